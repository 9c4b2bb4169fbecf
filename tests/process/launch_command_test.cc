// pushpull-launch running a command of the user's as every worker, as torchrun does: the command
// finds the job in its environment, and fails, exits early, is killed or is missing with the
// same consequences as pushpull-worker.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <utility>

#include "tests/support/local_cluster.h"

namespace pushpull {
namespace {

std::string Launch() { return BinDir() + "/pushpull-launch --heartbeat_timeout_ms=1500 --heartbeat_interval_ms=200 "; }

// A command run under sh -c, its words quoted for the shell that runs the test's command line.
std::string Sh(const std::string& script) { return "sh -c '" + script + "' "; }

TEST(LaunchCommand, ACommandThatDoesNotExistIsRefusedBeforeAnyProcessStarts) {
  const std::string data = ::testing::TempDir() + "/launch_command_not_a_program";
  { std::ofstream(data) << "not a program\n"; }
  ASSERT_EQ(chmod(data.c_str(), 0644), 0);
  for (auto [command, says] : {std::pair<std::string, std::string>{"no-such-trainer-here --epochs=1",
                                                                   "command 'no-such-trainer-here' not found in PATH"},
                               {"./no/such/trainer", "command './no/such/trainer': no such file"},
                               {data, "command '" + data + "': not an executable file"}}) {
    std::string out;
    EXPECT_EQ(RunCommand(Launch() + "--servers=2 --workers=2 -- " + command, 30, &out), 127) << out;
    EXPECT_NE(out.find(says), std::string::npos) << out;
    EXPECT_NE(out.find("; no process started"), std::string::npos) << out;
    EXPECT_EQ(out.find("[launch] started"), std::string::npos) << out;
  }
}

// Every worker is told where the job is, its rank and the job's shape; a real client (here
// pushpull-worker given no flag about the job, started by a shell) joins with nothing else,
// takes the job's consistency, finishes, and the job succeeds.
TEST(LaunchCommand, AnyCommandRunsAsEveryWorkerFindingTheJobInItsEnvironment) {
  std::string out;
  const int rc =
      RunCommand(Launch() + "--servers=2 --workers=2 --consistency=ssp:1 -- " +
                     Sh("echo \"env $PUSHPULL_RANK/$PUSHPULL_NUM_WORKERS $PUSHPULL_NUM_SERVERS $PUSHPULL_CONSISTENCY "
                        "$PUSHPULL_SCHEDULER $PUSHPULL_REGISTER_TIMEOUT_MS\"; exec \"$0\" \"$@\"") +
                     BinDir() + "/pushpull-worker --app=linreg --epochs=2 --progress_s=0",
                 90, &out);
  EXPECT_EQ(rc, 0) << out;
  for (const char* rank : {"0", "1"}) {
    const std::string tag = std::string("worker ") + rank + " | env " + rank + "/2 2 ssp:1 tcp://127.0.0.1:";
    EXPECT_NE(out.find(tag), std::string::npos) << tag << "\n" << out;
    EXPECT_NE(out.find(std::string("linreg summary: worker ") + rank + " consistency=ssp:1 workers=2"),
              std::string::npos)
        << out;
  }
  EXPECT_NE(out.find(" 120000\n"), std::string::npos) << out;  // the registration deadline, passed on
  EXPECT_NE(out.find("job finished: 2 workers finished"), std::string::npos) << out;
  EXPECT_NE(out.find("job succeeded"), std::string::npos) << out;
}

// A command that fails is a worker that died: the job fails with it, and --max_restarts starts
// the job again, command and all.
TEST(LaunchCommand, ACommandThatFailsFailsTheJobAndIsRestartedWithIt) {
  std::string out;
  const int rc = RunCommand(
      Launch() + "--workers=2 --max_restarts=1 --restart_delay_ms=50 -- " + Sh("echo attempt; exit 1"), 60, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("worker 0 | attempt"), std::string::npos) << out;
  EXPECT_NE(out.find("restart 1 of 1"), std::string::npos) << out;
  EXPECT_NE(out.find("job failed (exit 1)"), std::string::npos) << out;
  // Its own status otherwise, as pushpull-worker's (3: a missed target), and not restarted.
  std::string missed;
  EXPECT_EQ(RunCommand(Launch() + "--max_restarts=2 -- " + Sh("exit 3"), 60, &missed), 3) << missed;
  EXPECT_EQ(missed.find("restart 1"), std::string::npos) << missed;
}

// A command that exits 0 without finishing (never joined, or returned before Client::Finish())
// left the job early: the launcher takes it for dead at once, rather than the job waiting for
// it; one that finished and then exited 0 is no such thing (the job above succeeded).
TEST(LaunchCommand, ACommandThatExitsZeroWithoutFinishingIsTakenForDead) {
  std::string out;
  const int rc = RunCommand(Launch() + "--workers=2 -- " +
                                Sh("if [ \"$PUSHPULL_RANK\" = 1 ]; then exit 0; fi; exec \"$0\" \"$@\"") + BinDir() +
                                "/pushpull-worker --app=linreg --epochs=1000 --progress_s=0",
                            60, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("worker 1 (pid"), std::string::npos) << out;
  EXPECT_NE(out.find("exited 0 but never finished"), std::string::npos) << out;
  EXPECT_NE(out.find("job failed (exit 1)"), std::string::npos) << out;
}

// --on_worker_death=wait: the killed command is started again in its place, with the same
// environment (its rank among it), and the job finishes.
TEST(LaunchCommand, AKilledCommandIsStartedAgainInItsPlace) {
  KillRun r =
      LaunchAndKill("--servers=1 --workers=2 --on_worker_death=wait -- " + BinDir() +
                        "/pushpull-worker --app=linreg --epochs=6 --examples=2000 --progress_s=0 --straggler=1:10",
                    "worker 1", "[worker 1] linreg epoch 2/");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("worker 1 died; starting a new one in its place"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("takes a dead worker's place"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("job succeeded"), std::string::npos) << r.output;
}

// A Ctrl-C stops a job of commands as it stops pushpull-workers: each gets one SIGTERM.
TEST(LaunchCommand, ACtrlCStopsTheCommands) {
  std::string out;
  const int rc = RunCommand("sh -c 'setsid " + BinDir() +
                                "/pushpull-launch --servers=1 --workers=2 -- sleep 600 & p=$!; sleep 2; "
                                "/bin/kill -s INT -- -$p; wait $p'",
                            60, &out);
  EXPECT_EQ(rc, 130) << out;
  EXPECT_NE(out.find("interrupted; stopping every process"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1 (pid"), std::string::npos) << out;
  EXPECT_EQ(out.find("did not exit in time"), std::string::npos) << out;
}

}  // namespace
}  // namespace pushpull
