// What an operator sees: servers log their rates and state periodically, and options no job can run
// with are refused up front, by every binary, naming the option.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/mlp/backend.h"
#include "common/time.h"
#include "tests/support/fault_jobs.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace pushpull {
namespace {

// A server tells the operator how a long job goes: a line every stats_every_ms with the rates
// since the last line and where the slowest worker is.
TEST(Operations, ServersLogRatesAndStatePeriodically) {
  LocalClusterConfig cfg;
  cfg.servers = 1;
  cfg.workers = 1;
  cfg.stats_every_ms = 100;
  char tmpl[] = "/tmp/pushpull-stats-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  cfg.checkpoint_dir = tmpl;
  testing::internal::CaptureStderr();
  {
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Client& c = cluster.client(0);
    auto t = c.CreateTable(Dense("w", 8));
    ASSERT_TRUE(t.ok());
    std::vector<float> v(32);
    const int64_t start = NowMs(), until = start + 450;
    bool checkpointed = false;
    while (NowMs() < until) {
      ASSERT_TRUE(c.PushDense(*t, std::vector<float>(32, 0.5f)).Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
      ASSERT_TRUE(c.PullDense(*t, v.data()).Wait().ok());
      if (!checkpointed && NowMs() > start + 150) {
        ASSERT_TRUE(c.Checkpoint().ok());
        checkpointed = true;
      }
    }
    EXPECT_TRUE(cluster.FinishAndJoin().ok());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  size_t lines = 0, busy = 0;
  for (size_t at = err.find("stats, last"); at != std::string::npos; at = err.find("stats, last", at + 1)) {
    const std::string line = err.substr(at, err.find('\n', at) - at);
    ++lines;
    EXPECT_NE(line.find("pulls parked"), std::string::npos) << line;
    EXPECT_NE(line.find("MB resident"), std::string::npos) << line;
    // A line that saw pushes says so at a rate above zero, and the worker's clock moving.
    if (line.find(" 0 pushes/s") == std::string::npos && line.find("pushes/s") != std::string::npos &&
        line.find("slowest live worker at clock -1") == std::string::npos)
      ++busy;
  }
  EXPECT_GE(lines, 2u) << err.substr(0, 2000);
  EXPECT_GE(busy, 1u) << err.substr(0, 2000);
  // Lines after the checkpoint say when it was.
  EXPECT_NE(err.find("; last checkpoint at clock "), std::string::npos) << err.substr(0, 4000);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
}

// Options no job can run with are refused when a node is made, naming the option, before it
// contacts anyone (the binaries exit 2 on them: not restarted).
TEST(Operations, OptionsNoJobCanRunWithAreRefusedUpFront) {
  auto refused = [](const Status& st, const char* name) {
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos) << st.ToString();
  };
  scheduler::SchedulerOptions so;
  so.bind_host = "127.0.0.1";
  so.port = 0;
  so.heartbeat_timeout_ms = 0;
  refused(scheduler::Scheduler::Create(so).status(), "heartbeat_timeout_ms");
  so.heartbeat_timeout_ms = 1000;
  so.checkpoint_timeout_ms = -1294967296;  // what --checkpoint_timeout_s=3000000 made in int
  refused(scheduler::Scheduler::Create(so).status(), "checkpoint_timeout_ms");
  so.checkpoint_timeout_ms = 1000;
  so.port = -5;
  refused(scheduler::Scheduler::Create(so).status(), "port");

  server::ServerOptions o;
  o.bind_host = "127.0.0.1";
  o.control.scheduler = "tcp://127.0.0.1:1";
  o.control.heartbeat_interval_ms = 0;  // a heartbeat storm that crashed ZeroMQ
  refused(server::Server::Create(o).status(), "heartbeat_interval_ms");
  o.control.heartbeat_interval_ms = 500;
  o.control.scheduler_timeout_ms = 100;
  refused(server::Server::Create(o).status(), "scheduler_timeout_ms");
  o.control.scheduler_timeout_ms = 15000;
  o.port = 70000;
  refused(server::Server::Create(o).status(), "port");

  ClientOptions c;
  c.scheduler = "tcp://127.0.0.1:1";
  c.heartbeat_interval_ms = -1;
  refused(Client::Connect(c).status(), "heartbeat_interval_ms");

  std::string out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-scheduler --num_servers=1 --num_workers=1 --port=0 "
                                  "--checkpoint_timeout_s=3000000",
                       30, &out),
            2)
      << out;
  EXPECT_NE(out.find("--checkpoint_timeout_s"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --heartbeat_interval_ms=0 -- --app=linreg --epochs=1", 60, &out), 2)
      << out;
  EXPECT_NE(out.find("heartbeat_interval_ms"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --grace_ms=-1 -- --app=linreg", 30, &out), 2) << out;
  // What the launcher gives each worker is refused after "--" (every worker would ask for rank 0).
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --workers=2 -- --app=linreg --rank=0", 30, &out), 2) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --workers=2 -- --app=linreg --metrics_port=9400", 30, &out), 2)
      << out;
  EXPECT_NE(out.find("would have all 2 workers bind port 9400"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --workers=2 -- --app=linreg --metrics_port 9400", 30, &out), 2)
      << out;
  EXPECT_NE(out.find("--rank is the launcher's to give each worker"), std::string::npos) << out;
  // Nodes that would heartbeat less than twice per scheduler timeout are refused at registration
  // (they would be declared dead between heartbeats), naming both settings; exit 2, no restart.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --heartbeat_timeout_ms=1000 --heartbeat_interval_ms=600 "
                                  "--max_restarts=3 -- --app=linreg --epochs=1",
                       60, &out),
            2)
      << out;
  EXPECT_NE(out.find("heartbeat every 600 ms, but the scheduler declares a node dead after 1000 ms"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("restart 1 of"), std::string::npos) << out;
  EXPECT_EQ(out.find("started scheduler"), std::string::npos) << out;  // (refused before any node starts)
  // So is a consistency model no table would take.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --consistency=ssp -- --app=linreg --epochs=1", 30, &out), 2) << out;
  EXPECT_NE(out.find("pushpull-launch: --consistency: consistency 'ssp' must be"), std::string::npos) << out;
  EXPECT_EQ(out.find("started scheduler"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-scheduler --num_servers=1 --num_workers=1 --port=0 "
                                  "--endpoint_file=/nonexistent/endpoint",
                       30, &out),
            2)
      << out;
  EXPECT_NE(out.find("--endpoint_file"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-worker --scheduler=tcp://127.0.0.1:1 --app=linreg --batch=-3", 30, &out),
            2)
      << out;
  EXPECT_NE(out.find("--batch"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-worker --scheduler=tcp://127.0.0.1:1 --app=linreg epochs=3", 30, &out), 2)
      << out;
  EXPECT_NE(out.find("unexpected argument 'epochs=3'"), std::string::npos) << out;
  // The app's flags are checked before joining: no scheduler listens at port 1, and a worker
  // that tried to join would wait out --register_timeout_ms (here 60 s, over the 30 s allowed).
  for (const char* flags : {"--app=linreg2", "--app=linreg --epochs=0", "--app=linreg --optimizer=rmsprop",
                            "--app=linreg --consistency=sspp", "--app=fmnist_mlp --device=tpu",
                            "--app=fmnist_mlp --layers=784,x,10", "--app=linreg --lr=nan", "--app=linreg --rank=-7",
                            "--app=linreg --dim=0", "--app=linreg --metrics_out=/nonexistent/m.jsonl",
                            "--app=fmnist_mlp --data_dir=/nonexistent", "--app=linreg --straggler=1:2.5"}) {
    EXPECT_EQ(
        RunCommand(BinDir() + "/pushpull-worker --scheduler=tcp://127.0.0.1:1 --register_timeout_ms=60000 " + flags, 30,
                   &out),
        2)
        << flags << ": " << out;
    EXPECT_NE(out.find("see --help"), std::string::npos) << flags << ": " << out;
  }
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-server --scheduler=tcp://127.0.0.1:1 --update_threads=-3", 30, &out), 2)
      << out;
  EXPECT_NE(out.find("--update_threads"), std::string::npos) << out;
  // pushpull-launch: worker flags before "--" are unknown to it, and it says where they go.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --app=linreg", 30, &out), 2) << out;
  EXPECT_NE(out.find("go after \"--\""), std::string::npos) << out;
  // Unknown flags are bad flags (gflags' own exit is 1, which the launcher restarts); values given
  // apart, negative ones too, and --noBOOL are no flags of their own.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-server --bogus=1", 30, &out), 2) << out;
  EXPECT_NE(out.find("unknown flag --bogus=1"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --threads -3 --filter=nothing", 30, &out), 2) << out;
  EXPECT_NE(out.find("--threads=-3"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --noquick --filter nothing --list", 30, &out), 0) << out;
  // A stray word is no bench name (it ran every bench), nor a checkpoint directory.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench transport --list", 30, &out), 2) << out;
  EXPECT_NE(out.find("unexpected argument 'transport'"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-checkpoint /tmp", 30, &out), 2) << out;
  // The scheduler's job size is required: a default of 1 refused every worker but one.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-scheduler --num_servers=2 --port=0", 30, &out), 2) << out;
  EXPECT_NE(out.find("--num_servers and --num_workers are required"), std::string::npos) << out;
  // So are values gflags cannot read, and a value missing (gflags' own exit: 1 again).
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-server --port=abc", 30, &out), 2) << out;
  EXPECT_NE(out.find("--port=abc is not a valid int32"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-server --port", 30, &out), 2) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --quick=maybe --list", 30, &out), 2) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --threads=09 --quick=True --filter=nothing --list", 30, &out), 0)
      << out;
  EXPECT_EQ(
      RunCommand("env PP_TRANSPORT_PROFILE=garbage " + BinDir() + "/pushpull-bench --filter=transport --out=/dev/null",
                 30, &out),
      2)
      << out;
  EXPECT_NE(out.find("PP_TRANSPORT_PROFILE=garbage: want OP/SIZE/SsWw"), std::string::npos) << out;
  EXPECT_EQ(RunCommand("env PP_TRANSPORT_PROFILE=pushpull/1MB/1s1w/rwa " + BinDir() +
                           "/pushpull-bench --filter=transport --out=/dev/null",
                       30, &out),
            2)
      << out;
  EXPECT_NE(out.find("PP_TRANSPORT_PROFILE=pushpull/1MB/1s1w/rwa: the side is raw or raw_sgd"), std::string::npos)
      << out;
  // Flags in a --flagfile are checked the same way, naming the file; a missing file too;
  // --undefok lets the flags it names be unknown, as gflags does.
  const std::string flagfile = ::testing::TempDir() + "/bad_flags.txt";
  {
    std::ofstream f(flagfile);
    f << "# a comment\n\n--filter=nothing\n  --threads=abc\n";
  }
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --flagfile=" + flagfile + " --list", 30, &out), 2) << out;
  EXPECT_NE(out.find("--threads=abc in --flagfile=" + flagfile + " is not a valid int32"), std::string::npos) << out;
  {
    std::ofstream f(flagfile);
    f << "--filter=nothing\n--bogus=1\n";
  }
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --flagfile=" + flagfile + " --list", 30, &out), 2) << out;
  EXPECT_NE(out.find("unknown flag --bogus=1 in --flagfile="), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --undefok=bogus --flagfile=" + flagfile + " --list", 30, &out), 0)
      << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --bogus --nobogus2 --undefok=bogus,bogus2 --filter=nothing --list",
                       30, &out),
            0)
      << out;
  {  // sections per program, as gflags reads them: another program's flags are not this one's
    std::ofstream f(flagfile);
    f << "--filter=nothing\npushpull-server pushpull-sched*\n--bogus=1\n--max_message_mb=5\n"
         "pushpull-w* *bench\n--threads=2\n--undefok=bogus3\n--bogus3=1\n";
  }
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --flagfile=" + flagfile + " --list", 30, &out), 0) << out;
  {
    std::ofstream f(flagfile);
    f << "*bench\n--threads\n--filter=nothing\n";
  }
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --flagfile=" + flagfile + " --list", 30, &out), 2) << out;
  EXPECT_NE(out.find("flag --threads in --flagfile=" + flagfile + " needs a value"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-bench --flagfile=/nonexistent/flags --list", 30, &out), 2) << out;
  EXPECT_NE(out.find("--flagfile=/nonexistent/flags: cannot open it"), std::string::npos) << out;
  if (!mlp::GpuAvailable()) {  // no GPU: no restart would find one
    EXPECT_EQ(
        RunCommand(BinDir() + "/pushpull-worker --scheduler=tcp://127.0.0.1:1 --app=fmnist_mlp --device=gpu", 30, &out),
        2)
        << out;
    EXPECT_NE(out.find("--device=gpu"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace pushpull
