// ClientOptions left at their defaults read the job from the environment pushpull-launch sets;
// fields set in code win; a value there that does not parse is refused naming it; a finished
// worker tells its launcher through the pipe named there, and nothing else.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"
#include "worker/job_environment.h"

namespace pushpull {
namespace {

using internal::ResolveOptions;

// Sets the launcher's variables for one test and removes them after it.
class JobEnvironment : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {internal::kEnvScheduler, internal::kEnvRank, internal::kEnvConsistency,
                          internal::kEnvHeartbeatIntervalMs, internal::kEnvSchedulerTimeoutMs,
                          internal::kEnvRegisterTimeoutMs, internal::kEnvConnectTimeoutMs, internal::kEnvStatusFd})
      unsetenv(v);
  }
};

TEST_F(JobEnvironment, DefaultsAreReadFromTheEnvironment) {
  setenv(internal::kEnvScheduler, "tcp://10.1.2.3:7000", 1);
  setenv(internal::kEnvRank, "3", 1);
  setenv(internal::kEnvConsistency, "ssp:2", 1);
  setenv(internal::kEnvHeartbeatIntervalMs, "250", 1);
  setenv(internal::kEnvRegisterTimeoutMs, "9000", 1);
  setenv(internal::kEnvConnectTimeoutMs, "700", 1);
  Result<ClientOptions> o = ResolveOptions(ClientOptions{});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->scheduler, "tcp://10.1.2.3:7000");
  EXPECT_EQ(o->requested_rank, 3);
  EXPECT_EQ(o->consistency, "ssp:2");
  EXPECT_EQ(o->heartbeat_interval_ms, 250);
  EXPECT_EQ(o->register_timeout_ms, 9000);
  EXPECT_EQ(o->connect_timeout_ms, 700);
  EXPECT_EQ(o->scheduler_timeout_ms, 15000);  // not in the environment: the built-in default
}

TEST_F(JobEnvironment, FieldsSetInCodeWin) {
  setenv(internal::kEnvScheduler, "tcp://10.1.2.3:7000", 1);
  setenv(internal::kEnvRank, "3", 1);
  setenv(internal::kEnvConsistency, "ssp:2", 1);
  setenv(internal::kEnvHeartbeatIntervalMs, "250", 1);
  ClientOptions mine;
  mine.scheduler = "tcp://127.0.0.1:9";
  mine.requested_rank = 0;
  mine.consistency = "asp";
  mine.heartbeat_interval_ms = 500;
  Result<ClientOptions> o = ResolveOptions(mine);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->scheduler, "tcp://127.0.0.1:9");
  EXPECT_EQ(o->requested_rank, 0);
  EXPECT_EQ(o->consistency, "asp");
  EXPECT_EQ(o->heartbeat_interval_ms, 500);
}

TEST_F(JobEnvironment, WithoutEnvironmentTheBuiltInDefaultsApply) {
  ClientOptions mine;
  mine.scheduler = "tcp://127.0.0.1:9";
  Result<ClientOptions> o = ResolveOptions(mine);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->requested_rank, -1);
  EXPECT_EQ(o->consistency, "bsp");
  EXPECT_EQ(o->heartbeat_interval_ms, 500);
  EXPECT_EQ(o->scheduler_timeout_ms, 15000);
  EXPECT_EQ(o->register_timeout_ms, 120000);
  EXPECT_EQ(o->connect_timeout_ms, 10000);
  // No scheduler anywhere: the error says where one comes from.
  Result<ClientOptions> none = ResolveOptions(ClientOptions{});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("PUSHPULL_SCHEDULER"), std::string::npos) << none.status().ToString();
}

TEST_F(JobEnvironment, AValueThatDoesNotParseIsRefusedNamingIt) {
  setenv(internal::kEnvScheduler, "tcp://127.0.0.1:9", 1);
  for (auto [var, value] : {std::pair<const char*, const char*>{internal::kEnvRank, "two"},
                            {internal::kEnvRank, "-3"},
                            {internal::kEnvHeartbeatIntervalMs, "10ms"},
                            {internal::kEnvRegisterTimeoutMs, "0"},
                            {internal::kEnvConnectTimeoutMs, "soon"},
                            {internal::kEnvConsistency, "ssp"}}) {
    setenv(var, value, 1);
    Result<ClientOptions> o = ResolveOptions(ClientOptions{});
    ASSERT_FALSE(o.ok()) << var << "=" << value;
    EXPECT_EQ(o.status().code(), Code::kInvalidArgument);
    EXPECT_NE(o.status().message().find(std::string(var) + "='" + value + "'"), std::string::npos)
        << o.status().ToString();
    unsetenv(var);
  }
  ClientOptions bad;
  bad.consistency = "sometimes";
  EXPECT_EQ(ResolveOptions(bad).status().code(), Code::kInvalidArgument);
  // And Connect refuses it before it tries to reach anyone.
  setenv(internal::kEnvRank, "x", 1);
  EXPECT_EQ(Client::Connect(ClientOptions{}).status().code(), Code::kInvalidArgument);
}

// Connect(ClientOptions{}) joins the job the environment names, as a worker pushpull-launch
// started does: the scheduler, the rank and the consistency model all come from there.
TEST_F(JobEnvironment, ConnectWithDefaultOptionsJoinsTheJobTheEnvironmentNames) {
  LocalClusterConfig cfg;
  cfg.workers = 1;  // (one client: nothing reads the environment while it is set)
  // The worker connects with options left at their defaults, once the scheduler's address is known.
  cfg.client_options = [](int, ClientOptions* o) {
    setenv(internal::kEnvScheduler, o->scheduler.c_str(), 1);
    setenv(internal::kEnvRank, "0", 1);
    setenv(internal::kEnvConsistency, "ssp:3", 1);
    setenv(internal::kEnvHeartbeatIntervalMs, "100", 1);
    *o = ClientOptions{};
  };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.num_workers(), 1);
  EXPECT_EQ(c.consistency().model, Consistency::kSsp);
  EXPECT_EQ(c.consistency().staleness, 3);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST_F(JobEnvironment, AFinishedWorkerTellsItsLauncherThroughThePipeOnly) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  setenv(internal::kEnvStatusFd, std::to_string(fds[1]).c_str(), 1);
  internal::TellLauncherFinished();
  char buf[32] = {};
  ASSERT_EQ(read(fds[0], buf, sizeof(buf) - 1), 9);
  EXPECT_STREQ(buf, "finished\n");
  close(fds[0]);
  internal::TellLauncherFinished();  // the launcher gone: no SIGPIPE ends the program
  close(fds[1]);
  // A descriptor that is not a pipe (the number reused for a file of the program's) is left alone.
  TempDir dir;
  const std::string path = dir.path() + "/data";
  const int file = open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(file, 0);
  setenv(internal::kEnvStatusFd, std::to_string(file).c_str(), 1);
  internal::TellLauncherFinished();
  EXPECT_EQ(lseek(file, 0, SEEK_END), 0);
  close(file);
}

}  // namespace
}  // namespace pushpull
