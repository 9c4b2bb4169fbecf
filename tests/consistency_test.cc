// The consistency models against their exact semantics (server/consistency.h), on a real
// cluster of threads: workers push known increments at every clock, worker 0 is slow, and every
// pull checks that what it sees lies inside what the model allows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "common/time.h"
#include "optimizers/optimizer.h"
#include "server/consistency.h"
#include "tests/support/local_cluster.h"
#include "tests/support/alloc_fault.h"
#include "tests/support/eventually.h"

namespace pushpull {
namespace {

TableSpec CounterTable(int rows, Consistency c) {
  TableSpec s;
  s.name = "counters";
  s.rows = rows;
  s.dim = 2;
  s.consistency = c;
  s.optimizer.kind = opt::Kind::kSgd;
  s.optimizer.lr = 1.0f;
  return s;
}

struct ModelCase {
  const char* name;
  Consistency c;
};

void PrintTo(const ModelCase& m, std::ostream* os) { *os << m.name; }

class ConsistencyTest : public ::testing::TestWithParam<ModelCase> {};

// Row v counts worker v's pushes: each push adds exactly 1 to row v (BSP: the mean over W
// workers is applied, so a worker pushes -W into its own row). At a pull at clock c:
//   every live worker's row >= c - s   (all updates tagged below c - s are visible)
//   own row == c exactly (read-my-writes; BSP: the pushes of clocks below c)
//   every row <= pushes that worker has issued so far
//   BSP: every row == c exactly
TEST_P(ConsistencyTest, PullsSeeWhatTheModelAllows) {
  const ModelCase mc = GetParam();
  const int W = 3, S = 2, T = 12;
  LocalClusterConfig cfg;
  cfg.servers = S;
  cfg.workers = W;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  std::atomic<int64_t> issued[W];
  for (auto& i : issued) i = 0;
  std::atomic<int> violations{0};
  std::atomic<int32_t> max_staleness{0};
  const int64_t s = mc.c.bound();
  cluster.RunWorkers([&](Client& client, int w) {
    auto t = client.CreateTable(CounterTable(W, mc.c));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    std::vector<float> vals(W * 2);
    for (int64_t c = 0; c < T; ++c) {
      if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(15));  // the straggler
      Future f = client.PullDense(*t, vals.data());
      ASSERT_TRUE(f.Wait().ok());
      int32_t st = f.staleness();
      if (st > max_staleness) max_staleness = st;
      if (s >= 0) {
        EXPECT_LE(st, s) << mc.name;
      }
      for (int v = 0; v < W; ++v) {
        double seen = vals[v * 2];
        EXPECT_EQ(vals[v * 2], vals[v * 2 + 1]);
        if (seen > issued[v].load() + 1e-4) ++violations;  // never more than was pushed
        if (v == w && std::fabs(seen - c) > 1e-4) ++violations;   // read-my-writes, exactly
        if (s >= 0 && seen < c - s - 1e-4) ++violations;          // staleness bound
        if (s == 0 && std::fabs(seen - c) > 1e-4) ++violations;   // BSP: exactly c
      }
      std::vector<float> g(W * 2, 0.0f);
      float inc = mc.c.model == Consistency::kBsp ? -float(W) : -1.0f;
      g[w * 2] = g[w * 2 + 1] = inc;
      issued[w]++;
      ASSERT_TRUE(client.PushDense(*t, std::move(g)).Wait().ok());
      ASSERT_TRUE(client.Clock().ok());
    }
  });
  EXPECT_EQ(violations.load(), 0) << mc.name;
  for (int i = 0; i < S; ++i) {
    if (s >= 0) {
      EXPECT_LE(cluster.server(i).stats().max_staleness.load(), s);
    }
    EXPECT_EQ(cluster.server(i).stats().rejected.load(), 0u);
  }
  if (mc.c.model == Consistency::kBsp) {
    EXPECT_EQ(max_staleness.load(), 0);
  }
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

INSTANTIATE_TEST_SUITE_P(Models, ConsistencyTest,
                         ::testing::Values(ModelCase{"bsp", {Consistency::kBsp, 0}},
                                           ModelCase{"ssp1", {Consistency::kSsp, 1}},
                                           ModelCase{"ssp3", {Consistency::kSsp, 3}},
                                           ModelCase{"asp", {Consistency::kAsp, 0}}),
                         [](const auto& info) { return std::string(info.param.name); });

// SSP(k): with worker 1 stopped at clock 0, worker 0 may pull at clocks 0..k without waiting
// and its pull at clock k+1 waits until worker 1 clocks once.
TEST(ConsistencyBlocking, SspLetsTheFastWorkerRunExactlyKAhead) {
  for (int k : {0, 1, 2}) {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Consistency c{k == 0 ? Consistency::kBsp : Consistency::kSsp, k};
    auto t0 = cluster.client(0).CreateTable(CounterTable(4, c));
    auto t1 = cluster.client(1).CreateTable(CounterTable(4, c));
    ASSERT_TRUE(t0.ok() && t1.ok());
    std::vector<float> vals(8);
    for (int clock = 0; clock <= k; ++clock) {
      Future f = cluster.client(0).PullDense(*t0, vals.data());
      ASSERT_TRUE(f.WaitFor(10000).ok()) << "k=" << k << " clock=" << clock;
      EXPECT_EQ(f.staleness(), clock) << "k=" << k;  // worker 1 is at clock 0
      ASSERT_TRUE(cluster.client(0).Clock().ok());
    }
    Future blocked = cluster.client(0).PullDense(*t0, vals.data());
    auto parked = [&] {
      uint64_t p = 0;
      for (int s = 0; s < 2; ++s) p += cluster.server(s).stats().parked_now.load();
      return p == 2;  // the pull's part on each server waits
    };
    ASSERT_TRUE(Eventually(parked)) << "pull at clock " << k + 1 << " should wait for worker 1";
    EXPECT_FALSE(blocked.Ready());
    // Worker 1's clock 0: a push to row 2 (SGD, lr 1), then the clock that releases the pull.
    std::vector<float> g(8, 0.0f);
    g[4] = g[5] = 5.0f;
    ASSERT_TRUE(cluster.client(1).PushDense(*t1, g).WaitFor(10000).ok());
    EXPECT_FALSE(blocked.Ready());
    ASSERT_TRUE(cluster.client(1).Clock().ok());
    EXPECT_TRUE(blocked.WaitFor(10000).ok());
    EXPECT_EQ(blocked.staleness(), k);  // the bound, met exactly
    // It sees the push it waited for: applied at once under SSP; under BSP in clock 0's mean
    // over both workers (worker 0 pushed nothing).
    EXPECT_EQ(vals[4], k == 0 ? -2.5f : -5.0f) << "k=" << k;
    EXPECT_EQ(vals[0], 0.0f);
    EXPECT_TRUE(cluster.FinishAndJoin().ok());
  }
}

// A pull the minimum clock released, but for whose reply the server ran out of memory, stays
// parked and is served a moment later, not at the next clock only, which may never come (here
// worker 1 has nothing left to do). Found in review.
TEST(ConsistencyBlocking, APullReleasedWithoutMemoryForItsReplyIsServedSoonAfter) {
  LocalClusterConfig cfg;
  cfg.servers = 1;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = CounterTable(1000, {Consistency::kBsp, 0});
  spec.dim = 37;
  spec.optimizer.momentum = 0.9f;  // a slot to pull: its reply is gathered into a new buffer
  auto t0 = cluster.client(0).CreateTable(spec);
  auto t1 = cluster.client(1).CreateTable(spec);
  ASSERT_TRUE(t0.ok() && t1.ok());
  ASSERT_TRUE(cluster.client(0).Clock().ok());
  std::vector<Key> keys(1000);
  for (Key k = 0; k < keys.size(); ++k) keys[k] = k;
  std::vector<float> out(keys.size() * spec.dim, 7.0f);
  fault::FailAllocationAnywhere fail(keys.size() * spec.dim * sizeof(float), 0);  // that buffer
  Future blocked = cluster.client(0).PullSlot(*t0, keys, 0, out.data());
  ASSERT_TRUE(Eventually([&] { return cluster.server(0).stats().parked_now.load() == 1; }));
  ASSERT_TRUE(cluster.client(1).Clock().ok());  // releases it; its reply's buffer fails
  Status st = blocked.WaitFor(5000);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(fail.fired());
  for (float x : out) ASSERT_EQ(x, 0.0f);  // the momentum of rows never pushed
  EXPECT_EQ(cluster.server(0).stats().max_staleness.load(), 0);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// ASP never blocks: worker 0 runs 40 clocks ahead of an idle worker 1.
TEST(ConsistencyBlocking, AspNeverWaits) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  auto t = cluster.client(0).CreateTable(CounterTable(4, {Consistency::kAsp, 0}));
  ASSERT_TRUE(t.ok());
  std::vector<float> vals(8);
  int32_t max_st = 0;
  for (int clock = 0; clock < 40; ++clock) {
    Future f = cluster.client(0).PullDense(*t, vals.data());
    ASSERT_TRUE(f.WaitFor(10000).ok());
    max_st = std::max(max_st, f.staleness());
    ASSERT_TRUE(cluster.client(0).Clock().ok());
  }
  EXPECT_EQ(max_st, 39);  // measured, not bounded
  for (int s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).stats().parked_pulls.load(), 0u);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// BSP over W workers with batch b equals one process training with batch W*b.
std::vector<float> CheckBspEquivalence(int W, opt::Kind kind, float lr, int update_threads = 1) {
  const int D = 37, b = 8, T = 15;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> X(size_t(T) * W * b * D), Y(size_t(T) * W * b), wtrue(D);
  for (auto& v : wtrue) v = nd(rng);
  for (size_t i = 0; i < Y.size(); ++i) {
    float dot = 0;
    for (int j = 0; j < D; ++j) dot += (X[i * D + j] = nd(rng)) * wtrue[j];
    Y[i] = dot + 0.1f * nd(rng);
  }
  auto grad = [&](const std::vector<float>& w, size_t first, int n) {
    std::vector<float> g(D, 0.0f);
    for (int i = 0; i < n; ++i) {
      const float* x = &X[(first + i) * D];
      float r = -Y[first + i];
      for (int j = 0; j < D; ++j) r += x[j] * w[j];
      for (int j = 0; j < D; ++j) g[j] += r * x[j] / n;
    }
    return g;
  };
  opt::OptimizerConfig oc;
  oc.kind = kind;
  oc.lr = lr;
  // Reference: one process, batch W*b.
  auto optimizer = opt::Optimizer::Create(oc);
  std::vector<float> ref(D, 0.0f);
  std::vector<std::vector<float>> slots(optimizer->num_slots(), std::vector<float>(D));
  for (int s = 0; s < optimizer->num_slots(); ++s)
    std::fill(slots[s].begin(), slots[s].end(), optimizer->slot_init(s));
  for (int t = 0; t < T; ++t) {
    auto g = grad(ref, size_t(t) * W * b, W * b);
    float* sp[4];
    for (int s = 0; s < optimizer->num_slots(); ++s) sp[s] = slots[s].data();
    opt::StepContext ctx;
    ctx.step = t + 1;
    ctx.lr = opt::ScheduledLr(oc, t);
    optimizer->Apply(ref.data(), sp, g.data(), D, ctx);
  }
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = W;
  cfg.update_threads = update_threads;
  LocalCluster cluster(cfg);
  EXPECT_TRUE(cluster.Start().ok());
  TableSpec spec;
  spec.name = "w";
  spec.rows = D;
  spec.dim = 1;
  spec.optimizer = oc;
  std::vector<float> result(D);
  cluster.RunWorkers([&](Client& client, int w) {
    auto tab = client.CreateTable(spec);
    ASSERT_TRUE(tab.ok());
    std::vector<float> cur(D);
    for (int t = 0; t < T; ++t) {
      ASSERT_TRUE(client.PullDense(*tab, cur.data()).Wait().ok());
      client.PushDense(*tab, grad(cur, size_t(t) * W * b + size_t(w) * b, b));
      ASSERT_TRUE(client.Clock().ok());
    }
    ASSERT_TRUE(client.PullDense(*tab, cur.data()).Wait().ok());
    if (w == 0) result = cur;
  });
  for (int j = 0; j < D; ++j) EXPECT_NEAR(result[j], ref[j], 2e-5f + 1e-4f * std::fabs(ref[j])) << "j=" << j;
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  return result;
}

TEST(BspEquivalence, TwoWorkersSgdEqualsOneProcessWithDoubleBatch) { CheckBspEquivalence(2, opt::Kind::kSgd, 0.05f); }
TEST(BspEquivalence, FourWorkersAdamEqualsOneProcess) { CheckBspEquivalence(4, opt::Kind::kAdam, 0.01f); }

// The mean is summed in worker order, not arrival order: two runs agree bit for bit.
TEST(BspEquivalence, RunsAreBitwiseReproducible) {
  std::vector<float> a = CheckBspEquivalence(4, opt::Kind::kSgd, 0.05f);
  std::vector<float> b = CheckBspEquivalence(4, opt::Kind::kSgd, 0.05f);
  ASSERT_EQ(a.size(), b.size());
  for (size_t j = 0; j < a.size(); ++j) EXPECT_EQ(a[j], b[j]) << "j=" << j;
}

// A sparse table's BSP mean is over every worker that took part in the clock, whichever servers
// its keys went to: two workers pushing keys that two servers own give the rows one server gives
// (each server used to divide by the workers that pushed to it, here one: twice the step).
TEST(BspEquivalence, SparseMeanIsOverEveryWorkerWhateverTheServers) {
  TableSpec spec;
  spec.name = "emb";
  spec.sparse = true;
  spec.dim = 2;
  spec.optimizer.kind = opt::Kind::kSgd;
  spec.optimizer.lr = 1.0f;
  // A key of server 0 and one of server 1 when there are two.
  const TableInfo two = TableInfo::Make(0, spec, 2);
  Key k0 = 0, k1 = 0;
  while (two.OwnerOf(k0) != 0) ++k0;
  while (two.OwnerOf(k1) != 1) ++k1;
  auto run = [&](int servers) {
    LocalClusterConfig cfg;
    cfg.servers = servers;
    cfg.workers = 2;
    LocalCluster cluster(cfg);
    EXPECT_TRUE(cluster.Start().ok());
    std::vector<float> rows(4, NAN);
    cluster.RunWorkers([&](Client& c, int w) {
      auto t = c.CreateTable(spec);
      ASSERT_TRUE(t.ok());
      // Worker 0 pushes -4 to k0, worker 1 -8 to k1; then both finish clock 0.
      ASSERT_TRUE(c.Push(*t, {w == 0 ? k0 : k1}, std::vector<float>(2, w == 0 ? -4.0f : -8.0f)).Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
      if (w == 0) {
        ASSERT_TRUE(c.Pull(*t, {k0, k1}, rows.data()).Wait().ok());  // clock 1: sees clock 0
      }
    });
    EXPECT_TRUE(cluster.FinishAndJoin().ok());
    return rows;
  };
  const std::vector<float> one = run(1), both = run(2);
  EXPECT_EQ(one, both);
  // Initial rows are zeros; the mean over 2 workers: k0 moves by 4/2, k1 by 8/2.
  EXPECT_EQ(both[0], 2.0f);
  EXPECT_EQ(both[2], 4.0f);
}

// A worker that dies in the middle of a BSP clock, having pushed to one server and not the other:
// every server drops its pushes for that clock, so the clock's mean is the survivor's gradient on
// every row (server 0 used to average the dead worker's push in and server 1 not).
TEST(BspEquivalence, AWorkerDyingMidClockCountsNowhere) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  cfg.continue_on_worker_death = true;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = CounterTable(4, Consistency{Consistency::kBsp, 0});  // rows 0-1 on server 0
  auto ta = cluster.client(0).CreateTable(spec);
  auto tb = cluster.client(1).CreateTable(spec);
  ASSERT_TRUE(ta.ok() && tb.ok());
  // Worker 1 pushes -100 to rows 0 and 1 (server 0 only), then dies before its Clock().
  ASSERT_TRUE(cluster.client(1).Push(*tb, {0, 1}, std::vector<float>(4, -100.0f)).Wait().ok());
  cluster.KillClient(1);
  Client& a = cluster.client(0);
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(8, -1.0f)).Wait().ok());
  ASSERT_TRUE(a.Clock().ok());
  std::vector<float> rows(8, NAN);
  ASSERT_TRUE(a.PullDense(*ta, rows.data()).WaitFor(20000).ok());  // once worker 1 is declared dead
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rows[i], 1.0f) << "value " << i << " (50.5: the dead worker's push counted)";
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Rows split over 3 update threads per server (stripes: per-stripe accumulators, applies and
// in-place pull frames) give bit for bit what one update thread gives.
TEST(BspEquivalence, StripesDoNotChangeTheResult) {
  std::vector<float> one = CheckBspEquivalence(4, opt::Kind::kAdam, 0.01f, 1);
  std::vector<float> three = CheckBspEquivalence(4, opt::Kind::kAdam, 0.01f, 3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t j = 0; j < one.size(); ++j) EXPECT_EQ(one[j], three[j]) << "j=" << j;
}

// A worker that pushes, clocks and finishes without waiting for any answer: its last pushes
// still count. (The scheduler's "done" travels on another connection than the data; Finish
// waits for the servers' answers first, else a server could drop the late pushes of a worker it
// already saw finish, and BSP would apply a mean over fewer workers.) The push is large so that
// a finish that did not wait would return long before the servers answered it.
TEST(ConsistencyFinish, LastPushesOfAFinishingWorkerCount) {
  const int rows = 1 << 22;  // 16 MB per push
  for (int rep = 0; rep < 2; ++rep) {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    TableSpec spec;
    spec.name = "w";
    spec.rows = rows;
    spec.dim = 1;
    spec.consistency.model = Consistency::kBsp;
    spec.optimizer.kind = opt::Kind::kSgd;
    spec.optimizer.lr = 1.0f;
    std::vector<float> seen(rows, 0.0f);
    std::atomic<bool> ok{true};
    cluster.RunWorkers([&](Client& client, int w) {
      auto t = client.CreateTable(spec);
      if (!t.ok()) return (void)(ok = false);
      // Worker 0 pushes -2 everywhere, worker 1 -4: the BSP mean over both adds 3; 2 means
      // worker 1's push was dropped.
      auto g = std::make_shared<const std::vector<float>>(rows, w == 0 ? -2.0f : -4.0f);
      Future push = client.PushDense(*t, g);  // not waited for
      if (!client.Clock().ok()) ok = false;
      if (w == 1) {
        if (!client.Finish().ok()) ok = false;
        EXPECT_TRUE(push.Ready()) << "Finish returned before the servers answered the last push";
        return;
      }
      if (!client.PullDense(*t, seen.data()).Wait().ok()) ok = false;
    });
    ASSERT_TRUE(ok);
    int wrong = 0;
    for (int i = 0; i < rows; ++i) wrong += seen[i] != 3.0f;
    EXPECT_EQ(wrong, 0) << "rep " << rep << ": row 0 = " << seen[0] << " (2: worker 1's push was dropped)";
    EXPECT_TRUE(cluster.FinishAndJoin().ok());
  }
}

// BSP's divisor is the workers that took part in a clock, the same on every server. A worker that
// finishes with pushes in a clock it has not closed closes it (Finish), so it counts everywhere,
// also where it pushed nothing (as one process with the whole batch would). Worker 1 pushes one
// row of server 0 and finishes mid-clock; worker 0 pushes every row and closes the clock.
TEST(ConsistencyFinish, AWorkerFinishingMidClockCountsOnEveryServer) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& a = cluster.client(0);
  Client& b = cluster.client(1);
  const int rows = 8;
  TableSpec spec = CounterTable(rows, Consistency{Consistency::kBsp, 0});
  auto ta = a.CreateTable(spec);
  auto tb = b.CreateTable(spec);
  ASSERT_TRUE(ta.ok() && tb.ok());
  ASSERT_TRUE(b.Push(*tb, {0}, {-4.0f, -4.0f}).Wait().ok());  // row 0: server 0's
  ASSERT_TRUE(b.Finish().ok());                              // clock 0 left open
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(rows * 2, -2.0f)).Wait().ok());
  ASSERT_TRUE(a.Clock().ok());
  std::vector<float> seen(rows * 2);
  ASSERT_TRUE(a.PullDense(*ta, seen.data()).Wait().ok());
  EXPECT_EQ(seen[0], 3.0f);  // server 0, row 0: (2 + 4) / 2
  EXPECT_EQ(seen[2], 1.0f);  // server 0, row 1: 2 / 2 (worker 1 pushed it nothing)
  EXPECT_EQ(seen[rows * 2 - 1], 1.0f);  // server 1: 2 / 2 too (worker 1 sent it nothing)
  EXPECT_EQ(b.clock(), 1);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// When the slowest worker finishes, the minimum clock may jump several clocks at once. A BSP pull
// parked until the minimum reaches its clock must still see exactly the clocks below its own:
// here clocks 1 and 2 close together, and a pull at clock 2 must not see clock 2's update.
TEST(ConsistencyFinish, MinimumJumpingSeveralClocksKeepsBspPullsExact) {
  LocalClusterConfig cfg;
  cfg.servers = 1;
  cfg.workers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& a = cluster.client(0);
  Client& b = cluster.client(1);
  TableSpec spec = CounterTable(1, Consistency{Consistency::kBsp, 0});
  auto ta = a.CreateTable(spec);
  auto tb = b.CreateTable(spec);
  ASSERT_TRUE(ta.ok() && tb.ok());
  // SGD, lr 1: a clock's mean gradient g moves the row by -g.
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(2, -1.0f)).Wait().ok());  // clock 0: mean 1
  ASSERT_TRUE(b.PushDense(*tb, std::vector<float>(2, -1.0f)).Wait().ok());
  ASSERT_TRUE(a.Clock().ok());
  ASSERT_TRUE(b.Clock().ok());  // both at 1: clock 0 applied
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(2, -10.0f)).Wait().ok());  // clock 1: A alone
  ASSERT_TRUE(a.Clock().ok());  // A at 2, B at 1
  std::vector<float> seen(2, -1.0f);
  Future pull = a.PullDense(*ta, seen.data());  // clock 2: parked until B reaches 2
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(2, -100.0f)).Wait().ok());  // clock 2
  ASSERT_TRUE(a.Clock().ok());  // A at 3
  ASSERT_FALSE(pull.Ready());
  ASSERT_TRUE(b.Finish().ok());  // the minimum jumps from 1 to 3: clocks 1 and 2 close
  ASSERT_TRUE(pull.Wait().ok());
  EXPECT_EQ(seen[0], 11.0f) << "111: the pull saw clock 2's update too";
  std::vector<float> after(2);
  ASSERT_TRUE(a.PullDense(*ta, after.data()).Wait().ok());  // clock 3: everything
  EXPECT_EQ(after[0], 111.0f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST(ConsistencyRules, PullRule) {
  EXPECT_TRUE(PullReady(5, 0, 5));
  EXPECT_FALSE(PullReady(5, 0, 4));
  EXPECT_TRUE(PullReady(5, 2, 3));
  EXPECT_FALSE(PullReady(5, 2, 2));
  EXPECT_TRUE(PullReady(1000, -1, 0));
  // A parked pull's key: the slowest live clock at which it is served (SSP(1) at clock 5: 4).
  EXPECT_EQ(PullReadyAt(5, 1), 4);
  EXPECT_TRUE(PullReady(5, 1, PullReadyAt(5, 1)));
  EXPECT_FALSE(PullReady(5, 1, PullReadyAt(5, 1) - 1));
  EXPECT_EQ(PullReadyAt(5, 0), 5);
  EXPECT_EQ(PullReadyAt(5, -1), INT64_MIN);  // ASP: never parked
  EXPECT_EQ(PullStaleness(5, 3), 2);
  EXPECT_EQ(PullStaleness(3, 5), 0);
  ClockVector v(3);
  EXPECT_TRUE(v.Advance(0, 1).ok());
  EXPECT_FALSE(v.Advance(0, 3).ok());  // jumps
  EXPECT_FALSE(v.Advance(0, 1).ok());  // replay
  EXPECT_EQ(v.MinLive(), 0);
  v.MarkDead(1);
  v.MarkDead(2);
  EXPECT_EQ(v.MinLive(), 1);
  EXPECT_FALSE(v.Advance(1, 1).ok());  // dead
  // No live worker left (the last finished or died): nothing is waited for, nothing is stale.
  v.MarkDead(0);
  EXPECT_EQ(v.MinLive(), std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(PullReady(5, 0, v.MinLive()));
  EXPECT_EQ(PullStaleness(5, v.MinLive()), 0);
  StalenessHistogram h;
  h.Record(40);
  h.Record(-1);
  EXPECT_EQ(h.max(), 40);
  EXPECT_EQ(h.counts()[StalenessHistogram::kBuckets - 1], 1u);  // the last bucket: 40 and above it
  EXPECT_EQ(h.counts()[0], 1u);
}

}  // namespace
}  // namespace pushpull
