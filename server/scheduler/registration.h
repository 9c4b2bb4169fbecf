// Registration (server/scheduler/scheduler.h): servers and workers register and are given a rank (the one
// they ask for, a deployment's task index, or the first free), servers their address in the
// cluster map. The job starts once every one has registered, and each is answered with the cluster
// map and the membership. Before the start, a node asking for a rank an earlier registration holds
// takes it (a restart), and a registered node gone silent gives its slot back; registration has
// register_timeout_ms. While the job runs, a new worker takes a dead one's vacant rank
// (wait_for_replacement; Liveness keeps the vacancies).
//
// Threading: the scheduler's loop thread only (scheduler_state.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "server/checkpoint/store.h"
#include "server/scheduler/liveness.h"
#include "server/scheduler/state.h"

namespace pushpull::scheduler {

class Registration {
 public:
  // restore: the checkpoint the job restores from, named in the cluster map (read when a node is
  // answered, so resolved by then).
  Registration(State* state, Liveness* liveness, const checkpoint::CheckpointManifest* restore, Events* events)
      : state_(*state), options_(state->options), liveness_(*liveness), restore_(*restore), events_(*events) {}
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // Starts the registration deadline.
  void Start();
  // A node's kRegister.
  void HandleRegister(const std::string& identity, const Header& h);
  // Before the job starts, a heartbeat: from a registered node waiting for the start, or from one
  // whose registration this scheduler no longer holds (it is told to start again).
  void HandleWaitingHeartbeat(const std::string& identity);
  // A registered node heartbeating with no membership yet: the answer to its registration was
  // lost with a dropped connection, and is sent again.
  void AnswerAgain(Node& n);
  // Once a pass: ends the job when not every node registered in time.
  void CheckDeadline();
  // Before the job starts: a registered node silent for a heartbeat timeout (killed while it
  // waited) gives its slot back, so that its restart, or another node, can have it.
  void DropSilentRegistrants(int64_t now);

 private:
  // A worker taking a dead one's vacant rank in a running job.
  void RegisterReplacement(const std::string& identity, const Header& h);
  // The cluster map and membership every registering node is answered with.
  Header RegisterReply() const;
  // Sends node n its registration's answer (h: a RegisterReply()), noting when.
  bool AnswerRegistration(Node& n, Header h);
  // Before the job starts: forgets a registered node (it is told `why`, in case it still listens).
  void DropRegistrant(const Node& n, const Status& why);

  State& state_;
  const SchedulerOptions& options_;
  Liveness& liveness_;
  const checkpoint::CheckpointManifest& restore_;
  Events& events_;
  int64_t start_ms_ = 0;
  std::set<std::string> told_not_yet_;  // early workers told "not yet" (logged once each)
};

}  // namespace pushpull::scheduler
