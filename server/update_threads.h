// A server's update threads: the queues that hand them requests, what they apply (each runs its
// stripes' parts of a request: Stripe::ApplyPush, Accumulate, Read, ...), and the channel that
// hands a finished request back to the I/O thread to be answered (Replier).
//
// Update thread t owns stripes t, t + T, t + 2T, ... of every table (TableShard::ThreadOf), so
// applying a request takes no lock. While every update thread is idle, Dispatch runs small
// requests on the I/O thread itself (two thread hand-offs cost more than they buy).
//
// Threading: every method is the I/O thread's (the one that calls Start) except the loop each
// update thread runs. The I/O thread hands requests over through single-producer queues; the
// last update thread to finish one sends its address over an in-process ZeroMQ PUSH/PULL pair
// (the "done" channel), read by HandleDone on the I/O thread. inflight counts, per update
// thread, the requests handed to it and not finished: their release decrements and the I/O
// thread's acquire loads order an update thread's stripe writes before the I/O thread touches
// those stripes (inline runs, checkpoints).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/spsc_queue.h"
#include "common/transport.h"
#include "server/request.h"
#include "server/table/shard.h"

namespace pushpull::server {

class UpdateThreads {
 public:
  // cow_budget: the server's copy-on-write budget (Dispatch keeps writes that may wait for it off
  // the I/O thread).
  UpdateThreads(Transport* transport, std::shared_ptr<const table::CopyOnWriteBudget> cow_budget);
  UpdateThreads(const UpdateThreads&) = delete;
  UpdateThreads& operator=(const UpdateThreads&) = delete;

  // Binds the I/O thread's end of the done channel; before Start.
  Status Bind();
  // Starts `num_threads` update threads; finished requests go to `replier`.
  void Start(int num_threads, Replier* replier);
  // Stops the update threads after the work they hold, and answers what they finished.
  void Stop();

  // Hands r to the update threads that own its stripes, or runs it here; either way the replier
  // answers it once its stripes are done (at once when it ran here or had nothing to run). r is
  // theirs from now on.
  void Dispatch(Request* r);
  // The I/O thread's end of the done channel (to poll), and what reads it: answers up to 1024
  // requests the update threads finished.
  Socket* done_socket() { return done_.get(); }
  void HandleDone();
  // Requests handed over whose "done" is not in yet.
  int64_t awaiting_done() const { return awaiting_done_; }
  // With awaiting_done() 0: makes the update threads' last stripe writes visible to this thread
  // (a checkpoint about to read the stripes from another thread it starts).
  void AcquireIdle() const;

 private:
  void UpdateLoop(int t);
  // Runs r's part in stripe i (ExecuteOrThrow), a failure recorded in r.
  void Execute(Request* r, int i) noexcept;
  void ExecuteOrThrow(Request* r, int i);
  // Runs r's parts in the stripes that update thread t owns.
  void ExecuteThreadPart(Request* r, int t) noexcept;

  Transport* const transport_;
  const std::shared_ptr<const table::CopyOnWriteBudget> cow_budget_;
  std::unique_ptr<Socket> done_;    // the I/O thread's end of the done channel
  std::vector<Frame> done_frames_;  // HandleDone's receive buffer
  std::string done_endpoint_;
  Replier* replier_ = nullptr;
  std::vector<std::unique_ptr<SpscQueue<Request>>> queues_;
  std::unique_ptr<std::atomic<int>[]> inflight_;  // per update thread: requests handed over, not done
  int64_t awaiting_done_ = 0;                     // requests handed over whose "done" is not in yet
  std::vector<std::thread> threads_;
};

}  // namespace pushpull::server
