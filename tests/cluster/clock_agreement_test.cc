// The servers' agreement on a dying worker's last clock: a worker that dies between the Clock
// messages it sends each server counts alike on every server (in BSP means and divisors), under
// --on_worker_death=continue and wait, and a Clock after pushes goes out only once every server
// answered them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/wire.h"
#include "tests/support/eventually.h"
#include "tests/support/fault_jobs.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tcp_proxy.h"

namespace pushpull {
namespace {

// Under --on_worker_death=continue, three workers push to a BSP table of two servers; worker 2's
// data connection to server 1 loses its first `lose` (a push or a clock: the proxy's filter), then
// worker 2 stops. Every row is then what the others' pull at clock 1 sees, and the test checks
// that both servers' rows (0-3 on server 0, 4-7 on server 1) came to the same value.
struct WorkerDyingBetweenServers {
  // control: server 1's scheduler connection goes through it (null: it does not).
  explicit WorkerDyingBetweenServers(MsgType lose, bool wait = false, TcpProxy* control = nullptr)
      : cluster(Config(proxy, wait, control)) {
    // (The first only: a worker taking rank 2's place sends the same messages.)
    proxy.DropToUpstream(
        [lose, lost = std::make_shared<std::atomic<bool>>(false)](const std::vector<std::string>& frames, int64_t) {
          Header h;
          return !frames.empty() && DecodeHeader(frames[0].data(), frames[0].size(), &h).ok() && h.type == lose &&
                 h.sender_rank == 2 && !lost->exchange(true);
        });
    if (!cluster.Start().ok()) return;
    for (int w = 0; w < 3; ++w) t[w] = cluster.client(w).CreateTable(Spec());
  }
  static TableSpec Spec() {  // 8 rows of 4 zeros, SGD lr 0.1, BSP
    TableSpec spec = AspZeros("w", 8);
    spec.consistency = *ParseConsistency("bsp");
    return spec;
  }
  static LocalClusterConfig Config(TcpProxy& proxy, bool wait, TcpProxy* control) {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 3;
    cfg.continue_on_worker_death = !wait;
    cfg.wait_for_replacement = wait;
    cfg.server_options = [data = DataThrough(proxy, 1), control](int s, server::ServerOptions* o) {
      data(s, o);
      if (control) ServerControlThrough(*control, 1)(s, o);
    };
    // (A push lost on its way is waited for this long by the Clock() after it.)
    cfg.client_options = [](int, ClientOptions* o) { o->request_timeout_ms = 1500; };
    return cfg;
  }
  bool ok() const { return t[0].ok() && t[1].ok() && t[2].ok(); }
  // Worker w pushes its gradient (1, 2, 4 for workers 0, 1, 2) to every row.
  Future Push(int w) { return cluster.client(w).PushDense(*t[w], std::vector<float>(32, float(1 << w))); }
  // Every worker pushes (worker 2 only when told to); worker 2's Clock() reaches server 0 (and is
  // lost on its way to server 1, with lose = kClock); then worker 2 stops. Call with ASSERT_TRUE.
  ::testing::AssertionResult Worker2ClocksOnServer0AndDies(bool worker2_pushes = true) {
    for (int w = 0; w < (worker2_pushes ? 3 : 2); ++w)
      if (Status st = Push(w).Wait(); !st.ok())
        return ::testing::AssertionFailure() << "push " << w << ": " << st.ToString();
    if (Status st = cluster.client(2).Clock(); !st.ok()) return ::testing::AssertionFailure() << st.ToString();
    if (!Eventually([&] { return cluster.server(0).stats().clocks == 1; }, 5000))
      return ::testing::AssertionFailure() << "worker 2's clock did not reach server 0";
    if (cluster.server(1).stats().clocks != 0)
      return ::testing::AssertionFailure() << "worker 2's clock reached server 1";
    if (Status st = cluster.client(2).Leave(Status::Aborted("test: worker 2 dies between its clocks")); !st.ok())
      return ::testing::AssertionFailure() << st.ToString();
    return ::testing::AssertionSuccess();
  }
  // (--on_worker_death=wait) A new worker takes rank 2, and starts at clock 1 (the agreed one).
  ::testing::AssertionResult ReplaceWorker2AtClock1() {
    cluster.KillClient(2);
    if (Status st = cluster.ReplaceClient(2); !st.ok()) return ::testing::AssertionFailure() << st.ToString();
    if (cluster.client(2).clock() != 1)
      return ::testing::AssertionFailure() << "the new worker starts at clock " << cluster.client(2).clock();
    return ::testing::AssertionSuccess();
  }
  // Workers 0 and 1 close clock 0; worker 0 pulls at clock 1 (which waits for worker 2's fate)
  // and finds every row at `expected`; then the job finishes.
  void ExpectEveryRowAfterClock0(float expected) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok()) << w;
    std::vector<float> rows(32);
    Status st =
        cluster.client(0).PullDense(*t[0], rows.data()).WaitFor(int64_t(cluster.config().heartbeat_timeout_ms) * 20);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(rows[i], expected) << "row " << i / 4 << " (server " << i / 16 << ")";
    EXPECT_TRUE(cluster.FinishAndJoin().ok());
  }
  TcpProxy proxy;  // (before the cluster, which it outlives)
  LocalCluster cluster;
  Result<Table> t[3] = {Status::Unavailable("not started"), Status::Unavailable("not started"),
                        Status::Unavailable("not started")};
};

// Worker 2's Clock() reaches server 0 and not server 1, and worker 2 dies. Server 0 counts its
// pushes of clock 0 in the clock's mean (its clock passed it); server 1, asked with the others
// where worker 2's clock is, counts them too, as server 0 does: its Clock went out once every push
// was answered, so server 1 holds them all. Without that agreement server 1 would drop them and
// apply the mean of two workers' pushes where server 0 applies three's.
TEST(ClockAgreement, AWorkerDyingBetweenItsClockMessagesCountsAlikeOnEveryServer) {
  WorkerDyingBetweenServers job(MsgType::kClock);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job.Worker2ClocksOnServer0AndDies());
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2 + 4) / 3);  // the mean of three workers' pushes
}

// The same under --on_worker_death=wait: the servers agree that worker 2 reached clock 1, and the
// worker taking its place starts there on both (server 1 raised worker 2's clock, from the
// scheduler's word or from the new worker's hello, whichever came first). Started at the lowest,
// clock 0, it would redo that clock: server 1 would drop the dead worker's pushes of it and sum
// the new one's, computed from parameters server 0 had already moved on.
TEST(ClockAgreement, AWorkerDyingBetweenItsClockMessagesIsReplacedWhereEveryServerCountsIt) {
  WorkerDyingBetweenServers job(MsgType::kClock, /*wait=*/true);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job.Worker2ClocksOnServer0AndDies());
  ASSERT_TRUE(job.ReplaceWorker2AtClock1());
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2 + 4) / 3);  // the mean of three workers' pushes
}

// Worker 2 pushed nothing in clock 0 and dies with its Clock() on server 0 only: it still counts in
// the clock's divisor there (every worker whose clock passed it does), so server 1 must count it
// too. A worker with a BSP table settles every Clock (one without pushes waits only for the Clock
// before it), not only one after BSP pushes: else server 1 would divide by two where server 0
// divides by three.
TEST(ClockAgreement, AWorkerDyingBetweenTheClockMessagesOfAClockItDidNotPushInCountsAlike) {
  WorkerDyingBetweenServers job(MsgType::kClock);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job.Worker2ClocksOnServer0AndDies(/*worker2_pushes=*/false));
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2) / 3);  // worker 2's clock passed clock 0: three
}

// A push whose caller stopped waiting for it (WaitFor(0)) and that every server then applied
// does not stop the settled Clock() after it: it reads DeadlineExceeded to its caller, but the
// servers' answers were OK.
TEST(ClockAgreement, ASettledClockGoesOutAfterAPushItsCallerGaveUpOnButTheServersApplied) {
  WorkerDyingBetweenServers job(MsgType::kHelloReply);  // (nothing lost)
  ASSERT_TRUE(job.ok());
  Future given_up = job.Push(0);
  EXPECT_EQ(given_up.WaitFor(0).code(), Code::kDeadlineExceeded);
  ASSERT_TRUE(Eventually(
      [&] { return job.cluster.server(0).stats().pushes == 1 && job.cluster.server(1).stats().pushes == 1; }, 5000));
  Status clocked = job.cluster.client(0).Clock();
  EXPECT_TRUE(clocked.ok()) << clocked.ToString();
  ASSERT_TRUE(Eventually(
      [&] { return job.cluster.server(0).stats().clocks == 1 && job.cluster.server(1).stats().clocks == 1; }, 5000));
  EXPECT_TRUE(job.cluster.FinishAndJoin().ok());
}

// Worker 2's push has a NaN in server 1's rows: server 1 refuses it, server 0 sums it. Its Clock()
// is then not sent (the refusal is the worker's error: ControlCalls::Clock, and a settled clock
// after a push that failed is not sent either), and worker 2 dies: no server counts it in clock 0.
// Settled and sent, the Clock would count on server 0 (refused on server 1, whose refused push
// blocks it), and the agreement then have server 1 count worker 2 in its divisor without its push.
TEST(ClockAgreement, AClockAfterAPushARefusedIsNotSentWhenTheJobSurvivesDeaths) {
  WorkerDyingBetweenServers job(MsgType::kHelloReply);  // (never sent to a server: nothing lost)
  ASSERT_TRUE(job.ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(job.Push(w).Wait().ok()) << w;
  std::vector<float> bad(32, 4.0f);
  bad[20] = std::numeric_limits<float>::quiet_NaN();  // row 5, on server 1
  Status pushed = job.cluster.client(2).PushDense(*job.t[2], bad).Wait();
  EXPECT_EQ(pushed.code(), Code::kDiverged) << pushed.ToString();
  ASSERT_TRUE(Eventually([&] { return job.cluster.server(0).stats().pushes == 3; }, 5000));
  Status clocked = job.cluster.client(2).Clock();
  EXPECT_EQ(clocked.ToString(), pushed.ToString());
  EXPECT_EQ(job.cluster.server(0).stats().clocks, 0u);
  ASSERT_TRUE(job.cluster.client(2).Leave(Status::Aborted("test: worker 2 stops after its refused push")).ok());
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2) / 2);  // the mean of workers 0 and 1's pushes
}

// Under --on_worker_death=wait, server 1 hears nothing from the scheduler after worker 2 is
// dying until the job ends (its scheduler connection loses those memberships): it learns the
// agreed clock from the new worker's hello, and takes that worker's requests (not refusing them as
// a dying worker's), so the new worker's first clock completes on both servers.
TEST(ClockAgreement, AServerThatMissedTheAgreementTakesTheReplacementsRequests) {
  TcpProxy control;
  control.DropFromUpstream([](const std::vector<std::string>& frames, int64_t) {
    Header h;
    if (frames.empty() || !DecodeHeader(frames[0].data(), frames[0].size(), &h).ok() || h.type != MsgType::kMembership)
      return false;
    const Membership& m = h.membership;
    return m.job_state == Membership::kRunning && m.worker_last_clock.size() == 3 && m.worker_last_clock[2] >= 0;
  });
  WorkerDyingBetweenServers job(MsgType::kClock, /*wait=*/true, &control);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job.Worker2ClocksOnServer0AndDies());
  ASSERT_TRUE(job.ReplaceWorker2AtClock1());
  Client& fresh = job.cluster.client(2);
  job.t[2] = fresh.CreateTable(WorkerDyingBetweenServers::Spec());
  ASSERT_TRUE(job.t[2].ok()) << job.t[2].status().ToString();
  Status pushed = job.cluster.client(2).PushDense(*job.t[2], std::vector<float>(32, 8.0f)).Wait();
  EXPECT_TRUE(pushed.ok()) << pushed.ToString();  // (server 1 refused it: "declared dead")
  Status clocked = fresh.Clock();
  EXPECT_TRUE(clocked.ok()) << clocked.ToString();
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2 + 4) / 3);
}

// Worker 2's push to server 1 is lost (as with a connection that drops as the worker dies): its
// Clock() after pushes to a BSP table waits for their answers and, none coming, is not sent at
// all, so no server counts worker 2 in clock 0. Sent at once, it would reach both servers: server
// 0 would count worker 2's push in a mean of three, server 1 a mean of three without it.
TEST(ClockAgreement, AClockAfterBspPushesGoesOutOnlyOnceEveryServerAnsweredThem) {
  WorkerDyingBetweenServers job(MsgType::kPush);
  ASSERT_TRUE(job.ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(job.Push(w).Wait().ok()) << w;
  Future lost = job.Push(2);
  ASSERT_TRUE(Eventually([&] { return job.cluster.server(0).stats().pushes == 3; }, 5000));
  Status clocked = job.cluster.client(2).Clock();
  EXPECT_EQ(clocked.code(), Code::kDeadlineExceeded) << clocked.ToString();
  EXPECT_NE(clocked.message().find("push to table 'w': no answer"), std::string::npos) << clocked.ToString();
  EXPECT_EQ(job.cluster.server(0).stats().clocks, 0u);
  EXPECT_EQ(job.cluster.client(2).Clock().code(), Code::kDeadlineExceeded);  // (sticky)
  ASSERT_TRUE(job.cluster.client(2).Leave(clocked).ok());
  job.ExpectEveryRowAfterClock0(-0.1f * (1 + 2) / 2);  // the mean of workers 0 and 1's pushes
}

}  // namespace
}  // namespace pushpull
