// A worker that finishes: its last pushes count, also mid-clock and on every server, and BSP pulls
// stay exact when the minimum clock jumps several clocks at once.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

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
  ASSERT_TRUE(b.Finish().ok());                               // clock 0 left open
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(rows * 2, -2.0f)).Wait().ok());
  ASSERT_TRUE(a.Clock().ok());
  std::vector<float> seen(rows * 2);
  ASSERT_TRUE(a.PullDense(*ta, seen.data()).Wait().ok());
  EXPECT_EQ(seen[0], 3.0f);             // server 0, row 0: (2 + 4) / 2
  EXPECT_EQ(seen[2], 1.0f);             // server 0, row 1: 2 / 2 (worker 1 pushed it nothing)
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
  ASSERT_TRUE(b.Clock().ok());                                               // both at 1: clock 0 applied
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(2, -10.0f)).Wait().ok());  // clock 1: A alone
  ASSERT_TRUE(a.Clock().ok());                                               // A at 2, B at 1
  std::vector<float> seen(2, -1.0f);
  Future pull = a.PullDense(*ta, seen.data());                                // clock 2: parked until B reaches 2
  ASSERT_TRUE(a.PushDense(*ta, std::vector<float>(2, -100.0f)).Wait().ok());  // clock 2
  ASSERT_TRUE(a.Clock().ok());                                                // A at 3
  ASSERT_FALSE(pull.Ready());
  ASSERT_TRUE(b.Finish().ok());  // the minimum jumps from 1 to 3: clocks 1 and 2 close
  ASSERT_TRUE(pull.Wait().ok());
  EXPECT_EQ(seen[0], 11.0f) << "111: the pull saw clock 2's update too";
  std::vector<float> after(2);
  ASSERT_TRUE(a.PullDense(*ta, after.data()).Wait().ok());  // clock 3: everything
  EXPECT_EQ(after[0], 111.0f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
