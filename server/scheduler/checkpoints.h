// Checkpoint coordination (server/checkpoint/store.h): workers ask for a checkpoint (Client::Checkpoint);
// once every live worker has asked, at the same clock and describing the same run, every server
// writes its files into checkpoint_dir/ckpt-CLOCK, and once all wrote, the checkpoint is committed
// (its MANIFEST, LATEST, the older ones pruned) and the workers answered. Each phase has
// checkpoint_timeout_ms. And the checkpoint the job restores from (restore_from), resolved once
// before the job starts, which the cluster map names to every node.
//
// Threading: the scheduler's loop thread only (scheduler_state.h); PrepareRestore() may come
// first from the thread that created the scheduler, before Run().
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "common/time.h"
#include "server/checkpoint/store.h"
#include "server/scheduler/liveness.h"
#include "server/scheduler/state.h"

namespace pushpull::scheduler {

class Checkpoints {
 public:
  Checkpoints(State* state, const Liveness* liveness)
      : state_(*state), options_(state->options), liveness_(*liveness) {}
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  // Resolves restore_from once (a second call gets the first's answer): Scheduler::PrepareRestore.
  Status PrepareRestore();
  // The checkpoint to restore (clock 0, no dir: a fresh job). Set by PrepareRestore().
  const checkpoint::CheckpointManifest& restore() const { return restore_; }
  // A fresh job whose checkpoint_dir holds another run's checkpoints: says so, once, at the start.
  void WarnOfAnotherRun() const;

  // A worker's kCheckpoint (its clock, and its run's description in `address`).
  void HandleAsk(const Node& worker, const Header& h);
  // A server's kCheckpointReply: its files are written (or why not).
  void HandleServerReply(const Node& server, const Header& h);
  // Once every live worker has asked: the same clock from all, then every server writes.
  void Check();
  // Once a pass while the job runs: the servers that have not written are asked again, and a
  // phase past its deadline fails the checkpoint.
  void Tick();
  // Worker `rank` died: its ask goes with it.
  void ForgetAsk(int rank) { checkpoint_.workers.erase(rank); }
  // The checkpoint in progress fails: every worker that asked is answered `st`.
  void Fail(const Status& st);

  // The clock of this job's newest committed checkpoint, or the one it restored from (-1: none).
  int64_t committed_clock() const { return committed_clock_; }
  uint64_t committed() const { return checkpoints_committed_; }  // by this scheduler

 private:
  // A checkpoint in progress: the workers that asked (and at which clock), then the servers that
  // wrote their files.
  struct Pending {
    struct Ask {
      Waiter waiter;
      int64_t clock = 0;
      std::string run;  // how the worker's run counts its clocks (Client::Checkpoint)
    };
    std::map<int, Ask> workers;  // rank -> its ask
    std::string run;             // the askers' (all the same)
    bool writing = false;        // servers asked
    int64_t clock = 0;
    std::string dir;
    std::set<int> written;  // server ranks
    uint64_t request_id = 0;
    Deadline deadline = Deadline::Never();
    int64_t started_ms = 0;
    int64_t resend_ms = 0;  // writing: when the servers that have not answered are asked again
  };
  Status ResolveRestore();
  Header Request() const;

  State& state_;
  const SchedulerOptions& options_;
  const Liveness& liveness_;
  Pending checkpoint_;
  // A worker asking for a checkpoint at or before committed_clock_ is answered at once (a
  // replacement that took a dead worker's place at that clock catches up on the checkpoint the
  // dead one would have asked for).
  int64_t committed_clock_ = -1;
  uint64_t checkpoints_committed_ = 0;
  checkpoint::CheckpointManifest restore_;
  bool restore_prepared_ = false;
  Status restore_status_;
};

}  // namespace pushpull::scheduler
