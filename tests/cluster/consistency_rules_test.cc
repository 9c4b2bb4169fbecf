// The consistency models against their exact semantics (server/consistency/rules.h): their rules on their
// own, and on a real cluster of threads where workers push known increments at every clock, worker
// 0 is slow, and every pull checks that what it sees lies inside what the model allows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/consistency/rules.h"
#include "tests/support/cluster_test.h"
#include "tests/support/local_cluster.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

class ConsistencyRules : public ClusterTest {};

// Row v counts worker v's pushes: each push adds exactly 1 to row v (BSP: the mean over W
// workers is applied, so a worker pushes -W into its own row). At a pull at clock c:
//   every live worker's row >= c - s   (all updates tagged below c - s are visible)
//   own row == c exactly (read-my-writes; BSP: the pushes of clocks below c)
//   every row <= pushes that worker has issued so far
//   BSP: every row == c exactly
TEST_P(ConsistencyRules, PullsSeeWhatTheModelAllows) {
  const struct {
    std::string name;  // the instance's, for messages
    Consistency c;
  } mc{GetParam().Name(), GetParam().consistency};
  const int W = GetParam().workers, S = GetParam().servers, T = 12;
  LocalCluster& cluster = *cluster_;
  std::vector<std::atomic<int64_t>> issued(W);
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
        if (seen > issued[v].load() + 1e-4) ++violations;        // never more than was pushed
        if (v == w && std::fabs(seen - c) > 1e-4) ++violations;  // read-my-writes, exactly
        if (s >= 0 && seen < c - s - 1e-4) ++violations;         // staleness bound
        if (s == 0 && std::fabs(seen - c) > 1e-4) ++violations;  // BSP: exactly c
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

INSTANTIATE_TEST_SUITE_P(, ConsistencyRules,
                         ::testing::ValuesIn(UnderEachModel(2, 3, {"bsp", "ssp:1", "ssp:3", "asp"})),
                         ClusterParamsName());

TEST_F(ConsistencyRules, PullRule) {
  EXPECT_TRUE(consistency::PullReady(5, 0, 5));
  EXPECT_FALSE(consistency::PullReady(5, 0, 4));
  EXPECT_TRUE(consistency::PullReady(5, 2, 3));
  EXPECT_FALSE(consistency::PullReady(5, 2, 2));
  EXPECT_TRUE(consistency::PullReady(1000, -1, 0));
  // A parked pull's key: the slowest live clock at which it is served (SSP(1) at clock 5: 4).
  EXPECT_EQ(consistency::PullReadyAt(5, 1), 4);
  EXPECT_TRUE(consistency::PullReady(5, 1, consistency::PullReadyAt(5, 1)));
  EXPECT_FALSE(consistency::PullReady(5, 1, consistency::PullReadyAt(5, 1) - 1));
  EXPECT_EQ(consistency::PullReadyAt(5, 0), 5);
  EXPECT_EQ(consistency::PullReadyAt(5, -1), INT64_MIN);  // ASP: never parked
  EXPECT_EQ(consistency::PullStaleness(5, 3), 2);
  EXPECT_EQ(consistency::PullStaleness(3, 5), 0);
  consistency::ClockVector v(3);
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
  EXPECT_TRUE(consistency::PullReady(5, 0, v.MinLive()));
  EXPECT_EQ(consistency::PullStaleness(5, v.MinLive()), 0);
  consistency::StalenessHistogram h;
  h.Record(40);
  h.Record(-1);
  EXPECT_EQ(h.max(), 40);
  EXPECT_EQ(h.counts()[consistency::StalenessHistogram::kBuckets - 1], 1u);  // the last bucket: 40 and above it
  EXPECT_EQ(h.counts()[0], 1u);
}

}  // namespace
}  // namespace pushpull
