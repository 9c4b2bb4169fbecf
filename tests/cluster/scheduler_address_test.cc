// A scheduler address that leads nowhere (a host name that does not resolve, a port nothing
// listens on) fails a node's registration within its connect timeout, naming the address and the
// reason, rather than after the registration's deadline; one that comes up within it is reached,
// and one that answers is waited for as long as the registration's deadline allows.
#include <gtest/gtest.h>
#include <netdb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/address.h"
#include "common/time.h"
#include "pushpull/client.h"
#include "server/scheduler/scheduler.h"
#include "server/server.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tcp_proxy.h"

namespace pushpull {
namespace {

// Far below the registration's deadline (60 s here) and far above the connect timeout (500 ms):
// the failure came from the latter, whatever the machine's load.
constexpr int64_t kWellBeforeTheRegisterTimeoutMs = 30000;

ClientOptions OptionsFor(const std::string& scheduler) {
  ClientOptions o;
  o.scheduler = scheduler;
  o.connect_timeout_ms = 500;
  o.register_timeout_ms = 60000;
  return o;
}

// (.invalid never resolves, RFC 6761.)
TEST(SchedulerAddress, AHostNameThatDoesNotResolveFailsWithinTheConnectTimeout) {
  const int err = ResolveHost("nosuchhost.invalid");
  if (err != EAI_NONAME) GTEST_SKIP() << "this machine's resolver does not answer for .invalid: " << gai_strerror(err);
  const std::string address = "tcp://nosuchhost.invalid:7000";
  const int64_t start = NowMs();
  auto client = Client::Connect(OptionsFor(address));
  EXPECT_LT(NowMs() - start, kWellBeforeTheRegisterTimeoutMs);
  const Status& st = client.status();
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("cannot reach the scheduler at " + address + " for 500 ms: host name does not resolve"),
            std::string::npos)
      << st.ToString();
  // A server registers through the same channel: the same.
  server::ServerOptions so;
  so.bind_host = "127.0.0.1";
  so.control.scheduler = address;
  so.control.connect_timeout_ms = 500;
  so.control.register_timeout_ms = 60000;
  auto server = server::Server::Create(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Status ran = (*server)->Run();
  EXPECT_EQ(ran.code(), Code::kUnavailable) << ran.ToString();
  EXPECT_NE(ran.message().find("host name does not resolve"), std::string::npos) << ran.ToString();
}

// A port that was bound and closed: nothing listens there, and connections are refused.
TEST(SchedulerAddress, APortThatRefusesConnectionsFailsWithinTheConnectTimeout) {
  const std::string address = "tcp://127.0.0.1:" + std::to_string(TcpProxy::FreePort());
  const int64_t start = NowMs();
  auto client = Client::Connect(OptionsFor(address));
  EXPECT_LT(NowMs() - start, kWellBeforeTheRegisterTimeoutMs);
  const Status& st = client.status();
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("cannot reach the scheduler at " + address + " for 500 ms: connection refused"),
            std::string::npos)
      << st.ToString();
}

// A scheduler that starts after the worker, on the port that refused the worker's first
// attempts, within the connect timeout: the worker reaches it and joins the job.
TEST(SchedulerAddress, ASchedulerThatStartsWithinTheConnectTimeoutIsReached) {
  const int port = TcpProxy::FreePort();
  ClientOptions o = OptionsFor("tcp://127.0.0.1:" + std::to_string(port));
  o.connect_timeout_ms = 30000;
  o.register_timeout_ms = 40000;
  testing::internal::CaptureStderr();
  Result<std::unique_ptr<Client>> client = Status::Internal("not connected");
  std::thread worker([&] { client = Client::Connect(o); });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // (its first attempts refused)
  scheduler::SchedulerOptions sched;
  sched.bind_host = "127.0.0.1";
  sched.port = port;
  sched.register_timeout_ms = 40000;
  auto scheduler = scheduler::Scheduler::Create(sched);
  Status sched_status;
  std::thread sched_thread;
  if (scheduler.ok()) sched_thread = std::thread([&] { sched_status = (*scheduler)->Run(); });
  server::ServerOptions so;
  so.bind_host = "127.0.0.1";
  so.control.scheduler = o.scheduler;
  so.control.requested_rank = 0;
  auto server = server::Server::Create(so);
  Status server_status;
  std::thread server_thread;
  if (server.ok()) server_thread = std::thread([&] { server_status = (*server)->Run(); });
  worker.join();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(client.ok()) << client.status().ToString() << "\n" << err;
  EXPECT_NE(err.find("cannot reach the scheduler at " + o.scheduler + " (connection refused); trying again"),
            std::string::npos)
      << err;
  EXPECT_TRUE((*client)->Finish().ok());
  if (sched_thread.joinable()) sched_thread.join();
  if (server_thread.joinable()) server_thread.join();
  EXPECT_TRUE(sched_status.ok()) << sched_status.ToString();
  EXPECT_TRUE(server_status.ok()) << server_status.ToString();
}

// A scheduler that answers, while it waits for the job's other nodes, is waited for up to the
// registration's deadline: the connect timeout, far shorter, does not end the wait.
TEST(SchedulerAddress, ASchedulerThatAnswersIsWaitedForUpToTheRegisterTimeout) {
  scheduler::SchedulerOptions sched;
  sched.bind_host = "127.0.0.1";
  sched.num_workers = 2;
  sched.register_timeout_ms = 60000;
  auto scheduler = scheduler::Scheduler::Create(sched);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  std::thread sched_thread([&] { (*scheduler)->Run().IgnoreError(); });
  ClientOptions o = OptionsFor((*scheduler)->address());
  o.connect_timeout_ms = 100;
  o.register_timeout_ms = 1500;
  auto client = Client::Connect(o);
  EXPECT_EQ(client.status().code(), Code::kDeadlineExceeded) << client.status().ToString();
  EXPECT_NE(client.status().message().find("waited 1500 ms for the scheduler at " + o.scheduler), std::string::npos)
      << client.status().ToString();
  (*scheduler)->Stop();
  sched_thread.join();
}

}  // namespace
}  // namespace pushpull
