// Control calls and the scheduler's side of the I/O thread. Threading: see
// worker/control_calls.h.

#include "worker/control_calls.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "common/log.h"
#include "worker/job_environment.h"

namespace pushpull {
namespace internal {

ControlCalls::ControlCalls(const ClientOptions& options, ControlChannel& control, ClientState& state,
                           RequestTable& requests, CallSender& sender)
    : options_(options), control_(control), state_(state), requests_(requests), sender_(sender) {}

Result<Header> ControlCalls::ControlCall(Header h, const std::string& what, int64_t timeout_ms, bool despite_sticky) {
  if (!despite_sticky) PP_RETURN_IF_ERROR(state_.Sticky());
  auto cmd = std::make_unique<Command>();
  cmd->header = std::move(h);
  auto fs = sender_.NewState(what, 1, /*to_servers=*/false);
  cmd->part.fs = fs;
  cmd->part.target = kScheduler;
  cmd->despite_sticky = despite_sticky;
  switch (cmd->header.type) {
    case MsgType::kCreateTable: cmd->part.reply_type = MsgType::kCreateTableReply; break;
    case MsgType::kBarrier: cmd->part.reply_type = MsgType::kBarrierReply; break;
    case MsgType::kCheckpoint: cmd->part.reply_type = MsgType::kCheckpointReply; break;
    default: cmd->part.reply_type = MsgType::kDoneReply; break;
  }
  std::vector<std::unique_ptr<Command>> v;
  v.push_back(std::move(cmd));
  sender_.Post(std::move(v));
  Status st = timeout_ms < 0 ? Future(fs).Wait() : Future(fs).WaitFor(timeout_ms);
  if (!st.ok()) return st;
  MutexLock l(&fs->mu);
  return fs->reply;
}

Result<Table> ControlCalls::CreateTable(const TableSpec& spec) {
  PP_RETURN_IF_ERROR(spec.Validate());
  Header h;
  h.type = MsgType::kCreateTable;
  h.spec = spec;
  PP_ASSIGN_OR_RETURN(auto r, ControlCall(h, "create table '" + spec.name + "'"));
  const TableInfo& info = r.info;
  // The scheduler's partition indexes this client's per-server arrays: check it first.
  const size_t S = static_cast<size_t>(num_servers());
  bool fits = info.spec.sparse ? info.bucket_owner.size() == TableInfo::kBuckets
                               : info.row_offsets.size() == S + 1 && info.row_offsets.front() == 0 &&
                                     info.row_offsets.back() == info.spec.rows;
  for (size_t i = 1; fits && i < info.row_offsets.size(); ++i) fits = info.row_offsets[i - 1] <= info.row_offsets[i];
  for (size_t i = 0; fits && i < info.bucket_owner.size(); ++i) fits = info.bucket_owner[i] < S;
  if (!fits)
    return Status::Corruption("create table '" + spec.name + "': the scheduler's partition does not fit " +
                              std::to_string(S) + " servers");
  if (info.spec.consistency.model == Consistency::kBsp) state_.has_bsp_table = true;
  Table t;
  t.id = info.id;
  t.name = info.spec.name;
  t.sparse = info.spec.sparse;
  t.rows = info.spec.rows;
  t.dim = info.spec.dim;
  t.consistency = info.spec.consistency;
  MutexLock l(&state_.mu);
  state_.tables.emplace(t.id, info);  // never overwritten: other threads may be reading it (CheckTable)
  return t;
}

Status ControlCalls::Clock() {
  PP_RETURN_IF_ERROR(state_.Sticky());
  {
    MutexLock l(&state_.mu);
    if (!state_.refused_push.ok()) {
      state_.sticky =
          Status(state_.refused_push.code(), "clock " + std::to_string(state_.clock.load()) +
                                                 " is not done: a push of it was refused before it was sent (" +
                                                 state_.refused_push.message() + ")");
      return state_.sticky;
    }
  }
  // A worker with a BSP table settles its Clock: sent once every push of the clock succeeded and
  // every Clock before it was answered, by every server, so that each server holds all this
  // worker's pushes of the clocks it closes. Should this worker die while its Clock reaches some
  // servers and not others, those it did not reach can then count it as the others do, and the
  // clock's mean (its sums and its divisor) is the same on every server (DESIGN.md, "A worker
  // dying between its clocks"). It costs the caller one round trip a clock with pushes (under BSP
  // the next pull waits for every worker's Clock anyway), and only in a job that goes on after a
  // worker dies: elsewhere a death ends the job.
  // (A push to a BSP table needs one from CreateTable: ClientState::CheckTable.)
  const bool settle = control_.cluster().survives_worker_death && state_.has_bsp_table;
  if (settle) PP_RETURN_IF_ERROR(WaitForEarlierPushesAndClocks());
  auto fs = sender_.NewState("clock", num_servers(), /*to_servers=*/true);
  std::vector<std::unique_ptr<Command>> cmds;
  for (int s = 0; s < num_servers(); ++s) {
    auto c = std::make_unique<Command>();
    c->header.type = MsgType::kClock;  // stamped with the next clock by Post, which advances it
    if (settle) c->header.flags = kFlagSettled;
    c->part.fs = fs;
    c->part.target = s;
    c->part.reply_type = MsgType::kClockReply;
    cmds.push_back(std::move(c));
  }
  {
    MutexLock l(&state_.mu);
    ++state_.stats.clocks;
  }
  sender_.Post(std::move(cmds));
  return state_.Sticky();  // (a clock that found no room is not sent: the error Post made sticky)
}

Status ControlCalls::WaitForEarlierPushesAndClocks() {
  const Deadline deadline = Deadline::In(options_.request_timeout_ms);
  auto fail = [&](Code code, const std::string& what) {
    Status st(code, "clock " + std::to_string(state_.clock.load()) + " not sent: " + what +
                        " (in a job that goes on after a worker dies, a worker with a BSP table sends its Clock() "
                        "once its pushes have succeeded on every server)");
    state_.SetSticky(st);  // its step's pushes may be lost: the clock must not close without them
    return st;
  };
  // This clock's pushes to BSP tables (answered or not), then every push and Clock() unanswered.
  std::vector<std::shared_ptr<FutureState>> pushes, clocks;
  {
    MutexLock l(&state_.mu);
    pushes = state_.clock_pushes;
    state_.settled_at_pushes = state_.pushes_posted;
    state_.settled_at_clocks = state_.clocks_posted;
  }
  requests_.OpenPushesAndClocks(&pushes, &clocks);
  for (const auto* list : {&pushes, &clocks}) {
    for (auto& fs : *list) {
      Status st = WaitState(fs, std::max<int64_t>(1, deadline.RemainingMs()), /*abandon=*/false);
      bool unanswered;
      Status result;
      {
        MutexLock l(&fs->mu);
        unanswered = fs->remaining > 0;
        result = fs->answered_status;  // (not DeadlineExceeded for a caller that gave up on an answered push)
      }
      // ("dense push to table 'w': no answer within ..."; a push refused, or given up unsent)
      if (unanswered) return fail(Code::kDeadlineExceeded, st.message());
      if (!result.ok())
        return fail(result.code(),
                    (list == &pushes ? "a push of it failed: " : "an earlier clock failed: ") + result.message());
    }
  }
  return Status::OK();
}

Status ControlCalls::Barrier() {
  Header h;
  h.type = MsgType::kBarrier;
  auto r = ControlCall(h, "barrier at clock " + std::to_string(state_.clock));
  return r.status();
}

Status ControlCalls::Checkpoint(const std::string& run) {
  if (run.size() > kMaxRunText || run.find('\n') != std::string::npos)
    return Status::InvalidArgument("checkpoint: the run's description must be one line of at most " +
                                   std::to_string(kMaxRunText) + " bytes");
  Header h;
  h.type = MsgType::kCheckpoint;
  h.clock = state_.clock;
  h.address = run;
  // (Past the scheduler's two phases, each of which answers it when it expires.)
  const int64_t wait = options_.checkpoint_timeout_ms > 0
                           ? options_.checkpoint_timeout_ms
                           : 2 * control_.cluster().checkpoint_timeout_ms + options_.request_timeout_ms;
  auto r = ControlCall(h, "checkpoint at clock " + std::to_string(state_.clock), wait);
  return r.status();
}

Status ControlCalls::Finish() {
  MutexLock once(&finish_mu_);               // two threads at once: the second finds it done
  if (state_.finished) return Status::OK();  // once is enough
  PP_RETURN_IF_ERROR(state_.Sticky());       // (as it is, not as the clock below would annotate it)
  // Pushes in a clock left open would count, under BSP, only on the servers they went to (a
  // server counts a finished worker in a clock it pushed to there); closed, the worker counts in
  // that clock's mean everywhere, as any worker whose clock passed it.
  if (state_.pushed_in_clock) PP_RETURN_IF_ERROR(Clock().Annotate("finish: closing the clock of its last pushes"));
  // The scheduler's "done" travels on another connection than the data: without this wait a
  // server could hear of it before this worker's last pushes and clocks, and drop them. The
  // user's own Futures are not given up on if this times out.
  const Deadline deadline = Deadline::In(options_.request_timeout_ms);
  for (auto& fs : requests_.OpenToServers()) {
    Status st = WaitState(fs, std::max<int64_t>(1, deadline.RemainingMs()), /*abandon=*/false);
    // Only a call still unanswered fails it: one its caller gave up on, answered since, ends
    // DeadlineExceeded too, and must not keep Finish from telling the scheduler.
    MutexLock l(&fs->mu);
    if (fs->remaining > 0) return st.Annotate("finish");
  }
  Header h;
  h.type = MsgType::kDone;
  auto r = ControlCall(h, "finish");
  if (r.ok()) {
    state_.finished = true;
    TellLauncherFinished();
  }
  return r.status();
}

Status ControlCalls::Leave(const Status& why) {
  // Not under finish_mu_: a Finish() in progress may wait on slow servers far longer than this
  // call's 2 s (a worker stopped by a signal while it finishes).
  if (state_.finished) return Status::OK();
  Header h;
  h.type = MsgType::kDone;  // a "done" that carries an error: this worker stops, failed
  h.SetStatus(why.ok() ? Status::Aborted("left the job") : why);
  // Also after a sticky error (one the scheduler may not know of, such as a push that found no
  // room): it is what the job should hear.
  auto r = ControlCall(h, "leave", 2000, /*despite_sticky=*/true);
  if (r.ok()) state_.finished = true;
  return r.status();
}

void ControlCalls::SendToScheduler(std::unique_ptr<Command> c) {
  const uint64_t id = c->header.request_id;
  std::shared_ptr<FutureState> fs = c->part.fs;
  requests_.Add(id, std::move(c->part));
  // As ServerLinks::Send: an error that came between the caller's check and the line above (the
  // job's end: FailAll) has not failed this request, and after the end the scheduler answers
  // nothing but its membership, which this worker already holds (a Barrier() posted as the job
  // aborted would wait out its whole timeout); nor does it answer a node it no longer counts. A
  // Leave() goes despite another sticky error, not after those.
  const Membership& mem = control_.membership();
  Status st = control_.dropped();
  if (st.ok() && mem.job_state != Membership::kRunning)
    st = Status::Aborted(std::string(mem.job_state == Membership::kAborted ? "job aborted: " : "job finished: ") +
                         mem.reason);
  else if (st.ok() && !c->despite_sticky)
    st = state_.Sticky();
  if (st.ok()) st = control_.Send(c->header);
  if (!st.ok()) {
    if (requests_.Remove(id)) fs->Complete(kScheduler, st);  // (else already completed by whoever took it out)
    return;
  }
  const int64_t resend = NowMs() + ResendIntervalMs();
  if (sent_.empty() || resend < next_resend_ms_) next_resend_ms_ = resend;
  sent_[id] = SentRequest{c->header, resend};
}

void ControlCalls::ResendRequests() {
  const int64_t now = NowMs();
  if (now < next_resend_ms_) return;
  next_resend_ms_ = std::numeric_limits<int64_t>::max();
  for (auto it = sent_.begin(); it != sent_.end();) {
    std::shared_ptr<FutureState> fs = requests_.StateOf(it->first);
    bool wanted = fs != nullptr;  // no longer pending: answered, or failed
    if (wanted) {
      MutexLock l(&fs->mu);
      wanted = !fs->abandoned;  // its caller gave up waiting
    }
    if (!wanted) {
      it = sent_.erase(it);
      continue;
    }
    if (now >= it->second.resend_ms) {
      PP_LOG(Debug) << "asking the scheduler again: " << MsgTypeName(it->second.header.type) << " request " << it->first
                    << " (no answer yet)";
      control_.Send(it->second.header).IgnoreError();
      it->second.resend_ms = now + ResendIntervalMs();
    }
    next_resend_ms_ = std::min(next_resend_ms_, it->second.resend_ms);
    ++it;
  }
}

void ControlCalls::OnMembership() {
  const Membership& mem = control_.membership();
  for (size_t s = 0; s < mem.server_alive.size(); ++s)
    if (!mem.server_alive[s])
      FailTarget(state_, requests_, static_cast<int>(s),
                 Status::Unavailable("server " + std::to_string(s) + " (" + control_.cluster().servers[s].address +
                                     ") was declared dead by the scheduler"));
  if (mem.job_state == Membership::kAborted) FailAll(state_, requests_, Status::Aborted("job aborted: " + mem.reason));
  // The scheduler waits to hear that a job's end arrived (a heartbeat says which membership a
  // node holds): say so at once.
  if (mem.job_state != Membership::kRunning) control_.Tick(/*at_once=*/true).IgnoreError();
  // Finished with this worker done: its finish arrived, whether or not the answer (lost with a
  // dropped connection) ever comes.
  const int me = control_.rank();
  if (mem.job_state == Membership::kFinished && me >= 0 && static_cast<size_t>(me) < mem.worker_done.size() &&
      mem.worker_done[me]) {
    for (auto& fs : requests_.TakeDoneRequests()) fs->Complete(kScheduler, Status::OK());
  }
}

}  // namespace internal
}  // namespace pushpull
