// What a Client refuses, and what it does with calls that fail: requests no server would answer are
// refused before they are sent, a refused push leaves its step undone (the Clock closing it fails),
// given-up calls stay given up, and a push's clipping is by its whole norm.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/wire.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/raw_peer.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// A small request for a reply the server would not send (keys may repeat) is refused with a
// clear error, before the server allocates it; the server goes on serving.
TEST(ClientErrors, PullOfAReplyOverTheMessageLimitIsRefused) {
  LocalClusterConfig cfg;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec;
  spec.name = "wide";
  spec.rows = 2;
  spec.dim = 1024;
  spec.consistency.model = Consistency::kAsp;
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok());
  // 600k keys (4.8 MB) asking for 600k rows of 4 KB: 2.4 GB, over the 2 GiB default limit.
  std::vector<Key> keys(600000, 1);
  std::vector<float> out(1);  // never written: refused
  Status st = c.Pull(*t, keys, out.data()).Wait();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("message limit"), std::string::npos) << st.ToString();
  std::vector<float> row(2 * 1024);
  EXPECT_TRUE(c.PullDense(*t, row.data()).Wait().ok());
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// clip_norm clips a push by the norm of the whole push, also when it is split over servers
// (each part scaled alike, the direction kept): clipped by each part's own norm, results would
// depend on the number of servers.
TEST(ClientErrors, APushSplitOverServersIsClippedByItsWholeNorm) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec;
  spec.name = "clipped";
  spec.rows = 2;  // a row on each server
  spec.dim = 1;
  spec.init = InitKind::kZeros;
  spec.consistency.model = Consistency::kAsp;
  spec.optimizer.lr = 1.0f;
  spec.optimizer.clip_norm = 1.0f;
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(c.PushDense(*t, std::vector<float>{3.0f, 4.0f}).Wait().ok());
  std::vector<float> w(2);
  ASSERT_TRUE(c.PullDense(*t, w.data()).Wait().ok());
  EXPECT_FLOAT_EQ(w[0], -0.6f);
  EXPECT_FLOAT_EQ(w[1], -0.8f);
  ASSERT_TRUE(c.Push(*t, {1, 0}, {4.0f, 3.0f}).Wait().ok());  // keyed, across both servers
  ASSERT_TRUE(c.PullDense(*t, w.data()).Wait().ok());
  EXPECT_FLOAT_EQ(w[0], -1.2f);
  EXPECT_FLOAT_EQ(w[1], -1.6f);
  ASSERT_TRUE(c.Push(*t, {1}, {0.5f}).Wait().ok());  // one server's part alone, under the norm
  ASSERT_TRUE(c.PullDense(*t, w.data()).Wait().ok());
  EXPECT_FLOAT_EQ(w[1], -2.1f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A push part claiming a whole-push norm below its own (0: no clipping at all) is clipped by its
// own norm: the claim can only make a part's clipping stronger, never switch it off.
TEST(ClientErrors, AClaimedPushNormBelowThePartsOwnDoesNotUnclipIt) {
  LocalClusterConfig cfg;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = AspLrOne("clipped");
  spec.optimizer.clip_norm = 1.0f;
  auto t = cluster.client(0).CreateTable(spec);
  ASSERT_TRUE(t.ok());
  RawPeer peer(cluster.server(0).address());
  Header h;
  h.type = MsgType::kPush;
  h.sender_rank = 1;
  h.table = t->id;
  h.num_keys = 1;
  h.dim = 4;
  h.request_id = 1;
  const float claims[] = {0.0f, 2.5f, 10.0f};  // the part's own norm is 5
  for (float claim : claims) {
    h.push_norm = claim;
    ++h.request_id;
    peer.Send(h, {2}, {-3, -4, 0, 0});
    ASSERT_EQ(peer.Reply().status, Code::kOk) << claim;
  }
  // Clipped to norm 1 (by 5, 5 and 10): (0.6, 0.8) twice and (0.3, 0.4) once, lr 1.
  std::vector<float> row(4);
  ASSERT_TRUE(cluster.client(0).Pull(*t, {2}, row.data()).Wait().ok());
  EXPECT_NEAR(row[0], 1.5f, 1e-6);
  EXPECT_NEAR(row[1], 2.0f, 1e-6);
  EXPECT_EQ(row[2], 0.0f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A push a server refuses (here a NaN gradient: the job diverged) leaves its step undone, and the
// apps drop their push Futures unread: the refusal becomes the worker's error, and its next
// Clock(), pull and Finish() fail with it, its code and message, rather than the job failing
// later on a protocol error ("pull tagged clock 1 but worker 0 is at clock 0": the server refused
// the clock closing that step, and a clock closed without the push would take a BSP mean that
// silently lacks it).
TEST(ClientErrors, ARefusedPushFailsTheWorkersNextCallsWithItsReason) {
  LocalClusterConfig cfg;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec;
  spec.name = "bsp";
  spec.rows = 4;
  spec.dim = 2;
  std::vector<Table> t(2);
  for (int w = 0; w < 2; ++w) {
    auto made = cluster.client(w).CreateTable(spec);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    t[w] = *made;
  }
  Client& a = cluster.client(0);
  std::vector<float> g(8, 1.0f);
  g[3] = std::numeric_limits<float>::quiet_NaN();
  Future bad = a.PushDense(t[0], g);  // (looked at below only, as the apps never do)
  // Sent, or refused here when the push's refusal came first; the pull after it is sent before
  // the refusal came, or refused here once it is in.
  const Status clocked = a.Clock();
  std::vector<float> w(8);
  const Status pulled = a.PullDense(t[0], w.data()).Wait();
  const Status refused = bad.Wait();
  EXPECT_EQ(refused.code(), Code::kDiverged) << refused.ToString();
  EXPECT_NE(refused.message().find("the job diverged"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("lower the learning rate or clip gradients"), std::string::npos)
      << refused.ToString();
  if (!clocked.ok()) {
    EXPECT_EQ(clocked.ToString(), refused.ToString());
  }
  EXPECT_EQ(pulled.ToString(), refused.ToString());
  EXPECT_EQ(a.Clock().ToString(), refused.ToString());
  EXPECT_EQ(a.PushDense(t[0], std::vector<float>(8, 1.0f)).Wait().ToString(), refused.ToString());
  const Status st = a.Finish();
  EXPECT_EQ(st.ToString(), refused.ToString());
  EXPECT_EQ(cluster.server(0).stats().clocks, 0u);
  EXPECT_TRUE(a.Leave(st).ok());  // (the job then ends, as an app's failure ends it)
  cluster.FinishAndJoin().IgnoreError();
}

// Two workers on one server and a BSP table of 4 rows of 2, worker a one clock ahead: its next
// pull waits for b's Clock().
struct AOneClockAhead {
  AOneClockAhead() : cluster(Config()) {}
  static LocalClusterConfig Config() {
    LocalClusterConfig cfg;
    cfg.workers = 2;
    return cfg;
  }
  // Call with ASSERT_TRUE.
  bool Start() {
    if (!cluster.Start().ok()) return false;
    a = &cluster.client(0);
    b = &cluster.client(1);
    TableSpec spec;
    spec.name = "bsp";
    spec.rows = 4;
    spec.dim = 2;
    Result<Table> made_a = a->CreateTable(spec), made_b = b->CreateTable(spec);
    if (!made_a.ok() || !made_b.ok()) return false;
    ta = *made_a;
    return a->Clock().ok();
  }
  LocalCluster cluster;
  Client* a = nullptr;  // (the cluster's, once started)
  Client* b = nullptr;
  Table ta;
};

// A pull whose wait expired never turns OK afterwards, even when its reply comes (it is not
// written anywhere): here a BSP pull parked until the other worker's clock.
TEST(ClientErrors, AGivenUpPullNeverTurnsOk) {
  AOneClockAhead job;
  ASSERT_TRUE(job.Start());
  LocalCluster& cluster = job.cluster;
  Client& a = *job.a;
  Client& b = *job.b;
  const Table* ta = &job.ta;
  std::vector<float> out(8, 42.0f);
  Future pull = a.PullDense(*ta, out.data());  // clock 1: waits for b
  EXPECT_EQ(pull.WaitFor(50).code(), Code::kDeadlineExceeded);
  ASSERT_TRUE(b.Clock().ok());  // now the server answers it
  for (int i = 0; i < 2000 && !pull.Ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(pull.Ready());
  EXPECT_EQ(pull.Wait().code(), Code::kDeadlineExceeded);
  EXPECT_EQ(out[0], 42.0f);  // not written after the wait gave up
  // A pull whose Futures all went before it completed (an app returning early on an error) is
  // given up alike: its destination may go with them.
  ASSERT_TRUE(a.Clock().ok());
  {
    Future dropped = a.PullDense(*ta, out.data());  // clock 2: waits for b
    Future copy = dropped;
    EXPECT_FALSE(copy.Ready());
  }
  ASSERT_TRUE(b.Clock().ok());
  std::vector<float> other(8);
  EXPECT_TRUE(a.PullDense(*ta, other.data()).WaitFor(5000).ok());  // (answered after the dropped one)
  EXPECT_EQ(out[0], 42.0f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Finish() while a call its caller gave up on is still open waits for it, and succeeds when its
// answer comes (the call ends DeadlineExceeded, as given up, which does not fail Finish, so the
// scheduler hears that the worker finished); calls after Finish() are refused, saying so.
TEST(ClientErrors, FinishWithAGivenUpCallOpenSucceedsAndLaterCallsAreRefused) {
  AOneClockAhead job;
  ASSERT_TRUE(job.Start());
  LocalCluster& cluster = job.cluster;
  Client& a = *job.a;
  Client& b = *job.b;
  const Table* ta = &job.ta;
  std::vector<float> out(8);
  Future pull = a.PullDense(*ta, out.data());  // clock 1: parked until b clocks
  EXPECT_EQ(pull.WaitFor(50).code(), Code::kDeadlineExceeded);
  Status finished = Status::Unavailable("not yet");
  std::thread finish([&] { finished = a.Finish(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (Finish waits on the pull)
  ASSERT_TRUE(b.Clock().ok());                                  // the pull is answered
  finish.join();
  EXPECT_TRUE(finished.ok()) << finished.ToString();
  Status after = a.Clock();
  EXPECT_EQ(after.code(), Code::kFailedPrecondition) << after.ToString();
  EXPECT_NE(after.message().find("has finished"), std::string::npos) << after.ToString();
  EXPECT_EQ(a.PullDense(*ta, out.data()).Wait().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST(ClientErrors, BadShapesAreRefusedBeforeSending) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 1;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec;
  spec.name = "t";
  spec.rows = 10;
  spec.dim = 3;
  TableSpec odd = spec;
  odd.init = static_cast<InitKind>(9);  // as a peer's bytes may say
  EXPECT_EQ(c.CreateTable(odd).status().code(), Code::kInvalidArgument);
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok());
  // Same name, different spec.
  TableSpec other = spec;
  other.dim = 4;
  auto dup = c.CreateTable(other);
  EXPECT_EQ(dup.status().code(), Code::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("'t'"), std::string::npos);
  // Same spec again: a no-op returning the same table.
  auto again = c.CreateTable(spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, t->id);
  // FTRL with initial values it would overwrite at its first update: refused.
  TableSpec ftrl = spec;
  ftrl.name = "ftrl";
  ftrl.optimizer.kind = opt::Kind::kFtrl;
  ftrl.init = InitKind::kUniform;
  ftrl.init_scale = 0.1f;
  auto f = c.CreateTable(ftrl);
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_NE(f.status().message().find("FTRL starts from zero weights"), std::string::npos) << f.status().ToString();
  // Bad hyper-parameters are refused naming the field.
  TableSpec bad = spec;
  bad.name = "bad";
  bad.optimizer.kind = opt::Kind::kAdam;
  bad.optimizer.beta1 = 1.5f;
  auto b = c.CreateTable(bad);
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  EXPECT_NE(b.status().message().find("beta1"), std::string::npos) << b.status().ToString();
  // Keys split across both servers and out of order come back in order.
  std::vector<float> g(10 * 3);
  for (int i = 0; i < 30; ++i) g[i] = -float(i);
  ASSERT_TRUE(c.PushDense(*t, g).Wait().ok());
  ASSERT_TRUE(c.Clock().ok());  // BSP: the push becomes visible when its clock closes
  std::vector<float> out(3 * 3);
  ASSERT_TRUE(c.Pull(*t, {9, 0, 5}, out.data()).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], 0.01f * 27);
  EXPECT_FLOAT_EQ(out[3], 0.0f);
  EXPECT_FLOAT_EQ(out[6], 0.01f * 15);
  // The zero-copy view holds the same values as a copying pull, one part per server (one stripe
  // each here).
  std::vector<float> dense(30);
  ASSERT_TRUE(c.PullDense(*t, dense.data()).Wait().ok());
  PulledRows view;
  ASSERT_TRUE(c.Pull(*t, WholeTableInto(&view)).Wait().ok());
  ASSERT_EQ(view.num_parts(), 2u);
  EXPECT_EQ(view.part_first_row(1), 5u);
  EXPECT_EQ(view.part_floats(0) + view.part_floats(1), 30u);
  std::vector<float> copied(30, -1.0f);
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, dense);
  EXPECT_EQ(view.part(1)[0], dense[15]);
  // No destination: refused, not written through a null pointer on the receiving thread.
  EXPECT_EQ(c.Pull(*t, {1}, nullptr).Wait().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.PullDense(*t, nullptr).Wait().code(), Code::kInvalidArgument);
  EXPECT_TRUE(c.Pull(*t, std::vector<Key>{}, nullptr).Wait().ok());  // nothing to write
  // A view whose pull was refused before it was sent says so when read, not as an empty pull.
  Status refused = c.Pull(*t, IntoView({1, 10}, &view)).Wait();
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_THROW(view.num_rows(), std::logic_error);
  EXPECT_THROW(view.CopyTo(copied.data()), std::logic_error);
  // A wait without end (INT64_MAX ms) waits, rather than overflowing into an expired deadline.
  EXPECT_TRUE(c.PullDense(*t, dense.data()).WaitFor(std::numeric_limits<int64_t>::max()).ok());
  // A handle that does not match the table is refused, not trusted to size a destination.
  Table wrong = *t;
  wrong.rows = 1000;
  EXPECT_EQ(c.PullDense(wrong, dense.data()).Wait().code(), Code::kInvalidArgument);
  // Pushes of the wrong shape are refused before sending, and so is the Clock() closing their
  // step, which stays refused: a step is never done without its pushes.
  EXPECT_EQ(c.Push(*t, {1, 2}, {1, 2, 3}).Wait().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.Push(*t, {10}, {1, 2, 3}).Wait().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.PushDense(*t, std::vector<float>(29)).Wait().code(), Code::kInvalidArgument);
  Status clocked = c.Clock();
  EXPECT_EQ(clocked.code(), Code::kInvalidArgument) << clocked.ToString();
  EXPECT_NE(clocked.message().find("a push of it was refused before it was sent (push to 't': 2 keys"),
            std::string::npos)
      << clocked.ToString();
  EXPECT_EQ(c.Clock().code(), Code::kInvalidArgument);  // sticky
  EXPECT_TRUE(c.Leave(clocked).ok());
  cluster.FinishAndJoin().IgnoreError();
}

}  // namespace
}  // namespace pushpull
