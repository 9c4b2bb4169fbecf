// A transport that injects faults into another (common/transport.h), for tests: it drops, delays
// or duplicates chosen messages and cuts connections, at a chosen point (the nth message that
// matches a rule) or at random with a seed, and counts what it did.
//
//   auto faults = std::make_shared<FaultTransport>(NewZmqTransport(), /*seed=*/7);
//   faults->AddRule({FaultRule::kDrop, FaultRule::kRecv, MsgType::kPushReply, /*nth=*/3});
//   ... give `faults` to a node (LocalClusterConfig::worker_transport) ...
//
// What a fault looks like to the node: a dropped message is lost on a connection that stays up
// (what a peer's crash between receive and reply looks like); a cut loses everything sent and
// received on every network socket of the transport for cut_ms and reports each watched
// connection dropped, then back (kDisconnected, kConnected), as a network partition does; a
// delay holds a received message back; a duplicate delivers a message twice.
//
// Threading: thread-safe, like any Transport; each socket is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/mutex.h"
#include "common/transport.h"
#include "common/wire.h"

namespace pushpull {

struct FaultRule {
  enum Action : uint8_t { kDrop, kDelay, kDuplicate, kCut };
  enum Direction : uint8_t { kSend, kRecv };
  Action action = kDrop;
  Direction direction = kSend;
  // Only messages of this type (their header's); kAnyType: every message.
  static constexpr int kAnyType = -1;
  int type = kAnyType;
  // > 0: the nth message that matches (1-based), then the next `times - 1` matches; 0: each
  // match with `probability`, drawn from the transport's seeded generator.
  int64_t nth = 0;
  double probability = 0;
  int64_t times = 1;  // how many messages the rule acts on in all (-1: no limit)
  int delay_ms = 0;   // kDelay: how long a received message is held back
  int cut_ms = 0;     // kCut: how long the connections stay cut

  FaultRule() = default;
  FaultRule(Action a, Direction d, MsgType t, int64_t nth_match, int64_t times_ = 1)
      : action(a), direction(d), type(static_cast<int>(t)), nth(nth_match), times(times_) {}
};

class FaultTransport : public Transport {
 public:
  FaultTransport(std::shared_ptr<Transport> inner, uint64_t seed);
  ~FaultTransport() override;

  void AddRule(const FaultRule& rule) EXCLUDES(mu_);

  struct Counts {
    int64_t dropped = 0, delayed = 0, duplicated = 0, cuts = 0;
    int64_t lost_in_cuts = 0;  // messages sent or received while a cut lasted
  };
  Counts counts() const EXCLUDES(mu_);

  Result<std::unique_ptr<Socket>> MakeSocket(SocketKind kind, const SocketOptions& options) override;
  int Poll(PollItem* items, size_t n, int64_t timeout_ms) override;

 private:
  class FaultSocket;
  class FaultWatch;
  friend class FaultSocket;
  friend class FaultWatch;
  struct Decision {
    bool drop = false, duplicate = false, cut = false;
    int delay_ms = 0;
  };
  // What to do with a message going `dir` on a socket of `kind` (it has been counted).
  Decision Decide(FaultRule::Direction dir, SocketKind kind, const std::vector<Frame*>& frames) EXCLUDES(mu_);
  bool CutNow(int64_t now_ms) EXCLUDES(mu_);
  void CountLostInCut() EXCLUDES(mu_);
  int64_t cut_generation() const EXCLUDES(mu_);
  int64_t cut_end_ms() const EXCLUDES(mu_);

  const std::shared_ptr<Transport> inner_;
  mutable Mutex mu_;
  std::vector<FaultRule> rules_ GUARDED_BY(mu_);
  std::vector<int64_t> matched_ GUARDED_BY(mu_);  // per rule: messages that matched it so far
  std::vector<int64_t> acted_ GUARDED_BY(mu_);    // per rule: messages it acted on
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  Counts counts_ GUARDED_BY(mu_);
  int64_t cut_until_ms_ GUARDED_BY(mu_) = 0;
  int64_t cut_generation_ GUARDED_BY(mu_) = 0;  // cuts begun so far: sockets report each once
};

}  // namespace pushpull
