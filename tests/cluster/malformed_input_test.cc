// A live server under malformed input from an independent client: every bad message gets an error
// reply or is dropped and counted, nothing is applied twice, and a normal worker is still served
// correctly afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "tests/support/local_cluster.h"
#include "tests/support/raw_peer.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

TEST(MalformedInput, LiveServerRefusesBadMessagesAndKeepsServing) {
  LocalClusterConfig cfg;
  cfg.servers = 1;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  auto t = cluster.client(0).CreateTable(AspLrOne("t"));
  ASSERT_TRUE(t.ok());
  RawPeer peer(cluster.server(0).address());
  const server::ServerStats& stats = cluster.server(0).stats();

  Header push;
  push.type = MsgType::kPush;
  push.sender_rank = 1;
  push.table = t->id;
  push.num_keys = 1;
  push.dim = 4;
  std::vector<Key> key{2};
  std::vector<float> g{-1, -1, -1, -1};
  uint64_t id = 1000;
  auto expect_error = [&](Header h, const std::vector<Key>& k, const std::vector<float>& v, Code want,
                          const char* what) {
    h.request_id = ++id;
    peer.Send(h, k, v);
    Header r = peer.Reply();
    EXPECT_EQ(r.request_id, id) << what;
    EXPECT_EQ(r.status, want) << what << ": " << r.error;
    EXPECT_FALSE(r.error.empty()) << what;
  };

  // Truncated header: nothing addressable, dropped and counted.
  uint64_t bad0 = stats.bad_messages;
  {
    std::string e = EncodeHeader(push);
    std::vector<zmq::message_t> f;
    f.emplace_back(e.data(), 7);
    f.emplace_back(0);
    f.emplace_back(0);
    peer.SendRaw(std::move(f));
    EXPECT_TRUE(peer.Silent());
  }
  {  // random bytes, one frame
    std::vector<zmq::message_t> f;
    f.emplace_back("garbage!", 8);
    peer.SendRaw(std::move(f));
    EXPECT_TRUE(peer.Silent());
  }
  EXPECT_EQ(stats.bad_messages - bad0, 2u);
  {  // wrong frame count: answered with Corruption
    Header h = push;
    h.request_id = ++id;
    std::string e = EncodeHeader(h);
    std::vector<zmq::message_t> f;
    f.emplace_back(e.data(), e.size());
    f.emplace_back(key.data(), 8);
    peer.SendRaw(std::move(f));
    Header r = peer.Reply();
    EXPECT_EQ(r.status, Code::kCorruption) << r.error;
  }
  expect_error(push, {2, 3}, g, Code::kCorruption, "keys do not match num_keys");
  expect_error(push, key, {-1, -1, -1}, Code::kCorruption, "values do not match rows*dim");
  {
    Header h = push;
    h.table = 99;
    expect_error(h, key, g, Code::kNotFound, "unknown table");
  }
  expect_error(push, {8}, g, Code::kInvalidArgument, "row out of range");
  {  // a request claiming an error status (which excuses a reply from carrying values) and no
     // values: once applied stray memory as the gradient, or read past it (a crash)
    Header h = push;
    h.status = Code::kInternal;
    expect_error(h, {2, 3}, {}, Code::kCorruption, "push with an error status and no values");
    h.num_keys = 0;
    h.flags = kFlagRange;
    h.row_begin = 0;
    h.num_rows = 8;
    expect_error(h, {}, {}, Code::kCorruption, "range push with an error status and no values");
  }
  {
    Header h = push;
    h.dim = 2;
    expect_error(h, key, {-1, -1}, Code::kInvalidArgument, "wrong dimension");
  }
  {
    Header h = push;
    h.num_keys = uint64_t(1) << 40;
    expect_error(h, {}, {}, Code::kCorruption, "claimed length 2^40");
  }
  expect_error(push, key, {-1, std::nanf(""), -1, -1}, Code::kDiverged, "NaN gradient");
  expect_error(push, key, {-1, -1, std::numeric_limits<float>::infinity(), -1}, Code::kDiverged, "Inf gradient");
  {
    Header h;
    h.type = MsgType::kClock;
    h.sender_rank = 1;
    h.clock = 5;
    expect_error(h, {}, {}, Code::kFailedPrecondition, "clock jumps ahead");
  }
  {
    Header h = push;
    h.clock = 3;
    expect_error(h, key, g, Code::kFailedPrecondition, "push tagged with a future clock");
  }
  {
    Header h = push;
    h.sender_rank = 7;
    expect_error(h, key, g, Code::kInvalidArgument, "sender is not a worker");
  }
  {  // before the job's first clock: passed for a replacement's redo, answered and never applied
    Header h = push;
    h.clock = -1;
    expect_error(h, key, g, Code::kInvalidArgument, "push tagged with a negative clock");
    Header c;
    c.type = MsgType::kClock;
    c.sender_rank = 1;
    c.clock = -3;
    expect_error(c, {}, {}, Code::kInvalidArgument, "clock tagged negative");
  }
  // A valid push, then the same push replayed (as a worker sends it again after a dropped
  // connection): answered again, applied once.
  Header ok = push;
  ok.request_id = ++id;
  peer.Send(ok, key, g);
  EXPECT_EQ(peer.Reply().status, Code::kOk);
  peer.Send(ok, key, g);
  Header r = peer.Reply();
  EXPECT_EQ(r.status, Code::kOk) << r.error;
  EXPECT_EQ(r.request_id, ok.request_id);
  EXPECT_EQ(stats.duplicates.load(), 1u);
  // Replayed with another clock tag (as a replay from an earlier clock would be): still a
  // duplicate, not a clock error.
  Header stale = ok;
  stale.clock += 5;
  peer.Send(stale, key, g);
  EXPECT_EQ(peer.Reply().status, Code::kOk);
  EXPECT_EQ(stats.duplicates.load(), 2u);
  // A refused push asked again gets its refusal again.
  {
    Header nan = push;
    nan.request_id = ++id;
    const std::vector<float> bad = {std::nanf(""), -1, -1, -1};
    peer.Send(nan, key, bad);
    EXPECT_EQ(peer.Reply().status, Code::kDiverged);
    peer.Send(nan, key, bad);
    Header again = peer.Reply();
    EXPECT_EQ(again.status, Code::kDiverged);
    EXPECT_NE(again.error.find("NaN"), std::string::npos) << again.error;
    EXPECT_EQ(stats.duplicates.load(), 3u);
  }

  // The server still serves a normal worker, and row 2 moved exactly once (lr 1, grad -1).
  std::vector<float> vals(8 * 4);
  ASSERT_TRUE(cluster.client(0).PullDense(*t, vals.data()).Wait().ok());
  for (int r2 = 0; r2 < 8; ++r2)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(vals[r2 * 4 + c], r2 == 2 ? 1.0f : 0.0f) << r2 << "," << c;
  ASSERT_TRUE(cluster.client(0).Push(*t, {5}, {-2, -2, -2, -2}).Wait().ok());
  ASSERT_TRUE(cluster.client(0).Pull(*t, {5, 2}, vals.data()).Wait().ok());
  EXPECT_EQ(vals[0], 2.0f);
  EXPECT_EQ(vals[4], 1.0f);
  // Malformed: 2 dropped + 6 answered; refused: the 10 well-formed but invalid ones and the NaN
  // push (its repeat was answered from the record, not refused again).
  EXPECT_EQ(stats.bad_messages.load(), 8u);
  EXPECT_EQ(stats.rejected.load(), 11u);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
