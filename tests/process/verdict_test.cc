// A job's verdict names its first real cause, with that cause's exit code, and pushpull-launch and
// the scheduler name the same one: the process that died (its rank, and its signal or exit
// status), a diverged model, a missed target, a dead scheduler. Real processes under the launcher.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/local_cluster.h"

namespace pushpull {
namespace {

std::string Launch() { return BinDir() + "/pushpull-launch --heartbeat_timeout_ms=1500 --heartbeat_interval_ms=200 "; }

// The launcher's last line: "[launch] job failed (exit N): CAUSE".
std::string LastLine(const std::string& out) {
  const size_t at = out.rfind("[launch] job ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// The scheduler's "job aborted: CAUSE" line, without its log prefix.
std::string SchedulerVerdict(const std::string& out) {
  const size_t at = out.find("job aborted: ");
  return at == std::string::npos ? "" : out.substr(at + 13, out.find('\n', at) - at - 13);
}

// Both lines name `who` and `what`, and the launcher's ends with the scheduler's cause.
void ExpectAgreeOn(const std::string& out, const std::string& who, const std::string& what) {
  const std::string last = LastLine(out), scheduler = SchedulerVerdict(out);
  EXPECT_NE(last.find(who), std::string::npos) << last << "\n" << out;
  EXPECT_NE(last.find(what), std::string::npos) << last << "\n" << out;
  EXPECT_NE(scheduler.find(who), std::string::npos) << scheduler << "\n" << out;
  EXPECT_NE(scheduler.find(what), std::string::npos) << scheduler << "\n" << out;
  ASSERT_FALSE(scheduler.empty()) << out;
  EXPECT_NE(last.find(scheduler), std::string::npos) << "launcher: " << last << "\nscheduler: " << scheduler;
}

TEST(Verdict, AKilledWorkerIsNamedWithItsSignalByBoth) {
  KillRun r = LaunchAndKill("--servers=2 --workers=3 -- --app=linreg --epochs=200 --examples=2000", "worker 1",
                            "[worker 1] linreg epoch 2/");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ExpectAgreeOn(r.output, "worker 1", "killed by signal 9");
  // Not a healthy worker, nor a server the launcher stopped.
  EXPECT_EQ(SchedulerVerdict(r.output).find("worker 0"), std::string::npos) << r.output;
  EXPECT_EQ(SchedulerVerdict(r.output).find("without a server"), std::string::npos) << r.output;
}

// A user's program that returns 1 (its own error) is named with its exit status, not the workers
// the job's end then stops: one that joined the job (here a Python program that connects, then
// exits 1 without finish()), and one that exits before it joined.
TEST(Verdict, AProgramThatExitsOneIsNamedWithItsExitStatus) {
  const std::string script = ::testing::TempDir() + "/verdict_exit_one.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\n"
         "if [ \"$PUSHPULL_RANK\" = 2 ]; then\n"
         "  exec /usr/bin/python3 -c 'import sys, time, pushpull; c = pushpull.connect(); time.sleep(1); sys.exit(1)'\n"
         "fi\n"
         "exec \"$@\"\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  // (The Python package is not built in a sanitizer build.)
  const std::string python = BinDir() + "/../python";
  bool have_python = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(python + "/pushpull", ec))
    have_python = have_python || e.path().filename().string().rfind("_core", 0) == 0;
  if (have_python) {
    std::string out;
    const int rc = RunCommand("env PYTHONPATH=" + python + " " + Launch() + "--servers=2 --workers=3 -- " + script +
                                  " " + BinDir() + "/pushpull-worker --app=linreg --epochs=100000",
                              90, &out);
    EXPECT_EQ(rc, 1) << out;
    ExpectAgreeOn(out, "worker 2", "exited with status 1");
    EXPECT_EQ(SchedulerVerdict(out).find("before the job started"), std::string::npos) << out;
  }

  std::string early;
  EXPECT_EQ(RunCommand(Launch() + "--servers=1 --workers=2 -- sh -c '" +
                           "if [ \"$PUSHPULL_RANK\" = 1 ]; then exit 1; fi; exec \"$0\" \"$@\"' " + BinDir() +
                           "/pushpull-worker --app=linreg --epochs=100000",
                       90, &early),
            1)
      << early;
  ExpectAgreeOn(early, "worker 1", "exited with status 1");
  EXPECT_NE(SchedulerVerdict(early).find("before the job started"), std::string::npos) << early;
}

// A learning rate that blows the model up: the refused NaN push is the verdict, exit 4, not the
// protocol error the worker's next call would otherwise meet.
TEST(Verdict, ADivergedModelEndsTheJobSayingSo) {
  std::string out;
  const int rc = RunCommand(Launch() + "--servers=2 --workers=2 -- --app=linreg --epochs=5 --lr=1e9", 90, &out);
  EXPECT_EQ(rc, 4) << out;
  ExpectAgreeOn(out, "the job diverged", "lower the learning rate or clip gradients");
  EXPECT_NE(LastLine(out).find("table '"), std::string::npos) << out;
  EXPECT_EQ(LastLine(out).find("tagged clock"), std::string::npos) << out;
  EXPECT_EQ(SchedulerVerdict(out).find("tagged clock"), std::string::npos) << out;
}

TEST(Verdict, AMissedTargetIsTheVerdictWithExitThree) {
  std::string out;
  const int rc = RunCommand(Launch() + "--servers=1 --workers=2 -- --app=linreg --epochs=2 --target=1e-12", 90, &out);
  EXPECT_EQ(rc, 3) << out;
  ExpectAgreeOn(out, "worker ", "missed target: loss ");
}

// A killed scheduler: the launcher names it (nothing else can), and stops the job at once.
TEST(Verdict, AKilledSchedulerIsNamedByTheLauncher) {
  KillRun r = LaunchAndKill("--servers=1 --workers=2 -- --app=linreg --epochs=100000 --examples=2000", "scheduler",
                            "[worker 1] linreg epoch 2/");
  ASSERT_TRUE(r.killed) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string last = LastLine(r.output);
  EXPECT_NE(last.find("the scheduler (pid "), std::string::npos) << r.output;
  EXPECT_NE(last.find("killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(last.find("the job cannot go on without it"), std::string::npos) << r.output;
}

TEST(Verdict, ABareLauncherAndDashHPrintUsage) {
  std::string bare, help;
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch", 30, &bare), 2) << bare;
  EXPECT_NE(bare.find("usage: pushpull-launch"), std::string::npos) << bare;
  EXPECT_NE(bare.find("nothing to run"), std::string::npos) << bare;
  EXPECT_EQ(bare.find("[launch] started"), std::string::npos) << bare;
  for (const char* flag : {"-h", "--help"}) {
    EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch " + flag, 30, &help), 0) << flag << help;
    EXPECT_NE(help.find("usage: pushpull-launch"), std::string::npos) << flag << help;
    EXPECT_NE(help.find("--servers"), std::string::npos) << flag << help;
  }
}

}  // namespace
}  // namespace pushpull
