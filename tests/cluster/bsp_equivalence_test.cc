// BSP over W workers with batch b equals one process training with batch W*b, bit for bit
// reproducibly, whatever the servers, stripes and sparse keys; a worker dying mid-clock counts
// nowhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "optimizers/optimizer.h"
#include "tests/support/local_cluster.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

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
  for (int s = 0; s < optimizer->num_slots(); ++s) std::fill(slots[s].begin(), slots[s].end(), optimizer->slot_init(s));
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
// (a server that divided by the workers that pushed to it, here one, would take twice the step).
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
// every row (were server 0 to average the dead worker's push in and server 1 not, their rows would
// part).
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

}  // namespace
}  // namespace pushpull
