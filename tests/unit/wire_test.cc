// The wire format (common/wire.h): headers and messages round-trip, Cereal's bytes are what the
// hand-packed hot path writes, and every malformed or damaged message decodes to an error that
// says what is wrong, never a crash or a read out of bounds.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/control.h"
#include "common/wire.h"

namespace pushpull {
namespace {

std::vector<zmq::message_t> Frames(const Header& h, size_t key_bytes, size_t value_bytes) {
  std::vector<zmq::message_t> f;
  std::string e = EncodeHeader(h);
  f.emplace_back(e.data(), e.size());
  f.emplace_back(key_bytes);
  f.emplace_back(value_bytes);
  return f;
}

TEST(Wire, HeaderRoundTripsWithControlPayloads) {
  Header h;
  h.type = MsgType::kCreateTable;
  h.request_id = 77;
  h.spec.name = "emb";
  h.spec.sparse = true;
  h.spec.dim = 16;
  h.info = TableInfo::Make(3, h.spec, 4);
  h.SetStatus(Status::NotFound("x"));
  std::string e = EncodeHeader(h);
  Header d;
  ASSERT_TRUE(DecodeHeader(e.data(), e.size(), &d).ok());
  EXPECT_EQ(d.request_id, 77u);
  EXPECT_EQ(d.spec.name, "emb");
  EXPECT_EQ(d.info.id, 3u);
  EXPECT_EQ(d.info.bucket_owner.size(), TableInfo::kBuckets);
  EXPECT_EQ(d.status, Code::kNotFound);
  EXPECT_TRUE(d.spec == h.spec);
}

// What a dying worker's agreement moves: a server's clocks of the workers (kWorkerClocks), whose
// flags must be one per clock, and the clock the servers agreed on, in the membership.
TEST(Wire, WorkerClocksAndTheAgreedLastClockRoundTrip) {
  Header h;
  h.type = MsgType::kWorkerClocks;
  h.clock = 12;
  h.worker_clocks = {5, 4, -1};
  h.worker_settled = {1, 0, 0};
  std::string e = EncodeHeader(h);
  Header d;
  ASSERT_TRUE(DecodeHeader(e.data(), e.size(), &d).ok());
  EXPECT_EQ(d.worker_clocks, h.worker_clocks);
  EXPECT_EQ(d.worker_settled, h.worker_settled);
  h.worker_settled.pop_back();
  e = EncodeHeader(h);
  Status st = DecodeHeader(e.data(), e.size(), &d);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("3 worker clocks but 2 settled flags"), std::string::npos) << st.ToString();

  Header m;
  m.type = MsgType::kMembership;
  m.membership.worker_alive = {Membership::kWorkerAlive, Membership::kWorkerDying, Membership::kWorkerDead};
  m.membership.worker_last_clock = {-1, -1, 7};
  e = EncodeHeader(m);
  ASSERT_TRUE(DecodeHeader(e.data(), e.size(), &d).ok());
  EXPECT_EQ(d.membership.worker_alive, m.membership.worker_alive);
  EXPECT_EQ(d.membership.worker_last_clock, m.membership.worker_last_clock);
}

// The largest cluster the wire allows: a RegisterReply naming kMaxNodes servers by 256-byte
// addresses still decodes.
TEST(Wire, RegisterReplyForTheLargestClusterDecodes) {
  Header h;
  h.type = MsgType::kRegisterReply;
  h.cluster.num_workers = 1;
  for (uint32_t s = 0; s < kMaxNodes; ++s) {
    ServerAddress e;
    e.rank = static_cast<int32_t>(s);
    e.address = "tcp://" + std::string(240, 'h') + ":" + std::to_string(10000 + s);
    e.address.resize(256, '0');
    h.cluster.servers.push_back(e);
  }
  h.membership.server_alive.assign(kMaxNodes, 1);
  h.membership.worker_alive.assign(1, 1);
  h.membership.worker_done.assign(1, 0);
  const std::string e = EncodeHeader(h);
  EXPECT_GT(e.size(), 1000000u);
  Header d;
  Status st = DecodeHeader(e.data(), e.size(), &d);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(d.cluster.servers.size(), kMaxNodes);
  EXPECT_EQ(d.cluster.servers.back().address, h.cluster.servers.back().address);
  EXPECT_FALSE(d.cluster.checkpoints);
}

// Whether the job checkpoints travels in the RegisterReply, as a byte that must be 0 or 1.
TEST(Wire, RegisterReplySaysWhetherTheJobCheckpoints) {
  Header h;
  h.type = MsgType::kRegisterReply;
  h.cluster.num_workers = 1;
  h.cluster.servers.push_back({0, "tcp://10.0.0.2:7001"});
  h.cluster.checkpoints = true;
  h.cluster.checkpoint_timeout_ms = 3600000;  // (a worker's Checkpoint() waits past two of these)
  const std::string e = EncodeHeader(h);
  Header d;
  ASSERT_TRUE(DecodeHeader(e.data(), e.size(), &d).ok());
  EXPECT_TRUE(d.cluster.checkpoints);
  EXPECT_EQ(d.cluster.checkpoint_timeout_ms, 3600000);
  // The flag is the byte after restore_from (a u32 length, empty here) and start_clock.
  h.cluster.checkpoints = false;
  std::string off = EncodeHeader(h);
  ASSERT_EQ(off.size(), e.size());
  size_t at = 0;
  for (size_t i = 0; i < e.size(); ++i)
    if (e[i] != off[i]) at = i;
  std::string bad = e;
  bad[at] = 2;
  Status st = DecodeHeader(bad.data(), bad.size(), &d);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a bool"), std::string::npos) << st.ToString();
  // So does whether the job goes on after a worker dies (which settles BSP clocks).
  h.cluster.survives_worker_death = true;
  const std::string survives = EncodeHeader(h);
  ASSERT_TRUE(DecodeHeader(survives.data(), survives.size(), &d).ok());
  EXPECT_TRUE(d.cluster.survives_worker_death);
  for (size_t i = 0; i < off.size(); ++i)
    if (survives[i] != off[i]) at = i;
  bad = survives;
  bad[at] = 2;
  st = DecodeHeader(bad.data(), bad.size(), &d);
  EXPECT_NE(st.message().find("survives_worker_death flag 2 is not a bool"), std::string::npos) << st.ToString();
}

// A spec's bools travel as a byte each; from a peer, one that is neither 0 nor 1 is refused.
TEST(Wire, BoolBytesOtherThanZeroOrOneAreRefused) {
  auto flip = [](void (*set)(TableSpec&)) {
    Header h;
    h.type = MsgType::kCreateTable;
    h.spec.name = "t";
    h.spec.rows = 4;
    h.spec.dim = 2;
    const std::string off = EncodeHeader(h);
    set(h.spec);
    std::string on = EncodeHeader(h);
    EXPECT_EQ(on.size(), off.size());
    size_t diffs = 0;
    for (size_t i = 0; i < on.size(); ++i)
      if (on[i] != off[i]) {
        EXPECT_EQ(on[i], 1);
        on[i] = 2;
        ++diffs;
      }
    EXPECT_EQ(diffs, 1u);
    Header d;
    Status st = DecodeHeader(on.data(), on.size(), &d);
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    return st.message();
  };
  EXPECT_NE(flip([](TableSpec& s) { s.sparse = true; }).find("sparse"), std::string::npos);
  EXPECT_NE(flip([](TableSpec& s) { s.optimizer.nesterov = true; }).find("flag"), std::string::npos);
  EXPECT_NE(flip([](TableSpec& s) { s.optimizer.amsgrad = true; }).find("flag"), std::string::npos);
  EXPECT_NE(flip([](TableSpec& s) { s.optimizer.staleness_aware = true; }).find("flag"), std::string::npos);
}

// What a scheduler says a node sizes its state by is checked as it is decoded: a worker count of
// -1 or 2^31 would size a server's per-worker vectors, an unknown job state read as "not
// running".
TEST(Wire, RegisterRepliesAndMembershipsOutOfRangeAreRefused) {
  for (int32_t workers : {-1, int32_t(kMaxNodes) + 1, std::numeric_limits<int32_t>::max()}) {
    Header h;
    h.type = MsgType::kRegisterReply;
    h.cluster.num_workers = workers;
    const std::string e = EncodeHeader(h);
    Header d;
    Status st = DecodeHeader(e.data(), e.size(), &d);
    EXPECT_EQ(st.code(), Code::kCorruption) << workers;
    EXPECT_NE(st.message().find("worker count " + std::to_string(workers)), std::string::npos) << st.ToString();
  }
  Header m;
  m.type = MsgType::kMembership;
  m.membership.job_state = static_cast<Membership::JobState>(9);
  const std::string e = EncodeHeader(m);
  Header d;
  Status st = DecodeHeader(e.data(), e.size(), &d);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("job state 9 is unknown"), std::string::npos) << st.ToString();
}

TEST(Wire, DataHeadersAreCerealBytesPackedByHand) {
  for (MsgType t : {MsgType::kPush, MsgType::kPull, MsgType::kPushReply, MsgType::kPullReply, MsgType::kClock,
                    MsgType::kClockReply, MsgType::kHello, MsgType::kHelloReply}) {
    Header h;
    h.type = t;
    h.flags = kFlagRange;
    h.request_id = 0x0102030405060708ull;
    h.sender_role = Role::kServer;
    h.sender_rank = 3;
    h.table = 9;
    h.clock = -5;
    h.num_keys = 11;
    h.dim = 64;
    h.row_begin = 1000;
    h.num_rows = 24;
    h.slot = 1;
    h.staleness = 2;
    h.reply_to = "rx-1-42";
    h.SetStatus(Status::FailedPrecondition("clock tag 7 is behind"));
    const std::string fast = EncodeHeader(h), slow = EncodeHeaderCereal(h);
    ASSERT_EQ(fast, slow) << MsgTypeName(t);
    Header d;
    ASSERT_TRUE(DecodeHeader(fast.data(), fast.size(), &d).ok()) << MsgTypeName(t);
    EXPECT_EQ(d.type, t);
    EXPECT_EQ(d.request_id, h.request_id);
    EXPECT_EQ(d.sender_role, Role::kServer);
    EXPECT_EQ(d.sender_rank, 3);
    EXPECT_EQ(d.clock, -5);
    EXPECT_EQ(d.row_count(), 24u);
    EXPECT_EQ(d.staleness, 2);
    EXPECT_EQ(d.status, Code::kFailedPrecondition);
    EXPECT_EQ(d.error, h.error);
    EXPECT_EQ(d.reply_to, IsReply(t) ? "" : "rx-1-42");
    // Every truncation is an error, never a read past the frame (ASan checks the latter).
    for (size_t n = 0; n < fast.size(); ++n) {
      std::vector<char> cut(fast.begin(), fast.begin() + n);
      EXPECT_EQ(DecodeHeader(cut.data(), n, &d).code(), Code::kCorruption) << MsgTypeName(t) << " cut at " << n;
    }
  }
}

TEST(Wire, DecodeRejectsEveryMalformedShape) {
  Header h;
  h.type = MsgType::kPush;
  h.num_keys = 4;
  h.dim = 3;
  Message m;
  {  // consistent
    auto f = Frames(h, 32, 48);
    EXPECT_TRUE(Decode(&f, &m).ok());
  }
  {  // wrong frame count
    auto f = Frames(h, 32, 48);
    f.pop_back();
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
  }
  {  // keys frame does not match num_keys
    auto f = Frames(h, 24, 48);
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
  }
  {  // values frame does not match rows * dim
    auto f = Frames(h, 32, 44);
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
  }
  {  // a request that claims an error status, and so no values, for its rows (a server would
     // read a gradient that is not there)
    Header bad = h;
    bad.status = Code::kInternal;
    auto f = Frames(bad, 32, 0);
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
    bad.type = MsgType::kPull;
    auto g = Frames(bad, 32, 0);
    EXPECT_EQ(Decode(&g, &m).code(), Code::kCorruption);
  }
  {  // kFlagNoCreate: a keyed pull's (Lookup), no other message's
    Header look = h;
    look.type = MsgType::kPull;
    look.flags = kFlagNoCreate;
    auto f = Frames(look, 32, 0);
    EXPECT_TRUE(Decode(&f, &m).ok());
    look.flags = kFlagNoCreate | kFlagRange;
    look.num_rows = 4;
    look.num_keys = 0;
    auto g = Frames(look, 0, 0);
    EXPECT_EQ(Decode(&g, &m).code(), Code::kCorruption);
    Header push = h;
    push.flags = kFlagNoCreate;
    auto p = Frames(push, 32, 48);
    EXPECT_EQ(Decode(&p, &m).code(), Code::kCorruption);
  }
  {  // a claimed count of 2^40 keys with nothing behind it
    Header big = h;
    big.num_keys = uint64_t(1) << 40;
    auto f = Frames(big, 0, 0);
    Status st = Decode(&f, &m);
    EXPECT_EQ(st.code(), Code::kCorruption);
  }
  {  // truncated header
    std::string e = EncodeHeader(h);
    Header d;
    EXPECT_EQ(DecodeHeader(e.data(), e.size() / 2, &d).code(), Code::kCorruption);
    EXPECT_EQ(DecodeHeader(e.data(), 3, &d).code(), Code::kCorruption);
  }
  {  // a string length field claiming 2^32-1 bytes: refused before any allocation
    Header c;
    c.type = MsgType::kRegister;
    c.address = "abc";
    std::string e = EncodeHeader(c);
    size_t at = e.find("abc") - 4;
    uint32_t huge = 0xFFFFFFFFu;
    std::memcpy(&e[at], &huge, 4);
    Header d;
    Status st = DecodeHeader(e.data(), e.size(), &d);
    EXPECT_EQ(st.code(), Code::kCorruption);
    EXPECT_NE(st.message().find("claims"), std::string::npos) << st.ToString();
  }
  {  // wrong magic
    Header bad = h;
    bad.magic = 1234;
    std::string e = EncodeHeader(bad);
    Header d;
    EXPECT_EQ(DecodeHeader(e.data(), e.size(), &d).code(), Code::kCorruption);
  }
}

// Random damage to valid messages of every shape (bytes flipped, cut short, grown, frames added or
// dropped): decoding returns a status, ok or an error that says what is wrong, and never throws,
// crashes or reads out of bounds (the ASan build runs this too). A decoded header re-encodes.
TEST(Wire, RandomlyDamagedMessagesDecodeToAnErrorOrAMessage) {
  std::vector<Header> valid;
  {
    Header h;
    h.type = MsgType::kPush;
    h.num_keys = 5;
    h.dim = 3;
    h.push_norm = 2.5f;
    valid.push_back(h);
    h.type = MsgType::kPull;
    h.flags = kFlagRange;
    h.num_keys = 0;
    h.row_begin = 10;
    h.num_rows = 4;
    valid.push_back(h);
  }
  {
    Header h;
    h.type = MsgType::kCreateTable;
    h.spec.name = "emb";
    h.spec.sparse = true;
    h.spec.dim = 16;
    h.info = TableInfo::Make(3, h.spec, 4);
    h.SetStatus(Status::NotFound("nothing here"));
    valid.push_back(h);
  }
  {
    Header h;
    h.type = MsgType::kRegisterReply;
    h.cluster.num_workers = 3;
    for (int s = 0; s < 3; ++s)
      h.cluster.servers.push_back(ServerAddress{s, "tcp://10.0.0." + std::to_string(s) + ":7000"});
    h.membership.server_alive.assign(3, 1);
    h.membership.worker_alive.assign(3, 1);
    h.membership.worker_done.assign(3, 0);
    h.address = "tcp://node:1";
    valid.push_back(h);
  }
  std::mt19937_64 rng(2026);
  size_t ok = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    const Header& h = valid[rng() % valid.size()];
    std::string e = EncodeHeader(h);
    switch (rng() % 4) {
      case 0:  // bytes flipped
        for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) e[rng() % e.size()] ^= char(1 << (rng() % 8));
        break;
      case 1:  // a byte set to an extreme
        e[rng() % e.size()] = rng() % 2 ? char(0xFF) : char(0);
        break;
      case 2:  // cut short
        e.resize(rng() % e.size());
        break;
      case 3:  // grown
        e.append(1 + rng() % 16, char(rng()));
        break;
    }
    Header d;
    Status st;
    ASSERT_NO_THROW(st = DecodeHeader(e.data(), e.size(), &d)) << "round " << round;
    if (st.ok()) {
      ++ok;
      ASSERT_NO_THROW(EncodeHeader(d)) << "round " << round;
    } else {
      ++refused;
      ASSERT_FALSE(st.message().empty()) << "round " << round;
    }
    // The whole message: the damaged header, and keys and values frames of some size.
    std::vector<zmq::message_t> f;
    f.emplace_back(e.data(), e.size());
    for (int k = 0, n = int(rng() % 4); k < n; ++k) f.emplace_back(size_t(rng() % 3 == 0 ? rng() % 64 : rng() % 4) * 4);
    Message m;
    ASSERT_NO_THROW(Decode(&f, &m).IgnoreError()) << "round " << round;
  }
  EXPECT_GT(refused, 1000u);  // (damage is mostly seen)
  EXPECT_GT(ok, 100u);        // (and some of it lands in values any header may hold)
}

// A pull reply may carry its values in several frames (a server sends each stripe's rows in
// place): whole rows each, adding up to what the header says, at most kMaxValueFrames. Nothing
// else may split its values.
TEST(Wire, PullReplyValuesMaySpanFramesOfWholeRows) {
  Header h;
  h.type = MsgType::kPullReply;
  h.flags = kFlagRange;
  h.num_rows = 5;
  h.dim = 2;  // 8 bytes a row, 40 in all
  auto split = [&](const Header& hh, std::vector<size_t> sizes) {
    auto f = Frames(hh, 0, sizes[0]);
    for (size_t i = 1; i < sizes.size(); ++i) f.emplace_back(sizes[i]);
    return f;
  };
  Message m;
  {
    auto f = split(h, {16, 8, 16});
    std::memcpy(f[3].data(), "\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
    ASSERT_TRUE(Decode(&f, &m).ok());
    ASSERT_EQ(m.values.size(), 16u);
    ASSERT_EQ(m.more_values.size(), 2u);
    EXPECT_EQ(static_cast<const float*>(m.more_values[0].data())[1], 2.0f);
  }
  {  // one frame: nothing more
    auto f = split(h, {40});
    ASSERT_TRUE(Decode(&f, &m).ok());
    EXPECT_TRUE(m.more_values.empty());
  }
  {  // a frame that is not whole rows
    auto f = split(h, {12, 28});
    Status st = Decode(&f, &m);
    EXPECT_EQ(st.code(), Code::kCorruption);
    EXPECT_NE(st.message().find("whole number of rows"), std::string::npos) << st.ToString();
  }
  {  // an empty frame among them
    auto f = split(h, {16, 0, 24});
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
  }
  {  // frames adding up to more, or less, than the header says
    auto more = split(h, {16, 32});
    EXPECT_EQ(Decode(&more, &m).code(), Code::kCorruption);
    auto less = split(h, {16, 16});
    EXPECT_EQ(Decode(&less, &m).code(), Code::kCorruption);
  }
  {  // more frames than any server has stripes
    Header many = h;
    many.num_rows = kMaxValueFrames + 1;
    std::vector<size_t> sizes(kMaxValueFrames + 1, 8);
    auto f = split(many, sizes);
    Status st = Decode(&f, &m);
    EXPECT_EQ(st.code(), Code::kCorruption);
    EXPECT_NE(st.message().find("frames, got"), std::string::npos) << st.ToString();
  }
  {  // a push, or an error reply, may not split its values
    Header push = h;
    push.type = MsgType::kPush;
    auto f = split(push, {16, 24});
    EXPECT_EQ(Decode(&f, &m).code(), Code::kCorruption);
    Header err = h;
    err.SetStatus(Status::NotFound("no table"));
    auto e = split(err, {0, 0});
    EXPECT_EQ(Decode(&e, &m).code(), Code::kCorruption);
  }
}

// Checkpoint files keep each table's description as the CreateTable header that made it, in the
// protocol version of the build that wrote them: a later build still reads them (else every
// version bump would make older checkpoints unrestorable), while live peers must match.
TEST(Wire, CheckpointedTableDescriptionsOfOlderVersionsStillDecode) {
  Header h;
  h.type = MsgType::kCreateTable;
  TableSpec spec;
  spec.name = "w";
  spec.rows = 10;
  spec.dim = 3;
  h.spec = spec;
  h.info = TableInfo::Make(2, spec, 2);
  const std::string now = EncodeHeaderCereal(h);
  // Version 4 had no push_norm: 4 bytes fewer after the fixed fields (70 bytes in).
  constexpr size_t kPushNormAt = 70;
  float norm = 0;
  std::memcpy(&norm, now.data() + kPushNormAt, sizeof norm);
  ASSERT_EQ(norm, -1.0f);
  std::string v4 = now;
  v4.erase(kPushNormAt, sizeof(float));
  const uint16_t four = 4;
  std::memcpy(&v4[4], &four, sizeof four);
  Header back;
  EXPECT_EQ(DecodeHeader(v4.data(), v4.size(), &back).code(), Code::kCorruption);  // a live peer's: refused
  ASSERT_TRUE(DecodeHeader(v4.data(), v4.size(), &back, kOldestCheckpointVersion).ok());
  EXPECT_EQ(back.info.spec, spec);
  EXPECT_EQ(back.info.row_offsets, h.info.row_offsets);
  EXPECT_EQ(back.push_norm, -1.0f);
  std::string v2 = v4;
  const uint16_t two = 2;
  std::memcpy(&v2[4], &two, sizeof two);
  EXPECT_EQ(DecodeHeader(v2.data(), v2.size(), &back, kOldestCheckpointVersion).code(), Code::kCorruption);
}

}  // namespace
}  // namespace pushpull
