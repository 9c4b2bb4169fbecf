#include "server/request_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "common/log.h"
#include "common/time.h"

namespace pushpull::server {
namespace {

constexpr int64_t kControlEveryMs = 5;  // how often the I/O thread reads the scheduler's socket

// Counts one more of a kind; true for the first 20, then one in 1000.
bool LogThisOne(uint64_t* n) {
  ++*n;
  return *n <= 20 || *n % 1000 == 0;
}

// Where a reply goes: the routing id the request names (a client's receive socket), else the
// socket it came from.
Frame ReplyIdentity(const Message& m) {
  const std::string& to = m.header.reply_to;
  if (to.empty()) return Frame(m.identity.data(), m.identity.size());
  return Frame(to.data(), to.size());
}

// The reply type that answers a request of type t.
MsgType ReplyTypeOf(MsgType t) {
  switch (t) {
    case MsgType::kPush: return MsgType::kPushReply;
    case MsgType::kPull: return MsgType::kPullReply;
    case MsgType::kClock: return MsgType::kClockReply;
    default: return MsgType::kHelloReply;
  }
}

}  // namespace

RequestLoop::RequestLoop(const Parts& p)
    : ctx_(p.ctx),
      control_(p.control),
      workers_(p.workers),
      tables_(p.tables),
      updates_(p.updates),
      min_clock_(p.min_clock),
      checkpoint_(p.checkpoint),
      deaths_(p.deaths),
      validator_(p.validator),
      metrics_(p.metrics),
      transport_(p.transport) {}

Status RequestLoop::Bind() {
  const ServerOptions& o = ctx_->options;
  SocketOptions so;
  so.max_msg_bytes = o.max_message_bytes;
  PP_ASSIGN_OR_RETURN(router_, transport_->MakeSocket(SocketKind::kRouter, so));
  PP_ASSIGN_OR_RETURN(address_, BindTcp(*router_, o.bind_host, o.port, o.advertise_host, o.advertise_port));
  return Status::OK();
}

void RequestLoop::SayDone(const Status& why) {
  Header h;
  h.type = MsgType::kDone;
  h.SetStatus(why);
  control_->Send(h).IgnoreError();
}

Status RequestLoop::Run() {
  // The loop sleeps on the data socket, and on the update threads' "done" socket only while they
  // hold work; the scheduler's socket is looked at every kControlEveryMs. (Each socket in a
  // zmq_poll costs several system calls per wake-up, which is most of a small request's cost.)
  // With nothing owed by the update threads it sleeps in a receive on the data socket itself:
  // one request per pass, and none of a poll's extra calls or a drain's final empty receive.
  Status exit_status;
  int64_t next_control = 0;
  const int64_t started = NowMs();
  metrics_->StartLogging(started);
  const int64_t stats_every_ms = ctx_->options.stats_every_ms;
  int64_t next_stats = stats_every_ms > 0 ? started + stats_every_ms : INT64_MAX;
  while (!ctx_->stop) {
    int64_t now = NowMs();
    const int64_t timeout = std::max<int64_t>(0, std::min({control_->MsUntilTick(), next_control - now, int64_t{100}}));
    try {
      if (checkpoint_->writing()) {
        PollItem item{&control_->socket()};
        transport_->Poll(&item, 1, std::min<int64_t>(timeout, 5));
        if (checkpoint_->written()) checkpoint_->Finish();
      } else if (updates_->awaiting_done() > 0) {
        PollItem items[] = {{router_.get()}, {updates_->done_socket()}};
        transport_->Poll(items, 2, timeout);
        if (items[1].ready) updates_->HandleDone();
        if (items[0].ready) HandleRouter();
      } else {
        ReceiveRequest(timeout);
      }
    } catch (const std::exception& e) {
      // A request this server could not handle (out of memory for it, a socket error): say so and
      // go on serving everyone else; its sender's call runs into its deadline.
      PP_LOG(Error) << "request loop: " << e.what() << " (request dropped)";
      ++ctx_->stats.bad_messages;
    }
    if ((now = NowMs()) >= next_control) {
      try {
        HandleControl();
        // Pulls the minimum clock has released but that are still parked: a pass that ran out of
        // memory for a reply left them (MinClock::Advance). Tried again here, not only at the
        // next clock, which may never come while their worker waits for them.
        if (min_clock_->HasReleased() && !checkpoint_->writing()) min_clock_->Advance();
      } catch (const std::exception& e) {
        // (Out of memory serving released pulls: they stay parked for the next pass.)
        PP_LOG(Error) << "control loop: " << e.what();
      }
      metrics_->Update();
      next_control = now + kControlEveryMs;
      if (now >= next_stats) {
        metrics_->LogStats(now);
        next_stats = now + stats_every_ms;
      }
    }
    if (checkpoint_->asked() && !checkpoint_->writing()) checkpoint_->StartWhenReady();
    if (tables_->has_retired() && !checkpoint_->writing() && updates_->awaiting_done() == 0)
      tables_->FreeRetired([this](const table::TableShard* t) { return min_clock_->Parks(t); });
    const Membership& mem = control_->membership();
    if (mem.job_state == Membership::kFinished) {
      PP_LOG(Info) << "job finished: " << mem.reason;
      break;
    }
    if (mem.job_state == Membership::kAborted) {
      exit_status = Status::Aborted("job aborted: " + mem.reason);
      break;
    }
    Status st = control_->Tick();
    if (!st.ok()) {
      exit_status = st;
      break;
    }
    // (A report lost with a dropped connection is sent again while the worker is dying.)
    deaths_->Tick();
  }

  if (ctx_->stop && exit_status.ok() && control_->membership().job_state == Membership::kRunning) {
    exit_status = Status::Aborted("stopped before the job ended");
    SayDone(exit_status);
  }
  checkpoint_->Abandon();
  // Shutdown: stop the update threads after the work they hold, answer parked pulls.
  updates_->Stop();
  const std::string rank = std::to_string(ctx_->rank.load());
  min_clock_->DrainParked(
      [&](Request* r) { ReplyError(r->msg, Status::Aborted("server " + rank + " is shutting down")); });
  metrics_->CopyBudgetCounters();
  const ServerStats& stats = ctx_->stats;
  PP_LOG(Info) << "stopped: " << stats.pushes << " pushes, " << stats.pulls << " pulls, " << stats.clocks << " clocks, "
               << stats.bad_messages << " malformed, " << stats.rejected << " refused, " << stats.duplicates
               << " duplicates; "
               << "pull staleness histogram {" << min_clock_->staleness().ToString() << "}";
  return exit_status;
}

void RequestLoop::CountBad(const Status& st, const char* what) {
  ++ctx_->stats.bad_messages;
  if (LogThisOne(&malformed_logged_))
    PP_LOG(Warning) << what << " (" << ctx_->stats.bad_messages << " so far): " << st.ToString();
}

void RequestLoop::HandleRouter() {
  // Bounded batch so the other sockets get their turn.
  for (int i = 0; i < 256 && ReceiveRequest(0); ++i) {
    // Large batches must not starve the heartbeat (the scheduler would declare us dead).
    if (control_->MsUntilTick() == 0) control_->Tick().IgnoreError();
  }
}

bool RequestLoop::ReceiveRequest(int64_t wait_ms) {
  if (!RecvFrames(*router_, &frames_, 5, wait_ms)) return false;
  size_t bytes = 0;
  for (auto& f : frames_) bytes += f.size();
  ctx_->stats.bytes_in += bytes;
  Message m;
  m.identity = std::move(frames_[0]);
  frames_.erase(frames_.begin());
  bool header_ok = false;
  Status st = Decode(&frames_, &m, &header_ok);
  if (!st.ok()) {
    // Answer when the header decoded (the sender can match the reply); drop otherwise. Not
    // recorded: it ran nothing, and its id may be a request's in progress, whose answer a
    // repeat must get.
    if (header_ok && IsDataType(m.header.type) && !IsReply(m.header.type)) {
      CountBad(st, "malformed request answered with an error");
      ReplyError(m, st, /*record=*/false);
    } else {
      CountBad(st, "malformed message dropped");
    }
    return true;
  }
  if (!IsDataType(m.header.type) || IsReply(m.header.type)) {
    CountBad(Status::InvalidArgument(std::string("unexpected ") + MsgTypeName(m.header.type) + " on the data socket"),
             "message dropped");
    return true;
  }
  // A request that throws (out of memory for it) gets an error answer in the record, so that a
  // repeat is answered rather than taken for one in progress for good.
  const int w = m.header.sender_rank;
  const uint64_t id = m.header.request_id;
  const MsgType type = m.header.type;
  try {
    HandleData(m);
  } catch (const std::exception& e) {
    if (w >= 0 && w < static_cast<int>(workers_->size()) && type != MsgType::kHello) {
      RequestRecord::Answer a;
      a.type = type == MsgType::kPush   ? MsgType::kPushReply
               : type == MsgType::kPull ? MsgType::kPullReply
                                        : MsgType::kClockReply;
      a.code = Code::kInternal;
      a.error = std::string("the server could not handle it: ") + e.what();
      (*workers_)[w].requests.End(id, std::move(a));
    }
    throw;
  }
  return true;
}

void RequestLoop::HandleData(Message& m) {
  const Header& h = m.header;
  if (h.type == MsgType::kHello) {
    HandleHello(m);
    return;
  }
  const Repeat repeat = LookUpRepeat(m);
  if (repeat == Repeat::kHandled) return;
  table::TableShard* shard = nullptr;
  Status st = validator_->Validate(m, &shard, repeat == Repeat::kServeAgain);
  if (!st.ok()) {
    ++ctx_->stats.rejected;
    if (LogThisOne(&refused_logged_))
      PP_LOG(Warning) << "refused " << MsgTypeName(h.type) << " from worker " << h.sender_rank << ": " << st.ToString();
    NotePushRefused(workers_, h, st);
    ReplyError(m, st);
    return;
  }
  WorkerState& worker = (*workers_)[h.sender_rank];
  // A replacement redoing the clock its predecessor had finished here (it starts at the lowest
  // clock the servers have for its rank): answered, not applied twice.
  const int64_t hello_clock = worker.hello_clock;
  if ((h.type == MsgType::kPush && h.clock < hello_clock) ||
      (h.type == MsgType::kClock && h.clock <= hello_clock && h.clock <= min_clock_->clocks().clock(h.sender_rank))) {
    ++ctx_->stats.duplicates;
    Answered(h, SendBareReply(m, h.type == MsgType::kPush ? MsgType::kPushReply : MsgType::kClockReply, h.table,
                              h.clock, Status::OK()));
    return;
  }
  // ... and redoing the pushes its predecessor had applied in its open clock (not under BSP,
  // whose unfinished sums were dropped instead).
  if (h.type == MsgType::kPush && h.clock == hello_clock) {
    auto it = worker.redo.find(h.table);
    if (it != worker.redo.end() && it->second > 0) {
      --it->second;
      ++worker.pushed_in_clock[h.table];
      ++ctx_->stats.duplicates;
      Answered(h, SendBareReply(m, MsgType::kPushReply, h.table, h.clock, Status::OK()));
      return;
    }
  }
  if (h.type == MsgType::kClock) {
    HandleClock(m);
    return;
  }
  HandleUpdate(m, shard);
}

void RequestLoop::HandleHello(const Message& m) {
  const Header& h = m.header;
  bool raised = false;
  if (h.sender_role == Role::kWorker && h.sender_rank >= 0 && h.sender_rank < static_cast<int>(workers_->size())) {
    std::string session =
        h.reply_to.empty() ? std::string(static_cast<const char*>(m.identity.data()), m.identity.size()) : h.reply_to;
    raised = deaths_->OnHello(h.sender_rank, std::move(session), h);
  }
  // (What the raise completed: its clock's BSP mean, pulls parked for it.)
  if (raised) min_clock_->Advance();
  Header rh;
  rh.type = MsgType::kHelloReply;
  rh.request_id = h.request_id;
  // Where this worker rank's clock is here: a replacement starts from it.
  const consistency::ClockVector& clocks = min_clock_->clocks();
  if (h.sender_role == Role::kWorker && h.sender_rank >= 0 && h.sender_rank < clocks.size())
    rh.clock = clocks.clock(h.sender_rank);
  const int64_t max_message_bytes = ctx_->options.max_message_bytes;
  rh.num_rows = max_message_bytes > 0 ? uint64_t(max_message_bytes) : 0;
  rh.sender_role = Role::kServer;
  rh.sender_rank = ctx_->rank;
  Frame to = ReplyIdentity(m);
  SendMessage(*router_, &to, rh).IgnoreError();
}

void RequestLoop::HandleClock(const Message& m) {
  const Header& h = m.header;
  WorkerState& worker = (*workers_)[h.sender_rank];
  Status st;
  const WorkerState::RefusedPush& refused = worker.refused_push;
  if (refused.clock >= 0 && refused.clock == h.clock - 1)
    st = Status(refused.why.code(), "clock " + std::to_string(refused.clock) +
                                        " is not done here: this server refused a push of it (" +
                                        refused.why.message() + ")");
  else
    st = min_clock_->clocks().Advance(h.sender_rank, h.clock);
  if (!st.ok()) {
    ++ctx_->stats.rejected;
    ReplyError(m, st);
    return;
  }
  ++ctx_->stats.clocks;
  worker.settled = (h.flags & kFlagSettled) != 0;
  worker.pushed_in_clock.clear();
  worker.redo.clear();
  Answered(h, SendBareReply(m, MsgType::kClockReply, 0, h.clock, Status::OK()));
  min_clock_->Advance();
}

void RequestLoop::HandleUpdate(Message& m, table::TableShard* shard) {
  // Owned here until handed on: out of memory for it (its rows' split, a pull's reply buffer)
  // answers it with the error and frees it.
  std::unique_ptr<Request> owned(new Request);
  Request* r = owned.get();
  try {
    r->msg = std::move(m);
    r->shard = shard;
    const Header& rh = r->msg.header;
    if (rh.flags & kFlagRange)
      shard->SplitRange(rh.row_begin, rh.row_begin + rh.num_rows, &r->sel);
    else
      shard->Split(r->msg.key_data(), rh.num_keys, &r->sel);

    if (rh.type == MsgType::kPush) {
      ++ctx_->stats.pushes;
      const opt::OptimizerConfig& oc = shard->spec().optimizer;
      float scale = 1.0f;
      if (oc.clip_norm > 0) {
        // By the whole push's norm: a push split over servers says it (each part clipped alike).
        // Never below this part's own norm, whatever the header claims (a claim of 0 would switch
        // clipping off for it).
        const double own = opt::SquaredNorm(r->msg.value_data(), rh.row_count() * rh.dim);
        const double sq = rh.push_norm >= 0 ? std::max(own, double(rh.push_norm) * rh.push_norm) : own;
        if (sq > double(oc.clip_norm) * oc.clip_norm) scale = float(oc.clip_norm / std::sqrt(sq));
      }
      r->ctx.grad_scale = scale;
      const consistency::ClockVector& clocks = min_clock_->clocks();
      if (shard->spec().consistency.model == Consistency::kBsp) {
        r->op = Request::kAccumulate;
        r->clock = rh.clock;
        auto& who = shard->bsp_contributors[rh.clock];
        who.resize(clocks.size(), 0);
        who[rh.sender_rank] = 1;
      } else {
        r->op = Request::kApply;
        ++(*workers_)[rh.sender_rank].pushed_in_clock[rh.table];
        // A step a push (a call's first request here; its others take the same step, or a later
        // one when other pushes came between).
        const bool first = !(rh.flags & kFlagContinues) || shard->table_step == 0;
        r->ctx.lr = opt::ScheduledLr(oc, first ? shard->table_step++ : shard->table_step - 1);
        if (oc.staleness_aware) {
          int64_t tau = clocks.MaxLive() - rh.clock;
          if (tau > 1) r->ctx.lr /= float(tau);
        }
      }
      owned.release();
      updates_->Dispatch(r);
      return;
    }
    // Pull.
    ++ctx_->stats.pulls;
    r->op = Request::kRead;
    if (min_clock_->Ready(*r)) {
      min_clock_->PreparePull(r);
      owned.release();
      updates_->Dispatch(r);
    } else if (!min_clock_->MayPark(rh.sender_rank)) {
      CountBad(Status::ResourceExhausted("too many pulls parked"), "pull refused");
      ReplyError(r->msg, Status::ResourceExhausted("worker " + std::to_string(rh.sender_rank) + " has " +
                                                   std::to_string(MinClock::kMaxParked) +
                                                   " pulls waiting on this server; a client keeps to " +
                                                   std::to_string(kMaxUnansweredRequests)));
    } else {
      min_clock_->Park(&owned);
    }
  } catch (const std::exception& e) {
    if (!owned) throw;  // (handed on already: the request loop says so)
    const Status st =
        dynamic_cast<const std::bad_alloc*>(&e)
            ? Status::ResourceExhausted("out of memory for this request on server " + std::to_string(ctx_->rank.load()))
            : Status::Internal(e.what());
    PP_LOG(Error) << "refused " << MsgTypeName(r->msg.header.type) << " from worker " << r->msg.header.sender_rank
                  << ": " << st.ToString();
    ++ctx_->stats.rejected;
    NotePushRefused(workers_, r->msg.header, st);
    ReplyError(r->msg, st);
  }
}

void RequestLoop::Reply(Request* r) {
  const bool sum = r->op == Request::kApplyBsp || r->op == Request::kDropWorker;  // nobody to answer
  if (r->failed.load(std::memory_order_relaxed)) {
    ++ctx_->stats.rejected;
    if (sum)  // (a clock's update lost: always said)
      PP_LOG(Error) << (r->op == Request::kApplyBsp ? "applying" : "dropping a worker's sum of") << " clock "
                    << r->clock << " failed: " << r->error.ToString();
    else if (LogThisOne(&refused_logged_))
      PP_LOG(Error) << "refused " << MsgTypeName(r->msg.header.type) << " from worker " << r->msg.header.sender_rank
                    << ": " << r->error.ToString();
    if (!sum) {
      if (r->msg.header.type == MsgType::kPush) NotePushRefused(workers_, r->msg.header, r->error);
      ReplyError(r->msg, r->error);
    }
    delete r;
    return;
  }
  if (sum) {
    delete r;
    return;
  }
  const Header& h = r->msg.header;
  Header out;
  out.type = h.type == MsgType::kPush ? MsgType::kPushReply : MsgType::kPullReply;
  out.request_id = h.request_id;
  out.sender_role = Role::kServer;
  out.sender_rank = ctx_->rank;
  out.table = h.table;
  out.clock = h.clock;
  Frame values;
  std::vector<Frame> split;  // a pull a frame per stripe
  if (r->op == Request::kRead) {
    out.flags = h.flags & kFlagRange;  // (and kFlagByStripe below)
    out.num_keys = h.num_keys;
    out.row_begin = h.row_begin;
    out.num_rows = h.num_rows;
    out.dim = h.dim;
    out.slot = h.slot;
    out.staleness = r->staleness;
    size_t bytes = h.row_count() * h.dim * sizeof(float);
    ctx_->stats.bytes_out += bytes;
    if (r->out) {
      values = ZeroCopyFrame(r->out.get(), bytes, r->out);
    } else {
      const size_t row_bytes = size_t(h.dim) * sizeof(float);
      size_t frames = 0;
      for (size_t k = 0; k < r->shared.size(); ++k) frames += r->sel[k].size() > 0;
      for (size_t k = 0; k < r->shared.size(); ++k) {
        if (r->sel[k].size() == 0) continue;
        Frame f = ZeroCopyFrame(r->shared[k].get(), r->sel[k].size() * row_bytes, r->shared[k]);
        if (frames == 1)
          values = std::move(f);  // one stripe: the plain three-frame reply
        else
          split.push_back(std::move(f));
      }
      if (frames > 1 && !(h.flags & kFlagRange)) {  // keyed: each stripe's rows in turn
        out.flags |= kFlagByStripe;
        out.row_begin = r->shared.size();
      }
    }
  }
  Frame to = ReplyIdentity(r->msg);
  Status st = split.empty() ? SendMessage(*router_, &to, out, Frame(), std::move(values))
                            : SendMessage(*router_, &to, out, Frame(), &split);
  if (!st.ok() && LogThisOne(&lost_logged_))  // (a dropped connection loses many)
    PP_LOG(Warning) << "reply to worker " << h.sender_rank << " lost: " << st.ToString() << " (" << lost_logged_
                    << " so far; the worker asks again once it has reconnected)";
  Answered(h, out);
  delete r;
}

void RequestLoop::ReplyError(const Message& m, const Status& st, bool record) {
  Header out;
  switch (m.header.type) {
    case MsgType::kPush: out.type = MsgType::kPushReply; break;
    case MsgType::kPull: out.type = MsgType::kPullReply; break;
    default: out.type = MsgType::kClockReply; break;
  }
  out.request_id = m.header.request_id;
  out.sender_role = Role::kServer;
  out.sender_rank = ctx_->rank;
  out.table = m.header.table;
  out.SetStatus(st);
  Frame to = ReplyIdentity(m);
  SendMessage(*router_, &to, out).IgnoreError();
  if (record) Answered(m.header, out);
}

Header RequestLoop::SendBareReply(const Message& m, MsgType type, uint32_t table, int64_t clock, const Status& st) {
  Header out;
  out.type = type;
  out.request_id = m.header.request_id;
  out.sender_role = Role::kServer;
  out.sender_rank = ctx_->rank;
  out.table = table;
  out.clock = clock;
  out.SetStatus(st);
  Frame to = ReplyIdentity(m);
  SendMessage(*router_, &to, out).IgnoreError();
  return out;
}

void RequestLoop::Answered(const Header& request, const Header& reply) {
  if (request.sender_rank < 0 || request.sender_rank >= static_cast<int>(workers_->size())) return;
  // A request of an earlier client of this rank, answered after a new one said hello (a pull it
  // left parked): not the new client's request of the same id, whose record it would overwrite.
  if (FromEarlierClient(*workers_, request)) return;
  RequestRecord::Answer a;
  a.type = reply.type;
  a.table = reply.table;
  a.clock = reply.clock;
  a.code = reply.status;
  a.error = reply.error;
  (*workers_)[request.sender_rank].requests.End(request.request_id, std::move(a));
}

// A worker sends its unanswered requests to a server again when a connection to it dropped
// (server/request_record.h): a repeat is answered from the record, or dropped while the request is
// in progress, and never run twice; a pull answered already is served again.
RequestLoop::Repeat RequestLoop::LookUpRepeat(const Message& m) {
  const Header& h = m.header;
  if (h.sender_role != Role::kWorker || h.sender_rank < 0 || h.sender_rank >= static_cast<int>(workers_->size()))
    return Repeat::kNo;  // Validate() refuses it
  // Validate() refuses it too; marking its id begun would make the new client's request of that
  // id look in progress, and dropped, for good.
  if (FromEarlierClient(*workers_, h)) return Repeat::kNo;
  RequestRecord& record = (*workers_)[h.sender_rank].requests;
  const RequestRecord::Answer* a = nullptr;
  switch (record.Look(h.request_id, &a)) {
    case RequestRecord::Seen::kNew: record.Begin(h.request_id); return Repeat::kNo;
    case RequestRecord::Seen::kInProgress: ++ctx_->stats.duplicates; return Repeat::kHandled;
    case RequestRecord::Seen::kAnswered: {
      ++ctx_->stats.duplicates;
      // A repeat is the same request: an id answered as another kind of request is a client's
      // bug (a push given a pull's id would be served as that pull, or run at its old clock).
      // Refused, not recorded, nothing run.
      if (a->type != ReplyTypeOf(h.type)) {
        ReplyError(m,
                   Status::InvalidArgument(std::string(MsgTypeName(h.type)) + " " + std::to_string(h.request_id) +
                                           " from worker " + std::to_string(h.sender_rank) + " reuses the id of a " +
                                           MsgTypeName(a->type) + "'s request; not run"),
                   /*record=*/false);
        return Repeat::kHandled;
      }
      if (a->type == MsgType::kPullReply) {
        record.Begin(h.request_id);
        return Repeat::kServeAgain;
      }
      SendBareReply(m, a->type, a->table, a->clock, a->code == Code::kOk ? Status::OK() : Status(a->code, a->error));
      return Repeat::kHandled;
    }
    case RequestRecord::Seen::kForgotten:
      // Older than the answers kept. A pull is served again. A clock the worker's clock has
      // reached was applied: answered so; one it has not reached never was: run. Only a push
      // cannot be told apart (applied, refused or lost): refused, not run again.
      ++ctx_->stats.duplicates;
      if (h.type == MsgType::kPull) {
        record.Begin(h.request_id);
        return Repeat::kServeAgain;
      }
      if (h.type == MsgType::kClock) {
        if (h.clock > min_clock_->clocks().clock(h.sender_rank)) {
          record.Begin(h.request_id);
          return Repeat::kNo;
        }
        SendBareReply(m, MsgType::kClockReply, 0, h.clock, Status::OK());
        return Repeat::kHandled;
      }
      ReplyError(m,
                 Status::FailedPrecondition(std::string(MsgTypeName(h.type)) + " " + std::to_string(h.request_id) +
                                            " from worker " + std::to_string(h.sender_rank) +
                                            " asked again after this server forgot its answer; not run "
                                            "again"),
                 /*record=*/false);
      return Repeat::kHandled;
  }
  return Repeat::kNo;
}

void RequestLoop::HandleControl() {
  for (int i = 0; i < 64; ++i) {
    Message m;
    bool changed = false;
    bool got = control_->Receive(&m, &changed);
    if (changed) deaths_->OnMembership();
    if (!got) {
      PollItem item{&control_->socket()};
      transport_->Poll(&item, 1, 0);
      if (!item.ready) return;
      continue;
    }
    if (m.header.type == MsgType::kCreateTable) CreateTable(m);
    if (m.header.type == MsgType::kCheckpoint) checkpoint_->OnRequest(m.header);
  }
}

void RequestLoop::CreateTable(const Message& m) {
  Header reply;
  reply.type = MsgType::kCreateTableReply;
  reply.request_id = m.header.request_id;
  reply.info = m.header.info;
  const Status st =
      tables_->Create(m.header.info, [this](const std::string& name) { checkpoint_->FinishBeforeRestoring(name); });
  reply.SetStatus(st);
  control_->Send(reply).IgnoreError();
}

}  // namespace pushpull::server
