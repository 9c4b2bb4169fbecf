// Liveness and membership (server/scheduler/scheduler.h): a node is alive while it heartbeats; one silent
// for heartbeat_timeout_ms, or one that said it stops (kDone with an error), is declared dead and
// the others told. A dead server ends the job. A dead worker ends it too, or, with
// continue_on_worker_death or wait_for_replacement, is dying until the servers say where its
// clock is (DESIGN.md, "A worker dying between its clocks"), then dead (continue) or its rank
// vacant until a new worker takes it (wait; Registration fills the vacancy). A worker's finish is
// a membership change too.
//
// Threading: the scheduler's loop thread only (scheduler_state.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/time.h"
#include "server/scheduler/state.h"

namespace pushpull::scheduler {

class Liveness {
 public:
  Liveness(State* state, Events* events) : state_(*state), options_(state->options), events_(*events) {}
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // The loop did not run for `stalled` ms before `now` (a slow checkpoint commit, the process
  // paused): no node's silence. The nodes' last heartbeats, and the waits for the servers' word
  // on a dying worker's clock, move on by it before they are judged.
  void ForgiveStall(int64_t now, int64_t stalled);
  // While the job runs: declares dead every node silent past the timeout or that said it stops,
  // applies the worker death policy, ends the job when a vacant rank was not taken in time, and
  // settles the dying workers whose servers' reports are overdue. `now`: when the loop measured
  // its stall, so that a pause after it is not judged.
  void Check(int64_t now);

  // A server's kWorkerClocks: where the dying workers' clocks are on it.
  void HandleWorkerClocks(const Node& server, const Header& h);
  // kDone: a worker finished, or a node is stopping early (declared dead at the next Check()).
  void HandleDone(Node& n, const Header& h);
  // kNodeExited: the launcher saw a node it started exit. A node of the running job is declared
  // dead for it at the next Check(), as if it had said it stops; before the job started, the job
  // ends (nothing would take its place before the registration deadline), unless the launcher
  // starts another in its place.
  void HandleNodeExited(const Header& h);
  // A node declared dead that still speaks is told so, that it stops.
  void AnswerDeadNode(const Node& n);

  // Awaited by barriers, checkpoints and the job's end: a rank whose replacement the job waits
  // for, or will once its dying is settled.
  bool Replacing(int rank) const {
    return replacing_.count(rank) > 0 || (options_.wait_for_replacement && dying_.count(rank) > 0);
  }
  // Vacant ranks: dead workers' ranks a new worker may take (wait_for_replacement).
  bool HasVacancy() const { return !replacing_.empty(); }
  bool Vacant(int rank) const { return replacing_.count(rank) > 0; }
  size_t vacancies() const { return replacing_.size(); }
  // Takes rank `asked` when it is vacant, else the lowest vacant rank (HasVacancy() first); returns it.
  int FillVacancy(int asked);

 private:
  // A worker declared dead is kWorkerDying until every live server has said where its clock is
  // (kWorkerClocks), or its deadline passed; then it is dead (or awaits a replacement) at the
  // clock they agree on. decide_without_missing: past a dying worker's deadline, decide without
  // the servers that have not reported. Only Check() does, whose pass has forgiven a stall first:
  // a report handled right after a stall would find the deadline passed and decide on that one
  // server's word, with the others' reports next in the same batch.
  void SettleDying(bool decide_without_missing);
  int LiveWorkers() const;
  // A worker dying or declared dead: the new membership goes out, and what waited on the worker
  // (a barrier, a checkpoint, the job's end) is looked at again.
  void AnnounceWorkerDeaths(const std::string& reason);

  State& state_;
  const SchedulerOptions& options_;
  Events& events_;
  std::map<int, Deadline> replacing_;  // wait_for_replacement: vacant ranks, until when
  // Dying workers (kWorkerDying): the membership version that said so, and until when the
  // servers' reports are waited for.
  struct Dying {
    uint64_t version = 0;
    Deadline deadline = Deadline::Never();
  };
  std::map<int, Dying> dying_;
  // Each server's latest kWorkerClocks: the membership version it answered, its clocks and flags.
  struct ClocksReport {
    uint64_t version = 0;
    std::vector<int64_t> clocks;
    std::vector<uint8_t> settled;
  };
  std::map<int, ClocksReport> clocks_reports_;
};

}  // namespace pushpull::scheduler
