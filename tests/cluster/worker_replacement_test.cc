// --on_worker_death=wait: a new worker takes a dead one's rank and resumes at its clock, each step
// counting once; checkpoints and ranks held meanwhile; and the job's end when nobody comes in time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/wire.h"
#include "tests/support/cluster_test.h"
#include "tests/support/eventually.h"
#include "tests/support/fault_jobs.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tcp_proxy.h"

namespace pushpull {
namespace {

// The clusters of TEST_P tests wait for a dead worker's replacement (--on_worker_death=wait).
class WorkerReplacement : public ClusterTest {
 protected:
  void Configure(LocalClusterConfig* config) override { config->wait_for_replacement = true; }
};

// --on_worker_death=wait: a new worker takes a dead one's rank and resumes at its clock; the
// others wait for it meanwhile (under BSP; under SSP once the bound is reached). Each step counts
// once, as in the uninterrupted run: under BSP what the dead worker had pushed of its unfinished
// clock is dropped and the new one pushes it again; under SSP and ASP, whose pushes are applied
// as they come, the new one's pushes of that clock that the dead one had made are answered and
// not applied again.
TEST_P(WorkerReplacement, ANewWorkerTakesADeadOnesPlaceAndEachStepCountsOnce) {
  const bool bsp = GetParam().consistency.model == Consistency::kBsp;
  const LocalClusterConfig cfg = ParamConfig();
  LocalCluster& cluster = *cluster_;
  TableSpec spec = Dense("w", 8);
  spec.init = InitKind::kZeros;
  spec.optimizer.lr = 0.25f;
  spec.consistency = GetParam().consistency;
  std::vector<Table> t(2);
  for (int w = 0; w < 2; ++w) {
    auto made = cluster.client(w).CreateTable(spec);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    t[w] = *made;
  }
  constexpr int kSteps = 10, kDies = 4;
  // Worker w's step k: pull, push (k + 1) * (w + 1) everywhere, clock. Exact in float.
  auto step = [&](int w, int k, bool clock) -> Status {
    std::vector<float> v(32);
    PP_RETURN_IF_ERROR(cluster.client(w).PullDense(t[w], v.data()).WaitFor(60000));
    PP_RETURN_IF_ERROR(
        cluster.client(w).PushDense(t[w], std::vector<float>(32, float((k + 1) * (w + 1)))).WaitFor(60000));
    return clock ? cluster.client(w).Clock() : Status::OK();
  };
  Status worker0;
  std::atomic<int> done0{0};
  std::thread w0([&] {
    for (int k = 0; k < kSteps && worker0.ok(); ++k, ++done0) worker0 = step(0, k, true);
  });
  for (int k = 0; k < kDies; ++k) ASSERT_TRUE(step(1, k, true).ok());
  ASSERT_TRUE(step(1, kDies, /*clock=*/false).ok());  // dies with its clock kDies pushed, not finished
  cluster.KillClient(1);
  if (bsp) {
    // Worker 0 finishes clock kDies, then waits for rank 1 while nobody holds it.
    EXPECT_TRUE(Eventually([&] { return done0.load() == kDies + 1; }, 10000));
    std::this_thread::sleep_for(std::chrono::milliseconds(cfg.heartbeat_timeout_ms + 500));
    EXPECT_EQ(done0.load(), kDies + 1) << "worker 0 went on without rank 1";
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(cfg.heartbeat_timeout_ms + 500));
  }
  ASSERT_TRUE(cluster.ReplaceClient(1).ok());
  Client& fresh = cluster.client(1);
  EXPECT_TRUE(fresh.replacement());
  EXPECT_EQ(fresh.clock(), kDies);
  auto again = fresh.CreateTable(spec);  // as an app does: the table there already
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  t[1] = *again;
  Status worker1;
  for (int k = kDies; k < kSteps && worker1.ok(); ++k) worker1 = step(1, k, true);
  w0.join();
  ASSERT_TRUE(worker1.ok()) << worker1.ToString();
  ASSERT_TRUE(worker0.ok()) << worker0.ToString();
  std::vector<float> v(32);
  ASSERT_TRUE(cluster.client(0).PullDense(t[0], v.data()).Wait().ok());
  // -lr * sum over k of (k + 1) * (w + 1): BSP applies the mean over the workers at each clock,
  // -0.25 * 1.5 * 55; SSP and ASP every push, -0.25 * 3 * 55 (a step applied twice: -43.75).
  for (float x : v) EXPECT_EQ(x, bsp ? -20.625f : -41.25f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  EXPECT_TRUE(cluster.scheduler_status().ok()) << cluster.scheduler_status().ToString();
}

INSTANTIATE_TEST_SUITE_P(, WorkerReplacement, ::testing::ValuesIn(UnderEachModel(2, 2, {"bsp", "ssp:2", "asp"})),
                         ClusterParamsName());

// A worker dies while it waits in a checkpoint the other has not asked for yet, and a new one
// takes its place at that clock. The dead one's ask does not count for the new one (which pushes
// at that clock once it runs: a checkpoint started on the old ask would hold those pushes, or fail
// on them); the new one asks itself, as the apps' FirstEpoch does, and the checkpoint is taken
// once, at that clock, with both. Asked again at that clock, it is answered at once.
TEST_F(WorkerReplacement, ADeadWorkersCheckpointAskIsNotItsReplacements) {
  char tmpl[] = "/tmp/pp-ckpt-replace-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.wait_for_replacement = true;
  cfg.checkpoint_dir = tmpl;
  // Worker 1's first client gives up waiting in its Checkpoint() soon (its ask stays with the
  // scheduler), so that it is not destroyed while a thread is in the call.
  auto instances = std::make_shared<std::atomic<int>>(0);
  cfg.client_options = [instances](int w, ClientOptions* o) {
    if (w == 1 && instances->fetch_add(1) == 0) o->checkpoint_timeout_ms = 300;
  };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = Dense("w", 8);
  spec.consistency = *ParseConsistency("asp");
  std::vector<Table> t(2);
  for (int w = 0; w < 2; ++w) {
    auto made = cluster.client(w).CreateTable(spec);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    t[w] = *made;
  }
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok());
  // It asks, waits for worker 0, gives up waiting, and dies.
  EXPECT_EQ(cluster.client(1).Checkpoint().code(), Code::kDeadlineExceeded);
  cluster.KillClient(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(cfg.heartbeat_timeout_ms + 500));
  ASSERT_TRUE(cluster.ReplaceClient(1).ok());
  Client& fresh = cluster.client(1);
  ASSERT_EQ(fresh.clock(), 1);
  // Worker 0 asks: the checkpoint waits for rank 1's new worker rather than counting the dead one.
  Status first;
  std::thread w0([&] { first = cluster.client(0).Checkpoint(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(cluster.server(0).stats().checkpoints, 0u) << "taken on the dead worker's ask";
  ASSERT_TRUE(fresh.Checkpoint().ok());
  w0.join();
  ASSERT_TRUE(first.ok()) << first.ToString();
  EXPECT_EQ(cluster.server(0).stats().checkpoints, 1u);
  EXPECT_TRUE(fresh.Checkpoint().ok());  // at the clock of the newest: answered at once, not taken again
  EXPECT_EQ(cluster.server(0).stats().checkpoints, 1u);
  auto again = fresh.CreateTable(spec);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(fresh.PushDense(*again, std::vector<float>(32, 1.0f)).Wait().ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok());
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  std::filesystem::remove_all(tmpl);
}

// A worker that dies while the servers write the checkpoint it asked for: its replacement, which
// catches up on that checkpoint (it starts at its clock), joins the one being written and is
// answered when it commits (refused as "a checkpoint in progress", it would fail, and the rank go
// back to waiting for a replacement). The servers' answers are lost until then (a proxy on server
// 0's control connection), which keeps the checkpoint in its writing phase.
TEST_F(WorkerReplacement, AReplacementJoinsTheCheckpointBeingWritten) {
  char tmpl[] = "/tmp/pp-ckpt-writing-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  TcpProxy proxy;
  auto lose = std::make_shared<std::atomic<bool>>(true);
  proxy.DropToUpstream([lose](const std::vector<std::string>& frames, int64_t) {
    Header h;
    return lose->load() && !frames.empty() && DecodeHeader(frames[0].data(), frames[0].size(), &h).ok() &&
           h.type == MsgType::kCheckpointReply;
  });
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.wait_for_replacement = true;
  cfg.checkpoint_dir = tmpl;
  cfg.server_options = ServerControlThrough(proxy, 0);
  auto instances = std::make_shared<std::atomic<int>>(0);
  cfg.client_options = [instances](int w, ClientOptions* o) {
    if (w == 1 && instances->fetch_add(1) == 0) o->checkpoint_timeout_ms = 300;  // (as above)
  };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = Dense("w", 8);
  spec.consistency = *ParseConsistency("asp");
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).CreateTable(spec).ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok());
  Status first;
  std::thread w0([&] { first = cluster.client(0).Checkpoint(); });
  // Both asked: the server writes (its answer lost), and worker 1 gives up waiting, and dies.
  EXPECT_EQ(cluster.client(1).Checkpoint().code(), Code::kDeadlineExceeded);
  ASSERT_TRUE(Eventually([&] { return cluster.server(0).stats().checkpoints == 1; }));
  cluster.KillClient(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(cfg.heartbeat_timeout_ms + 500));
  ASSERT_TRUE(cluster.ReplaceClient(1).ok());
  Client& fresh = cluster.client(1);
  ASSERT_EQ(fresh.clock(), 1);
  Status caught_up;
  std::thread w1([&] { caught_up = fresh.Checkpoint(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  lose->store(false);  // the server's next answer (to the scheduler's asking again) arrives
  w0.join();
  w1.join();
  EXPECT_TRUE(first.ok()) << first.ToString();
  EXPECT_TRUE(caught_up.ok()) << caught_up.ToString();
  EXPECT_EQ(cluster.server(0).stats().checkpoints, 1u);  // written once
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  std::filesystem::remove_all(tmpl);
}

// Nobody takes the dead worker's place in time: the job aborts, naming its rank and the flag.
TEST_F(WorkerReplacement, NoReplacementInTimeAbortsTheJobNamingTheRank) {
  LocalClusterConfig cfg;
  cfg.servers = 1;
  cfg.workers = 2;
  cfg.wait_for_replacement = true;
  cfg.replacement_timeout_ms = 500;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Status st = PullWhileWorker1Dies(cluster, 20);
  EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("worker 1 died and no worker took its place"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("--replacement_timeout_s"), std::string::npos) << st.ToString();
  cluster.FinishAndJoin().IgnoreError();
  EXPECT_EQ(cluster.scheduler_status().code(), Code::kAborted);
}

// Under --on_worker_death=wait a worker that comes while every rank is held is told "not yet" and
// asks again (a replacement an orchestrator starts before the death is declared: ReplaceClient
// relies on it); when no rank frees up within its registration deadline, it says so.
TEST_F(WorkerReplacement, AWorkerComingWhileEveryRankIsHeldWaitsWithinItsDeadline) {
  LocalClusterConfig cfg;
  cfg.workers = 1;
  cfg.wait_for_replacement = true;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  ClientOptions o;
  o.scheduler = cluster.scheduler_address();
  o.register_timeout_ms = 1200;
  auto c = Client::Connect(o);  // (the message below comes only at the deadline: it asked again)
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kDeadlineExceeded) << c.status().ToString();
  EXPECT_NE(
      c.status().message().find("could not take this node within 1200 ms: the job is running with all its workers"),
      std::string::npos)
      << c.status().ToString();
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A worker that asks for a rank waits for that rank: rank 1 frees up (its worker died) while it
// waits for rank 0, which it does not take; rank 1 goes to the worker asking for it.
TEST_F(WorkerReplacement, AWorkerAskingForAHeldRankWaitsForItAndTakesNoOther) {
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.wait_for_replacement = true;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.KillClient(1);
  ClientOptions o;
  o.scheduler = cluster.scheduler_address();
  o.requested_rank = 0;
  o.register_timeout_ms = cfg.heartbeat_timeout_ms * 3;  // (rank 1 is declared dead meanwhile)
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rank 0 is held"), std::string::npos) << c.status().ToString();
  Status replaced = cluster.ReplaceClient(1);
  ASSERT_TRUE(replaced.ok()) << replaced.ToString();
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
