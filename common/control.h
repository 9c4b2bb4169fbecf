// The node side of the control plane: one DEALER to the scheduler, registration, heartbeats
// and membership updates. Used by servers and worker clients inside their I/O loops.
//
// Threading: owned and driven by one thread (the owner's I/O thread).
#pragma once

#include <atomic>
#include <string>

#include "common/cluster.h"
#include "common/time.h"
#include "common/transport.h"
#include "common/wire.h"
#include "pushpull/status.h"

namespace pushpull {

struct ControlOptions {
  std::string scheduler;             // e.g. tcp://10.0.0.1:7000
  int heartbeat_interval_ms = 500;   // how often this node says it is alive
  int scheduler_timeout_ms = 15000;  // the scheduler silent this long: the job is lost
  int register_timeout_ms = 120000;  // how long to wait for every node to register
  int requested_rank = -1;           // >= 0: ask the scheduler for this rank (if free)
  // A scheduler address whose host does not resolve, or whose port refuses connections, this
  // long fails the registration at once (Unavailable, saying which), rather than after
  // register_timeout_ms. Once the scheduler is reached, register_timeout_ms alone applies.
  int connect_timeout_ms = 10000;

  // InvalidArgument naming the flag for a value no job can run with (a heartbeat interval under
  // 1 ms, a scheduler timeout not above it, a registration or connection deadline under 1 ms).
  Status Validate() const;
};

class ControlChannel {
 public:
  // The channel's socket comes from `transport`, which outlives the channel.
  ControlChannel(Transport& transport, Role role, ControlOptions options);

  // Sends Register and waits (deadline: register_timeout_ms) for the scheduler's reply, which
  // comes once every expected node has registered. Before that, the scheduler's tcp address must
  // resolve and take a connection within connect_timeout_ms (asked again meanwhile: a name that
  // resolves late, a scheduler that starts late), else Unavailable names the address and why.
  // Aborted as soon as the process was asked to stop (common/signals.h) or *stop (SetStop) is set.
  Status Register(const std::string& address);
  void SetStop(const std::atomic<bool>* stop) { stop_ = stop; }

  // For the owner's poll (PollItem{&socket()}).
  Socket& socket() { return *sock_; }
  int rank() const { return rank_; }
  Role role() const { return role_; }
  const ClusterMap& cluster() const { return cluster_; }
  const Membership& membership() const { return membership_; }

  // Reads one message from the socket. Membership updates are absorbed (the return value is
  // false, *membership_changed set); any other valid message is returned for the owner.
  bool Receive(Message* out, bool* membership_changed);

  // Sends a heartbeat when one is due (or now); Unavailable when the scheduler has been silent
  // too long, Aborted once it said it no longer counts this node (dropped()).
  Status Tick(bool at_once = false);
  // After registration, the scheduler answering with a refused registration: it declared this
  // node dead (silent past its timeout, yet alive), or it is another scheduler (restarted at the
  // same address) that never registered it. Either way nothing this node asks will be answered:
  // the node stops. OK until then.
  const Status& dropped() const { return dropped_; }
  // Milliseconds until the next Tick is due (for poll timeouts).
  int64_t MsUntilTick() const;

  Status Send(Header h);

 private:
  // Until the scheduler's address takes a TCP connection (see Register), within `deadline` (the
  // registration's) and connect_timeout_ms. Addresses other than tcp:// are not looked at.
  Status WaitUntilReachable(const Deadline& deadline);
  // The process was asked to stop (a signal), or the owner was (SetStop).
  bool StopAsked() const;
  bool ApplyMembership(const Membership& m);
  // A membership whose lists do not match the job's node counts: what is wrong ("" when none).
  std::string MembershipMismatch(const Membership& m) const;

  const Role role_;
  const ControlOptions options_;
  Transport& transport_;
  std::unique_ptr<Socket> sock_;
  Status made_;  // whether sock_ could be made (reported by Register)
  int rank_ = -1;
  ClusterMap cluster_;
  Membership membership_;
  int64_t last_heard_ms_ = 0;
  bool warned_silence_ = false;  // the scheduler silent for half the timeout: said once
  Status dropped_;
  const std::atomic<bool>* stop_ = nullptr;
  int64_t next_heartbeat_ms_ = 0;
  std::vector<Frame> frames_;
};

}  // namespace pushpull
