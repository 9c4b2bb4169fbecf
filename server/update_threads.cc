#include "server/update_threads.h"

#include <bitset>
#include <cstring>

#include "common/log.h"
#include "common/wire.h"

namespace pushpull::server {

UpdateThreads::UpdateThreads(Transport* transport, std::shared_ptr<const table::CopyOnWriteBudget> cow_budget)
    : transport_(transport), cow_budget_(std::move(cow_budget)) {}

namespace {

// The done channel's options: an in-process pipe with no limit on "done" messages in flight (8
// bytes each): an update thread must never block on one while the I/O thread is blocked handing
// it more work, or joining it at shutdown.
SocketOptions DoneChannel() {
  SocketOptions o;
  o.network = false;
  o.send_hwm = 0;
  o.recv_hwm = 0;
  o.linger_ms = 0;
  return o;
}

}  // namespace

Status UpdateThreads::Bind() {
  done_endpoint_ = "inproc://pp-done-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  PP_ASSIGN_OR_RETURN(done_, transport_->MakeSocket(SocketKind::kPull, DoneChannel()));
  return done_->Bind(done_endpoint_).status();
}

void UpdateThreads::Start(int num_threads, Replier* replier) {
  replier_ = replier;
  const int K = num_threads;
  for (int k = 0; k < K; ++k) queues_.push_back(std::make_unique<SpscQueue<Request>>());
  inflight_.reset(new std::atomic<int>[K]);
  for (int k = 0; k < K; ++k) inflight_[k] = 0;
  for (int k = 0; k < K; ++k) threads_.emplace_back([this, k] { UpdateLoop(k); });
}

void UpdateThreads::Stop() {
  for (auto& q : queues_) q->Push(nullptr);
  for (auto& t : threads_) t.join();
  threads_.clear();
  while (true) {
    PollItem item{done_.get()};
    transport_->Poll(&item, 1, 0);
    if (!item.ready) break;
    HandleDone();
  }
}

void UpdateThreads::AcquireIdle() const {
  for (int k = 0; k < static_cast<int>(queues_.size()); ++k) (void)inflight_[k].load(std::memory_order_acquire);
}

// A stripe that cannot do its part (the tables' memory limit, the machine out of memory) leaves
// it undone (Stripe: nothing changed) and the request is answered with the error; the server goes
// on serving. (Under BSP a sum that ran out of memory part way is the exception: logged.)
void UpdateThreads::Execute(Request* r, int i) noexcept {
  try {
    ExecuteOrThrow(r, i);
  } catch (const table::TableMemoryExhausted& e) {  // (the client names the server)
    r->Fail(Status::ResourceExhausted(e.what()));
  } catch (const std::bad_alloc&) {
    r->Fail(Status::ResourceExhausted("out of memory (table '" + r->shard->spec().name + "')"));
  } catch (const std::exception& e) {
    r->Fail(Status::Internal("table '" + r->shard->spec().name + "': " + e.what()));
  }
}

void UpdateThreads::ExecuteThreadPart(Request* r, int t) noexcept {
  const table::TableShard& shard = *r->shard;
  for (int i = 0; i < shard.num_stripes(); ++i)
    if (shard.ThreadOf(i) == t && (r->sel.empty() || r->sel[i].size() > 0)) Execute(r, i);
}

void UpdateThreads::ExecuteOrThrow(Request* r, int i) {
  table::Stripe& s = r->shard->stripe(i);
  const table::RowSelection* sel = r->sel.empty() ? nullptr : &r->sel[i];
  switch (r->op) {
    case Request::kApply: s.ApplyPush(*sel, r->msg.key_data(), r->msg.value_data(), r->ctx); break;
    case Request::kAccumulate:
      s.Accumulate(r->clock, r->msg.header.sender_rank, *sel, r->msg.key_data(), r->msg.value_data(),
                   r->ctx.grad_scale);
      break;
    case Request::kRead:
      if (r->out)
        s.Read(*sel, r->msg.key_data(), r->msg.header.slot, r->out.get(), !(r->msg.header.flags & kFlagNoCreate));
      else if (sel->is_range)
        r->shared[i] = s.ShareRows(sel->range_begin);
      else {  // in place, or this stripe's rows gathered on their own (stripes run in parallel)
        std::shared_ptr<float[]> own;
        r->shared[i] = s.ReadOrShare(*sel, r->msg.key_data(), &own);
        if (!r->shared[i]) r->shared[i] = std::shared_ptr<const float>(own, own.get());
      }
      break;
    case Request::kApplyBsp: s.ApplyAccumulated(r->clock, r->ctx); break;
    case Request::kDropWorker: s.DropAccumulated(r->clock, r->worker); break;
  }
}

void UpdateThreads::UpdateLoop(int t) {
  SetThreadName("pp-update-" + std::to_string(t));
  opt::FlushDenormalsOnThisThread();
  table::CopyOnWriteBudget::SetThisThreadMayWait(true);  // a write over the budget waits for a reply here
  // The thread's own end of the done channel (a socket is used by one thread). An in-process
  // pipe to a bound endpoint cannot fail to be made but for want of memory: then nothing works.
  auto made = transport_->MakeSocket(SocketKind::kPush, DoneChannel());
  if (!made.ok() || !(*made)->Connect(done_endpoint_).ok()) {
    PP_LOG(Error) << "update thread " << t << ": no done channel: " << made.status().ToString();
    std::abort();
  }
  std::unique_ptr<Socket> done = std::move(*made);
  SpscQueue<Request>& q = *queues_[t];
  while (Request* r = q.Pop()) {
    ExecuteThreadPart(r, t);
    const bool last = r->pending.fetch_sub(1, std::memory_order_acq_rel) == 1;
    // After the stripe's writes: the I/O thread may run small requests inline once all are idle.
    inflight_[t].fetch_sub(1, std::memory_order_release);
    if (last) {
      Frame m(&r, sizeof(r));
      Frame* parts[] = {&m};
      bool would_block = false;  // (no limit: never)
      done->Send(parts, 1, /*dont_wait=*/false, &would_block).IgnoreError();
    }
  }
}

void UpdateThreads::Dispatch(Request* r) {
  const int K = static_cast<int>(queues_.size());
  const table::TableShard& shard = *r->shard;
  const int stripes = shard.num_stripes();
  const bool whole = r->sel.empty();
  // The update threads with a part of it, and how many.
  std::bitset<kMaxValueFrames> threads;
  for (int i = 0; i < stripes; ++i)
    if (whole || r->sel[i].size() > 0) threads.set(shard.ThreadOf(i));
  const int n = static_cast<int>(threads.count());
  if (n == 0) {
    replier_->Reply(r);
    return;
  }
  // While every update thread is idle, a request runs right here when it is small, or at any
  // size when there is a single update thread (nothing to run in parallel): two thread hand-offs
  // cost more than they buy (measured with the transport bench). Busy update threads still take the
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
      replier_->Reply(r);
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

void UpdateThreads::HandleDone() {
  for (int i = 0; i < 1024; ++i) {
    if (!done_->Recv(&done_frames_, 1, 0) || done_frames_.empty() || done_frames_[0].size() != sizeof(Request*)) return;
    Request* r;
    std::memcpy(&r, done_frames_[0].data(), sizeof(r));
    --awaiting_done_;
    // Pairs with the update threads' release decrements: their writes to the request (a pull's
    // values) are visible here, whatever ZeroMQ's inproc pipe guarantees on its own.
    (void)r->pending.load(std::memory_order_acquire);
    replier_->Reply(r);
  }
}

}  // namespace pushpull::server
