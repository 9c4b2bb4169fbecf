// Whole jobs as real processes (pushpull-launch and the daemons on free ports; the Slurm script):
// killed and stopped workers and servers, restarts from checkpoints, signals, and the exit codes
// that say why a job ended.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/temp_dir.h"

namespace pushpull {
namespace {

// The zmq_ceiling bench (raw ZeroMQ with a server-side SGD pass, and raw pulls in 1 MB messages
// from 1 and 2 servers) reports every figure it names, each with a baseline, and its summary;
// a raw driver that miscounted its block replies would wait out its deadline or find replies
// left over after its runs, and say FAILED; SGD servers that applied nothing would too.
TEST(MultiProcess, TheCeilingBenchReportsEveryFigureWithItsBaseline) {
  const std::string jsonl = ::testing::TempDir() + "/ceiling.jsonl";
  std::string out;
  ASSERT_EQ(RunCommand(BinDir() + "/pushpull-bench --quick --filter=zmq_ceiling --out=" + jsonl, 120, &out), 0) << out;
  EXPECT_NE(out.find("zmq ceilings (the data-path goals against raw ZeroMQ on this machine)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
  std::ifstream f(jsonl);
  std::vector<std::string> cases;
  for (std::string line; std::getline(f, line);) {
    EXPECT_NE(line.find("\"bench\": \"zmq_ceiling\""), std::string::npos) << line;
    if (line.find("\"case\": \"raw_sgd_pushpull/") != std::string::npos) {
      const auto at = line.find("SGD applied to ");
      ASSERT_NE(at, std::string::npos) << line;
      EXPECT_GE(std::strtoull(line.c_str() + at + 15, nullptr, 10), 256u * 1024u) << line;  // a 1 MB push at least
    }
    const auto c = line.find("\"case\": \"");
    ASSERT_NE(c, std::string::npos) << line;
    cases.push_back(line.substr(c + 9, line.find('"', c + 9) - c - 9));
    for (const char* field : {"\"value\": ", "\"baseline\": "}) {
      const auto at = line.find(field);
      ASSERT_NE(at, std::string::npos) << field << " in " << line;
      EXPECT_GT(std::strtod(line.c_str() + at + std::strlen(field), nullptr), 0.0) << field << " in " << line;
    }
  }
  const std::vector<std::string> want{"raw_sgd_pushpull/1MB/1s1w",
                                      "pushpull_vs_raw_sgd/1MB/1s1w",
                                      "raw_sgd_pushpull/1MB/2s1w",
                                      "pushpull_vs_raw_sgd/1MB/2s1w",
                                      "raw_pull_2s_vs_1s/16MB/1w",
                                      "raw_blocks_pull_2s_vs_1s/16MB/1w",
                                      "pushpull_vs_raw_blocks_pull/16MB/1s1w",
                                      "pushpull_pull_2s_vs_1s/16MB/1w"};
  EXPECT_EQ(cases, want) << out;
  // The same raw servers with SGD as one profiled side of a transport case.
  ASSERT_EQ(RunCommand("env PP_TRANSPORT_PROFILE=pushpull/64KB/1s1w/raw_sgd PP_TRANSPORT_PROFILE_S=0.05 " + BinDir() +
                           "/pushpull-bench --filter=transport --out=" + jsonl,
                       60, &out),
            0)
      << out;
  std::ifstream g(jsonl);
  std::string line;
  ASSERT_TRUE(std::getline(g, line)) << out;
  EXPECT_NE(line.find("\"case\": \"profile_raw_sgd_pushpull/64KB/1s1w\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"note\": \"ops "), std::string::npos) << line;
}

// A worker stopped by SIGTERM says so as it goes: the job ends at once naming it (here with a
// heartbeat timeout of a minute, which the test's 90 s would not see twice), exit 1.
TEST(MultiProcess, ASigtermedWorkerSaysSoAndTheJobEndsAtOnce) {
  KillRun r = LaunchAndKill(
      "--heartbeat_timeout_ms=60000 --servers=1 --workers=2 -- --app=linreg --epochs=400 "
      "--examples=4000 --progress_s=0",
      "worker 1", "linreg epoch 2/", SIGTERM);
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("job aborted: worker 1 stopped: Aborted: stopped by a signal"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("sent no heartbeat"), std::string::npos) << r.output;
}

TEST(MultiProcess, LinregConvergesUnderSspWithTwoServersThreeWorkers) {
  std::string out;
  int code = RunCommand(BinDir() +
                            "/pushpull-launch --servers=2 --workers=3 --consistency=ssp:1 -- "
                            "--app=linreg --epochs=4 --progress_s=0",
                        120, &out);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("reached=yes"), std::string::npos) << out;
  EXPECT_NE(out.find("job succeeded"), std::string::npos);
}

TEST(MultiProcess, SigkilledWorkerDoesNotHangTheJob) {
  const std::string app = "-- --app=linreg --epochs=40 --examples=4000 --progress_s=0";
  KillRun go = LaunchAndKill("--servers=2 --workers=3 --on_worker_death=continue " + app, "worker 1");
  ASSERT_TRUE(go.killed) << go.output;
  EXPECT_EQ(go.exit_code, 0) << go.output;
  // Named by the scheduler as the launcher saw it die, not a heartbeat timeout later.
  EXPECT_NE(go.output.find("[scheduler] worker 1 died: pid "), std::string::npos) << go.output;
  EXPECT_EQ(go.output.find("worker 1 sent no heartbeat"), std::string::npos) << go.output;
  EXPECT_NE(go.output.find("job finished: 2 workers finished, 1 died"), std::string::npos) << go.output;

  KillRun stop = LaunchAndKill("--servers=2 --workers=3 " + app, "worker 1");
  ASSERT_TRUE(stop.killed) << stop.output;
  EXPECT_NE(stop.exit_code, 0);
  EXPECT_NE(stop.output.find("worker 1 (pid"), std::string::npos) << stop.output;
  EXPECT_NE(stop.output.find("killed by signal 9"), std::string::npos) << stop.output;
}

// --on_worker_death=wait with real processes: the launcher starts a new worker in the SIGKILLed
// one's place, it resumes mid-epoch at that worker's clock, and the job ends as if nothing had
// happened: under BSP with one server (whose clock the dead worker either reached or did not),
// with the uninterrupted run's loss, to the last digit printed.
TEST(MultiProcess, AKilledWorkerIsReplacedMidEpochAndTheJobEndsAsItWouldHave) {
  // Worker 1 sleeps 10 ms a clock: 20 clocks an epoch, so a kill 60 ms into epoch 3 is mid-epoch.
  const std::string job = BinDir() +
                          "/pushpull-launch --heartbeat_timeout_ms=1500 --heartbeat_interval_ms=200 "
                          "--servers=1 --workers=2 --consistency=bsp --on_worker_death=wait -- --app=linreg "
                          "--epochs=6 --examples=2000 --progress_s=0 --straggler=1:10";
  auto last_loss = [](const std::string& out) {  // worker 0's, after its last epoch
    const std::string tag = "[worker 0] linreg epoch 6/6 loss ";
    const size_t at = out.rfind(tag);
    return at == std::string::npos ? std::string("none")
                                   : out.substr(at + tag.size(), out.find(' ', at + tag.size()) - at - tag.size());
  };
  std::string plain;
  ASSERT_EQ(RunCommand(job, 120, &plain), 0) << plain;
  pid_t pid = -1;
  bool killed = false;
  std::string out;
  const int code = RunCommandLines(job, 120, &out, [&](const std::string& line) {
    const std::string tag = "started worker 1 (pid ";
    const size_t at = line.find(tag);
    if (at != std::string::npos) pid = std::stoi(line.substr(at + tag.size()));
    if (!killed && pid > 0 && line.find("[worker 1] linreg epoch 2/") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      kill(pid, SIGKILL);
      killed = true;
    }
  });
  ASSERT_TRUE(killed) << out;
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("worker 1 died; starting a new one in its place"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1 replaced: a new worker took its place"), std::string::npos) << out;
  EXPECT_NE(out.find("linreg: taking a dead worker's place in epoch 3 after its step"), std::string::npos) << out;
  EXPECT_NE(out.find("job finished: 2 workers finished"), std::string::npos) << out;
  EXPECT_EQ(last_loss(out), last_loss(plain)) << out;
  EXPECT_NE(last_loss(plain), "none") << plain;
}

// A scheduler that stops running for a while (SIGSTOP here; a slow checkpoint commit or a paused
// VM alike) judges no node by the heartbeats it did not read meanwhile: the job goes on.
TEST(MultiProcess, APausedSchedulerDeclaresNoNodeDead) {
  pid_t pid = -1;
  bool paused = false;
  std::thread resume;
  std::string out;
  const std::string cmd = BinDir() +
                          "/pushpull-launch --heartbeat_timeout_ms=1000 --heartbeat_interval_ms=100 "
                          "--servers=2 --workers=2 -- --app=linreg --epochs=30 --examples=4000 --progress_s=0";
  int code = RunCommandLines(cmd, 90, &out, [&](const std::string& line) {
    const std::string tag = "started scheduler (pid ";
    auto at = line.find(tag);
    if (at != std::string::npos) pid = std::stoi(line.substr(at + tag.size()));
    if (!paused && pid > 0 && line.find("linreg epoch 2/") != std::string::npos) {
      kill(pid, SIGSTOP);
      paused = true;
      resume = std::thread([pid] {
        std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // 3 heartbeat timeouts
        kill(pid, SIGCONT);
      });
    }
  });
  if (resume.joinable()) resume.join();
  ASSERT_TRUE(paused) << out;
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("declared dead"), std::string::npos) << out;
  EXPECT_NE(out.find("not held against any node"), std::string::npos) << out;
  EXPECT_NE(out.find("job succeeded"), std::string::npos) << out;
}

TEST(MultiProcess, SigkilledServerEndsTheJobNamingIt) {
  KillRun r =
      LaunchAndKill("--servers=2 --workers=2 -- --app=linreg --epochs=40 --examples=4000 --progress_s=0", "server 1");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("server 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("job failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;  // the rest stop cleanly
}

// "final_loss=X params_crc=Y" of worker 0's summary line: its loss and the exact final
// parameters ("" when missing).
std::string FinalLoss(const std::string& out) {
  auto at = out.find("linreg summary: worker 0 ");
  if (at == std::string::npos) return "";
  auto field = [&](const std::string& name) {
    auto f = out.find(name, at);
    return f == std::string::npos ? std::string() : out.substr(f, out.find(' ', f) - f);
  };
  const std::string loss = field("final_loss="), crc = field("params_crc=");
  return loss.empty() || crc.empty() ? "" : loss + " " + crc;
}

// The checkpoint tests below: a BSP linreg job over real processes (every epoch's end is a clock
// boundary), its loss when never killed, and a checkpoint directory removed at the end.
struct CheckpointedJob {
  const std::string job = "--servers=2 --workers=2 --consistency=bsp";
  // 80 clocks an epoch: the epochs left after the kill take long enough for it to land first.
  const std::string app = " -- --app=linreg --epochs=8 --examples=8000 --progress_s=0";
  std::string dir, whole_loss, whole;
  CheckpointedJob() {
    char tmpl[] = "/tmp/pushpull-ckpt-test-XXXXXX";
    if (mkdtemp(tmpl)) dir = tmpl;
    if (RunCommand(BinDir() + "/pushpull-launch " + job + app, 120, &whole) == 0) whole_loss = FinalLoss(whole);
  }
  ~CheckpointedJob() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

// A server SIGKILLed after the checkpoint at epoch 4 fails the job; the job relaunched with
// --restore_from resumes after epoch 4 and ends with the loss of a run that was never killed
// (BSP is bitwise reproducible, so equal to the last printed digit).
TEST(MultiProcess, JobRestoredFromACheckpointAfterASigkilledServerEndsAsIfNeverKilled) {
  CheckpointedJob j;
  ASSERT_FALSE(j.dir.empty());
  ASSERT_NE(j.whole_loss, "") << j.whole;
  const std::string app = j.app + " --checkpoint_every_epochs=2";
  KillRun crash = LaunchAndKill(j.job + " --checkpoint_dir=" + j.dir + app, "server 1", "linreg epoch 5/");
  ASSERT_TRUE(crash.killed) << crash.output;
  EXPECT_NE(crash.exit_code, 0);
  EXPECT_NE(crash.output.find("checkpoint at clock 320 complete"), std::string::npos) << crash.output;
  // The job's end names the server, not the first worker that says it was stopped by a signal
  // (the launcher stops every process at once).
  EXPECT_NE(crash.output.find("job aborted: server 1 "), std::string::npos) << crash.output;
  EXPECT_EQ(crash.output.find("job aborted: worker"), std::string::npos) << crash.output;
  // The other processes stop cleanly (no crash on an interrupted wait).
  EXPECT_EQ(crash.output.find("terminate called"), std::string::npos) << crash.output;
  EXPECT_EQ(crash.output.find("signal 6"), std::string::npos) << crash.output;

  std::string resumed;
  int code = RunCommand(
      BinDir() + "/pushpull-launch " + j.job + " --checkpoint_dir=" + j.dir + " --restore_from=" + j.dir + app, 120,
      &resumed);
  EXPECT_EQ(code, 0) << resumed;
  EXPECT_NE(resumed.find("resuming after epoch 4 (clock 320)"), std::string::npos) << resumed;
  EXPECT_EQ(resumed.find("linreg epoch 4/"), std::string::npos) << resumed;  // not trained again
  EXPECT_EQ(FinalLoss(resumed), j.whole_loss) << resumed;
}

// --max_restarts: the launcher itself starts the job again from its newest checkpoint when a
// server is SIGKILLed, and the job succeeds with the uninterrupted run's loss.
TEST(MultiProcess, LauncherRestartsAJobFromItsCheckpointWhenAServerDies) {
  CheckpointedJob j;
  ASSERT_FALSE(j.dir.empty());
  ASSERT_NE(j.whole_loss, "") << j.whole;
  KillRun r =
      LaunchAndKill(j.job + " --max_restarts=1 --checkpoint_dir=" + j.dir + j.app + " --checkpoint_every_epochs=2",
                    "server 1", "linreg epoch 3/");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restart 1 of 1: from the newest checkpoint in " + j.dir), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resuming after epoch 2 (clock 160)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", starting in 1000 ms"), std::string::npos) << r.output;  // --restart_delay_ms
  const size_t restart = r.output.find("restart 1 of 1");
  ASSERT_NE(restart, std::string::npos) << r.output;
  EXPECT_EQ(FinalLoss(r.output.substr(restart)), j.whole_loss) << r.output;
}

// A worker that misses its target is no crash: no restart.
TEST(MultiProcess, LauncherDoesNotRestartAJobThatFailedOnItsOwn) {
  std::string out;
  int code = RunCommand(BinDir() +
                            "/pushpull-launch --max_restarts=2 -- --app=linreg --epochs=1 --examples=500 "
                            "--progress_s=0 --target=1e-9",
                        60, &out);
  EXPECT_EQ(code, 3) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
}

// The Slurm script (deploy/slurm/pushpull.sbatch) under stand-ins for srun and scontrol that run
// each step's tasks on this host: a job runs to its end (exit 0), its scheduler on a free port that
// it hands the other steps in a file; workers that cannot start (exit 2) end the job with their
// code at once, the scheduler stopped rather than left waiting for them; a scheduler that cannot
// listen ends it with its own (2), before any other step starts. A command given to the script
// runs as every worker, its arguments as given, told the job through PUSHPULL_*; one that does
// not exist ends the job with 127 before any step starts.
TEST(MultiProcess, TheSlurmScriptRunsAJobAndEndsWithTheCodeThatSaysWhy) {
  char tmpl[] = "/tmp/pushpull-slurm-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto write_exec = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    std::filesystem::permissions(dir + "/" + name, std::filesystem::perms::owner_all);
  };
  write_exec("scontrol", "#!/bin/bash\necho localhost\n");
  write_exec(
      "srun",
      "#!/bin/bash\n"
      "echo \"$@\" >>\"${0%/*}/steps\"\n"  // (the steps started, beside this file)
      "n=1\n"
      "while [[ $# -gt 0 ]]; do case \"$1\" in --ntasks=*) n=${1#--ntasks=}; shift;; -w) shift 2;; --*) shift;; "
      "*) break;; esac; done\n"
      "if (( n == 1 )); then SLURM_PROCID=0 exec \"$@\"; fi\n"
      "pids=(); for (( i = 0; i < n; ++i )); do SLURM_PROCID=$i \"$@\" & pids+=($!); done\n"
      "trap 'kill -TERM \"${pids[@]}\" 2>/dev/null' TERM\n"  // (srun passes a SIGTERM on to its tasks)
      "rc=0; for p in \"${pids[@]}\"; do while kill -0 \"$p\" 2>/dev/null; do wait \"$p\"; done; wait \"$p\" || rc=$?; "
      "done; exit $rc\n");
  const std::string script = BinDir() + "/../../deploy/slurm/pushpull.sbatch";
  ASSERT_TRUE(std::filesystem::exists(script)) << script;
  auto job = [&](const std::string& extra, const std::string& app_flags, std::string* out,
                 const std::string& latest = "", const std::string& command = "") {
    std::filesystem::remove_all(dir + "/ckpt");
    std::filesystem::remove(dir + "/steps");
    if (!latest.empty()) {  // (a checkpoint to resume from, as a requeued job finds it)
      std::filesystem::create_directories(dir + "/ckpt");
      std::ofstream(dir + "/ckpt/LATEST") << latest << "\n";
    }
    return RunCommand("env PATH=" + dir +
                          ":\"$PATH\" SLURM_NTASKS=4 SLURM_JOB_ID=77 SLURM_JOB_NODELIST=localhost "
                          "SERVERS=1 BIN=" +
                          BinDir() + " CKPT=" + dir + "/ckpt " + extra + " APP_FLAGS='" + app_flags + "' bash " +
                          script + " " + command,
                      90, out);
  };
  std::string out;
  EXPECT_EQ(job("", "--app=linreg --epochs=1", &out), 0) << out;
  EXPECT_NE(out.find("job finished: 2 workers finished"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(job("", "--app=nosuchapp", &out), 2) << out;
  EXPECT_NE(out.find("unknown --app 'nosuchapp'"), std::string::npos) << out;
  EXPECT_NE(out.find("stopping the scheduler"), std::string::npos) << out;
  out.clear();
  // A checkpoint to resume from that is not there: the scheduler says so and ends the job (2),
  // and the servers and workers, started meanwhile, are stopped rather than left to wait out their
  // registration (120 s).
  EXPECT_EQ(job("", "--app=linreg --epochs=1", &out, "ckpt-0000000004"), 2) << out;
  EXPECT_NE(out.find("--restore_from"), std::string::npos) << out;
  EXPECT_NE(out.find("the scheduler ended (exit 2"), std::string::npos) << out;
  out.clear();
  const int busy = TcpProxy::FreePort();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(busy));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_EQ(job("PORT=" + std::to_string(busy), "--app=linreg --epochs=1", &out), 2) << out;
  EXPECT_NE(out.find("Address already in use"), std::string::npos) << out;
  EXPECT_EQ(out.find("[worker"), std::string::npos) << out;
  close(fd);
  out.clear();
  // pushpull-worker given nothing but the environment, behind a shell that shows it; the first
  // argument has two spaces and a glob in it, which must reach the command as one word. APP_FLAGS
  // are pushpull-worker's when no command is given, and unused here.
  EXPECT_EQ(job("CONSISTENCY=ssp:1", "--app=nosuchapp", &out, "",
                "sh -c 'echo \"rank $PUSHPULL_RANK of $PUSHPULL_NUM_WORKERS, $PUSHPULL_NUM_SERVERS server, "
                "$PUSHPULL_CONSISTENCY, $PUSHPULL_SCHEDULER, [$0]\"; exec \"$@\"' 'two  words *' " +
                    BinDir() + "/pushpull-worker --app=linreg --epochs=1"),
            0)
      << out;
  EXPECT_NE(out.find("job finished: 2 workers finished"), std::string::npos) << out;
  for (const char* rank : {"rank 0 of 2, 1 server, ssp:1, tcp://localhost:", "rank 1 of 2, 1 server, ssp:1, "})
    EXPECT_NE(out.find(rank), std::string::npos) << rank << " in " << out;
  EXPECT_NE(out.find(", [two  words *]\n"), std::string::npos) << out;
  EXPECT_NE(out.find("linreg summary: worker 1 consistency=ssp:1 "), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/steps"));  // (the stand-in's record, looked for next)
  for (const std::string& missing : {std::string("no-such-trainer --epochs=1"), dir + "/no-such-trainer"}) {
    out.clear();
    EXPECT_EQ(job("", "--app=linreg --epochs=1", &out, "", missing), 127) << out;
    EXPECT_NE(out.find("pushpull.sbatch: command '" + missing.substr(0, missing.find(' ')) + "': "), std::string::npos)
        << out;
    EXPECT_NE(out.find("; no step started"), std::string::npos) << out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/steps")) << out;
  }
  std::filesystem::remove_all(dir);
}

// The Kubernetes manifest (deploy/kubernetes/pushpull.yaml) tells every worker where the job is,
// as pushpull-launch does: the scheduler's Service address, the rank from the Indexed Job's
// completion index, and counts that agree with the Jobs and the scheduler's flags. (Parsed with
// Debian's python3 and its yaml module, which make deps installs.)
TEST(MultiProcess, TheKubernetesManifestTellsEveryWorkerWhereTheJobIs) {
  std::string out;
  const std::string check = ::testing::TempDir() + "/check_manifest-" + std::to_string(getpid()) + ".py";
  std::ofstream(check)
      << "import sys, yaml\n"
         "docs = {d['kind'] + '/' + d['metadata']['name']: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}\n"
         "def job(name): return docs['Job/' + name]['spec']\n"
         "def container(name): return job(name)['template']['spec']['containers'][0]\n"
         "env = {e['name']: e.get('value', e.get('valueFrom')) for e in container('pushpull-worker')['env']}\n"
         "sched = container('pushpull-scheduler')['args']\n"
         "port = docs['Service/pushpull-scheduler']['spec']['ports'][0]['port']\n"
         "assert env['PUSHPULL_SCHEDULER'] == 'tcp://pushpull-scheduler:%d' % port, env\n"
         "assert '--port=%d' % port in sched, sched\n"
         "assert env['PUSHPULL_RANK'] == {'fieldRef': {'fieldPath': "
         "\"metadata.annotations['batch.kubernetes.io/job-completion-index']\"}}, env\n"
         "for role in ('worker', 'server'):\n"
         "  n = env['PUSHPULL_NUM_%sS' % role.upper()]\n"
         "  spec = job('pushpull-' + role)\n"
         "  assert spec['completionMode'] == 'Indexed', spec\n"
         "  assert str(spec['completions']) == str(spec['parallelism']) == n, (role, n, spec['completions'])\n"
         "  assert '--num_%ss=%s' % (role, n) in sched, (role, n, sched)\n"
         "assert env['PUSHPULL_CONSISTENCY'] in ('bsp', 'asp') or env['PUSHPULL_CONSISTENCY'].startswith('ssp:'), env\n"
         "print('manifest ok:', container('pushpull-worker')['command'], sorted(env))\n";
  out.clear();
  EXPECT_EQ(
      RunCommand("/usr/bin/python3 " + check + " " + BinDir() + "/../../deploy/kubernetes/pushpull.yaml", 30, &out), 0)
      << out;
  EXPECT_NE(out.find("manifest ok: ['pushpull-worker']"), std::string::npos) << out;
  std::filesystem::remove(check);
}

// Nor one whose worker misses its data: the same file is missing again (exit 2).
TEST(MultiProcess, LauncherDoesNotRestartAJobMissingItsData) {
  std::string out;
  int code = RunCommand(BinDir() +
                            "/pushpull-launch --max_restarts=2 -- --app=fmnist_mlp --data_dir=/nonexistent "
                            "--epochs=1",
                        60, &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
  // The worker looks for its data before it joins the job: it says why at once, and the job ends
  // then, not a heartbeat timeout later.
  EXPECT_NE(out.find("NotFound: cannot open /nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << out;
  EXPECT_EQ(out.find("registering with the scheduler at"), out.rfind("registering with the scheduler at"))
      << out << "(only the server registers)";
  EXPECT_EQ(out.find("sent no heartbeat"), std::string::npos) << out;
}

// Nor one whose table outgrew its server's --max_table_mb: it would again. The worker stopping
// while the launcher signals every process exits cleanly (without calling into its freed client).
TEST(MultiProcess, LauncherDoesNotRestartAJobPastItsTableMemory) {
  std::string out;
  int code = RunCommand(BinDir() + "/pushpull-launch --max_table_mb=1 --max_restarts=2 -- --app=sparse_lr --epochs=1",
                        60, &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find(" stopped: ResourceExhausted: worker 0: sparse_lr: server 0: table 'sparse_lr.w': "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("past their limit of 1.0 MB (--max_table_mb"), std::string::npos) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
  EXPECT_EQ(out.find("killed by signal"), std::string::npos) << out;
}

// A scheduler that fails at once (nothing to restore from): the launcher stops the servers and
// workers it had just started with SIGTERM, which they heed wherever they are, also a child that
// has not yet exec'd (the launcher's own handler, still installed there, would otherwise take the
// signal and lose it, and the daemon be killed after --grace_ms).
TEST(MultiProcess, LauncherStopsChildrenItJustStartedWithoutKillingThem) {
  std::string out;
  const int code = RunCommand(BinDir() +
                                  "/pushpull-launch --servers=2 --workers=2 --restore_from=/nonexistent/ckpt "
                                  "-- --app=linreg --epochs=1",
                              60, &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--restore_from"), std::string::npos) << out;
  EXPECT_EQ(out.find("did not exit in time"), std::string::npos) << out;
  EXPECT_EQ(out.find("signal 9"), std::string::npos) << out;
}

// Nor one whose app's data does not fit in the worker's memory: linreg with a huge --dim or
// --examples says so and exits 2, rather than abort on an uncaught std::bad_alloc (signal 6, which
// the launcher restarts into).
TEST(MultiProcess, AWorkerOutOfMemoryForItsDataSaysSoAndIsNotRestarted) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // A sanitizer's allocator ends the process on a request this large instead of throwing.
  GTEST_SKIP() << "a sanitizer build cannot fail an allocation with bad_alloc";
#endif
  std::string out;
  int code = RunCommand(
      BinDir() + "/pushpull-launch --max_restarts=2 -- --app=linreg --epochs=1 --examples=2000000000 --dim=100000", 60,
      &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("ResourceExhausted: worker 0: linreg: out of memory on this worker"), std::string::npos) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
  EXPECT_EQ(out.find("killed by signal"), std::string::npos) << out;
}

// Neither is a worker that --on_worker_death=continue let go, when the job later fails on its own
// (its target missed: exit 3). Killed, or stopped by SIGTERM (it then tells the scheduler and
// exits 1): the job goes on. And when the job then finishes, it succeeded: such a worker does not
// count as its failure in the end (though one stopped by SIGTERM exits 1).
TEST(MultiProcess, LauncherDoesNotRestartForAToleratedWorkerDeath) {
  struct Case {
    int sig;
    const char* target;
    int want;
  };
  for (const Case& c : {Case{SIGKILL, " --target=1e-9", 3}, Case{SIGTERM, " --target=1e-9", 3}, Case{SIGTERM, "", 0}}) {
    SCOPED_TRACE(std::string(c.sig == SIGKILL ? "SIGKILL" : "SIGTERM") + c.target);
    KillRun r = LaunchAndKill(std::string("--servers=1 --workers=2 --on_worker_death=continue --max_restarts=1 -- "
                                          "--app=linreg --epochs=40 --examples=4000 --progress_s=0") +
                                  c.target,
                              "worker 1", "linreg epoch 2/", c.sig);
    ASSERT_TRUE(r.killed) << r.output;
    EXPECT_EQ(r.exit_code, c.want) << r.output;
    EXPECT_NE(r.output.find("worker 1 died; the job goes on without it"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("restart 1"), std::string::npos) << r.output;
    if (c.want == 0) {
      EXPECT_NE(r.output.find("job succeeded"), std::string::npos) << r.output;
    }
  }
}

// The launcher stopped by SIGTERM stops the job and exits 128 + 15 (143), not as if interrupted
// from the keyboard (130).
TEST(MultiProcess, LauncherStoppedBySigtermExits143) {
  std::string out;
  const int rc = RunCommand("timeout --preserve-status -s TERM 3 " + BinDir() +
                                "/pushpull-launch --servers=1 --workers=1 -- --app=linreg --epochs=100000 "
                                "--examples=4000 --progress_s=0",
                            60, &out);
  EXPECT_EQ(rc, 143) << out;
  EXPECT_NE(out.find("terminated; stopping every process"), std::string::npos) << out;
}

// A Ctrl-C at the terminal (SIGINT to the launcher's whole process group, as the terminal sends
// it) stops every process once, cleanly: the children have process groups of their own, so each
// gets only the launcher's SIGTERM (with the terminal's SIGINT too, it would take the SIGTERM for
// a second signal and exit at once, 143, without telling the job).
TEST(MultiProcess, ACtrlCStopsEveryProcessCleanly) {
  std::string out;
  const int rc = RunCommand("sh -c 'setsid " + BinDir() +
                                "/pushpull-launch --servers=1 --workers=1 -- --app=linreg --epochs=100000 "
                                "--examples=4000 --progress_s=0 & p=$!; sleep 3; /bin/kill -s INT -- -$p; wait $p'",
                            60, &out);
  EXPECT_EQ(rc, 130) << out;
  EXPECT_NE(out.find("interrupted; stopping every process"), std::string::npos) << out;
  EXPECT_EQ(out.find("exited with status 143"), std::string::npos) << out;
}

// A daemon (here a server waiting for a scheduler that is not there) stops on SIGTERM at once,
// also while it registers (not after its 120 s registration deadline); and a second signal
// before the first's clean stop is done kills it by that signal, as its parent sees it (a
// launcher replaces or restarts it as a process killed from outside), rather than exiting 143
// as if it had chosen to.
TEST(MultiProcess, SignalsStopADaemonAtOnceAndASecondKillsIt) {
  const std::string bin = BinDir() + "/pushpull-server";
  auto start = [&] {
    pid_t pid = fork();
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execl(bin.c_str(), bin.c_str(), "--scheduler=tcp://127.0.0.1:1", "--register_timeout_ms=60000",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // (registering, its handlers installed)
    return pid;
  };
  auto wait = [](pid_t pid, int* st) {  // true when it ended within 10 s
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid, st, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid, SIGKILL);
    waitpid(pid, st, 0);
    return false;
  };
  int st = 0;
  pid_t pid = start();
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  ASSERT_TRUE(wait(pid, &st)) << "still registering 10 s after SIGTERM";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  // Two signals at once (held while it is stopped, delivered together: one of a kind would merge).
  pid = start();
  ASSERT_GT(pid, 0);
  kill(pid, SIGSTOP);
  kill(pid, SIGINT);
  kill(pid, SIGTERM);
  kill(pid, SIGCONT);
  ASSERT_TRUE(wait(pid, &st));
  EXPECT_TRUE(WIFSIGNALED(st)) << "exited " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  if (WIFSIGNALED(st)) {
    EXPECT_TRUE(WTERMSIG(st) == SIGINT || WTERMSIG(st) == SIGTERM) << WTERMSIG(st);
  }
}

// A restart uses only checkpoints its own job wrote: one an earlier job left in the directory is
// not resumed (here the server dies before this job's first checkpoint).
TEST(MultiProcess, LauncherRestartIgnoresAnEarlierJobsCheckpoint) {
  CheckpointedJob j;
  ASSERT_FALSE(j.dir.empty());
  std::string earlier;
  ASSERT_EQ(RunCommand(BinDir() + "/pushpull-launch " + j.job + " --checkpoint_dir=" + j.dir + j.app +
                           " --checkpoint_every_epochs=2",
                       120, &earlier),
            0)
      << earlier;
  KillRun r =
      LaunchAndKill(j.job + " --max_restarts=1 --checkpoint_dir=" + j.dir + j.app + " --checkpoint_every_epochs=4",
                    "server 1", "linreg epoch 1/");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restart 1 of 1: from the start (no checkpoint of this job)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("resuming after"), std::string::npos) << r.output;
  const size_t restart = r.output.find("restart 1 of 1");
  ASSERT_NE(restart, std::string::npos) << r.output;
  EXPECT_EQ(FinalLoss(r.output.substr(restart)), j.whole_loss) << r.output;
}

}  // namespace
}  // namespace pushpull
