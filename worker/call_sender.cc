// Sending a call's requests: frame limits, backpressure, request ids and clock stamps. Threading:
// see worker/call_sender.h.

#include "worker/call_sender.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace pushpull {
namespace internal {
namespace {
// How often a call waiting for room (max_unanswered_mb) looks again at the bytes unanswered.
constexpr int64_t kRoomSliceMs = 5;
}  // namespace

CallSender::CallSender(const ClientOptions& options, const ControlChannel& control, ClientState& state,
                       RequestTable& requests, ServerLinks& links, CommandQueue& queue)
    : options_(options), control_(control), state_(state), requests_(requests), links_(links), queue_(queue) {}

std::shared_ptr<FutureState> CallSender::NewState(std::string what, int parts, bool to_servers) const {
  // A call's Future learns where replies are received before any of its requests is sent, so no
  // waiter reads it while it is written.
  return std::make_shared<FutureState>(std::move(what), parts, options_.request_timeout_ms, num_servers(),
                                       to_servers ? links_.receiver() : nullptr);
}

std::shared_ptr<FutureState> CallSender::NewState(const char* kind, const std::string& table, int64_t rows,
                                                  int parts) const {
  auto fs = NewState(std::string(), parts, /*to_servers=*/true);
  fs->what_kind = kind;
  fs->what_table = table;
  fs->what_rows = rows;
  return fs;
}

Future CallSender::Failed(const Status& st) const {
  return Future(
      std::make_shared<FutureState>(std::string(), 0, options_.request_timeout_ms, num_servers(), nullptr, st));
}

Future CallSender::FailedPull(const Status& st, PulledRows* view) const {
  if (view) {  // its accessors say why, rather than read as an empty pull
    auto p = std::make_shared<PulledParts>();
    p->refused = st.ToString();
    ClientAccess::parts(view) = std::move(p);
  }
  return Failed(st);
}

Future CallSender::RefusedPush(const Status& st) const {
  state_.NoteRefusedPush(st);
  return Failed(st);
}

void CallSender::Post(std::vector<std::unique_ptr<Command>> cmds) {
  // A part over its server's frame limit fails the whole call before any part is sent (a push
  // split over servers is applied on all of them or on none).
  for (const auto& c : cmds) {
    const int s = c->part.target;
    const uint64_t frame = std::max(c->keys.size(), c->values.size());
    if (s == kScheduler || links_.max_frame(s) == 0 || frame <= links_.max_frame(s)) continue;
    const Status st =
        Status::InvalidArgument(std::string(MsgTypeName(c->header.type)) + " of " + std::to_string(frame) +
                                " bytes to server " + std::to_string(s) + ", over its message limit of " +
                                std::to_string(links_.max_frame(s)) + " bytes (pushpull-server --max_message_mb)");
    if (cmds.front()->header.type == MsgType::kPush) state_.NoteRefusedPush(st);
    for (const auto& d : cmds) d->part.fs->Complete(d->part.target, st);
    return;
  }
  // Backpressure: while earlier requests hold too much payload unanswered (a server that takes
  // nothing, or slower than this worker posts), or are as many as a server's record of them
  // keeps, the call waits (WaitForRoom), not in memory.
  // One lock around id assignment and sending: a server sees each worker's push ids increase.
  // Pushes, pulls and clocks are stamped with this worker's clock here too, so that with several
  // threads a push sent after a Clock() carries the new clock (the server refuses stale ones).
  // Room is looked at again under it: every request is registered while it is held, so two
  // threads cannot both take the last of a server's room.
  // The wait for room has one deadline, however often other threads take the room first.
  const size_t limit = size_t(options_.max_unanswered_mb) << 20;
  const Deadline room_deadline = Deadline::In(options_.request_timeout_ms);
  MutexLock send_lock(&links_.send_mu());
  while (!requests_.CheckRoom(cmds, limit).fits) {
    send_lock.Unlock();  // (not held while waiting: other threads' calls that fit go on)
    if (Status room = WaitForRoom(cmds, room_deadline); !room.ok()) {
      // Sticky: a push never sent must not be followed by a Clock() that says its step is done
      // (under BSP the clock would close without it); the job fails, and restarts from a checkpoint.
      state_.SetSticky(room);
      for (const auto& d : cmds) d->part.fs->Complete(d->part.target, room);
      return;
    }
    send_lock.Lock();
  }
  const bool ticks = !cmds.empty() && cmds[0]->header.type == MsgType::kClock;
  const int64_t clock = ticks ? state_.clock.load() + 1 : state_.clock.load();
  if (ticks) {
    {
      MutexLock l(&cmds[0]->part.fs->mu);
      cmds[0]->part.fs->what = "clock " + std::to_string(clock);
    }
    MutexLock l(&state_.mu);
    // A push or Clock() another thread posted after this Clock() listed what to wait for: not
    // settled.
    if ((cmds[0]->header.flags & kFlagSettled) &&
        (state_.pushes_posted != state_.settled_at_pushes || state_.clocks_posted != state_.settled_at_clocks))
      for (auto& c : cmds) c->header.flags &= uint8_t(~kFlagSettled);
    state_.clock_pushes.clear();
    ++state_.clocks_posted;
  }
  for (auto& c : cmds) {
    const MsgType type = c->header.type;
    if (type == MsgType::kPush || type == MsgType::kPull || type == MsgType::kClock) c->header.clock = clock;
    {
      MutexLock l(&state_.mu);
      c->header.request_id = state_.next_request_id++;
      if (c->header.type == MsgType::kPush) {
        ++state_.stats.pushes, ++state_.pushes_posted;
        state_.pushed_in_clock = true;
        // (Pushes to BSP tables, whose sums the settled Clock() protects, only where one may
        // settle: an app that seldom clocks keeps none of its other pushes. Unanswered others are
        // waited for from the RequestTable.)
        if (c->part.bsp && control_.cluster().survives_worker_death &&
            (state_.clock_pushes.empty() || state_.clock_pushes.back() != c->part.fs))
          state_.clock_pushes.push_back(c->part.fs);
      }
      if (c->header.type == MsgType::kPull) ++state_.stats.pulls;
      state_.stats.bytes_sent += c->keys.size() + c->values.size();
    }
    c->header.sender_role = Role::kWorker;
    c->header.sender_rank = control_.rank();
    int t = c->part.target;
    {
      MutexLock l(&c->part.fs->mu);  // another thread may wait on it (Finish)
      ++c->part.fs->waiting_on[t == kScheduler ? c->part.fs->waiting_on.size() - 1 : t];
    }
    if (t != kScheduler) {
      links_.Send(std::move(c));  // straight from the calling thread
      continue;
    }
    queue_.Post(std::move(c));  // (the scheduler's socket belongs to the I/O thread)
  }
  if (ticks) {
    state_.clock = clock;
    state_.pushed_in_clock = false;
  }
}

Status CallSender::WaitForRoom(const std::vector<std::unique_ptr<Command>>& cmds, const Deadline& deadline) {
  const size_t limit = size_t(options_.max_unanswered_mb) << 20;
  Room room = requests_.CheckRoom(cmds, limit);
  if (room.fits) return Status::OK();
  bool counted = false;
  for (; !room.fits; room = requests_.CheckRoom(cmds, limit)) {
    {
      MutexLock l(&state_.mu);
      if (!state_.sticky.ok()) return state_.sticky;  // the job failed meanwhile: say why, not "no room"
      if (!counted) ++state_.stats.waits_for_room;
      counted = true;
    }
    if (deadline.Expired()) {
      std::string what;
      {
        MutexLock l(&cmds.front()->part.fs->mu);
        what = cmds.front()->part.fs->What();
      }
      return Status::DeadlineExceeded(
          what + ": not sent: waited " + std::to_string(options_.request_timeout_ms) + " ms for " +
          (room.full >= 0 ? "answers from server " + std::to_string(room.full) + " (its record keeps the last " +
                                std::to_string(kMaxUnansweredRequests) +
                                " of a worker's requests, which no more may be unanswered or sent past one whose "
                                "answer may have been lost)"
                          : "earlier requests holding " + std::to_string(room.held) +
                                " bytes to be answered (limit: max_unanswered_mb = " +
                                std::to_string(options_.max_unanswered_mb) + ")") +
          "; a server is slow or unreachable");
    }
    // Waiting on the oldest receives replies here, as any waiter does (it stays the caller's), in
    // short slices: answers from other servers make room too.
    if (room.oldest)
      WaitState(room.oldest, std::max<int64_t>(1, std::min<int64_t>(deadline.RemainingMs(), kRoomSliceMs)),
                /*abandon=*/false)
          .IgnoreError();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // (taken meanwhile: look again)
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace pushpull
