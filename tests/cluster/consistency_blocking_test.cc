// When a pull waits: SSP(k) lets a fast worker run exactly k clocks ahead, ASP never waits, and a
// pull released without memory for its reply is served soon after.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/support/alloc_fault.h"
#include "tests/support/cluster_test.h"
#include "tests/support/eventually.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

class ConsistencyBlocking : public ClusterTest {};

// SSP(k): with worker 1 stopped at clock 0, worker 0 may pull at clocks 0..k without waiting
// and its pull at clock k+1 waits until worker 1 clocks once.
TEST_P(ConsistencyBlocking, SspLetsTheFastWorkerRunExactlyKAhead) {
  LocalCluster& cluster = *cluster_;
  const Consistency c = GetParam().consistency;
  const int k = int(c.bound());  // BSP: 0
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

INSTANTIATE_TEST_SUITE_P(, ConsistencyBlocking, ::testing::ValuesIn(UnderEachModel(2, 2, {"bsp", "ssp:1", "ssp:2"})),
                         ClusterParamsName());

// A pull the minimum clock released, but for whose reply the server ran out of memory, stays
// parked and is served a moment later, not at the next clock only, which may never come (here
// worker 1 has nothing left to do).
TEST_F(ConsistencyBlocking, APullReleasedWithoutMemoryForItsReplyIsServedSoonAfter) {
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
  Future blocked = cluster.client(0).Pull(*t0, SlotOf(keys, 0, out.data()));
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
TEST_F(ConsistencyBlocking, AspNeverWaits) {
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

}  // namespace
}  // namespace pushpull
