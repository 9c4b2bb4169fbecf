// Checkpoints on the scheduler's request (kCheckpoint): when every live worker has reached the
// checkpoint's clock and the update threads are idle, a thread of its own writes this server's
// file (the format: server/checkpoint/shard_file.h); the answer goes back over the control channel. The
// scheduler asks again while it has no answer (a dropped connection may have taken it): a request
// in progress is not started twice, one answered gets its answer again.
//
// Threading: every method is the I/O thread's. While the writer thread writes (writing()), it
// reads the shards and the saved rows of a restore, so the I/O thread reads no request, applies
// no BSP clock and releases no pull until Finish() (control and heartbeats go on). The writer
// thread sets status_ and bytes_, then written_; the I/O thread reads them after joining it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "common/control.h"
#include "common/wire.h"
#include "pushpull/status.h"
#include "server/min_clock.h"
#include "server/server_context.h"
#include "server/tables.h"
#include "server/update_threads.h"
#include "server/worker_state.h"

namespace pushpull::server {

class CheckpointWriter {
 public:
  CheckpointWriter(ServerContext* ctx, ControlChannel* control, Tables* tables, MinClock* min_clock,
                   const std::vector<WorkerState>* workers, const UpdateThreads* updates);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // A kCheckpoint request from the scheduler.
  void OnRequest(const Header& h);
  // Asked for one not written yet; a writer thread is writing it; it has finished writing.
  bool asked() const { return asked_; }
  bool writing() const { return writer_.joinable(); }
  bool written() const { return written_; }
  // Starts the writer once the checkpoint's clock is reached and the update threads are idle (or
  // answers why no checkpoint can be taken). Asked, and not writing.
  void StartWhenReady();
  // Joins the writer, answers the scheduler, then releases what membership changes during the
  // write held back (MinClock::Advance).
  void Finish();
  // While writing: waits for the writer, heartbeats going, then Finish(). For table `name`, whose
  // saved rows the writer may be reading.
  void FinishBeforeRestoring(const std::string& name);
  // The server stops: nobody can take the answer any more, so the checkpoint could never be
  // committed. Stops the writer (at most one 4 MB write on) rather than wait for the whole file.
  void Abandon();

  // The last checkpoint this server wrote (at_ms 0: none).
  int64_t last_clock() const { return last_clock_; }
  int64_t last_at_ms() const { return last_at_ms_; }

 private:
  void Answer(const Header& reply);

  ServerContext* const ctx_;
  ControlChannel* const control_;
  Tables* const tables_;
  MinClock* const min_clock_;
  const std::vector<WorkerState>* const workers_;
  const UpdateThreads* const updates_;

  bool asked_ = false;
  int64_t clock_ = 0;
  std::string dir_;
  uint64_t request_id_ = 0;
  int64_t started_ms_ = 0;
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::atomic<bool> abandon_{false};  // the server is stopping: its answer could not be sent
  Status status_;                     // the writer's result (set before written_)
  uint64_t bytes_ = 0;                // the file's size (set before written_)
  // The answers to the last few requests: the scheduler asks again while it has none, and gets
  // the answer again instead of a second write (or, for one refused, a write nobody waits for).
  std::deque<Header> answers_;
  int64_t last_clock_ = 0, last_at_ms_ = 0;
};

}  // namespace pushpull::server
