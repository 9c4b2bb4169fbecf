// Jobs that checkpoint and restore (server/checkpoint/store.h through a cluster): a restored job
// continues exactly where the checkpointed one was (BSP: bit for bit, on any number of servers), a
// checkpoint is an exact cut under every model, the apps checkpoint and resume, and misuses get
// clear errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/mlp/backend.h"
#include "apps/sparse_lr.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"
#include "tests/support/cluster_test.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

namespace fs = std::filesystem;

// The clusters of TEST_P tests checkpoint into root_, a fresh directory.
class Checkpoint : public ClusterTest {
 protected:
  void Configure(LocalClusterConfig* config) override {
    root_ = std::make_unique<TempDir>();
    config->checkpoint_dir = root_->path();
  }

  std::unique_ptr<TempDir> root_;
};

// One worker's part of a small BSP job from its current clock to `until`: a dense Adam table over
// both servers and a sparse AdaGrad one; gradients depend on the pulled parameters, so any
// difference in restored state would show in the end. Checkpoints at clock `ckpt_at`.
void Train(Client& c, int64_t until, int64_t ckpt_at, std::vector<float>* final_state) {
  // Learning-rate schedules that move every clock, and sparse pushes that skip some servers at
  // some clocks: BSP's schedule step is the clock on every server, so rows restored onto another
  // server keep their rate.
  TableSpec ds = CheckpointSpec("dense", false, opt::Kind::kAdam),
            ss = CheckpointSpec("sparse", true, opt::Kind::kAdaGrad);
  ds.optimizer.schedule.kind = opt::ScheduleKind::kCosine;
  ds.optimizer.schedule.total_steps = 10;
  ss.optimizer.schedule.kind = opt::ScheduleKind::kStep;
  ss.optimizer.schedule.step_size = 2;
  ss.optimizer.schedule.gamma = 0.5f;
  auto dense = c.CreateTable(ds);
  auto sparse = c.CreateTable(ss);
  ASSERT_TRUE(dense.ok() && sparse.ok()) << dense.status().ToString() << sparse.status().ToString();
  std::vector<Key> keys{1, 77, 5000000000ull, 31, 2};
  std::vector<float> w(10 * 4), e(keys.size() * 4);
  while (c.clock() < until) {
    ASSERT_TRUE(c.PullDense(*dense, w.data()).Wait().ok());
    ASSERT_TRUE(c.Pull(*sparse, keys, e.data()).Wait().ok());
    const float t = float(c.clock()) + 0.25f * c.rank();
    std::vector<float> gw(w.size()), ge(e.size());
    for (size_t i = 0; i < w.size(); ++i) gw[i] = 0.3f * w[i] + std::cos(t + i);
    for (size_t i = 0; i < e.size(); ++i) ge[i] = e[i] - std::sin(t * i);
    c.PushDense(*dense, gw);
    if (c.clock() % 2 == 0) {
      c.Push(*sparse, keys, ge);
    } else {  // one key: the other server(s) get no sparse push this clock
      c.Push(*sparse, {keys[0]}, std::vector<float>(ge.begin(), ge.begin() + 4));
    }
    ASSERT_TRUE(c.Clock().ok());
    if (c.clock() == ckpt_at) {
      ASSERT_TRUE(c.Checkpoint().ok());
    }
  }
  ASSERT_TRUE(c.PullDense(*dense, w.data()).Wait().ok());
  ASSERT_TRUE(c.Pull(*sparse, keys, e.data()).Wait().ok());
  std::vector<float> m(w.size());
  ASSERT_TRUE(c.Pull(*dense, SlotOf({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, m.data())).Wait().ok());
  *final_state = w;
  final_state->insert(final_state->end(), e.begin(), e.end());
  final_state->insert(final_state->end(), m.begin(), m.end());
}

// A job checkpointed at clock 4 and run on to 8, and new jobs restored from that checkpoint and
// run to 8 (another number of update threads; 3 servers and 1, re-sharding the checkpoint), end
// bit for bit alike: BSP's per-row arithmetic does not depend on where a row lives.
TEST_F(Checkpoint, RestoredBspJobContinuesExactlyOnAnyNumberOfServers) {
  TempDir root;
  std::vector<std::vector<float>> full(2);
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.update_threads = 3;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, 4, &full[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  ASSERT_FALSE(full[0].empty());
  EXPECT_EQ(full[0], full[1]);  // BSP: both workers see the same parameters
  auto latest = checkpoint::ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 4);
  for (int servers : {2, 3, 1}) {
    std::vector<std::vector<float>> resumed(2);
    LocalClusterConfig cfg;
    cfg.servers = servers;
    cfg.workers = 2;
    cfg.update_threads = servers == 2 ? 1 : 2;
    cfg.restore_from = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    EXPECT_EQ(cluster.client(0).clock(), 4);
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, -1, &resumed[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
    EXPECT_EQ(full[0], resumed[0]) << servers << " servers";
    EXPECT_EQ(full[1], resumed[1]) << servers << " servers";
  }
}

// A restored table that no worker created again before the next checkpoint is in that checkpoint
// as it was restored (left out, it would be gone once its checkpoint was pruned), also across a
// change in the number of servers.
TEST_F(Checkpoint, ATableNotCreatedAgainIsKeptInTheNextCheckpoint) {
  TempDir first, second;
  std::vector<std::vector<float>> full(2);
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.checkpoint_dir = first.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, 4, &full[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Resumed on 3 servers, checkpointed again at once, creating neither table.
    LocalClusterConfig cfg;
    cfg.servers = 3;
    cfg.workers = 2;
    cfg.restore_from = first.path();
    cfg.checkpoint_dir = second.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int) { EXPECT_TRUE(c.Checkpoint().ok()); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  auto latest = checkpoint::ReadLatestCheckpoint(second.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 4);
  std::vector<std::vector<float>> resumed(2);
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  cfg.restore_from = second.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, -1, &resumed[w]); });
  ASSERT_TRUE(cluster.FinishAndJoin().ok());
  EXPECT_EQ(full[0], resumed[0]);
  EXPECT_EQ(full[1], resumed[1]);
}

// A restore that failed once its rows were handed over (here: past the server's table memory
// limit) fails every later creation of the table the same way, rather than being retried into an
// empty sparse table that is logged as restored.
TEST_F(Checkpoint, ARestoreThatFailedPartWayIsNotRetriedIntoAnEmptyTable) {
  TempDir root;
  TableSpec s = CheckpointSpec("sparse", true, opt::Kind::kAdaGrad);
  {
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    auto t = cluster.client(0).CreateTable(s);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    std::vector<Key> keys(1000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = 3 * i + 1;
    ASSERT_TRUE(cluster.client(0).Push(*t, keys, std::vector<float>(keys.size() * s.dim, 0.5f)).Wait().ok());
    ASSERT_TRUE(cluster.client(0).Clock().ok());
    ASSERT_TRUE(cluster.client(0).Checkpoint().ok());
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  TempDir later;
  LocalClusterConfig cfg;
  cfg.restore_from = root.path();
  cfg.checkpoint_dir = later.path();
  cfg.server_options = [](int, server::ServerOptions* o) { o->max_table_bytes = 16 << 10; };  // < the 1000 rows
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto t = cluster.client(0).CreateTable(s);
    ASSERT_FALSE(t.ok()) << "attempt " << attempt;
    EXPECT_EQ(t.status().code(), Code::kResourceExhausted) << t.status().ToString();
    EXPECT_NE(t.status().message().find("rows from the checkpoint"), std::string::npos) << t.status().ToString();
    if (attempt == 1) {
      EXPECT_NE(t.status().message().find("cannot be restored by this server any more"), std::string::npos)
          << t.status().ToString();
    }
  }
  // Nor is a checkpoint taken without it (this server's file would lack the table the others' hold).
  ASSERT_TRUE(cluster.client(0).Clock().ok());
  Status st = cluster.client(0).Checkpoint();
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("table 'sparse' could not be restored on server 0"), std::string::npos) << st.ToString();
  EXPECT_FALSE(checkpoint::ReadLatestCheckpoint(later.path()).ok());
  cluster.FinishAndJoin().IgnoreError();
}

// Under SSP and ASP too a checkpoint is an exact cut: what every worker reads right after it (the
// others held at a barrier) is exactly what a job restored from it reads first, tables and
// optimizer state alike, even with workers running at different speeds before it.
TEST_P(Checkpoint, RestoredStateIsWhatWorkersSawAtTheCheckpoint) {
  const TempDir& root = *root_;
  const Consistency model = GetParam().consistency;
  auto tables = [&](Client& c, Table* d, Table* sp) {
    TableSpec ds = CheckpointSpec("dense", false, opt::Kind::kAdam),
              ss = CheckpointSpec("sparse", true, opt::Kind::kAdaGrad);
    ds.consistency = ss.consistency = model;
    auto a = c.CreateTable(ds);
    auto b = c.CreateTable(ss);
    ASSERT_TRUE(a.ok() && b.ok());
    *d = *a;
    *sp = *b;
  };
  const std::vector<Key> keys{1, 77, 5000000000ull, 31, 2};
  auto read = [&](Client& c, const Table& d, const Table& sp) {
    std::vector<float> w(10 * 4), e(keys.size() * 4), m(10 * 4);
    EXPECT_TRUE(c.PullDense(d, w.data()).Wait().ok());
    EXPECT_TRUE(c.Pull(sp, keys, e.data()).Wait().ok());
    EXPECT_TRUE(c.Pull(d, SlotOf({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, m.data())).Wait().ok());
    w.insert(w.end(), e.begin(), e.end());
    w.insert(w.end(), m.begin(), m.end());
    return w;
  };
  std::vector<std::vector<float>> seen(3), restored(3);
  // A 16 MB table worker 0 pushes to just before the checkpoint: the servers are still busy with
  // it, and the others' last pushes and clocks wait behind it, when the scheduler's request comes.
  TableSpec big;
  big.name = "big";
  big.rows = 1 << 16;
  big.dim = 64;
  big.optimizer.lr = 1e-3f;
  big.consistency = model;
  {
    LocalCluster& cluster = *cluster_;  // checkpointing into root
    cluster.RunWorkers([&](Client& c, int w) {
      Table d, sp;
      tables(c, &d, &sp);
      std::vector<float> buf(40);
      auto b = c.CreateTable(big);
      ASSERT_TRUE(b.ok());
      for (int it = 0; it < 6; ++it) {
        // Worker 2 lags; workers race ahead as far as the model lets them.
        if (w == 2) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        if (w == 0 && it == 5) c.PushDense(*b, std::vector<float>(big.rows * big.dim, 1e-3f));
        ASSERT_TRUE(c.PullDense(d, buf.data()).Wait().ok());
        std::vector<float> g(40), ge(keys.size() * 4);
        for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * buf[i] + std::sin(float(it * 7 + w + i));
        for (size_t i = 0; i < ge.size(); ++i) ge[i] = std::cos(float(it + w * 3 + i));
        c.PushDense(d, g);
        c.Push(sp, keys, ge);
        ASSERT_TRUE(c.Clock().ok());
      }
      ASSERT_TRUE(c.Checkpoint().ok());
      seen[w] = read(c, d, sp);
      ASSERT_TRUE(c.Barrier().ok());  // nobody pushes before everyone has read
      c.PushDense(d, std::vector<float>(40, 1.0f));
      ASSERT_TRUE(c.Clock().ok());
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {
    LocalClusterConfig cfg = GetParam().Config();
    cfg.restore_from = root.path();
    ASSERT_TRUE(StartCluster(cfg));
    LocalCluster& cluster = *cluster_;
    cluster.RunWorkers([&](Client& c, int w) {
      Table d, sp;
      tables(c, &d, &sp);
      EXPECT_EQ(c.clock(), 6);
      restored[w] = read(c, d, sp);
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  for (int w = 0; w < 3; ++w) {
    ASSERT_FALSE(seen[w].empty());
    EXPECT_EQ(seen[w], seen[0]) << "worker " << w;
    EXPECT_EQ(restored[w], seen[0]) << "worker " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(, Checkpoint, ::testing::ValuesIn(UnderEachModel(2, 3, {"ssp:2", "asp"})),
                         ClusterParamsName());

// An app checkpoints every N epochs and after its last, so the trained model is in the newest
// checkpoint; a job restored from that one (restarted after training, before it ended) has
// nothing left to train: it evaluates the restored model, the trained one, and ends.
TEST_F(Checkpoint, AppsCheckpointEveryNEpochsAndAfterTheLast) {
  TempDir root;
  AppOptions app;
  app.consistency = *ParseConsistency("bsp");
  app.epochs = 4;
  app.progress_interval_s = 0;
  app.checkpoint_every_epochs = 3;
  LinregOptions o;
  o.examples_per_worker = 1000;  // 10 clocks an epoch
  std::vector<AppResult> trained(2), restored(2);
  {
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = root.path();
    cfg.checkpoint_keep = 5;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { EXPECT_TRUE(RunLinreg(c, app, o, &trained[w]).ok()); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointDir(root.path(), 30) + "/MANIFEST"));  // after epoch 3
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root.path(), 20)));
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 40);  // after the last, epoch 4
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.checkpoint_dir = root.path();  // a restart keeps checkpointing where it restores from
  cfg.restore_from = root.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.RunWorkers([&](Client& c, int w) {
    Status st = RunLinreg(c, app, o, &restored[w]);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(c.clock(), 40);  // no step taken
  });
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(restored[w].final_metric, trained[w].final_metric) << "worker " << w;  // the same model, bit for bit
    EXPECT_EQ(restored[w].reached_target, trained[w].reached_target) << restored[w].summary;
    const auto crc = [](const std::string& s) { return s.substr(s.find("params_crc=")); };
    EXPECT_EQ(crc(restored[w].summary).substr(0, 19), crc(trained[w].summary).substr(0, 19));
  }
  // The checkpoint keeps how the run counted its clocks: restored with half the batch, clock 40
  // would end epoch 2 of a run of 20 clocks an epoch, and the job would go on there as if
  // nothing changed. Refused, naming both.
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->run,
            "linreg: epochs end at clocks 10, 20, 30, ... (batch 100, 2 workers, 1000 examples a worker, seed 42)");
  LocalCluster other(cfg);
  ASSERT_TRUE(other.Start().ok());
  EXPECT_EQ(other.client(0).restored_run(), checkpoint::ReadLatestCheckpoint(root.path())->run);
  AppOptions half = app;
  half.batch = 50;
  other.RunWorkers([&](Client& c, int w) {
    AppResult r;
    Status st = RunLinreg(c, half, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("taken by a run where \"linreg: epochs end at clocks 10, 20"), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("this one: \"linreg: epochs end at clocks 20, 40, 60, ... (batch 50"),
              std::string::npos)
        << st.ToString();
    // Nor with another seed, which draws another problem to resume on.
    AppOptions reseeded = app;
    reseeded.seed = 7;
    st = RunLinreg(c, reseeded, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("1000 examples a worker, seed 7)\""), std::string::npos) << st.ToString();
  });
  other.FinishAndJoin().IgnoreError();
  {
    // A checkpoint whose run line names neither workers nor seed (an older build's) resumes with
    // the default seed.
    const std::string manifest = checkpoint::ReadLatestCheckpoint(root.path())->dir + "/MANIFEST";
    std::string text;
    {
      std::ifstream in(manifest);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t run = text.find("\nrun ");
    ASSERT_NE(run, std::string::npos) << text;
    std::ofstream(manifest, std::ios::trunc)
        << text.substr(0, run)
        << "\nrun linreg: epochs end at clocks 10, 20, 30, ... (batch 100, 1000 examples a worker)\n";
    LocalCluster earlier(cfg);
    ASSERT_TRUE(earlier.Start().ok());
    earlier.RunWorkers([&](Client& c, int w) {
      AppResult r;
      Status st = RunLinreg(c, app, o, &r);
      EXPECT_TRUE(st.ok()) << st.ToString();
    });
    EXPECT_TRUE(earlier.FinishAndJoin().ok());
    std::ofstream(manifest, std::ios::trunc) << text;
  }
  // Restored with fewer --epochs than it had trained: a setup error naming the epoch (exit 2, so
  // that a launcher does not restart into it).
  LocalCluster fewer(cfg);
  ASSERT_TRUE(fewer.Start().ok());
  AppOptions three = app;
  three.epochs = 3;
  fewer.RunWorkers([&](Client& c, int w) {
    AppResult r;
    Status st = RunLinreg(c, three, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("the checkpoint (clock 40) is after epoch 4, beyond this run's last (--epochs=3): "
                                "resume with --epochs=4 or more"),
              std::string::npos)
        << st.ToString();
  });
  fewer.FinishAndJoin().IgnoreError();

  // The newest checkpoint damaged (one byte of a server's file):
  {
    const std::string file = checkpoint::ServerCheckpointFile(checkpoint::CheckpointDir(root.path(), 40), 0);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  {
    // The tool lists every checkpoint, which is damaged and which would do, and fails for the
    // newest's tables: exit 2, as for any damaged checkpoint (a second try would meet it again).
    std::string out;
    EXPECT_EQ(RunCommand(BinDir() + "/pushpull-checkpoint --dir=" + root.path(), 60, &out), 2) << out;
    EXPECT_NE(out.find("ckpt-0000000030  intact, clock 30"), std::string::npos) << out;
    EXPECT_NE(out.find("ckpt-0000000040 (LATEST)  Corruption: "), std::string::npos) << out;
  }
  LocalClusterConfig damaged = cfg;
  damaged.checkpoint_dir.clear();
  {
    // - without the scheduler's reading first, the server cannot restore and says how to resume
    //   from an older one (pushpull-server exits 2 on it: a restart would meet it again);
    damaged.verify_restore = false;
    LocalCluster c(damaged);
    EXPECT_FALSE(c.Start().ok());
    c.FinishAndJoin().IgnoreError();
    const Status st = c.server_status(0);
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find("--restore_from=" + root.path() + "/ckpt-"), std::string::npos) << st.ToString();
    // The scheduler hears why at once and ends the job as a setup error (it exits 2: no restart).
    EXPECT_EQ(c.scheduler_status().code(), Code::kInvalidArgument) << c.scheduler_status().ToString();
    EXPECT_NE(c.scheduler_status().message().find("checksum mismatch"), std::string::npos)
        << c.scheduler_status().ToString();
    damaged.verify_restore = true;
  }
  {
    // - named itself, it is refused before the job starts, naming the file;
    LocalClusterConfig named = damaged;
    named.restore_from = checkpoint::CheckpointDir(root.path(), 40);
    LocalCluster c(named);
    const Status st = c.Start();
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find(checkpoint::ServerCheckpointFile(checkpoint::CheckpointDir(root.path(), 40), 0)),
              std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.ToString();
  }
  {
    // The one before it from another run (a fresh job in a used directory) does not stand in.
    const std::string manifest = checkpoint::CheckpointDir(root.path(), 30) + "/MANIFEST";
    std::string text;
    {
      std::ifstream in(manifest);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t run = text.find("\nrun ");
    ASSERT_NE(run, std::string::npos) << text;
    std::ofstream(manifest, std::ios::trunc) << text.substr(0, run) << "\nrun another app's run\n";
    std::vector<std::string> skipped;
    auto none = checkpoint::NewestIntactCheckpoint(root.path(), &skipped);
    EXPECT_FALSE(none.ok());
    ASSERT_EQ(skipped.size(), 2u);
    EXPECT_NE(skipped[1].find("another run's"), std::string::npos) << skipped[1];
    std::ofstream(manifest, std::ios::trunc) << text;
  }
  std::vector<std::string> skipped;
  auto intact = checkpoint::NewestIntactCheckpoint(root.path(), &skipped);
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  EXPECT_EQ(intact->clock, 30);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind("ckpt-0000000040: ", 0), 0u) << skipped[0];
  // - and the job resuming from the directory takes the newest intact one before it, as it does
  //   named itself (a checkpoint directory is a --restore_from too).
  for (const std::string& from : {root.path(), checkpoint::CheckpointDir(root.path(), 30)}) {
    damaged.restore_from = from;
    LocalCluster older(damaged);
    ASSERT_TRUE(older.Start().ok()) << from;
    EXPECT_EQ(older.client(0).clock(), 30);
    // Resumed to train longer than the checkpointed run: it counts its clocks alike, so it goes on.
    AppOptions longer = app;
    longer.epochs = 6;
    longer.checkpoint_every_epochs = 0;
    older.RunWorkers([&](Client& c, int w) {
      AppResult r;
      Status st = RunLinreg(c, longer, o, &r);
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(c.clock(), 60);
    });
    EXPECT_TRUE(older.FinishAndJoin().ok());
  }
  // A root whose own name starts like a checkpoint's is still a root, not one incomplete
  // checkpoint: a job in --checkpoint_dir=.../ckpt-fmnist resumes.
  TempDir links;
  const std::string named_like_one = links.path() + "/ckpt-fmnist";
  std::filesystem::create_directory_symlink(root.path(), named_like_one);
  damaged.restore_from = named_like_one;
  LocalCluster renamed(damaged);
  ASSERT_TRUE(renamed.Start().ok());
  EXPECT_EQ(renamed.client(0).clock(), 30);
  EXPECT_TRUE(renamed.FinishAndJoin().ok());
}

// The other apps too: restored from the checkpoint after their last epoch, they evaluate the
// trained model (worker 0 reports the same metric as the run that trained it) and end.
TEST_F(Checkpoint, AppsRestoredAfterTheLastEpochEvaluateTheTrainedModel) {
  using AppFn = std::function<Status(Client&, const AppOptions&, AppResult*)>;
  FmnistOptions fo;
  fo.device = mlp::Device::kCpu;
  fo.train_limit = 2000;
  fo.test_limit = 1000;
  SparseLrOptions so;
  so.examples_total = 100000;
  so.heldout = 5000;
  const std::vector<std::pair<std::string, AppFn>> apps = {
      {"fmnist_mlp", [&](Client& c, const AppOptions& a, AppResult* r) { return RunFmnistMlp(c, a, fo, r); }},
      {"sparse_lr", [&](Client& c, const AppOptions& a, AppResult* r) { return RunSparseLr(c, a, so, r); }}};
  for (const auto& entry : apps) {
    const std::string& name = entry.first;
    const AppFn& run = entry.second;  // a named reference: lambdas cannot capture bindings in C++17
    SCOPED_TRACE(name);
    TempDir root;
    AppOptions app;
    app.consistency = *ParseConsistency("bsp");
    app.epochs = 1;
    app.batch = name == "sparse_lr" ? 1000 : 64;
    app.progress_interval_s = 0;
    app.checkpoint_every_epochs = 1;
    app.target = 0.01;  // not what this test is about
    std::vector<AppResult> trained(2), restored(2);
    for (int pass = 0; pass < 2; ++pass) {
      LocalClusterConfig cfg;
      cfg.workers = 2;
      cfg.checkpoint_dir = root.path();  // a restart keeps checkpointing where it restores from
      if (pass == 1) cfg.restore_from = root.path();
      LocalCluster cluster(cfg);
      ASSERT_TRUE(cluster.Start().ok());
      cluster.RunWorkers([&](Client& c, int w) {
        const int64_t clock0 = c.clock();
        Status st = run(c, app, pass == 0 ? &trained[w] : &restored[w]);
        EXPECT_TRUE(st.ok()) << st.ToString();
        if (pass == 1) {
          EXPECT_EQ(c.clock(), clock0);  // no step taken
        }
      });
      ASSERT_TRUE(cluster.FinishAndJoin().ok());
    }
    EXPECT_EQ(restored[0].final_metric, trained[0].final_metric) << restored[0].summary;
    EXPECT_TRUE(std::isfinite(restored[0].final_metric)) << restored[0].summary;
  }
}

// An app asked to checkpoint in a job without checkpoints (no scheduler --checkpoint_dir) fails
// before it trains, saying so; a checkpoint directory that cannot be created fails the
// scheduler at its start. Both are setup errors: the binaries exit 2, not restarted.
TEST_F(Checkpoint, CheckpointsAskedForWithoutADirectoryFailAtTheStart) {
  LocalClusterConfig cfg;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  EXPECT_FALSE(cluster.client(0).checkpoints_enabled());
  AppOptions app;
  app.progress_interval_s = 0;
  app.checkpoint_every_epochs = 1;
  LinregOptions o;
  AppResult r;
  Status st = RunLinreg(cluster.client(0), app, o, &r);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("--checkpoint_dir"), std::string::npos) << st.ToString();
  EXPECT_EQ(cluster.client(0).clock(), 0);
  cluster.FinishAndJoin().IgnoreError();

  TempDir root;
  const std::string file = root.path() + "/a-file";
  std::ofstream(file) << "x";
  scheduler::SchedulerOptions so;
  so.bind_host = "127.0.0.1";
  so.port = 0;
  so.checkpoint_dir = file + "/ckpt";  // under a regular file: cannot be created
  auto s = scheduler::Scheduler::Create(so);
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().message().find("cannot create checkpoint directory"), std::string::npos)
      << s.status().ToString();
  so.checkpoint_dir = root.path() + "/new/ckpt";  // created when missing
  EXPECT_TRUE(scheduler::Scheduler::Create(so).ok());
  EXPECT_TRUE(fs::is_directory(so.checkpoint_dir));
}

// A worker that dies while the others wait in Checkpoint() (the job going on without it) counts no
// more: the checkpoint completes with the live ones.
TEST_F(Checkpoint, ADeadWorkerDoesNotHoldACheckpointUp) {
  TempDir root;
  LocalClusterConfig cfg;
  cfg.workers = 3;
  cfg.continue_on_worker_death = true;
  cfg.checkpoint_dir = root.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok());
  std::vector<Status> st(2);
  std::vector<std::thread> t;
  for (int w = 0; w < 2; ++w) t.emplace_back([&, w] { st[w] = cluster.client(w).Checkpoint(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cluster.KillClient(2);  // never asks; declared dead after the heartbeat timeout
  for (auto& th : t) th.join();
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(st[w].ok()) << st[w].ToString();
  auto latest = checkpoint::ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 1);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST_F(Checkpoint, MisuseGetsClearErrors) {
  {  // No --checkpoint_dir.
    LocalCluster cluster(LocalClusterConfig{});
    ASSERT_TRUE(cluster.Start().ok());
    Status st = cluster.client(0).Checkpoint();
    EXPECT_EQ(st.code(), Code::kFailedPrecondition);
    EXPECT_NE(st.message().find("--checkpoint_dir"), std::string::npos) << st.ToString();
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  TempDir root;
  {  // Workers at different clocks: both told, and the job goes on.
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    std::vector<Status> st(2);
    cluster.RunWorkers([&](Client& c, int w) {
      for (int i = 0; i <= w; ++i) ASSERT_TRUE(c.Clock().ok());
      st[w] = c.Checkpoint();
    });
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(st[w].code(), Code::kInvalidArgument) << st[w].ToString();
      EXPECT_NE(st[w].message().find("different clocks"), std::string::npos) << st[w].ToString();
    }
    cluster.RunWorkers([&](Client& c, int w) {
      if (w == 0) {
        ASSERT_TRUE(c.Clock().ok());
      }
      EXPECT_TRUE(c.Checkpoint().ok());
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // A worker that does not ask in time: the one waiting is told who is missing, and the next
     // checkpoint, asked for by both, succeeds.
    TempDir r3;
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = r3.path();
    cfg.checkpoint_timeout_ms = 300;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Status st = cluster.client(0).Checkpoint();
    EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
    EXPECT_NE(st.message().find("worker 1"), std::string::npos) << st.ToString();
    cluster.RunWorkers([&](Client& c, int) { EXPECT_TRUE(c.Checkpoint().ok()); });
    EXPECT_TRUE(checkpoint::ReadLatestCheckpoint(r3.path()).ok());
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Pushes at the checkpoint's clock itself (a worker that went on after a failed
     // Checkpoint(), or another thread of it): they would be in the checkpoint and trained again
     // on resuming, so it is refused, and taken once the clock is closed.
    TempDir r4;
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = r4.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Client& c = cluster.client(0);
    for (const char* model : {"ssp:2", "asp"}) {
      TableSpec s = CheckpointSpec(std::string("pushed_") + model, false, opt::Kind::kSgd);
      s.consistency = *ParseConsistency(model);
      auto t = c.CreateTable(s);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE(c.Clock().ok());  // (a clock with no checkpoint yet: one taken is not taken again)
      ASSERT_TRUE(c.PushDense(*t, std::vector<float>(s.rows * s.dim, 1.0f)).Wait().ok());
      Status st = c.Checkpoint();
      EXPECT_EQ(st.code(), Code::kFailedPrecondition) << model << ": " << st.ToString();
      EXPECT_NE(st.message().find("pushed 1 time(s) at the checkpoint's clock"), std::string::npos) << st.ToString();
      ASSERT_TRUE(c.Clock().ok());
      EXPECT_TRUE(c.Checkpoint().ok()) << model;
    }
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Nothing to restore from.
    TempDir empty;
    LocalClusterConfig cfg;
    cfg.restore_from = empty.path();
    LocalCluster cluster(cfg);
    Status st = cluster.Start();
    EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find("LATEST"), std::string::npos) << st.ToString();
  }
  {  // A table the checkpoint holds under another spec.
    TempDir r2;
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = r2.path();
    {
      LocalCluster cluster(cfg);
      ASSERT_TRUE(cluster.Start().ok());
      ASSERT_TRUE(cluster.client(0).CreateTable(CheckpointSpec("dense", false, opt::Kind::kAdam)).ok());
      ASSERT_TRUE(cluster.client(0).Checkpoint().ok());
      ASSERT_TRUE(cluster.FinishAndJoin().ok());
    }
    cfg.checkpoint_dir.clear();
    cfg.restore_from = r2.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    auto t = cluster.client(0).CreateTable(CheckpointSpec("dense", false, opt::Kind::kSgd));
    // A setup error (the job's flags against the checkpoint): a worker exits 2 on it, not restarted.
    // It says what differs (two specs printed whole leave out most settings, and so may read the
    // same).
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find("cannot take the checkpoint's rows: optimizer adam -> sgd"), std::string::npos)
        << t.status().ToString();
    // Its learning rate, schedule and initialisation may change (training longer, fine-tuning):
    // the rows are the checkpoint's.
    TableSpec longer = CheckpointSpec("dense", false, opt::Kind::kAdam);
    longer.optimizer.lr = 0.01f;
    longer.optimizer.schedule.kind = opt::ScheduleKind::kCosine;
    longer.optimizer.schedule.total_steps = 100;
    longer.seed = 8;
    EXPECT_EQ(longer.DifferencesFrom(CheckpointSpec("dense", false, opt::Kind::kAdam)),
              "seed 7 -> 8, lr 0.05 -> 0.01, schedule constant -> cosine, schedule.total_steps 0 -> 100");
    auto resumed = cluster.client(0).CreateTable(longer);
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    std::vector<float> now(10 * 4), fresh(10 * 4);
    ASSERT_TRUE(cluster.client(0).PullDense(*resumed, now.data()).Wait().ok());
    for (size_t i = 0; i < now.size(); ++i) fresh[i] = InitialValue(longer, i / 4, i % 4);
    EXPECT_NE(now, fresh);  // (the checkpoint's rows, not seed 8's)
    TableSpec was = CheckpointSpec("dense", false, opt::Kind::kAdam);
    for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i], InitialValue(was, i / 4, i % 4)) << i;
    // Nor may the optimizer's state or the consistency model.
    TableSpec other = was;
    other.optimizer.amsgrad = true;  // (a third slot)
    EXPECT_FALSE(other.CanRestoreFrom(was));
    other = was;
    other.consistency = *ParseConsistency("asp");
    EXPECT_FALSE(other.CanRestoreFrom(was));
    EXPECT_TRUE(longer.CanRestoreFrom(was));
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
}

}  // namespace
}  // namespace pushpull
