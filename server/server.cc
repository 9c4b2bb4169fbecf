// The server's request loop. Reading order: Run() -> HandleData() -> Validate() -> Dispatch();
// HandleClock()/OnMembership() -> AdvanceMinClock() for the consistency rules of
// server/consistency.h; UpdateLoop() is what each update thread runs.
#include "server/server.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/memory.h"
#include "common/metrics.h"
#include "common/spsc_queue.h"
#include "common/time.h"
#include "common/wire.h"
#include "server/checkpoint.h"
#include "server/consistency.h"
#include "server/request_record.h"
#include "server/table_shard.h"

namespace pushpull {
namespace {

constexpr uint64_t kInlineBytes = 64 * 1024;  // requests up to this size may run on the I/O thread
constexpr int64_t kControlEveryMs = 5;          // how often the I/O thread reads the scheduler's socket

// One unit of work for the update threads: a push, a pull, or a BSP clock to apply. sel[i] is
// its rows in stripe i (none: every stripe as a whole, kApplyBsp and kDropWorker); each update
// thread works on the stripes it owns (TableShard::ThreadOf).
struct Request {
  enum Op { kApply, kAccumulate, kRead, kApplyBsp, kDropWorker };
  Op op = kApply;
  Message msg;                      // the request as received (frames read in place)
  TableShard* shard = nullptr;
  std::vector<RowSelection> sel;
  opt::StepContext ctx;
  int64_t clock = 0;                // kAccumulate / kApplyBsp / kDropWorker
  int worker = -1;                  // kDropWorker: whose sum for `clock` to drop
  std::shared_ptr<float[]> out;     // kRead: reply values (uninitialised, then filled) ...
  // ... or, for a pull of parameters sent a stripe a frame, shared[k] for stripe k: its rows in
  // place (Stripe::ShareRows, ReadOrShare) or, for a keyed part not one run, gathered.
  std::vector<std::shared_ptr<const float>> shared;
  int32_t staleness = 0;
  std::atomic<int> pending{0};
  // Set by the first stripe whose part failed (out of memory, the tables' memory limit), before
  // its `pending` decrement; the request is then answered with it instead of its result.
  std::atomic<bool> failed{false};
  Status error;
  void Fail(Status st) {
    bool expected = false;
    if (failed.compare_exchange_strong(expected, true, std::memory_order_relaxed)) error = std::move(st);
  }
};

// Where a reply goes: the routing id the request names (a client's receive socket), else the
// socket it came from.
zmq::message_t ReplyIdentity(const Message& m) {
  const std::string& to = m.header.reply_to;
  if (to.empty()) return zmq::message_t(m.identity.data(), m.identity.size());
  return zmq::message_t(to.data(), to.size());
}

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& o)
      : options_(o),
        router_(ctx_, zmq::socket_type::router),
        done_(ctx_, zmq::socket_type::pull),
        control_(ctx_, Role::kServer, o.control) {}

  Status Init() {
    ConfigureSocket(router_, true, options_.max_message_bytes);
    auto addr = BindTcp(router_, options_.bind_host, options_.port, options_.advertise_host, options_.advertise_port);
    if (!addr.ok()) return addr.status();
    address_ = addr.value();
    done_endpoint_ = "inproc://pp-done-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    // No limit on "done" messages in flight (8 bytes each): an update thread must never block on
    // one while the I/O thread is blocked handing it more work, or joining it at shutdown.
    done_.set(zmq::sockopt::rcvhwm, 0);
    done_.bind(done_endpoint_);
    if (options_.metrics_port >= 0) {
      auto m = MetricsEndpoint::Start(options_.bind_host, options_.metrics_port, [this] { return RenderMetrics(); });
      if (!m.ok()) return m.status();
      metrics_ = std::move(m.value());
    }
    return Status::OK();
  }

  Status Run() override;
  void Stop() override { stop_ = true; }
  const std::string& address() const override { return address_; }
  int rank() const override { return rank_; }
  const ServerStats& stats() const override { return stats_; }
  int metrics_port() const override { return metrics_ ? metrics_->port() : -1; }

 private:
  // What /metrics serves (on the metrics thread): stats_, the budgets, and what the request loop
  // last published (PublishMetrics).
  std::string RenderMetrics() const;
  void PublishMetrics();
  void UpdateLoop(int t);
  // Runs r's part in stripe i (ExecuteOrThrow), a failure recorded in r.
  void Execute(Request* r, int i) noexcept;
  // Runs r's parts in the stripes that update thread t owns.
  void ExecuteThreadPart(Request* r, int t) noexcept;
  void HandleRouter();
  bool ReceiveRequest(int64_t wait_ms);
  void HandleData(Message& m);
  // again: a pull answered already, asked again; its clock tag may be behind its worker's by now.
  Status Validate(const Message& m, TableShard** shard, bool again = false);
  void Dispatch(Request* r);
  void HandleDone();
  void ExecuteOrThrow(Request* r, int i);
  void Reply(Request* r);
  // record: the answer goes into the sender's RequestRecord (a repeat gets it again).
  void ReplyError(const Message& m, const Status& st, bool record = true);
  void Answered(const Header& request, const Header& reply);
  // From a client of a worker rank that another client has replaced since (its receive socket,
  // named in every request, is not the one the rank's last Hello came from). Its request ids are
  // not the new client's: it is refused without a look at, or a mark in, the rank's record.
  bool FromEarlierClient(const Header& h) const {
    if (h.sender_rank < 0 || h.sender_rank >= static_cast<int>(sessions_.size())) return false;
    const std::string& session = sessions_[h.sender_rank];
    return !h.reply_to.empty() && !session.empty() && h.reply_to != session;
  }
  // Sends m's sender a reply of `type` without payload; returns it.
  Header SendBareReply(const Message& m, MsgType type, uint32_t table, int64_t clock, const Status& st);
  enum class Repeat { kNo, kHandled, kServeAgain };  // kServeAgain: a pull answered already
  Repeat LookUpRepeat(const Message& m);
  void HandleControl();
  void FreeRetiredTables();
  void OnMembership();
  // A worker dying: this server's clock of every worker, for the scheduler (kWorkerClocks).
  void ReportWorkerClocks();
  // A dead worker's clock raised to the one the servers agreed on (Membership::worker_last_clock,
  // or a replacement's hello): its last Clock() reached other servers and not this one.
  bool RaiseToAgreedClock(int w, int64_t agreed);  // false: at or past it already
  void DropBspSums(int w);
  void AdvanceMinClock();
  void PreparePull(Request* r, int64_t min_live);
  // Tells the scheduler this server stops and why: the job hears it now, not from this server's
  // silence a heartbeat timeout later (the control socket lingers 200 ms for it when closed).
  void SayDone(const Status& why) {
    Header h;
    h.type = MsgType::kDone;
    h.SetStatus(why);
    control_.Send(h).IgnoreError();
  }
  void CountBad(const Status& st, const char* what);
  void CreateTable(const Message& m);
  void StartCheckpointWhenReady();
  void FinishCheckpoint();
  void LogStats(int64_t now);
  // Runs f on another thread while this one keeps the heartbeats to the scheduler going: filling
  // or restoring a large table takes seconds, which would otherwise look like a dead server.
  template <typename F>
  auto WhileHeartbeating(F&& f) -> decltype(f()) {
    auto done = std::async(std::launch::async, std::forward<F>(f));
    while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) control_.Tick().IgnoreError();
    return done.get();
  }

  const ServerOptions options_;
  zmq::context_t ctx_;
  zmq::socket_t router_;
  zmq::socket_t done_;
  ControlChannel control_;
  std::string address_, done_endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> rank_{-1};
  ServerStats stats_;
  // Memory for arrays that pull replies hold while their stripe moved on (every table's).
  const std::shared_ptr<CopyOnWriteBudget> cow_budget_ =
      std::make_shared<CopyOnWriteBudget>(options_.copy_on_write_budget_bytes, options_.copy_on_write_wait_ms);
  // What every table's rows hold, against options_.max_table_bytes.
  const std::shared_ptr<ByteBudget> table_memory_ = std::make_shared<ByteBudget>(options_.max_table_bytes);

  // I/O thread state.
  std::vector<std::unique_ptr<TableShard>> tables_;  // by table id
  ClockVector clocks_;
  int64_t min_live_ = 0;
  std::vector<RequestRecord> requests_;              // per worker: requests asked again run once
  // Per worker: its pulls in parked_. A client never has more than kMaxUnansweredRequests
  // unanswered here; a peer that parks kMaxParked has the rest refused, rather than let the
  // server's memory grow with what it sends (found in review). Generous: pulls a client gave up
  // on may still be parked.
  std::vector<uint32_t> parked_of_;
  static constexpr uint32_t kMaxParked = 4 * kMaxUnansweredRequests;
  std::vector<std::string> sessions_;                // per worker: its client's receive socket (Hello)
  // Replacement workers (Membership::kWorkerReplacing): a rank declared dead, whose requests are
  // refused until a new client says hello for it; and per worker, the clock this server had for
  // it when its current client said hello: what that client sends tagged below it, the client
  // before already finished here (a push is answered and not applied, a clock tick is answered).
  std::vector<uint8_t> replacing_;
  // Per worker: declared dead a moment ago (Membership::kWorkerDying): its requests are refused,
  // its clock and sums kept until the scheduler says which clock the servers agree it reached.
  std::vector<uint8_t> dying_;
  bool any_dying_ = false;             // the last membership had a dying worker
  int64_t next_clocks_report_ms_ = 0;  // while a worker is dying: sent again each heartbeat
  // Per worker: whether the Clock that brought its current clock was settled (kFlagSettled).
  std::vector<uint8_t> settled_;
  std::vector<int64_t> hello_clock_;
  std::vector<uint64_t> hello_version_;  // the membership version its current client said hello with
  // Per worker and table, the pushes applied in its open clock (tables not under BSP, whose
  // pushes are applied as they come); and, after a replacement, how many of the new client's
  // pushes at that clock are its predecessor's again (the same step redone): answered, not
  // applied, so each push of a clock is applied once whoever sent it.
  std::vector<std::map<uint32_t, int64_t>> pushed_in_clock_, redo_;
  // Per worker: the clock of a push this server refused, and why (clock -1: none). That clock's
  // Clock is refused in turn: a step with a push left out is not done (under BSP its mean would
  // lack the push, silently).
  struct RefusedPush {
    int64_t clock = -1;
    Status why;
  };
  std::vector<RefusedPush> refused_push_;
  void NotePushRefused(const Header& h, const Status& why);
  std::multimap<int64_t, Request*> parked_;          // pulls by the min clock they need
  // Tables a failed creation left here, dropped (CreateTable) but freed only once nothing uses
  // them: the checkpoint writer, a request handed to the update threads, a parked pull.
  std::vector<std::unique_ptr<TableShard>> retired_;
  StalenessHistogram staleness_;
  // The request loop's own state that /metrics shows, copied every control pass while served.
  struct MetricsSnapshot {
    int64_t slowest_clock = -1;  // of the live workers (-1: none)
    StalenessHistogram staleness;
    uint64_t membership_version = 0;
  };
  mutable std::mutex metrics_mu_;
  MetricsSnapshot metrics_snapshot_;  // guarded by metrics_mu_
  // Declared after everything RenderMetrics reads: destroyed, its thread stopped, before them.
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::vector<std::unique_ptr<SpscQueue<Request>>> queues_;
  std::unique_ptr<std::atomic<int>[]> inflight_;     // per update thread: requests handed over, not done
  int64_t awaiting_done_ = 0;                        // requests handed over whose "done" is not in yet
  std::vector<std::thread> threads_;
  std::vector<zmq::message_t> frames_;
  // Log lines so far, malformed messages and refused requests apart: the first 20 of each, then
  // one in 1000 (a flood of one kind does not silence the other).
  uint64_t malformed_logged_ = 0, refused_logged_ = 0, lost_logged_ = 0;
  // Counts one more of a kind; true for the first 20, then one in 1000.
  static bool LogThisOne(uint64_t* n) {
    ++*n;
    return *n <= 20 || *n % 1000 == 0;
  }
  // Restoring: the checkpoint's tables of this server not created yet, by name (each checkpoint
  // writes them too, as read). A restore that failed part way consumed its rows: its error, for
  // every later creation of the name (found in review: a retry restored an empty table).
  std::map<std::string, TableCheckpoint> restore_;
  std::map<std::string, Status> restore_failed_;
  // Checkpointing (server/checkpoint.h): asked by the scheduler, written by a thread of its own
  // once every live worker reached the clock and the update threads are idle. While it writes,
  // the data socket is not read (nothing may change the shards); control and heartbeats go on.
  struct {
    bool asked = false;
    int64_t clock = 0;
    std::string dir;
    uint64_t request_id = 0;
    std::thread writer;
    std::atomic<bool> written{false};
    std::atomic<bool> abandon{false};  // the server is stopping: its answer could not be sent
    Status status;
    uint64_t bytes = 0;
    int64_t started_ms = 0;
    // The answers to the last few requests: the scheduler asks again while it has none (a
    // dropped connection may have taken it), and gets the answer again instead of a second
    // write (or, for one refused, a write nobody waits for).
    std::deque<Header> answers;
  } ckpt_;
  void AnswerCheckpoint(const Header& reply);
  struct {
    int64_t clock = 0, at_ms = 0;  // the last checkpoint this server wrote (at_ms 0: none)
  } ckpt_last_;
  // LogStats: the counters when it last logged.
  struct {
    int64_t at = 0;
    uint64_t pushes = 0, pulls = 0, clocks = 0, bytes_in = 0, bytes_out = 0;
  } logged_;
};

Status ServerImpl::Run() {
  control_.SetStop(&stop_);
  Status st = control_.Register(address_);
  if (!st.ok()) return st;
  rank_ = control_.rank();
  SetLogTag("server " + std::to_string(rank_.load()));
  SetThreadName("pp-server-" + std::to_string(rank_.load()));
  opt::FlushDenormalsOnThisThread();  // (requests are applied on this thread too)
  const ClusterMap& cluster = control_.cluster();
  const int W = cluster.num_workers;
  clocks_.Reset(W, cluster.start_clock);
  requests_ = std::vector<RequestRecord>(W);
  parked_of_.assign(W, 0);
  sessions_.assign(W, std::string());
  replacing_.assign(W, 0);
  dying_.assign(W, 0);
  settled_.assign(W, 0);
  hello_clock_.assign(W, cluster.start_clock);
  hello_version_.assign(W, 0);
  pushed_in_clock_.assign(W, {});
  refused_push_.assign(W, {});
  redo_.assign(W, {});
  if (!cluster.restore_from.empty()) {
    auto r = WhileHeartbeating(
        [&] {
          return ReadCheckpointForServer(cluster.restore_from, rank_, static_cast<int>(cluster.servers.size()),
                                         /*in_blocks=*/true);  // (a stripe per block takes each as read)
        });
    if (!r.ok()) {
      // A damaged or missing file: every restart meets it again (pushpull-server exits 2), and
      // the checkpoint before it may do.
      std::filesystem::path dir = std::filesystem::path(cluster.restore_from).lexically_normal();
      if (!dir.has_filename()) dir = dir.parent_path();  // (a trailing slash)
      const std::string root = dir.has_parent_path() ? dir.parent_path().string() : std::string(".");
      Status st = Status(r.status().code(), r.status().message() + "; to resume from an earlier checkpoint, give the "
                                             "scheduler (or pushpull-launch) --restore_from=" + root + "/ckpt-... (pushpull-checkpoint --dir=" +
                                             root + " lists them)");
      PP_LOG(Error) << "cannot restore: " << st.ToString();
      st = st.Annotate("restoring from " + cluster.restore_from);
      SayDone(st);
      return st;
    }
    restore_ = std::move(r.value());
    PP_LOG(Info) << "restoring " << Count(restore_.size(), "table") << " at clock " << cluster.start_clock << " from "
                 << cluster.restore_from;
  }
  OnMembership();
  PP_LOG(Info) << "serving at " << address_ << " (" << Count(W, "worker") << ", "
               << Count(control_.cluster().servers.size(), "server") << ", "
               << Count(options_.update_threads, "update thread")
               << (options_.max_table_bytes == std::numeric_limits<size_t>::max()
                       ? std::string()
                       : ", tables up to " + std::to_string(options_.max_table_bytes >> 20) + " MiB")
               << ")";

  const int K = options_.update_threads;
  for (int k = 0; k < K; ++k) queues_.push_back(std::make_unique<SpscQueue<Request>>());
  inflight_.reset(new std::atomic<int>[K]);
  for (int k = 0; k < K; ++k) inflight_[k] = 0;
  for (int k = 0; k < K; ++k) threads_.emplace_back([this, k] { UpdateLoop(k); });

  // The loop sleeps on the data socket, and on the update threads' "done" socket only while they
  // hold work; the scheduler's socket is looked at every kControlEveryMs. (Each socket in a
  // zmq_poll costs several system calls per wake-up, which is most of a small request's cost.)
  // With nothing owed by the update threads it sleeps in a receive on the data socket itself:
  // one request per pass, and none of a poll's extra calls or a drain's final empty receive.
  Status exit_status;
  int64_t next_control = 0;
  logged_.at = NowMs();
  int64_t next_stats = options_.stats_every_ms > 0 ? logged_.at + options_.stats_every_ms : INT64_MAX;
  while (!stop_) {
    int64_t now = NowMs();
    const int64_t timeout = std::max<int64_t>(0, std::min({control_.MsUntilTick(), next_control - now, int64_t{100}}));
    try {
      if (ckpt_.writer.joinable()) {
        zmq::pollitem_t item{static_cast<void*>(control_.socket()), 0, ZMQ_POLLIN, 0};
        Poll(&item, 1, std::min<int64_t>(timeout, 5));
        if (ckpt_.written) FinishCheckpoint();
      } else if (awaiting_done_ > 0) {
        zmq::pollitem_t items[] = {{static_cast<void*>(router_), 0, ZMQ_POLLIN, 0},
                                   {static_cast<void*>(done_), 0, ZMQ_POLLIN, 0}};
        Poll(items, 2, timeout);
        if (items[1].revents & ZMQ_POLLIN) HandleDone();
        if (items[0].revents & ZMQ_POLLIN) HandleRouter();
      } else {
        ReceiveRequest(timeout);
      }
    } catch (const std::exception& e) {
      // A request this server could not handle (out of memory for it, a socket error): say so and
      // go on serving everyone else; its sender's call runs into its deadline.
      PP_LOG(Error) << "request loop: " << e.what() << " (request dropped)";
      ++stats_.bad_messages;
    }
    if ((now = NowMs()) >= next_control) {
      try {
        HandleControl();
        // Pulls the minimum clock has released but that are still parked: a pass that ran out of
        // memory for a reply left them (AdvanceMinClock). Tried again here, not only at the next
        // clock, which may never come while their worker waits for them (found in review).
        if (!parked_.empty() && parked_.begin()->first <= min_live_ && !ckpt_.writer.joinable()) AdvanceMinClock();
      } catch (const std::exception& e) {
        // (Out of memory serving released pulls: they stay parked for the next pass.)
        PP_LOG(Error) << "control loop: " << e.what();
      }
      stats_.copy_on_write_waits = cow_budget_->waits.load();
      stats_.copy_on_write_overdrafts = cow_budget_->overdrafts.load();
      stats_.table_bytes = table_memory_->used();
      if (metrics_) PublishMetrics();
      next_control = now + kControlEveryMs;
      if (now >= next_stats) {
        LogStats(now);
        next_stats = now + options_.stats_every_ms;
      }
    }
    if (ckpt_.asked && !ckpt_.writer.joinable()) StartCheckpointWhenReady();
    if (!retired_.empty() && !ckpt_.writer.joinable() && awaiting_done_ == 0) FreeRetiredTables();
    const Membership& mem = control_.membership();
    if (mem.job_state == Membership::kFinished) {
      PP_LOG(Info) << "job finished: " << mem.reason;
      break;
    }
    if (mem.job_state == Membership::kAborted) {
      exit_status = Status::Aborted("job aborted: " + mem.reason);
      break;
    }
    st = control_.Tick();
    if (!st.ok()) {
      exit_status = st;
      break;
    }
    // (A report lost with a dropped connection is sent again while the worker is dying.)
    if (any_dying_ && NowMs() >= next_clocks_report_ms_) ReportWorkerClocks();
  }

  if (stop_ && exit_status.ok() && control_.membership().job_state == Membership::kRunning) {
    exit_status = Status::Aborted("stopped before the job ended");
    SayDone(exit_status);
  }
  if (ckpt_.writer.joinable()) {
    // Nobody can take this server's answer any more, so the checkpoint could never be committed:
    // stop writing it (at most one 4 MB write on) rather than wait for the whole file.
    ckpt_.abandon = true;
    ckpt_.writer.join();
    PP_LOG(Warning) << "checkpoint at clock " << ckpt_.clock << " abandoned, the server stopping ("
                    << (ckpt_.status.ok() ? "it was written, but not answered" : ckpt_.status.ToString())
                    << "); the last committed checkpoint stays";
  }
  // Shutdown: stop the update threads after the work they hold, answer parked pulls.
  for (auto& q : queues_) q->Push(nullptr);
  for (auto& t : threads_) t.join();
  while (true) {
    zmq::pollitem_t item{static_cast<void*>(done_), 0, ZMQ_POLLIN, 0};
    Poll(&item, 1, 0);
    if (!(item.revents & ZMQ_POLLIN)) break;
    HandleDone();
  }
  for (auto& [at, r] : parked_) {
    ReplyError(r->msg, Status::Aborted("server " + std::to_string(rank_.load()) + " is shutting down"));
    delete r;
  }
  parked_.clear();
  std::fill(parked_of_.begin(), parked_of_.end(), 0);
  stats_.parked_now = 0;
  stats_.copy_on_write_waits = cow_budget_->waits.load();
  stats_.copy_on_write_overdrafts = cow_budget_->overdrafts.load();
  PP_LOG(Info) << "stopped: " << stats_.pushes << " pushes, " << stats_.pulls << " pulls, "
               << stats_.clocks << " clocks, " << stats_.bad_messages << " malformed, "
               << stats_.rejected << " refused, " << stats_.duplicates << " duplicates; "
               << "pull staleness histogram {" << staleness_.ToString() << "}";
  return exit_status;
}

// A stripe that cannot do its part (the tables' memory limit, the machine out of memory) leaves
// it undone (Stripe: nothing changed) and the request is answered with the error; the server goes
// on serving. (Under BSP a sum that ran out of memory part way is the exception: logged.)
void ServerImpl::Execute(Request* r, int i) noexcept {
  try {
    ExecuteOrThrow(r, i);
  } catch (const TableMemoryExhausted& e) {  // (the client names the server)
    r->Fail(Status::ResourceExhausted(e.what()));
  } catch (const std::bad_alloc&) {
    r->Fail(Status::ResourceExhausted("out of memory (table '" + r->shard->spec().name + "')"));
  } catch (const std::exception& e) {
    r->Fail(Status::Internal("table '" + r->shard->spec().name + "': " + e.what()));
  }
}

void ServerImpl::ExecuteThreadPart(Request* r, int t) noexcept {
  const TableShard& shard = *r->shard;
  for (int i = 0; i < shard.num_stripes(); ++i)
    if (shard.ThreadOf(i) == t && (r->sel.empty() || r->sel[i].size() > 0)) Execute(r, i);
}

void ServerImpl::ExecuteOrThrow(Request* r, int i) {
  Stripe& s = r->shard->stripe(i);
  const RowSelection* sel = r->sel.empty() ? nullptr : &r->sel[i];
  switch (r->op) {
    case Request::kApply:
      s.ApplyPush(*sel, r->msg.key_data(), r->msg.value_data(), r->ctx);
      break;
    case Request::kAccumulate:
      s.Accumulate(r->clock, r->msg.header.sender_rank, *sel, r->msg.key_data(), r->msg.value_data(),
                   r->ctx.grad_scale);
      break;
    case Request::kRead:
      if (r->out)
        s.Read(*sel, r->msg.key_data(), r->msg.header.slot, r->out.get(), !(r->msg.header.flags & kFlagNoCreate));
      else if (sel->is_range) r->shared[i] = s.ShareRows(sel->range_begin);
      else {  // in place, or this stripe's rows gathered on their own (stripes run in parallel)
        std::shared_ptr<float[]> own;
        r->shared[i] = s.ReadOrShare(*sel, r->msg.key_data(), &own);
        if (!r->shared[i]) r->shared[i] = std::shared_ptr<const float>(own, own.get());
      }
      break;
    case Request::kApplyBsp:
      s.ApplyAccumulated(r->clock, r->ctx);
      break;
    case Request::kDropWorker:
      s.DropAccumulated(r->clock, r->worker);
      break;
  }
}

void ServerImpl::UpdateLoop(int t) {
  SetThreadName("pp-update-" + std::to_string(t));
  opt::FlushDenormalsOnThisThread();
  CopyOnWriteBudget::SetThisThreadMayWait(true);  // a write over the budget waits for a reply here
  zmq::socket_t done(ctx_, zmq::socket_type::push);
  done.set(zmq::sockopt::linger, 0);
  done.set(zmq::sockopt::sndhwm, 0);
  done.connect(done_endpoint_);
  SpscQueue<Request>& q = *queues_[t];
  while (Request* r = q.Pop()) {
    ExecuteThreadPart(r, t);
    const bool last = r->pending.fetch_sub(1, std::memory_order_acq_rel) == 1;
    // After the stripe's writes: the I/O thread may run small requests inline once all are idle.
    inflight_[t].fetch_sub(1, std::memory_order_release);
    if (last) {
      zmq::message_t m(&r, sizeof(r));
      done.send(m, zmq::send_flags::none);
    }
  }
}

// One line an operator can follow a long job by: rates since the last line, where the slowest
// worker is, what is waiting, what was refused, and memory.
void ServerImpl::LogStats(int64_t now) {
  const double s = std::max<int64_t>(1, now - logged_.at) / 1000.0;
  const uint64_t pushes = stats_.pushes, pulls = stats_.pulls, clocks = stats_.clocks;
  const uint64_t in = stats_.bytes_in, out = stats_.bytes_out;
  char line[512];
  std::snprintf(line, sizeof line,
                "stats, last %.1f s: %.0f pushes/s, %.0f pulls/s, %.0f clocks/s, in %.1f MB/s, out %.1f MB/s; "
                "slowest live worker at clock %lld, %llu pulls parked, max staleness %lld; "
                "so far %llu malformed, %llu refused, %llu duplicates; %.1f MB resident",
                s, (pushes - logged_.pushes) / s, (pulls - logged_.pulls) / s, (clocks - logged_.clocks) / s,
                (in - logged_.bytes_in) / s / 1e6, (out - logged_.bytes_out) / s / 1e6,
                static_cast<long long>(min_live_ == std::numeric_limits<int64_t>::max() ? -1 : min_live_),
                static_cast<unsigned long long>(stats_.parked_now.load()),
                static_cast<long long>(stats_.max_staleness.load()),
                static_cast<unsigned long long>(stats_.bad_messages.load()),
                static_cast<unsigned long long>(stats_.rejected.load()),
                static_cast<unsigned long long>(stats_.duplicates.load()), ResidentBytes() / 1e6);
  std::string ckpt;
  if (ckpt_last_.at_ms > 0)
    ckpt = "; last checkpoint at clock " + std::to_string(ckpt_last_.clock) + ", " +
           std::to_string((now - ckpt_last_.at_ms) / 1000) + " s ago";
  const CopyOnWriteBudget& cow = *cow_budget_;
  std::string spare;
  if (cow.used() > 0 || cow.waits > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; copy-on-write %.1f of %.1f MB, %llu writes waited for a reply (%llu over budget)",
                  cow.used() / 1e6, cow.limit() / 1e6, static_cast<unsigned long long>(cow.waits.load()),
                  static_cast<unsigned long long>(cow.overdrafts.load()));
    spare = buf;
  }
  std::string tables;
  if (table_memory_->limit() != std::numeric_limits<size_t>::max()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; tables hold %.1f of %.1f MB", table_memory_->used() / 1e6,
                  table_memory_->limit() / 1e6);
    tables = buf;
  }
  PP_LOG(Info) << line << tables << spare << ckpt;
  logged_ = {now, pushes, pulls, clocks, in, out};
}

void ServerImpl::PublishMetrics() {
  std::lock_guard<std::mutex> l(metrics_mu_);
  metrics_snapshot_.slowest_clock = min_live_ == std::numeric_limits<int64_t>::max() ? -1 : min_live_;
  metrics_snapshot_.staleness = staleness_;
  metrics_snapshot_.membership_version = control_.membership().version;
}

std::string ServerImpl::RenderMetrics() const {
  MetricsSnapshot snap;
  {
    std::lock_guard<std::mutex> l(metrics_mu_);
    snap = metrics_snapshot_;
  }
  const MetricsText::Labels server = {{"server", std::to_string(rank_.load())}};
  MetricsText m;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    m.Counter(std::string("pushpull_server_") + name, help, double(v), server);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    m.Gauge(std::string("pushpull_server_") + name, help, v, server);
  };
  counter("pushes_total", "Push requests taken to apply (refused ones count in refused_total).", stats_.pushes);
  counter("pulls_total", "Pull requests taken to answer.", stats_.pulls);
  counter("clocks_total", "Clock requests taken.", stats_.clocks);
  counter("malformed_total", "Messages dropped or answered with an error because they did not decode.",
          stats_.bad_messages);
  counter("refused_total", "Well-formed requests refused (a wrong shape, a non-finite gradient, a limit).",
          stats_.rejected);
  counter("duplicates_total", "Requests asked again after a reconnect: answered once, never run twice.",
          stats_.duplicates);
  counter("received_bytes_total", "Bytes received in requests (headers and keys included).", stats_.bytes_in);
  counter("sent_bytes_total", "Bytes of values sent in pull replies.", stats_.bytes_out);
  counter("parked_pulls_total", "Pulls that waited for slower workers (SSP, BSP).", stats_.parked_pulls);
  gauge("parked_pulls", "Pulls waiting for slower workers now.", double(stats_.parked_now.load()));
  gauge("slowest_worker_clock", "The clock of the slowest live worker (-1: none yet).", double(snap.slowest_clock));
  gauge("max_staleness", "The largest staleness a pull was answered at, in clocks.", double(stats_.max_staleness.load()));
  {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
    for (int b = 0; b < StalenessHistogram::kBuckets; ++b) {
      if (b + 1 < StalenessHistogram::kBuckets) bounds.push_back(b);
      counts.push_back(snap.staleness.counts()[b]);
      sum += double(b) * double(snap.staleness.counts()[b]);  // (the last bucket at its bound: a lower bound)
    }
    m.Histogram("pushpull_server_pull_staleness", "Clocks a pull's answer was behind its worker's clock.", bounds,
                counts, sum, server);
  }
  gauge("tables", "Tables this server holds a shard of.", double(stats_.tables.load()));
  gauge("table_bytes", "What this server's tables hold (parameters, optimizer slots, steps, key index).",
        double(table_memory_->used()));
  if (table_memory_->limit() != std::numeric_limits<size_t>::max())
    gauge("table_bytes_limit", "The limit on table_bytes (--max_table_mb).", double(table_memory_->limit()));
  gauge("copy_on_write_bytes", "Parameter arrays that pull replies still hold while pushes moved on.",
        double(cow_budget_->used()));
  gauge("copy_on_write_budget_bytes", "The limit on copy_on_write_bytes (--copy_on_write_budget_mb).",
        double(cow_budget_->limit()));
  counter("copy_on_write_waits_total", "Pushes that waited for a pull reply to be sent (the budget spent).",
          cow_budget_->waits.load());
  counter("copy_on_write_overdrafts_total", "Pushes that copied over the budget after --copy_on_write_wait_ms.",
          cow_budget_->overdrafts.load());
  counter("checkpoints_total", "Checkpoint files this server wrote.", stats_.checkpoints);
  gauge("membership_version", "The scheduler's membership version this server holds.", double(snap.membership_version));
  gauge("resident_bytes", "The server process's resident memory.", double(ResidentBytes()));
  return m.str();
}

void ServerImpl::CountBad(const Status& st, const char* what) {
  ++stats_.bad_messages;
  if (LogThisOne(&malformed_logged_))
    PP_LOG(Warning) << what << " (" << stats_.bad_messages << " so far): " << st.ToString();
}

void ServerImpl::HandleRouter() {
  // Bounded batch so the other sockets get their turn.
  for (int i = 0; i < 256 && ReceiveRequest(0); ++i) {
    // Large batches must not starve the heartbeat (the scheduler would declare us dead).
    if (control_.MsUntilTick() == 0) control_.Tick().IgnoreError();
  }
}

// Receives one message from the data socket, waiting up to `wait_ms` (0: not at all), and
// handles it. False when none came.
bool ServerImpl::ReceiveRequest(int64_t wait_ms) {
  if (!RecvFrames(router_, &frames_, 5, wait_ms)) return false;
  size_t bytes = 0;
  for (auto& f : frames_) bytes += f.size();
  stats_.bytes_in += bytes;
  Message m;
  m.identity = std::move(frames_[0]);
  frames_.erase(frames_.begin());
  bool header_ok = false;
  Status st = Decode(&frames_, &m, &header_ok);
  if (!st.ok()) {
    // Answer when the header decoded (the sender can match the reply); drop otherwise. Not
    // recorded: it ran nothing, and its id may be a request's in progress, whose answer a
    // repeat must get (found in review).
    if (header_ok && IsDataType(m.header.type) && !IsReply(m.header.type)) {
      CountBad(st, "malformed request answered with an error");
      ReplyError(m, st, /*record=*/false);
    } else {
      CountBad(st, "malformed message dropped");
    }
    return true;
  }
  if (!IsDataType(m.header.type) || IsReply(m.header.type)) {
    CountBad(Status::InvalidArgument(std::string("unexpected ") + MsgTypeName(m.header.type) +
                                     " on the data socket"), "message dropped");
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
    if (w >= 0 && w < static_cast<int>(requests_.size()) && type != MsgType::kHello) {
      RequestRecord::Answer a;
      a.type = type == MsgType::kPush ? MsgType::kPushReply : type == MsgType::kPull ? MsgType::kPullReply : MsgType::kClockReply;
      a.code = Code::kInternal;
      a.error = std::string("the server could not handle it: ") + e.what();
      requests_[w].End(id, std::move(a));
    }
    throw;
  }
  return true;
}

Status ServerImpl::Validate(const Message& m, TableShard** shard, bool again) {
  const Header& h = m.header;
  if (h.sender_role != Role::kWorker || h.sender_rank < 0 || h.sender_rank >= clocks_.size())
    return Status::InvalidArgument("sender rank " + std::to_string(h.sender_rank) + " is not a worker of this job");
  if (!clocks_.alive(h.sender_rank))
    return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) + " was declared dead");
  if (replacing_[h.sender_rank])
    return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) +
                                      " was declared dead; the job waits for a new worker in its place");
  if (dying_[h.sender_rank])
    return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) + " was declared dead");
  if (FromEarlierClient(h))
    return Status::FailedPrecondition("from an earlier client of worker " + std::to_string(h.sender_rank) +
                                      ", which another has replaced");
  // (Below the clock the job started at, a request would pass for a replacement's redo of one
  // applied already: answered, never applied.)
  if (h.clock < clocks_.start())
    return Status::InvalidArgument(std::string(MsgTypeName(h.type)) + " tagged clock " + std::to_string(h.clock) +
                                   ", before the job's first clock " + std::to_string(clocks_.start()));
  if (h.type == MsgType::kClock) return Status::OK();
  if (h.table >= tables_.size() || !tables_[h.table])
    return Status::NotFound("unknown table id " + std::to_string(h.table));
  TableShard* t = tables_[h.table].get();
  const TableSpec& spec = t->spec();
  if (h.dim != spec.dim)
    return Status::InvalidArgument("table '" + spec.name + "' has dim " + std::to_string(spec.dim) +
                                   ", message says " + std::to_string(h.dim));
  if (h.flags & kFlagRange) {
    if (spec.sparse) return Status::InvalidArgument("row ranges are for dense tables only");
    if (h.row_begin < t->row_begin() || h.num_rows > t->row_end() - h.row_begin ||
        h.row_begin > t->row_end())
      return Status::InvalidArgument("rows [" + std::to_string(h.row_begin) + ", +" +
                                     std::to_string(h.num_rows) + ") are outside this server's [" +
                                     std::to_string(t->row_begin()) + ", " +
                                     std::to_string(t->row_end()) + ") of '" + spec.name + "'");
  } else if (!t->OwnsEveryKey()) {
    const Key* keys = m.key_data();
    for (uint64_t i = 0; i < h.num_keys; ++i) {
      if (!t->Owns(keys[i])) {
        if (!spec.sparse && keys[i] >= spec.rows)
          return Status::InvalidArgument("row " + std::to_string(keys[i]) + " out of range [0, " +
                                         std::to_string(spec.rows) + ") of '" + spec.name + "'");
        return Status::InvalidArgument("row " + std::to_string(keys[i]) + " of '" + spec.name +
                                       "' belongs to server " +
                                       std::to_string(t->info().OwnerOf(keys[i])) + ", not " +
                                       std::to_string(rank_.load()));
      }
    }
  }
  int64_t own = clocks_.clock(h.sender_rank);
  if (again && h.clock < own && h.type == MsgType::kPull && spec.consistency.model == Consistency::kBsp)
    return Status::FailedPrecondition("pull at clock " + std::to_string(h.clock) + " of BSP table '" + spec.name +
                                      "' asked again after worker " + std::to_string(h.sender_rank) +
                                      " moved on to clock " + std::to_string(own) +
                                      ": what it would have seen then is gone");
  const bool before_hello = h.clock < own && h.clock < hello_clock_[h.sender_rank];  // done by the client before
  if (h.clock != own && !(again && h.clock < own) && !before_hello)
    return Status::FailedPrecondition(std::string(MsgTypeName(h.type)) + " tagged clock " +
                                      std::to_string(h.clock) + " but worker " +
                                      std::to_string(h.sender_rank) + " is at clock " +
                                      std::to_string(own));
  if (h.type == MsgType::kPull) {
    // The reply is row_count x dim floats, whatever the request's size (keys may repeat).
    const uint64_t max_rows = options_.max_message_bytes > 0
                                  ? uint64_t(options_.max_message_bytes) / (uint64_t(spec.dim) * sizeof(float))
                                  : std::numeric_limits<uint64_t>::max();  // no message limit set
    if (h.row_count() > max_rows)
      return Status::InvalidArgument("pull of " + std::to_string(h.row_count()) + " rows of dim " +
                                     std::to_string(spec.dim) + " from '" + spec.name + "' would be over the " +
                                     std::to_string(options_.max_message_bytes >> 20) + " MB message limit");
    if (h.slot < -1 || h.slot >= t->optimizer()->num_slots())
      return Status::InvalidArgument("slot " + std::to_string(h.slot) + " does not exist for optimizer " +
                                     opt::KindName(spec.optimizer.kind));
  }
  if (h.type == MsgType::kPush) {
    if (!opt::AllUsable(m.value_data(), h.row_count() * h.dim))
      return Status::InvalidArgument("gradient for '" + spec.name + "' holds NaN, Inf or a value of 2^60 or more "
                                     "(its square would overflow the optimizer's state); push refused");
  }
  *shard = t;
  return Status::OK();
}

void ServerImpl::HandleData(Message& m) {
  const Header& h = m.header;
  if (h.type == MsgType::kHello) {
    bool raised = false;
    // A client new to this worker rank (another receive socket: a new process) numbers its
    // requests from the start again, so its record starts over.
    if (h.sender_role == Role::kWorker && h.sender_rank >= 0 && h.sender_rank < static_cast<int>(requests_.size())) {
      std::string session = h.reply_to.empty() ? std::string(static_cast<const char*>(m.identity.data()), m.identity.size())
                                               : h.reply_to;
      const int w = h.sender_rank;
      if (sessions_[w] != session) {
        // The clock the servers agreed the rank's dead worker reached, as the new client heard it
        // from the scheduler: this server may not have heard it yet (nor that the rank is no
        // longer dying). Before anything below reads the clock.
        if (h.row_begin > 0 && h.row_begin <= uint64_t(std::numeric_limits<int64_t>::max()) &&
            RaiseToAgreedClock(w, static_cast<int64_t>(h.row_begin - 1)) && !ckpt_.writer.joinable())
          raised = true;
        dying_[w] = 0;
        // A new process for this rank after another (a replacement): what the one before left
        // unfinished of its open clock is dropped (BSP sums), and it goes on from this clock.
        if (!sessions_[w].empty() || replacing_[w]) {
          // Pushes of the open clock applied already (by the one before, or redone by an earlier
          // replacement, or still to be redone for one) are the new client's first ones again.
          for (auto& [table, n] : pushed_in_clock_[w]) redo_[w][table] += n;
          pushed_in_clock_[w].clear();
          int64_t redo = 0;
          for (auto& [table, n] : redo_[w]) redo += n;
          PP_LOG(Warning) << "worker " << w << ": a new client took its place at clock " << clocks_.clock(w)
                          << (redo > 0 ? "; its first " + std::to_string(redo) +
                                             " pushes there were applied already and will be answered, not applied again"
                                       : std::string());
          if (!ckpt_.writer.joinable()) DropBspSums(w);
        }
        refused_push_[w] = {};  // (the new client's own pushes count)
        sessions_[w] = std::move(session);
        requests_[w] = RequestRecord();
        replacing_[w] = 0;
        hello_clock_[w] = clocks_.clock(w);
        // (kHello's clock: the membership version its client registered under, which has it
        // alive: a "being replaced" older than that, still on its way here, is not about it.)
        hello_version_[w] = h.clock > 0 ? uint64_t(h.clock) : 0;
      }
    }
    // (What the raise completed: its clock's BSP mean, pulls parked for it.)
    if (raised) AdvanceMinClock();
    Header rh;
    rh.type = MsgType::kHelloReply;
    rh.request_id = h.request_id;
    // Where this worker rank's clock is here: a replacement starts from it.
    if (h.sender_role == Role::kWorker && h.sender_rank >= 0 && h.sender_rank < clocks_.size())
      rh.clock = clocks_.clock(h.sender_rank);
    rh.num_rows = options_.max_message_bytes > 0 ? uint64_t(options_.max_message_bytes) : 0;
    rh.sender_role = Role::kServer;
    rh.sender_rank = rank_;
    zmq::message_t to = ReplyIdentity(m);
    SendMessage(router_, &to, rh).IgnoreError();
    return;
  }
  const Repeat repeat = LookUpRepeat(m);
  if (repeat == Repeat::kHandled) return;
  TableShard* shard = nullptr;
  Status st = Validate(m, &shard, repeat == Repeat::kServeAgain);
  if (!st.ok()) {
    ++stats_.rejected;
    if (LogThisOne(&refused_logged_))
      PP_LOG(Warning) << "refused " << MsgTypeName(h.type) << " from worker " << h.sender_rank
                      << ": " << st.ToString();
    NotePushRefused(h, st);
    ReplyError(m, st);
    return;
  }
  // A replacement redoing the clock its predecessor had finished here (it starts at the lowest
  // clock the servers have for its rank): answered, not applied twice.
  const int64_t hello_clock = hello_clock_[h.sender_rank];
  if ((h.type == MsgType::kPush && h.clock < hello_clock) || (h.type == MsgType::kClock && h.clock <= hello_clock &&
                                                                h.clock <= clocks_.clock(h.sender_rank))) {
    ++stats_.duplicates;
    Answered(h, SendBareReply(m, h.type == MsgType::kPush ? MsgType::kPushReply : MsgType::kClockReply, h.table,
                              h.clock, Status::OK()));
    return;
  }
  // ... and redoing the pushes its predecessor had applied in its open clock (not under BSP,
  // whose unfinished sums were dropped instead).
  if (h.type == MsgType::kPush && h.clock == hello_clock) {
    auto it = redo_[h.sender_rank].find(h.table);
    if (it != redo_[h.sender_rank].end() && it->second > 0) {
      --it->second;
      ++pushed_in_clock_[h.sender_rank][h.table];
      ++stats_.duplicates;
      Answered(h, SendBareReply(m, MsgType::kPushReply, h.table, h.clock, Status::OK()));
      return;
    }
  }
  if (h.type == MsgType::kClock) {
    const RefusedPush& refused = refused_push_[h.sender_rank];
    if (refused.clock >= 0 && refused.clock == h.clock - 1)
      st = Status(refused.why.code(), "clock " + std::to_string(refused.clock) + " is not done here: this server refused "
                                      "a push of it (" + refused.why.message() + ")");
    else
      st = clocks_.Advance(h.sender_rank, h.clock);
    if (!st.ok()) {
      ++stats_.rejected;
      ReplyError(m, st);
      return;
    }
    ++stats_.clocks;
    settled_[h.sender_rank] = (h.flags & kFlagSettled) != 0;
    pushed_in_clock_[h.sender_rank].clear();
    redo_[h.sender_rank].clear();
    Answered(h, SendBareReply(m, MsgType::kClockReply, 0, h.clock, Status::OK()));
    AdvanceMinClock();
    return;
  }

  // Owned here until handed on: out of memory for it (its rows' split, a pull's reply buffer)
  // answers it with the error and frees it.
  std::unique_ptr<Request> owned(new Request);
  Request* r = owned.get();
  try {
    r->msg = std::move(m);
    r->shard = shard;
    const Header& rh = r->msg.header;
    if (rh.flags & kFlagRange) shard->SplitRange(rh.row_begin, rh.row_begin + rh.num_rows, &r->sel);
    else shard->Split(r->msg.key_data(), rh.num_keys, &r->sel);

    if (rh.type == MsgType::kPush) {
      ++stats_.pushes;
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
      if (shard->spec().consistency.model == Consistency::kBsp) {
        r->op = Request::kAccumulate;
        r->clock = rh.clock;
        auto& who = shard->bsp_contributors[rh.clock];
        who.resize(clocks_.size(), 0);
        who[rh.sender_rank] = 1;
      } else {
        r->op = Request::kApply;
        ++pushed_in_clock_[rh.sender_rank][rh.table];
        // A step a push (a call's first request here; its others take the same step, or a later
        // one when other pushes came between).
        const bool first = !(rh.flags & kFlagContinues) || shard->table_step == 0;
        r->ctx.lr = opt::ScheduledLr(oc, first ? shard->table_step++ : shard->table_step - 1);
        if (oc.staleness_aware) {
          int64_t tau = clocks_.MaxLive() - rh.clock;
          if (tau > 1) r->ctx.lr /= float(tau);
        }
      }
      owned.release();
      Dispatch(r);
      return;
    }
    // Pull.
    ++stats_.pulls;
    r->op = Request::kRead;
    int64_t bound = shard->spec().consistency.bound();
    if (PullReady(rh.clock, bound, min_live_)) {
      PreparePull(r, min_live_);
      owned.release();
      Dispatch(r);
    } else if (parked_of_[rh.sender_rank] >= kMaxParked) {
      CountBad(Status::ResourceExhausted("too many pulls parked"), "pull refused");
      ReplyError(r->msg, Status::ResourceExhausted("worker " + std::to_string(rh.sender_rank) + " has " +
                                                   std::to_string(kMaxParked) + " pulls waiting on this server; a "
                                                   "client keeps to " + std::to_string(kMaxUnansweredRequests)));
    } else {
      parked_.emplace(PullReadyAt(rh.clock, bound), r);
      owned.release();
      ++parked_of_[rh.sender_rank];
      ++stats_.parked_pulls;
      ++stats_.parked_now;
    }
  } catch (const std::exception& e) {
    if (!owned) throw;  // (handed on already: the request loop says so)
    const Status st = dynamic_cast<const std::bad_alloc*>(&e)
                          ? Status::ResourceExhausted("out of memory for this request on server " + std::to_string(rank_.load()))
                          : Status::Internal(e.what());
    PP_LOG(Error) << "refused " << MsgTypeName(r->msg.header.type) << " from worker " << r->msg.header.sender_rank
                  << ": " << st.ToString();
    ++stats_.rejected;
    NotePushRefused(r->msg.header, st);
    ReplyError(r->msg, st);
  }
}

// What a pull needs before it is handed on (its staleness, where its values go): out of memory
// here throws with the pull still the caller's (a parked one stays parked).
void ServerImpl::PreparePull(Request* r, int64_t min_live) {
  const Header& h = r->msg.header;
  const int64_t s = PullStaleness(h.clock, min_live);
  r->staleness = static_cast<int32_t>(s);
  // A dense pull of parameters is sent from the parameters themselves, a values frame per
  // stripe, without a copy (copy-on-write: the pull still sees exactly the updates applied
  // before it). So is each stripe's part of a keyed pull whose rows that stripe holds as one run,
  // which its update thread finds out (Stripe::ReadOrShare; else it gathers them, in parallel
  // with the other stripes); over several stripes the reply holds each stripe's rows in turn
  // (kFlagByStripe), and the client places them. Optimizer slots are gathered into one buffer,
  // and so are small pulls that span stripes (one small copied frame rather than several) and
  // keyed pulls of a dense table that span stripes.
  int stripes = 0;
  for (const RowSelection& sel : r->sel) stripes += sel.size() > 0;
  const bool large = h.row_count() * h.dim * sizeof(float) > kInlineBytes;
  const bool range = h.flags & kFlagRange;
  // (A client places a reply's stripes by a key's hash: sparse tables only.)
  // (A lookup's rows not there are made up in its reply: gathered too.)
  const bool in_place = h.slot < 0 && !(h.flags & kFlagNoCreate) &&
                        (stripes <= 1 || (large && (range || r->shard->spec().sparse)));
  if (in_place) r->shared.resize(r->sel.size());
  else r->out = NewFloatBuffer(h.row_count() * h.dim);
  // (Counted once its reply buffer is there: out of memory for it leaves the pull parked.)
  staleness_.Record(s);
  if (s > stats_.max_staleness) stats_.max_staleness = s;
}

void ServerImpl::Dispatch(Request* r) {
  const int K = static_cast<int>(queues_.size());
  const TableShard& shard = *r->shard;
  const int stripes = shard.num_stripes();
  const bool whole = r->sel.empty();
  // The update threads with a part of it, and how many.
  std::bitset<kMaxValueFrames> threads;
  for (int i = 0; i < stripes; ++i)
    if (whole || r->sel[i].size() > 0) threads.set(shard.ThreadOf(i));
  const int n = static_cast<int>(threads.count());
  if (n == 0) {
    Reply(r);
    return;
  }
  // While every update thread is idle, a request runs right here when it is small, or at any
  // size when there is a single update thread (nothing to run in parallel): two thread hand-offs
  // cost more than they buy (measured: docs/PERFORMANCE.md). Busy update threads still take the
  // work, so receiving the next message overlaps applying this one. Safe: an idle update thread
  // touches no stripe until this thread hands it work, and its last writes are visible through
  // the acquire below.
  // (Sharing a stripe's rows for an in-place pull costs nothing, whatever their size.)
  const bool shares = !r->shared.empty() && (r->msg.header.flags & kFlagRange);  // costs nothing
  const uint64_t bytes = whole || shares ? 0 : r->msg.header.row_count() * r->msg.header.dim * sizeof(float);
  if (!whole && (K == 1 || bytes <= kInlineBytes)) {
    bool run_here = true;
    for (int k = 0; k < K && run_here; ++k) run_here = inflight_[k].load(std::memory_order_acquire) == 0;
    // A small push to a stripe that a pull reply still holds first copies the stripe
    // (copy-on-write); with several update threads that copy is theirs to make, not this
    // thread's, which would stop receiving meanwhile.
    // Nor may this thread wait for a pull reply to let go of a stripe's parameters: a push, or
    // any request that may add rows, whose copy-on-write copies would not fit the budget all
    // together goes to the update threads, which may wait.
    if (run_here && (r->op == Request::kApply || shard.spec().sparse)) {
      size_t need = 0;
      for (int i = 0; i < stripes; ++i)
        if (r->sel[i].size() > 0) need += shard.stripe(i).WriteBudgetBytes();
      run_here = need == 0 || !cow_budget_->WouldExceed(need);
    }
    if (run_here && K > 1 && (r->op == Request::kApply || shard.spec().sparse)) {  // sparse: may add rows
      uint64_t copy = 0;
      for (int i = 0; i < stripes; ++i)
        if (r->sel[i].size() > 0) copy += shard.stripe(i).CopyOnWriteBytes(r->sel[i]);
      run_here = bytes + copy <= kInlineBytes;
    }
    if (run_here) {
      for (int i = 0; i < stripes; ++i)
        if (r->sel[i].size() > 0) Execute(r, i);
      Reply(r);
      return;
    }
  }
  r->pending.store(n, std::memory_order_relaxed);
  ++awaiting_done_;  // the last update thread to finish it sends one "done"
  for (int k = 0; k < K; ++k) {
    if (!threads.test(k)) continue;
    inflight_[k].fetch_add(1, std::memory_order_relaxed);
    queues_[k]->Push(r);
  }
}

void ServerImpl::HandleDone() {
  for (int i = 0; i < 1024; ++i) {
    zmq::message_t m;
    if (!done_.recv(m, zmq::recv_flags::dontwait)) return;
    Request* r;
    std::memcpy(&r, m.data(), sizeof(r));
    --awaiting_done_;
    // Pairs with the update threads' release decrements: their writes to the request (a pull's
    // values) are visible here, whatever ZeroMQ's inproc pipe guarantees on its own.
    (void)r->pending.load(std::memory_order_acquire);
    Reply(r);
  }
}

void ServerImpl::Reply(Request* r) {
  const bool sum = r->op == Request::kApplyBsp || r->op == Request::kDropWorker;  // nobody to answer
  if (r->failed.load(std::memory_order_relaxed)) {
    ++stats_.rejected;
    if (sum)  // (a clock's update lost: always said)
      PP_LOG(Error) << (r->op == Request::kApplyBsp ? "applying" : "dropping a worker's sum of") << " clock "
                    << r->clock << " failed: " << r->error.ToString();
    else if (LogThisOne(&refused_logged_))
      PP_LOG(Error) << "refused " << MsgTypeName(r->msg.header.type) << " from worker " << r->msg.header.sender_rank
                    << ": " << r->error.ToString();
    if (!sum) {
      if (r->msg.header.type == MsgType::kPush) NotePushRefused(r->msg.header, r->error);
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
  out.sender_rank = rank_;
  out.table = h.table;
  out.clock = h.clock;
  zmq::message_t values;
  std::vector<zmq::message_t> split;  // a pull a frame per stripe
  if (r->op == Request::kRead) {
    out.flags = h.flags & kFlagRange;  // (and kFlagByStripe below)
    out.num_keys = h.num_keys;
    out.row_begin = h.row_begin;
    out.num_rows = h.num_rows;
    out.dim = h.dim;
    out.slot = h.slot;
    out.staleness = r->staleness;
    size_t bytes = h.row_count() * h.dim * sizeof(float);
    stats_.bytes_out += bytes;
    if (r->out) {
      values = ZeroCopyFrame(r->out.get(), bytes, r->out);
    } else {
      const size_t row_bytes = size_t(h.dim) * sizeof(float);
      size_t frames = 0;
      for (size_t k = 0; k < r->shared.size(); ++k) frames += r->sel[k].size() > 0;
      for (size_t k = 0; k < r->shared.size(); ++k) {
        if (r->sel[k].size() == 0) continue;
        zmq::message_t f = ZeroCopyFrame(r->shared[k].get(), r->sel[k].size() * row_bytes, r->shared[k]);
        if (frames == 1) values = std::move(f);  // one stripe: the plain three-frame reply
        else split.push_back(std::move(f));
      }
      if (frames > 1 && !(h.flags & kFlagRange)) {  // keyed: each stripe's rows in turn
        out.flags |= kFlagByStripe;
        out.row_begin = r->shared.size();
      }
    }
  }
  zmq::message_t to = ReplyIdentity(r->msg);
  Status st = split.empty() ? SendMessage(router_, &to, out, zmq::message_t(), std::move(values))
                            : SendMessage(router_, &to, out, zmq::message_t(), &split);
  if (!st.ok() && LogThisOne(&lost_logged_))  // (a dropped connection loses many)
    PP_LOG(Warning) << "reply to worker " << h.sender_rank << " lost: " << st.ToString() << " (" << lost_logged_
                    << " so far; the worker asks again once it has reconnected)";
  Answered(h, out);
  delete r;
}

void ServerImpl::NotePushRefused(const Header& h, const Status& why) {
  if (h.type != MsgType::kPush || h.sender_role != Role::kWorker || h.sender_rank < 0 ||
      h.sender_rank >= static_cast<int>(refused_push_.size()) || FromEarlierClient(h))
    return;
  refused_push_[h.sender_rank] = {h.clock, why};
}

void ServerImpl::ReplyError(const Message& m, const Status& st, bool record) {
  Header out;
  switch (m.header.type) {
    case MsgType::kPush: out.type = MsgType::kPushReply; break;
    case MsgType::kPull: out.type = MsgType::kPullReply; break;
    default: out.type = MsgType::kClockReply; break;
  }
  out.request_id = m.header.request_id;
  out.sender_role = Role::kServer;
  out.sender_rank = rank_;
  out.table = m.header.table;
  out.SetStatus(st);
  zmq::message_t to = ReplyIdentity(m);
  SendMessage(router_, &to, out).IgnoreError();
  if (record) Answered(m.header, out);
}

Header ServerImpl::SendBareReply(const Message& m, MsgType type, uint32_t table, int64_t clock, const Status& st) {
  Header out;
  out.type = type;
  out.request_id = m.header.request_id;
  out.sender_role = Role::kServer;
  out.sender_rank = rank_;
  out.table = table;
  out.clock = clock;
  out.SetStatus(st);
  zmq::message_t to = ReplyIdentity(m);
  SendMessage(router_, &to, out).IgnoreError();
  return out;
}

void ServerImpl::Answered(const Header& request, const Header& reply) {
  if (request.sender_rank < 0 || request.sender_rank >= static_cast<int>(requests_.size())) return;
  // A request of an earlier client of this rank, answered after a new one said hello (a pull it
  // left parked): not the new client's request of the same id, whose record it would overwrite.
  if (FromEarlierClient(request)) return;
  RequestRecord::Answer a;
  a.type = reply.type;
  a.table = reply.table;
  a.clock = reply.clock;
  a.code = reply.status;
  a.error = reply.error;
  requests_[request.sender_rank].End(request.request_id, std::move(a));
}

// A worker sends its unanswered requests to a server again when a connection to it dropped
// (server/request_record.h): a repeat is answered from the record, or dropped while the request is
// in progress, and never run twice; a pull answered already is served again.
ServerImpl::Repeat ServerImpl::LookUpRepeat(const Message& m) {
  const Header& h = m.header;
  if (h.sender_role != Role::kWorker || h.sender_rank < 0 || h.sender_rank >= static_cast<int>(requests_.size()))
    return Repeat::kNo;  // Validate() refuses it
  // Validate() refuses it too; marking its id begun would make the new client's request of that
  // id look in progress, and dropped, for good.
  if (FromEarlierClient(h)) return Repeat::kNo;
  RequestRecord& record = requests_[h.sender_rank];
  const RequestRecord::Answer* a = nullptr;
  switch (record.Look(h.request_id, &a)) {
    case RequestRecord::Seen::kNew:
      record.Begin(h.request_id);
      return Repeat::kNo;
    case RequestRecord::Seen::kInProgress:
      ++stats_.duplicates;
      return Repeat::kHandled;
    case RequestRecord::Seen::kAnswered: {
      ++stats_.duplicates;
      // A repeat is the same request: an id answered as another kind of request is a client's
      // bug (a push given a pull's id would be served as that pull, or run at its old clock;
      // found in review). Refused, not recorded, nothing run.
      const MsgType asked = h.type == MsgType::kPush   ? MsgType::kPushReply
                            : h.type == MsgType::kPull ? MsgType::kPullReply
                            : h.type == MsgType::kClock ? MsgType::kClockReply
                                                        : MsgType::kHelloReply;
      if (a->type != asked) {
        ReplyError(m, Status::InvalidArgument(std::string(MsgTypeName(h.type)) + " " + std::to_string(h.request_id) +
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
      ++stats_.duplicates;
      if (h.type == MsgType::kPull) {
        record.Begin(h.request_id);
        return Repeat::kServeAgain;
      }
      if (h.type == MsgType::kClock) {
        if (h.clock > clocks_.clock(h.sender_rank)) {
          record.Begin(h.request_id);
          return Repeat::kNo;
        }
        SendBareReply(m, MsgType::kClockReply, 0, h.clock, Status::OK());
        return Repeat::kHandled;
      }
      ReplyError(m, Status::FailedPrecondition(std::string(MsgTypeName(h.type)) + " " + std::to_string(h.request_id) +
                                               " from worker " + std::to_string(h.sender_rank) +
                                               " asked again after this server forgot its answer; not run again"),
                 /*record=*/false);
      return Repeat::kHandled;
  }
  return Repeat::kNo;
}

void ServerImpl::AdvanceMinClock() {
  const int64_t m = clocks_.MinLive();
  // (Pulls parked at or below the minimum are served even when it did not move: a pass that
  // threw, out of memory for a reply, left them.)
  if (m <= min_live_ && m != std::numeric_limits<int64_t>::max() &&
      (parked_.empty() || parked_.begin()->first > min_live_))
    return;
  // The minimum may jump several clocks (a slow worker dies or finishes). It is stepped up to each
  // point where something happens, in order, so that a pull parked until the minimum reaches k
  // is served after BSP's clocks below k are applied and before clock k is: it sees exactly the
  // updates tagged below its own clock.
  while (true) {
    int64_t next = m;
    for (auto& t : tables_)
      if (t && t->spec().consistency.model == Consistency::kBsp && !t->bsp_contributors.empty())
        next = std::min(next, t->bsp_contributors.begin()->first + 1);
    if (!parked_.empty()) next = std::min(next, parked_.begin()->first);
    min_live_ = std::max(min_live_, next);
    // BSP: every clock below the minimum is complete; apply its mean once, in clock order,
    // before any pull released below can read.
    for (auto& t : tables_) {
      if (!t || t->spec().consistency.model != Consistency::kBsp) continue;
      auto& open = t->bsp_contributors;
      while (!open.empty() && open.begin()->first < min_live_) {
        // The mean over the workers that took part in the clock: every one whose clock passed it
        // (it finished the clock, whether or not it pushed here: a sparse table's rows get the
        // same divisor on every server, as one process with the whole batch would) and any that
        // pushed to it here and left before finishing it.
        const int64_t k = open.begin()->first;
        const std::vector<uint8_t>& pushed = open.begin()->second;
        int participants = 0;
        for (int w = 0; w < clocks_.size(); ++w)
          participants += (static_cast<size_t>(w) < pushed.size() && pushed[w]) || clocks_.clock(w) > k;
        auto* r = new Request;
        r->op = Request::kApplyBsp;
        r->shard = t.get();
        r->clock = open.begin()->first;
        // BSP's schedule step is the clock: the same on every server, whether or not a clock
        // brought this server any push (sparse tables), and so after a restore onto other servers.
        r->ctx.lr = opt::ScheduledLr(t->spec().optimizer, r->clock);
        t->table_step = std::max(t->table_step, r->clock + 1);
        r->ctx.grad_scale = participants > 0 ? 1.0f / participants : 0.0f;
        open.erase(open.begin());
        Dispatch(r);
      }
    }
    while (!parked_.empty() && parked_.begin()->first <= min_live_) {
      Request* r = parked_.begin()->second;
      // Its staleness against the slowest live worker now (m), not the step the minimum is
      // stepped through (which would report more than the pull has). Prepared while still
      // parked: out of memory for it leaves it there for the next pass.
      PreparePull(r, m);
      parked_.erase(parked_.begin());
      --parked_of_[r->msg.header.sender_rank];
      --stats_.parked_now;
      Dispatch(r);
    }
    if (min_live_ >= m) break;
  }
}

void ServerImpl::HandleControl() {
  for (int i = 0; i < 64; ++i) {
    Message m;
    bool changed = false;
    bool got = control_.Receive(&m, &changed);
    if (changed) OnMembership();
    if (!got) {
      zmq::pollitem_t item{static_cast<void*>(control_.socket()), 0, ZMQ_POLLIN, 0};
      Poll(&item, 1, 0);
      if (!(item.revents & ZMQ_POLLIN)) return;
      continue;
    }
    if (m.header.type == MsgType::kCreateTable) CreateTable(m);
    if (m.header.type == MsgType::kCheckpoint) {
      // Asked again: still in progress (answered when written), or answered already.
      if (ckpt_.asked && m.header.request_id == ckpt_.request_id) continue;
      auto answered = std::find_if(ckpt_.answers.begin(), ckpt_.answers.end(),
                                   [&](const Header& a) { return a.request_id == m.header.request_id; });
      if (answered != ckpt_.answers.end()) {
        control_.Send(*answered).IgnoreError();
        continue;
      }
      if (ckpt_.writer.joinable()) {
        Header reply;
        reply.type = MsgType::kCheckpointReply;
        reply.request_id = m.header.request_id;
        reply.SetStatus(Status::FailedPrecondition("server " + std::to_string(rank_.load()) +
                                                   " is still writing the checkpoint at clock " +
                                                   std::to_string(ckpt_.clock)));
        AnswerCheckpoint(reply);
        continue;
      }
      // A request not yet written is replaced: the scheduler gave up on it (its deadline) and
      // ignores an answer to it.
      ckpt_.asked = true;
      ckpt_.clock = m.header.clock;
      ckpt_.dir = m.header.address;
      ckpt_.request_id = m.header.request_id;
      ckpt_.started_ms = NowMs();
    }
  }
}

// Frees the dropped tables no parked pull refers to. Called with no checkpoint being written and
// nothing handed to the update threads.
void ServerImpl::FreeRetiredTables() {
  auto used = [&](const TableShard* t) {
    for (const auto& [at, r] : parked_)
      if (r->shard == t) return true;
    return false;
  };
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [&](const auto& t) { return !used(t.get()); }),
                 retired_.end());
}

void ServerImpl::CreateTable(const Message& m) {
  const TableInfo& info = m.header.info;
  Header reply;
  reply.type = MsgType::kCreateTableReply;
  reply.request_id = m.header.request_id;
  reply.info = info;
  Status st = info.spec.Validate();
  const int S = static_cast<int>(control_.cluster().servers.size());
  if (st.ok() && info.num_servers() != S)
    st = Status::InvalidArgument("table partitioned over " + std::to_string(info.num_servers()) + " servers");
  if (st.ok() && info.id >= TableInfo::kMaxTables)
    st = Status::InvalidArgument("table id " + std::to_string(info.id) + " is over the most a job may use");
  if (st.ok()) {  // (the rows' owners are looked up by it: a partition of another shape reads out of bounds)
    const TableInfo expect = TableInfo::Make(info.id, info.spec, S);
    if (info.row_offsets != expect.row_offsets || info.bucket_owner != expect.bucket_owner)
      st = Status::InvalidArgument("table " + std::to_string(info.id) + "'s partition is not the one its spec and " +
                                   std::to_string(S) + " servers give");
  }
  if (st.ok()) {
    if (info.id >= tables_.size()) tables_.resize(info.id + 1);
    if (tables_[info.id] && !(tables_[info.id]->spec() == info.spec))
      st = Status::FailedPrecondition("table id " + std::to_string(info.id) + " is " + tables_[info.id]->spec().ToString() +
                                      " here, not " + info.spec.ToString());
    if (st.ok() && !tables_[info.id]) {
      // One table a name: one under another id is what a failed creation left here (the
      // scheduler gives a name a new id only when it was tried with another spec and no
      // creation of it succeeded; no worker knows that id), so it goes.
      for (auto& t : tables_) {
        if (!t || t->spec().name != info.spec.name) continue;
        PP_LOG(Warning) << "dropping table " << t->info().id << " " << t->spec().ToString()
                        << ", left by a failed creation, for table " << info.id << " of that name";
        retired_.push_back(std::move(t));
        --stats_.tables;
      }
      auto saved = restore_.find(info.spec.name);
      if (auto failed = restore_failed_.find(info.spec.name); failed != restore_failed_.end())
        st = Status(failed->second.code(), "table '" + info.spec.name + "' cannot be restored by this server any more: " +
                                               failed->second.message() + " (restart the job to restore it again)");
      // The checkpoint writer may be reading the saved rows (written again as they are): they
      // are taken only once it is done.
      if (st.ok() && saved != restore_.end() && ckpt_.writer.joinable()) {
        PP_LOG(Info) << "table '" << info.spec.name << "' waits for the checkpoint being written before it is restored";
        WhileHeartbeating([&] {
          ckpt_.writer.join();
          return 0;
        });
        FinishCheckpoint();
      }
      const bool fill = saved == restore_.end();
      std::unique_ptr<TableShard> shard;
      if (st.ok()) try {
        shard = WhileHeartbeating([&] {
          return std::make_unique<TableShard>(info, rank_, options_.update_threads, fill, cow_budget_, table_memory_);
        });
      } catch (const TableMemoryExhausted& e) {  // (the scheduler names the server)
        st = Status::ResourceExhausted(e.what());
      } catch (const std::bad_alloc&) {
        st = Status::ResourceExhausted("out of memory for table " + info.spec.ToString());
      } catch (const std::exception& e) {  // (answered, not dropped: the scheduler would ask again and again)
        st = Status::Internal("table " + info.spec.ToString() + ": " + e.what());
      }
      if (!st.ok()) PP_LOG(Error) << "refused table " << info.id << ": " << st.ToString();
      if (st.ok() && saved != restore_.end()) {
        // The checkpoint's rows must be this table's: same shape, optimizer state and consistency
        // model (TableSpec::CanRestoreFrom), same partition over this job's servers
        // (ReadCheckpointForServer re-partitions a checkpoint of another server count). Its
        // learning rate, schedule and the like may change: said, and taken.
        const TableInfo& was = saved->second.info;
        const std::string changed = info.spec.DifferencesFrom(was.spec);
        if (!info.spec.CanRestoreFrom(was.spec) || was.row_offsets != info.row_offsets ||
            was.bucket_owner != info.bucket_owner)
          // (The job's flags and the checkpoint disagree: a setup error, the same on every restart,
          // so InvalidArgument, which a worker exits 2 on.)
          st = Status::InvalidArgument("table '" + info.spec.name + "' cannot take the checkpoint's rows: " +
                                       (changed.empty() ? std::string("its partition over the servers differs") : changed) +
                                       " (checkpoint -> asked for; its shape, optimizer state and consistency model "
                                       "must stay)");
        else if (!changed.empty())
          PP_LOG(Warning) << "table '" << info.spec.name << "' restored under new settings: " << changed
                          << " (checkpoint -> now)";
        bool consumed = false;  // (the rows are the shard's, whatever Restore answers)
        if (st.ok()) {
          try {
            consumed = true;
            st = WhileHeartbeating([&] { return shard->Restore(std::move(saved->second.rows)); });
          } catch (const std::bad_alloc&) {
            st = Status::ResourceExhausted("out of memory restoring table " + info.spec.ToString());
          }
        }
        if (st.ok()) {
          shard->table_step = saved->second.table_step;
          restore_.erase(saved);
          PP_LOG(Info) << "table " << info.id << " '" << info.spec.name << "' restored from the checkpoint";
        } else if (consumed) {
          restore_failed_.emplace(info.spec.name, st);
          restore_.erase(saved);
        }
      }
      if (st.ok()) {
        tables_[info.id] = std::move(shard);
        ++stats_.tables;
        PP_LOG(Info) << "created table " << info.id << " " << info.spec.ToString();
      }
    }
  }
  reply.SetStatus(st);
  control_.Send(reply).IgnoreError();
}

// A checkpoint at clock c is written once every live worker has reached c (each worker's pushes
// tagged below c came before its clock, over the same connection) and every update handed to the
// update threads is applied: the shards then hold exactly the updates tagged below c.
void ServerImpl::StartCheckpointWhenReady() {
  if (min_live_ < ckpt_.clock || awaiting_done_ > 0) return;
  std::vector<const TableShard*> tables;
  Status st;
  for (auto& t : tables_) {
    if (!t) continue;
    if (!t->bsp_contributors.empty())
      st = Status::FailedPrecondition("table '" + t->spec().name + "' has BSP pushes of clock " +
                                      std::to_string(t->bsp_contributors.begin()->first) +
                                      " pending: a worker pushed past the checkpoint's clock");
    tables.push_back(t.get());
  }
  // A table this server could not restore (its rows gone with the failed attempt) would be left
  // out of its file only, the other servers' holding theirs: a checkpoint would restore it half
  // reset (found in review). None is taken until the job restarts.
  if (st.ok() && !restore_failed_.empty())
    st = Status(restore_failed_.begin()->second.code(),
                "table '" + restore_failed_.begin()->first + "' could not be restored on server " +
                    std::to_string(rank_.load()) + " (" + restore_failed_.begin()->second.message() +
                    "): no checkpoint without it until the job is restarted");
  // Every live worker exactly at the clock: one past it (it gave up waiting and went on) may have
  // pushed updates that must not be in this checkpoint.
  const int64_t fastest = clocks_.MaxLive();
  if (st.ok() && fastest != std::numeric_limits<int64_t>::min() && (min_live_ != ckpt_.clock || fastest != ckpt_.clock))
    st = Status::FailedPrecondition("live workers are at clocks " + std::to_string(min_live_) + " to " +
                                    std::to_string(fastest) + ", not all at the checkpoint's clock " +
                                    std::to_string(ckpt_.clock));
  // Nor pushes of the clock itself (SSP/ASP tables apply them as they come; BSP's are pending sums,
  // refused above): a worker that went on after its Checkpoint() failed, or another of its
  // threads pushing meanwhile. Resumed from the checkpoint, that clock is trained again whole, so
  // they would count twice (found in review). A replacement's pushes to redo are its
  // predecessor's of this clock, the same.
  for (size_t w = 0; st.ok() && w < pushed_in_clock_.size(); ++w) {
    if (!clocks_.alive(static_cast<int>(w))) continue;
    int64_t n = 0;
    for (const auto* of : {&pushed_in_clock_[w], &redo_[w]})
      for (const auto& [table, k] : *of) n += k;
    if (n > 0)
      st = Status::FailedPrecondition("worker " + std::to_string(w) + " pushed " + std::to_string(n) +
                                      " time(s) at the checkpoint's clock " + std::to_string(ckpt_.clock) +
                                      " before it was written: a checkpoint is taken between clocks");
  }
  ckpt_.written = false;
  if (!st.ok()) {
    ckpt_.status = st;
    FinishCheckpoint();
    return;
  }
  // Safe to read the stripes from another thread: the update threads are idle (their last writes
  // are visible through the acquire below) and this thread reads no request until it is done.
  for (int k = 0; k < static_cast<int>(queues_.size()); ++k) (void)inflight_[k].load(std::memory_order_acquire);
  const int servers = static_cast<int>(control_.cluster().servers.size());
  std::vector<const TableCheckpoint*> kept;  // (CreateTable takes none of them while this writes)
  for (const auto& [name, saved] : restore_) kept.push_back(&saved);
  if (!kept.empty())
    PP_LOG(Info) << "checkpoint at clock " << ckpt_.clock << " also holds " << Count(kept.size(), "table")
                 << " restored but not created again yet, as restored";
  ckpt_.writer = std::thread([this, tables, servers, kept] {
    SetThreadName("pp-checkpoint");
    try {
      ckpt_.status = WriteServerCheckpoint(ckpt_.dir, rank_, servers, ckpt_.clock, tables, &ckpt_.bytes,
                                           [this] { return ckpt_.abandon.load(std::memory_order_relaxed); }, kept);
    } catch (const std::bad_alloc&) {  // (a sparse stripe's key list copied for the file)
      ckpt_.status = Status::ResourceExhausted("out of memory writing the checkpoint");
    } catch (const std::exception& e) {
      ckpt_.status = Status::Internal(std::string("writing the checkpoint: ") + e.what());
    }
    ckpt_.written = true;
  });
}

void ServerImpl::AnswerCheckpoint(const Header& reply) {
  control_.Send(reply).IgnoreError();
  ckpt_.answers.push_back(reply);
  if (ckpt_.answers.size() > 4) ckpt_.answers.pop_front();
}

void ServerImpl::FinishCheckpoint() {
  if (ckpt_.writer.joinable()) ckpt_.writer.join();
  if (ckpt_.status.ok()) {
    ckpt_last_ = {ckpt_.clock, NowMs()};
    ++stats_.checkpoints;
    PP_LOG(Info) << "checkpoint at clock " << ckpt_.clock << " written: " << ServerCheckpointFile(ckpt_.dir, rank_)
                 << ", " << (ckpt_.bytes >= 1000000 ? ckpt_.bytes / 1e6 : ckpt_.bytes / 1e3)
                 << (ckpt_.bytes >= 1000000 ? " MB" : " KB") << " in " << NowMs() - ckpt_.started_ms << " ms";
  } else {
    PP_LOG(Error) << "checkpoint at clock " << ckpt_.clock << " failed: " << ckpt_.status.ToString();
  }
  Header reply;
  reply.type = MsgType::kCheckpointReply;
  reply.request_id = ckpt_.request_id;
  reply.clock = ckpt_.clock;
  reply.SetStatus(ckpt_.status);
  AnswerCheckpoint(reply);
  ckpt_.asked = false;
  ckpt_.status = Status::OK();
  AdvanceMinClock();  // what membership changes during the write held back
}

// BSP: a worker that died in the middle of a clock may have reached some servers with its pushes
// for it and not others. Every server drops its sums from the clock the worker had not finished
// on, so the clock's mean is over the workers that finished it, alike everywhere (DESIGN.md). A
// finished worker's sums are whole (Finish waits for its pushes) and stay.
void ServerImpl::DropBspSums(int w) {
  const int64_t from = clocks_.clock(w);
  for (auto& t : tables_) {
    if (!t || t->spec().consistency.model != Consistency::kBsp) continue;
    for (auto& [k, pushed] : t->bsp_contributors) {
      if (k < from || static_cast<size_t>(w) >= pushed.size() || !pushed[w]) continue;
      pushed[w] = 0;
      PP_LOG(Warning) << "table '" << t->spec().name << "': dropping dead worker " << w << "'s pushes for clock " << k;
      auto* r = new Request;
      r->op = Request::kDropWorker;
      r->shard = t.get();
      r->clock = k;
      r->worker = w;
      Dispatch(r);  // behind its pushes in every stripe's queue, before the clock's apply
    }
  }
}

void ServerImpl::OnMembership() {
  const Membership& mem = control_.membership();
  // An ending job releases nothing: parked pulls are answered with the job's end instead of being
  // served because the dead worker that ended it stopped being waited for.
  if (mem.job_state != Membership::kRunning) return;
  bool report = false;
  for (int w = 0; w < clocks_.size() && w < static_cast<int>(mem.worker_alive.size()); ++w) {
    if (!clocks_.alive(w)) continue;
    if (mem.worker_alive[w] == Membership::kWorkerDying) {
      if (mem.version <= hello_version_[w]) continue;  // about a worker replaced since
      // Its clock stays put (its requests are refused from now on) until the servers agree.
      if (!dying_[w])
        PP_LOG(Warning) << "worker " << w << " declared dead at clock " << clocks_.clock(w)
                        << " here; telling the scheduler, which asks every server where its clock is";
      dying_[w] = 1;
      report = true;
      continue;
    }
    dying_[w] = 0;
    if (mem.worker_alive[w] != Membership::kWorkerAlive && static_cast<size_t>(w) < mem.worker_last_clock.size())
      RaiseToAgreedClock(w, mem.worker_last_clock[w]);
    if (mem.worker_alive[w] == Membership::kWorkerReplacing) {
      if (replacing_[w] || mem.version <= hello_version_[w]) continue;  // told already, or replaced since
      PP_LOG(Warning) << "worker " << w << " declared dead at clock " << clocks_.clock(w)
                      << "; waiting for the worker that takes its place";
      replacing_[w] = 1;
      if (!ckpt_.writer.joinable()) DropBspSums(w);
    } else if (!mem.worker_alive[w]) {
      PP_LOG(Warning) << "worker " << w << " declared dead; no longer waiting for it";
      clocks_.MarkDead(w);
      if (!ckpt_.writer.joinable()) DropBspSums(w);  // (none are open while one is written)
    } else if (w < static_cast<int>(mem.worker_done.size()) && mem.worker_done[w]) {
      PP_LOG(Info) << "worker " << w << " finished at clock " << clocks_.clock(w);
      clocks_.MarkDead(w);
    }
  }
  any_dying_ = report;
  if (report) ReportWorkerClocks();
  // Not while a checkpoint is written: released pulls and BSP sums would touch the shards.
  if (!ckpt_.writer.joinable()) AdvanceMinClock();
}

void ServerImpl::ReportWorkerClocks() {
  Header h;
  h.type = MsgType::kWorkerClocks;
  h.clock = static_cast<int64_t>(control_.membership().version);
  for (int w = 0; w < clocks_.size(); ++w) {
    h.worker_clocks.push_back(clocks_.clock(w));
    h.worker_settled.push_back(settled_[w]);
  }
  Status st = control_.Send(std::move(h));
  if (!st.ok()) PP_LOG(Warning) << "telling the scheduler the workers' clocks: " << st.ToString();
  next_clocks_report_ms_ = NowMs() + options_.control.heartbeat_interval_ms;
}

bool ServerImpl::RaiseToAgreedClock(int w, int64_t agreed) {
  const int64_t was = clocks_.clock(w);
  if (!clocks_.Raise(w, agreed)) return false;
  // Its pushes of the clocks passed are whole here (a settled Clock went out only once every
  // earlier push was answered): they count, as on the servers its Clock reached.
  PP_LOG(Warning) << "worker " << w << "'s last Clock() reached other servers and not this one: counting it at clock "
                  << agreed << " (was " << was << ") as they do";
  pushed_in_clock_[w].clear();
  redo_[w].clear();
  return true;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  // A dense pull reply carries a values frame per stripe: at most kMaxValueFrames.
  if (options.update_threads < 1 || options.update_threads > static_cast<int>(kMaxValueFrames))
    return Status::InvalidArgument("update_threads must be in [1, " + std::to_string(kMaxValueFrames) + "]");
  if (options.port < 0 || options.port > 65535 || options.advertise_port < 0 || options.advertise_port > 65535)
    return Status::InvalidArgument("port " + std::to_string(options.port) + " and advertise_port " +
                                   std::to_string(options.advertise_port) + " must be in [0, 65535] (0: any free port)");
  if (options.metrics_port < -1 || options.metrics_port > 65535)
    return Status::InvalidArgument("metrics_port " + std::to_string(options.metrics_port) +
                                   " must be in [0, 65535] (0: any free port), or -1 (not served)");
  PP_RETURN_IF_ERROR(options.control.Validate());
  auto s = std::make_unique<ServerImpl>(options);
  PP_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace pushpull
