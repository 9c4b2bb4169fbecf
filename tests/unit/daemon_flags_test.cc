// The flags pushpull-launch shares with the daemons (common/daemon/daemon_flags.h): each defined once,
// and passed on by the launcher to every daemon that takes it, with the value it was given.
#include "common/daemon/daemon_flags.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "deploy/launch/commands.h"

namespace pushpull {
namespace {

using launch::Command;
using launch::JobOptions;

int Count(const std::vector<std::string>& argv, const std::string& prefix) {
  return static_cast<int>(
      std::count_if(argv.begin(), argv.end(), [&](const std::string& a) { return a.rfind(prefix, 0) == 0; }));
}

bool Has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

JobOptions TwoByTwo() {
  JobOptions o;
  o.bin_dir = "/bin-dir";
  o.worker = Command({"/bin-dir/pushpull-worker", "--app=linreg"});
  o.servers = 2;
  o.workers = 2;
  return o;
}

// Every command line the launcher starts a job with, by the daemon that runs it.
std::map<unsigned, std::vector<std::vector<std::string>>> CommandsOf(const JobOptions& o) {
  std::map<unsigned, std::vector<std::vector<std::string>>> out;
  out[kSchedulerFlag].push_back(launch::SchedulerCommand(o, "/tmp/e", "/tmp/v").argv);
  for (int s = 0; s < o.servers; ++s) out[kServerFlag].push_back(launch::ServerCommand(o, "tcp://h:1", s).argv);
  for (int w = 0; w < o.workers; ++w) out[kWorkerFlag].push_back(launch::WorkerCommand(o, "tcp://h:1", w).argv);
  return out;
}

// A value of the flag's type that is not its current one.
std::string OtherValue(const gflags::CommandLineFlagInfo& info) {
  if (info.type == "bool") return info.current_value == "true" ? "false" : "true";
  if (info.type == "string") return "changed-" + info.name;
  return std::to_string(std::stoll(info.current_value) + 1000 + static_cast<long long>(info.name.size()));
}

TEST(DaemonFlags, EachIsDefinedOnceInTheTableFile) {
  ASSERT_FALSE(DaemonFlags().empty());
  std::vector<std::string> names;
  for (const DaemonFlag& f : DaemonFlags()) {
    names.push_back(f.name);
    gflags::CommandLineFlagInfo info;
    ASSERT_TRUE(gflags::GetCommandLineFlagInfo(f.name, &info)) << f.name;
    EXPECT_EQ(info.filename, "common/daemon/daemon_flags.cc") << f.name;
    EXPECT_NE(f.roles & kEveryDaemonFlag, 0u) << f.name << ": taken by no daemon";
    EXPECT_FALSE(info.description.empty()) << f.name;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "a name twice in the table";
  // And every flag that file defines is in the table (none defined beside it, unforwarded).
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  for (const auto& info : all) {
    if (info.filename == "common/daemon/daemon_flags.cc") {
      EXPECT_TRUE(std::binary_search(names.begin(), names.end(), info.name)) << info.name << " is not in the table";
    }
  }
}

// Each daemon's command line carries every entry that daemon takes, once, and none other.
TEST(DaemonFlags, TheLauncherPassesEveryEntryToEachDaemonThatTakesIt) {
  const auto commands = CommandsOf(TwoByTwo());
  for (const DaemonFlag& f : DaemonFlags()) {
    for (unsigned role : {kSchedulerFlag, kServerFlag, kWorkerFlag}) {
      for (const auto& argv : commands.at(role)) {
        EXPECT_EQ(Count(argv, std::string("--") + f.name + "="), (f.roles & role) ? 1 : 0)
            << "--" << f.name << " to " << DaemonRoleNames(role) << ": " << argv[0];
      }
    }
  }
}

// A value given to the launcher is the one each daemon that takes the flag is started with.
TEST(DaemonFlags, AChangedValueReachesTheChildsCommandLine) {
  gflags::FlagSaver saver;
  std::map<std::string, std::string> given;
  for (const DaemonFlag& f : DaemonFlags()) {
    const std::string v = OtherValue(gflags::GetCommandLineFlagInfoOrDie(f.name));
    ASSERT_FALSE(gflags::SetCommandLineOption(f.name, v.c_str()).empty()) << f.name << "=" << v;
    given[f.name] = v;
  }
  JobOptions o = TwoByTwo();
  o.restore_from = given["restore_from"];  // (the launcher's per-run value: the flag's, on a first run)
  const auto commands = CommandsOf(o);
  for (const DaemonFlag& f : DaemonFlags()) {
    for (unsigned role : {kSchedulerFlag, kServerFlag, kWorkerFlag}) {
      if ((f.roles & role) == 0) continue;
      for (const auto& argv : commands.at(role)) {
        EXPECT_TRUE(Has(argv, std::string("--") + f.name + "=" + given[f.name]))
            << "--" << f.name << "=" << given[f.name] << " not given to " << argv[0];
      }
    }
  }
}

TEST(DaemonFlags, TheSchedulerIsGivenThisRunsRestoreFrom) {
  gflags::FlagSaver saver;
  gflags::SetCommandLineOption("restore_from", "/first/run");
  JobOptions o = TwoByTwo();
  o.restore_from = "/checkpoints/of/this/job";  // (a restart's)
  const Command c = launch::SchedulerCommand(o, "/tmp/e", "/tmp/v");
  EXPECT_TRUE(Has(c.argv, "--restore_from=/checkpoints/of/this/job"));
  EXPECT_EQ(Count(c.argv, "--restore_from="), 1);
}

TEST(DaemonFlags, EachServerGetsAMetricsPortOfItsOwn) {
  JobOptions o = TwoByTwo();
  o.metrics_port = 9100;
  EXPECT_TRUE(Has(launch::SchedulerCommand(o, "e", "v").argv, "--metrics_port=9100"));
  EXPECT_TRUE(Has(launch::ServerCommand(o, "tcp://h:1", 0).argv, "--metrics_port=9101"));
  EXPECT_TRUE(Has(launch::ServerCommand(o, "tcp://h:1", 1).argv, "--metrics_port=9102"));
  o.metrics_port = 0;  // (free ports: the same 0 to each)
  EXPECT_TRUE(Has(launch::ServerCommand(o, "tcp://h:1", 1).argv, "--metrics_port=0"));
  EXPECT_EQ(Count(launch::WorkerCommand(o, "tcp://h:1", 0).argv, "--metrics_port"), 0);
}

// pushpull-worker is given the job by its flags, before the user's; a user's own command gets
// none, only its environment, which carries the launcher's values.
TEST(DaemonFlags, AUsersCommandFindsTheValuesInItsEnvironment) {
  gflags::FlagSaver saver;
  gflags::SetCommandLineOption("consistency", "ssp:2");
  gflags::SetCommandLineOption("register_timeout_ms", "7777");
  JobOptions o = TwoByTwo();
  const Command pp = launch::WorkerCommand(o, "tcp://h:1", 1);
  ASSERT_GE(pp.argv.size(), 3u);
  EXPECT_EQ(pp.argv[1], "--scheduler=tcp://h:1");
  EXPECT_EQ(pp.argv.back(), "--app=linreg");  // (the user's last: it cannot be overridden by ours)
  EXPECT_TRUE(Has(pp.argv, "--rank=1"));
  o.worker = Command({"python3", "train.py"});
  o.worker.exe = "/usr/bin/python3";
  const Command own = launch::WorkerCommand(o, "tcp://h:1", 1);
  EXPECT_EQ(own.argv, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_TRUE(own.status_pipe);
  for (const char* e :
       {"PUSHPULL_RANK=1", "PUSHPULL_NUM_WORKERS=2", "PUSHPULL_NUM_SERVERS=2", "PUSHPULL_CONSISTENCY=ssp:2",
        "PUSHPULL_REGISTER_TIMEOUT_MS=7777", "PUSHPULL_SCHEDULER=tcp://h:1"})
    EXPECT_TRUE(Has(own.env, e)) << e;
}

// A flag pushpull-worker is given by the launcher is refused after "--", where it would override
// the launcher's.
TEST(DaemonFlags, TheWorkersEntriesAreRefusedAfterTheDashes) {
  for (const DaemonFlag& f : DaemonFlags()) {
    const std::string arg = std::string("--") + f.name + "=1";
    EXPECT_EQ(launch::RefuseWorkerFlags({"--app=linreg", arg}, 1, 1), (f.roles & kWorkerFlag) ? 2 : 0) << arg;
  }
  EXPECT_EQ(launch::RefuseWorkerFlags({"--rank=0"}, 1, 1), 2);
  EXPECT_EQ(launch::RefuseWorkerFlags({"--app=linreg", "--epochs=2"}, 1, 1), 0);
}

// The launcher's defaults where they differ from the daemons', as defaults: --help shows them, a
// value given still wins.
TEST(DaemonFlags, TheLauncherDefaultsAreDefaults) {
  gflags::FlagSaver saver;
  int overridden = 0;
  for (const DaemonFlag& f : DaemonFlags()) {
    if (f.launcher_default == nullptr) continue;
    ++overridden;
    EXPECT_NE(gflags::GetCommandLineFlagInfoOrDie(f.name).default_value, f.launcher_default) << f.name;
  }
  EXPECT_GE(overridden, 1);
  gflags::SetCommandLineOption("replacement_timeout_s", "45");  // (given on the command line)
  UseLauncherDefaults();
  for (const DaemonFlag& f : DaemonFlags()) {
    if (f.launcher_default == nullptr) continue;
    const auto info = gflags::GetCommandLineFlagInfoOrDie(f.name);
    EXPECT_EQ(info.default_value, f.launcher_default) << f.name;
    EXPECT_EQ(info.current_value, f.name == std::string("replacement_timeout_s") ? "45" : f.launcher_default) << f.name;
  }
}

// Each daemon takes, and --help lists, its own entries; the others, linked into it all the same,
// are refused as unknown flags. The launcher takes them all, its --help saying where each goes.
TEST(DaemonFlags, EachDaemonTakesItsEntriesOnly) {
  const FlagSelection server = DaemonFlagSelection("server_main", kServerFlag);
  EXPECT_EQ(server.flag_file, std::string("server_main"));
  for (const DaemonFlag& f : DaemonFlags()) {
    const bool shared = std::count(server.shared.begin(), server.shared.end(), f.name) == 1;
    const bool refused = std::count(server.refused.begin(), server.refused.end(), f.name) == 1;
    EXPECT_EQ(shared, (f.roles & kServerFlag) != 0) << f.name;
    EXPECT_NE(shared, refused) << f.name;
  }
  EXPECT_TRUE(server.help_prefix.empty());
  const FlagSelection launcher = DaemonFlagSelection("launch_main", kEveryDaemonFlag, true);
  EXPECT_TRUE(launcher.refused.empty());
  EXPECT_EQ(launcher.shared.size(), DaemonFlags().size());
  EXPECT_EQ(launcher.help_prefix.at("heartbeat_timeout_ms"), "scheduler: ");
  EXPECT_EQ(launcher.help_prefix.at("heartbeat_interval_ms"), "servers and workers: ");
  EXPECT_EQ(launcher.help_prefix.at("register_timeout_ms"), "every process: ");
}

}  // namespace
}  // namespace pushpull
