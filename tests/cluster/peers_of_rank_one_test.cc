// A server's record of a worker's requests (server/request_record.h) as raw peers of one worker
// rank meet it: repeats are answered once and never run twice, across new clients of the rank
// (replacements), parked pulls, malformed requests and ids reused for another kind of request.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "tests/support/eventually.h"
#include "tests/support/local_cluster.h"
#include "tests/support/raw_peer.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// Raw peers speaking for worker 1 of a running job (clients of that rank, as a replacement's
// would be) to server 0, pushing -1 to row 2 of an AspLrOne table: each push applied adds 1.
class PeersOfRankOne : public ::testing::Test {
 protected:
  PeersOfRankOne() : cluster_(Config()) {}
  static LocalClusterConfig Config() {
    LocalClusterConfig cfg;
    cfg.workers = 2;
    return cfg;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_.Start().ok());
    auto t = cluster_.client(0).CreateTable(AspLrOne("w"));
    ASSERT_TRUE(t.ok());
    table_ = *t;
  }
  void TearDown() override { EXPECT_TRUE(cluster_.FinishAndJoin().ok()); }

  std::unique_ptr<RawPeer> Peer(const std::string& routing_id = "") {
    return std::make_unique<RawPeer>(cluster_.server(0).address(), routing_id);
  }
  static Header Of(MsgType type, int64_t clock, uint64_t request_id) {
    Header h;
    h.type = type;
    h.sender_rank = 1;
    h.clock = clock;
    h.request_id = request_id;
    return h;
  }
  MsgType Hello(RawPeer& p) {
    p.Send(Of(MsgType::kHello, 0, 0), {}, {});
    return p.Reply().type;
  }
  Code Push(RawPeer& p, uint64_t request_id, int64_t clock = 0) {
    Header h = Of(MsgType::kPush, clock, request_id);
    h.table = table_.id;
    h.num_keys = 1;
    h.dim = 4;
    p.Send(h, {2}, {-1, -1, -1, -1});
    return p.Reply().status;
  }
  Code Tick(RawPeer& p, int64_t to_clock, uint64_t request_id) {
    p.Send(Of(MsgType::kClock, to_clock, request_id), {}, {});
    return p.Reply().status;
  }
  // A BSP table of AspLrOne's shape, and a peer of rank 1 at clock 1: its pulls at clock 1 are
  // parked until worker 0 reaches clock 1.
  Table Bsp() {
    TableSpec bsp = AspLrOne("bsp");
    bsp.consistency = {Consistency::kBsp, 0};
    auto table = cluster_.client(0).CreateTable(bsp);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    return table.ok() ? *table : Table{};
  }
  std::unique_ptr<RawPeer> PeerAtClockOne() {
    auto p = Peer();
    EXPECT_EQ(Hello(*p), MsgType::kHelloReply);
    EXPECT_EQ(Tick(*p, 1, 1), Code::kOk);
    return p;
  }
  static Header PullOfRow2(const Table& t, int64_t clock, uint64_t request_id) {
    Header h = Of(MsgType::kPull, clock, request_id);
    h.table = t.id;
    h.num_keys = 1;
    h.dim = 4;
    return h;
  }
  float Row2() {
    std::vector<float> v(4);
    EXPECT_TRUE(cluster_.client(0).Pull(table_, {2}, v.data()).Wait().ok());
    return v[0];
  }
  uint64_t Duplicates() { return cluster_.server(0).stats().duplicates.load(); }

  LocalCluster cluster_;
  Table table_;
};

// A server answers a request id it has seen from a worker again instead of running it twice (a
// worker sends its unanswered requests again after a dropped connection), but a new client of
// that worker (a Hello from another receive socket) numbers its requests from the start again.
TEST_F(PeersOfRankOne, AHelloFromAnotherClientStartsAWorkersRequestRecordOver) {
  const uint64_t dups = Duplicates();
  {
    auto a = Peer();
    EXPECT_EQ(Hello(*a), MsgType::kHelloReply);
    EXPECT_EQ(Push(*a, 5), Code::kOk);
    EXPECT_EQ(Push(*a, 5), Code::kOk);           // the same id again: answered, not applied
    EXPECT_EQ(Hello(*a), MsgType::kHelloReply);  // the same client again: its record stays
    EXPECT_EQ(Push(*a, 5), Code::kOk);
    EXPECT_EQ(Duplicates(), dups + 2);
    EXPECT_EQ(Row2(), 1.0f);
    // The clock done (a new client in the middle of one redoes its pushes: below).
    EXPECT_EQ(Tick(*a, 1, 6), Code::kOk);
  }
  auto b = Peer();
  EXPECT_EQ(Hello(*b), MsgType::kHelloReply);
  EXPECT_EQ(Push(*b, 5, 1), Code::kOk);  // id 5 of another client: a new request
  EXPECT_EQ(Duplicates(), dups + 2);
  EXPECT_EQ(Row2(), 2.0f);
}

// A malformed request whose header decodes is answered with its error, but not recorded: it ran
// nothing, and its id may be that of a request in progress (here a parked pull), whose repeat
// must get that request's own answer, not the malformed one's.
TEST_F(PeersOfRankOne, AMalformedRequestIsAnsweredButNotRecorded) {
  const Table table = Bsp();
  auto p = PeerAtClockOne();
  const Header pull = PullOfRow2(table, 1, 7);  // parked
  p->Send(pull, {2}, {});
  EXPECT_TRUE(p->Silent(200));
  Header h = Of(MsgType::kPush, 1, 7);  // id 7 too, with a keys frame of 3 bytes
  h.table = table.id;
  h.num_keys = 1;
  h.dim = 4;
  std::vector<zmq::message_t> f;
  const std::string e = EncodeHeader(h);
  f.emplace_back(e.data(), e.size());
  f.emplace_back(3);
  f.emplace_back(16);
  p->SendRaw(std::move(f));
  const Header bad = p->Reply();
  EXPECT_EQ(bad.type, MsgType::kPushReply);
  EXPECT_NE(bad.status, Code::kOk);
  ASSERT_TRUE(cluster_.client(0).Clock().ok());
  Header got = p->Reply();
  EXPECT_EQ(got.type, MsgType::kPullReply);
  EXPECT_EQ(got.status, Code::kOk);
  p->Send(pull, {2}, {});  // asked again: served again, as any answered pull
  got = p->Reply();
  EXPECT_EQ(got.type, MsgType::kPullReply);
  EXPECT_EQ(got.status, Code::kOk);
}

// A peer that parks more pulls than a client ever would (four times kMaxUnansweredRequests) has
// the rest refused, not kept: a server's memory does not grow with what a peer sends.
TEST_F(PeersOfRankOne, PullsParkedPastFourTimesAClientsBoundAreRefused) {
  const Table table = Bsp();
  auto p = PeerAtClockOne();
  const size_t bound = 4 * kMaxUnansweredRequests, extra = 20;
  for (uint64_t id = 10; id < 10 + bound + extra; ++id) p->Send(PullOfRow2(table, 1, id), {2}, {});  // parked
  size_t refused = 0;
  for (Header h = p->Reply(2000); h.type != MsgType::kHeartbeat; h = p->Reply(500))
    refused += h.type == MsgType::kPullReply && h.status == Code::kResourceExhausted;
  EXPECT_EQ(refused, extra);
  ASSERT_TRUE(cluster_.client(0).Clock().ok());
  size_t served = 0;
  for (Header h = p->Reply(5000); h.type != MsgType::kHeartbeat; h = p->Reply(500))
    served += h.type == MsgType::kPullReply && h.status == Code::kOk;
  EXPECT_EQ(served, bound);
}

// A pull an earlier client of the rank left parked, answered after a new client said hello, is
// not taken for the new client's request of the same id in the server's record: the new one's
// pull, parked too and asked again (as after a lost connection), is still in progress and
// dropped, so it is answered once.
TEST_F(PeersOfRankOne, AnOldClientsParkedPullIsNotTheNewOnesRequest) {
  TableSpec bsp = AspLrOne("bsp");
  bsp.consistency = {Consistency::kBsp, 0};
  auto table = cluster_.client(0).CreateTable(bsp);
  ASSERT_TRUE(table.ok());
  // Rank 1's pull at `clock` of the BSP table: parked until worker 0 reaches that clock.
  auto pull = [&](RawPeer& p, int64_t clock, const std::string& reply_to) {
    Header h = Of(MsgType::kPull, clock, 7);
    h.reply_to = reply_to;
    h.table = table->id;
    h.num_keys = 1;
    h.dim = 4;
    p.Send(h, {2}, {});
  };
  auto a = Peer("old-client"), b = Peer();
  Header hello = Of(MsgType::kHello, 0, 0);
  hello.reply_to = "old-client";
  a->Send(hello, {}, {});
  ASSERT_EQ(a->Reply().type, MsgType::kHelloReply);
  Header tick = Of(MsgType::kClock, 1, 1);
  tick.reply_to = "old-client";
  a->Send(tick, {}, {});
  ASSERT_EQ(a->Reply().status, Code::kOk);
  pull(*a, 1, "old-client");
  EXPECT_TRUE(a->Silent(200));
  EXPECT_EQ(Hello(*b), MsgType::kHelloReply);  // a new client of rank 1, at clock 1
  EXPECT_EQ(Tick(*b, 2, 1), Code::kOk);
  pull(*b, 2, "");  // id 7 too
  EXPECT_TRUE(b->Silent(200));
  ASSERT_TRUE(cluster_.client(0).Clock().ok());  // worker 0 at clock 1: the old pull is served
  EXPECT_EQ(a->Reply().type, MsgType::kPullReply);
  const uint64_t dups = Duplicates();
  pull(*b, 2, "");  // asked again: in progress, dropped (once answered, a pull is served again)
  ASSERT_TRUE(Eventually([&] { return Duplicates() == dups + 1; }, 5000));
  ASSERT_TRUE(cluster_.client(0).Clock().ok());  // worker 0 at clock 2: the new one is served, once
  EXPECT_EQ(b->Reply().type, MsgType::kPullReply);
  EXPECT_TRUE(b->Silent(300)) << "the new client's pull was served twice";
}

// A new client of a worker in the middle of a clock (a replacement) redoes that clock: its first
// pushes there to a table whose pushes are applied as they come (not BSP) are answered and not
// applied, as many as its predecessors had made, carried over a replacement that itself dies
// before redoing them all; the clock's tick ends it.
TEST_F(PeersOfRankOne, ANewClientMidClockRedoesItsPredecessorsPushesOnce) {
  const uint64_t dups = Duplicates();
  auto a = Peer(), b = Peer(), c = Peer();
  EXPECT_EQ(Hello(*a), MsgType::kHelloReply);
  EXPECT_EQ(Push(*a, 1), Code::kOk);
  EXPECT_EQ(Push(*a, 2), Code::kOk);
  EXPECT_EQ(Row2(), 2.0f);
  EXPECT_EQ(Hello(*b), MsgType::kHelloReply);  // takes rank 1's place at clock 0, 2 pushes applied
  EXPECT_EQ(Push(*b, 1), Code::kOk);           // the first again: answered, not applied
  EXPECT_EQ(Row2(), 2.0f);
  EXPECT_EQ(Hello(*c), MsgType::kHelloReply);  // and c takes b's place before b redid the second
  EXPECT_EQ(Push(*c, 1), Code::kOk);
  EXPECT_EQ(Push(*c, 2), Code::kOk);
  EXPECT_EQ(Row2(), 2.0f);
  EXPECT_EQ(Duplicates(), dups + 3);
  EXPECT_EQ(Push(*c, 3), Code::kOk);  // the clock's third push: new
  EXPECT_EQ(Row2(), 3.0f);
  EXPECT_EQ(Tick(*c, 1, 4), Code::kOk);
  EXPECT_EQ(Push(*c, 5, 1), Code::kOk);  // the next clock's: applied
  EXPECT_EQ(Row2(), 4.0f);
  EXPECT_EQ(Duplicates(), dups + 3);
}

// A repeat older than the server's record of a worker's requests (a client keeps fewer than that
// unanswered, so only another peer can ask one): decided by kind. A push is refused rather than
// maybe applied twice; a clock the worker's clock reached is answered; a pull is served again.
TEST_F(PeersOfRankOne, ARepeatOlderThanTheRecordIsDecidedByKind) {
  auto p = Peer();
  ASSERT_EQ(Hello(*p), MsgType::kHelloReply);
  ASSERT_EQ(Push(*p, 1), Code::kOk);
  ASSERT_EQ(Tick(*p, 1, 2), Code::kOk);
  Header pull = Of(MsgType::kPull, 1, 3);
  pull.table = table_.id;
  pull.num_keys = 1;
  pull.dim = 4;
  p->Send(pull, {2}, {});
  ASSERT_EQ(p->Reply().status, Code::kOk);
  for (uint64_t id = 4; id < 4 + kMaxUnansweredRequests; ++id) ASSERT_EQ(Push(*p, id, 1), Code::kOk) << id;
  EXPECT_EQ(Row2(), float(1 + kMaxUnansweredRequests));
  Header h = Of(MsgType::kPush, 0, 1);  // the first push asked again
  h.table = table_.id;
  h.num_keys = 1;
  h.dim = 4;
  p->Send(h, {2}, {-1, -1, -1, -1});
  Header r = p->Reply();
  EXPECT_EQ(r.type, MsgType::kPushReply);
  EXPECT_EQ(r.status, Code::kFailedPrecondition) << r.error;
  EXPECT_NE(r.error.find("forgot its answer"), std::string::npos) << r.error;
  EXPECT_EQ(Tick(*p, 1, 2), Code::kOk);
  p->Send(pull, {2}, {});
  Header again = p->Reply();
  EXPECT_EQ(again.type, MsgType::kPullReply);
  EXPECT_EQ(again.status, Code::kOk) << again.error;
  EXPECT_EQ(Row2(), float(1 + kMaxUnansweredRequests));  // nothing applied twice
}

// A request id answered as one kind of request and reused for another (a client's bug) is
// refused, not served as the first nor run: a push given a pull's id would run at the pull's old
// clock, a pull given a push's id be answered with the push's reply.
TEST_F(PeersOfRankOne, AnIdReusedForAnotherKindOfRequestIsRefused) {
  auto p = Peer();
  ASSERT_EQ(Hello(*p), MsgType::kHelloReply);
  Header pull = PullOfRow2(table_, 0, 1);
  p->Send(pull, {2}, {});
  ASSERT_EQ(p->Reply().status, Code::kOk);
  ASSERT_EQ(Push(*p, 2), Code::kOk);
  EXPECT_EQ(Row2(), 1.0f);
  EXPECT_EQ(Push(*p, 1), Code::kInvalidArgument);  // the pull's id
  p->Send(PullOfRow2(table_, 0, 2), {2}, {});      // the push's id
  Header r = p->Reply();
  EXPECT_EQ(r.status, Code::kInvalidArgument) << r.error;
  EXPECT_NE(r.error.find("reuses the id of a PushReply's request"), std::string::npos) << r.error;
  EXPECT_EQ(Row2(), 1.0f);            // nothing run
  EXPECT_EQ(Push(*p, 3), Code::kOk);  // and the worker goes on
  EXPECT_EQ(Row2(), 2.0f);
}

// A client of a worker rank that another has replaced (declared dead, but still running) is
// refused, and its request ids stay out of the new client's record: the new client's requests of
// the same ids are run and answered (the old one's refused id, marked begun in the new record,
// would have the new client's request of that id dropped as a repeat for good), and the old
// client is never given the new one's recorded answers.
TEST_F(PeersOfRankOne, AReplacedClientsRequestIdsAreNotTheNewOnes) {
  auto a = Peer("old-client"), b = Peer("new-client");
  auto send = [&](RawPeer& p, MsgType type, uint64_t request_id, const std::string& reply_to) {
    Header h = Of(type, 0, request_id);
    h.reply_to = reply_to;
    if (type == MsgType::kPush) {
      h.table = table_.id;
      h.num_keys = 1;
      h.dim = 4;
      p.Send(h, {2}, {-1, -1, -1, -1});
    } else {
      p.Send(h, {}, {});
    }
    return p.Reply();
  };
  ASSERT_EQ(send(*a, MsgType::kHello, 0, "old-client").type, MsgType::kHelloReply);
  ASSERT_EQ(send(*a, MsgType::kPush, 1, "old-client").status, Code::kOk);
  EXPECT_EQ(Row2(), 1.0f);
  ASSERT_EQ(send(*b, MsgType::kHello, 0, "new-client").type, MsgType::kHelloReply);
  Header r = send(*a, MsgType::kPush, 3, "old-client");
  EXPECT_EQ(r.type, MsgType::kPushReply);
  EXPECT_EQ(r.status, Code::kFailedPrecondition) << r.error;
  // The new client redoes the open clock: its first push was its predecessor's (answered, not
  // applied), its second and third are new; the third has the id the old client's refused one had.
  for (uint64_t id = 1; id <= 3; ++id) {
    Header q = send(*b, MsgType::kPush, id, "new-client");
    ASSERT_EQ(q.type, MsgType::kPushReply) << "the new client's push " << id << " was not answered";
    EXPECT_EQ(q.status, Code::kOk) << q.error;
  }
  EXPECT_EQ(Row2(), 3.0f);
  // The old client asks for an id the new one's record holds as answered: refused, not told "ok".
  r = send(*a, MsgType::kPush, 2, "old-client");
  EXPECT_EQ(r.status, Code::kFailedPrecondition) << r.error;
  EXPECT_EQ(Row2(), 3.0f);
}

}  // namespace
}  // namespace pushpull
