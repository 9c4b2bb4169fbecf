// Faults injected through the transport (tests/support/fault_transport.h) into an in-process job:
// whatever message is lost with a dropped connection, duplicated or held back, every push is
// applied exactly once and every call is answered. The table counts: SGD with lr 1 on zeros and
// gradients of -1, so each row ends at the number of pushes applied to it.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/wire.h"
#include "tests/support/fault_transport.h"
#include "tests/support/local_cluster.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

constexpr int kPushes = 40;  // per worker

// A job whose workers reach it through FaultTransports (worker_faults[w]), and whose servers do
// too where server_faults is set.
struct FaultJob {
  explicit FaultJob(int servers, int workers, uint64_t seed, bool faulty_servers = false) {
    for (int w = 0; w < workers; ++w)
      worker_faults.push_back(std::make_shared<FaultTransport>(NewZmqTransport(), seed + w));
    if (faulty_servers)
      for (int s = 0; s < servers; ++s)
        server_faults.push_back(std::make_shared<FaultTransport>(NewZmqTransport(), seed + 100 + s));
    LocalClusterConfig cfg;
    cfg.servers = servers;
    cfg.workers = workers;
    cfg.worker_transport = [this](int w) -> std::shared_ptr<Transport> { return worker_faults[w]; };
    cfg.server_options = [this](int s, server::ServerOptions* o) {
      if (!server_faults.empty()) o->transport = server_faults[s];
    };
    cluster = std::make_unique<LocalCluster>(cfg);
  }

  // Every worker pushes -1 to every row kPushes times, each push waited for, then clocks; worker
  // 0 then pulls the table. Each row must read workers * kPushes.
  void PushAndCheck() {
    const int workers = cluster->config().workers;
    std::vector<Table> tables(workers);
    const TableSpec spec = AspLrOne("faults");
    cluster->RunWorkers([&](Client& c, int w) {
      auto t = c.CreateTable(spec);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      tables[w] = *t;
    });
    cluster->RunWorkers([&](Client& c, int w) {
      const std::vector<float> minus_one(spec.rows * spec.dim, -1.0f);
      for (int i = 0; i < kPushes; ++i) {
        Status st = c.PushDense(tables[w], minus_one).Wait();
        ASSERT_TRUE(st.ok()) << "push " << i << " of worker " << w << ": " << st.ToString();
      }
      Status st = c.Clock();
      ASSERT_TRUE(st.ok()) << st.ToString();
    });
    std::vector<float> values(spec.rows * spec.dim, -7.0f);
    Status st = cluster->client(0).PullDense(tables[0], values.data()).Wait();
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(values[i], float(workers * kPushes)) << "element " << i << ": a push lost or applied twice";
    for (int w = 0; w < workers; ++w) resent += cluster->client(w).stats().resent;
    ASSERT_TRUE(cluster->FinishAndJoin().ok());
  }

  uint64_t ServerDuplicates() {
    uint64_t n = 0;
    for (int s = 0; s < cluster->config().servers; ++s) n += cluster->server(s).stats().duplicates;
    return n;
  }

  uint64_t resent = 0;  // requests the workers sent again (ClientStats::resent)
  std::vector<std::shared_ptr<FaultTransport>> worker_faults, server_faults;
  std::unique_ptr<LocalCluster> cluster;
};

// A push's reply lost with the connection it came on (the worker's connections cut for 50 ms as
// it arrives): the worker asks again on the connection back, and the server answers the repeat
// from its record without applying it again.
TEST(TransportFaults, AReplyLostWithItsConnectionIsAskedForAgainAndNotAppliedTwice) {
  FaultJob job(2, 1, 11);
  FaultRule cut(FaultRule::kCut, FaultRule::kRecv, MsgType::kPushReply, /*nth=*/5);
  cut.cut_ms = 50;
  job.worker_faults[0]->AddRule(cut);
  ASSERT_TRUE(job.cluster->Start().ok());
  job.PushAndCheck();
  EXPECT_EQ(job.worker_faults[0]->counts().cuts, 1);
  EXPECT_GE(job.resent, 1u);
  EXPECT_GE(job.ServerDuplicates(), 1u) << "the lost reply's push was not asked for again";
}

// A push delivered twice (the worker's transport sends it again): applied once; the second copy
// is answered from the server's record and its answer dropped by the worker as already had.
TEST(TransportFaults, ADuplicatedPushIsAppliedOnce) {
  FaultJob job(2, 1, 12);
  job.worker_faults[0]->AddRule(FaultRule(FaultRule::kDuplicate, FaultRule::kSend, MsgType::kPush, /*nth=*/3,
                                          /*times=*/4));
  ASSERT_TRUE(job.cluster->Start().ok());
  job.PushAndCheck();
  EXPECT_EQ(job.worker_faults[0]->counts().duplicated, 4);
  EXPECT_GE(job.ServerDuplicates(), 4u);
}

// A push lost with a connection cut as it is sent: sent again once the connection is back.
TEST(TransportFaults, APushLostWithACutConnectionIsSentAgain) {
  FaultJob job(2, 1, 13);
  FaultRule cut(FaultRule::kCut, FaultRule::kSend, MsgType::kPush, /*nth=*/7);
  cut.cut_ms = 100;
  job.worker_faults[0]->AddRule(cut);
  ASSERT_TRUE(job.cluster->Start().ok());
  job.PushAndCheck();
  EXPECT_EQ(job.worker_faults[0]->counts().cuts, 1);
  EXPECT_GE(job.resent, 1u);
}

// A server that sends a reply twice: the worker takes the first and drops the second.
TEST(TransportFaults, AReplySentTwiceCompletesItsCallOnce) {
  FaultJob job(2, 1, 14, /*faulty_servers=*/true);
  for (auto& f : job.server_faults)
    f->AddRule(FaultRule(FaultRule::kDuplicate, FaultRule::kSend, MsgType::kPushReply, /*nth=*/2, /*times=*/3));
  ASSERT_TRUE(job.cluster->Start().ok());
  job.PushAndCheck();
  EXPECT_EQ(job.server_faults[0]->counts().duplicated + job.server_faults[1]->counts().duplicated, 6);
}

// Faults at random, from a seed, on two workers at once: pushes and their replies duplicated,
// replies held back, connections cut. Nothing is lost or applied twice.
TEST(TransportFaults, RandomFaultsFromASeedLoseNothing) {
  FaultJob job(2, 2, 2024);
  for (auto& f : job.worker_faults) {
    FaultRule dup(FaultRule::kDuplicate, FaultRule::kSend, MsgType::kPush, 0, /*times=*/-1);
    dup.probability = 0.1;
    FaultRule late(FaultRule::kDelay, FaultRule::kRecv, MsgType::kPushReply, 0, -1);
    late.probability = 0.1;
    late.delay_ms = 20;
    FaultRule cut(FaultRule::kCut, FaultRule::kSend, MsgType::kPush, 0, /*times=*/2);
    cut.probability = 0.05;
    cut.cut_ms = 50;
    f->AddRule(cut);
    f->AddRule(dup);
    f->AddRule(late);
  }
  ASSERT_TRUE(job.cluster->Start().ok());
  job.PushAndCheck();
  int64_t faults = 0;
  for (auto& f : job.worker_faults) {
    const FaultTransport::Counts n = f->counts();
    faults += n.duplicated + n.delayed + n.cuts;
  }
  EXPECT_GE(faults, 10) << "the seed gave too few faults to test anything";
}

}  // namespace
}  // namespace pushpull
