// A server that dies, is slow, or is refused: registrations that time out or ask for ranks outside
// the job, table creations that take long or are retried, memory limits that refuse tables and
// pushes while the server goes on, and a dead server that ends the job naming it.
#include <gtest/gtest.h>

#include <netdb.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/address.h"
#include "common/time.h"
#include "common/wire.h"
#include "tests/support/eventually.h"
#include "tests/support/fault_jobs.h"
#include "tests/support/local_cluster.h"

namespace pushpull {
namespace {

// A scheduler of `servers` and `workers` running on a thread of its own while the test lasts.
class SchedulerThread {
 public:
  SchedulerThread(int servers, int workers, int64_t register_timeout_ms, int heartbeat_timeout_ms = 5000) {
    scheduler::SchedulerOptions so;
    so.bind_host = "127.0.0.1";
    so.num_servers = servers;
    so.num_workers = workers;
    so.register_timeout_ms = register_timeout_ms;
    so.heartbeat_timeout_ms = heartbeat_timeout_ms * kTimeoutScale;
    auto s = scheduler::Scheduler::Create(so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return;
    sched_ = std::move(*s);
    thread_ = std::thread([this] { sched_->Run().IgnoreError(); });
  }
  ~SchedulerThread() {
    if (!sched_) return;
    sched_->Stop();
    thread_.join();
  }
  bool ok() const { return sched_ != nullptr; }
  std::string address() const { return sched_->address(); }

 private:
  std::unique_ptr<scheduler::Scheduler> sched_;
  std::thread thread_;
};

// A registration the scheduler gives up on (a worker never came) ends the waiting nodes at once
// with the scheduler's reason, naming who is missing, rather than after their own deadline.
TEST(ServerFailure, RegistrationThatTimesOutSaysWhoIsMissing) {
  SchedulerThread sched(1, 1, 300);
  ASSERT_TRUE(sched.ok());
  server::ServerOptions o;
  o.bind_host = "127.0.0.1";
  o.control.scheduler = sched.address();
  o.control.register_timeout_ms = 60000;
  auto srv = server::Server::Create(o);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  Status st = (*srv)->Run();
  EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("0/1 workers"), std::string::npos) << st.ToString();
}

// A scheduler address whose host does not resolve: the registration's deadline says so, rather
// than asking whether the scheduler runs. (.invalid never resolves, RFC 6761.)
TEST(ServerFailure, ASchedulerNameThatDoesNotResolveIsNamed) {
  const int err = ResolveHost("nosuchhost.invalid");
  if (err != EAI_NONAME) GTEST_SKIP() << "this machine's resolver does not answer for .invalid: " << gai_strerror(err);
  server::ServerOptions o;
  o.bind_host = "127.0.0.1";
  o.control.scheduler = "tcp://nosuchhost.invalid:5555";
  o.control.register_timeout_ms = 500;
  auto srv = server::Server::Create(o);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  Status st = (*srv)->Run();
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("nosuchhost.invalid does not resolve"), std::string::npos) << st.ToString();
}

// A rank asked for outside the job (a deploy's task index and the job's size disagree, so the
// node's data shard would be wrong) is refused at registration, naming both: exit 2, not restarted.
TEST(ServerFailure, ARankOutsideTheJobIsRefused) {
  SchedulerThread sched(1, 2, 20000);
  ASSERT_TRUE(sched.ok());
  ClientOptions c;
  c.scheduler = sched.address();
  c.register_timeout_ms = 10000;
  c.requested_rank = 2;
  auto client = Client::Connect(c);
  EXPECT_EQ(client.status().code(), Code::kInvalidArgument) << client.status().ToString();
  EXPECT_NE(client.status().message().find("rank 2, but the job has 2 workers"), std::string::npos)
      << client.status().ToString();
}

// A node asking for a rank an earlier registration holds, before the job runs, is most likely
// that node restarted before the dead one's heartbeat timeout: it takes the rank its deployment
// gave it (not another, nor a refusal when the job has its count), and the earlier one is told
// why and dropped.
TEST(ServerFailure, ANodeAskingForItsRankAgainBeforeTheJobRunsTakesIt) {
  // Both workers in (the job has its count of them), the server not yet: a worker of rank 1
  // asks again.
  SchedulerThread sched(1, 2, 30000);
  ASSERT_TRUE(sched.ok());
  ClientOptions c;
  c.scheduler = sched.address();
  c.register_timeout_ms = 30000;
  auto connect = [&](int rank) {
    ClientOptions o = c;
    o.requested_rank = rank;
    return Client::Connect(o);
  };
  Result<std::unique_ptr<Client>> zero = Status::Internal("not connected"), first = Status::Internal("not connected"),
                                  again = Status::Internal("not connected");
  std::thread t0([&] { zero = connect(0); });
  std::thread t1([&] { first = connect(1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // (their registrations are in)
  std::thread t2([&] { again = connect(1); });
  // Whichever registered second holds rank 1 (on a loaded machine the order may differ); the
  // other is told why.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server::ServerOptions o;
  o.bind_host = "127.0.0.1";
  o.control.scheduler = sched.address();
  auto srv = server::Server::Create(o);
  EXPECT_TRUE(srv.ok()) << srv.status().ToString();
  std::thread server([&] {
    if (srv.ok()) (*srv)->Run().IgnoreError();
  });
  t0.join();
  t1.join();
  t2.join();
  // (Threads joined before any assertion that returns.)
  const bool one_each = zero.ok() && first.ok() != again.ok();
  if (one_each) {
    const Status refused = first.ok() ? again.status() : first.status();
    EXPECT_EQ(refused.code(), Code::kFailedPrecondition) << refused.ToString();
    EXPECT_NE(refused.message().find("another worker registered asking for rank 1"), std::string::npos)
        << refused.ToString();
    Client& one = first.ok() ? **first : **again;
    EXPECT_EQ(one.rank(), 1);
    EXPECT_TRUE((*zero)->Finish().ok());
    EXPECT_TRUE(one.Finish().ok());
  } else if (srv.ok()) {
    (*srv)->Stop();
  }
  server.join();
  EXPECT_TRUE(one_each) << zero.status().ToString() << " / " << first.status().ToString() << " / "
                        << again.status().ToString();
}

// A node killed while it waited for the job to start (it registered, then went silent) gives its
// slot back after a heartbeat timeout: the job then starts with the nodes that are there.
// Holding the slot, the dead one would start the job only to fail it a timeout later, and a node
// in its place would be refused while the job had its count.
TEST(ServerFailure, ANodeSilentBeforeTheJobStartsGivesItsSlotBack) {
  SchedulerThread sched(1, 1, 60000, 1000);
  ASSERT_TRUE(sched.ok());
  // A node that registers and then says nothing (hung, or killed: a closed socket is the same
  // silence): it is told, after a heartbeat timeout, that its slot was given up.
  std::shared_ptr<Transport> transport = NewZmqTransport();
  SocketOptions so;
  so.linger_ms = 0;
  auto made = transport->MakeSocket(SocketKind::kDealer, so);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Socket& hung = **made;
  ASSERT_TRUE(hung.Connect(sched.address()).ok());
  Header h;
  h.type = MsgType::kRegister;
  h.sender_role = Role::kWorker;
  h.sender_rank = -1;  // any rank: it takes the job's only worker slot
  h.clock = 100;
  ASSERT_TRUE(SendMessage(hung, nullptr, h).ok());
  std::vector<Frame> frames;
  ASSERT_TRUE(RecvFrames(hung, &frames, 8, 30000 * kTimeoutScale)) << "no word to the silent node";
  Message told;
  ASSERT_TRUE(Decode(&frames, &told).ok());
  EXPECT_EQ(told.header.type, MsgType::kRegisterReply);
  EXPECT_EQ(told.header.status, Code::kAborted);  // (Unavailable is "not yet": asked again)
  EXPECT_NE(told.header.error.find("its slot was given up"), std::string::npos) << told.header.error;
  server::ServerOptions o;
  o.bind_host = "127.0.0.1";
  o.control.scheduler = sched.address();
  o.control.heartbeat_interval_ms = 100;
  auto srv = server::Server::Create(o);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  std::thread server([&] { (*srv)->Run().IgnoreError(); });
  ClientOptions c;
  c.scheduler = sched.address();
  c.register_timeout_ms = 20000;
  c.heartbeat_interval_ms = 100;
  auto worker = Client::Connect(c);
  if (!worker.ok()) (*srv)->Stop();  // (the server would wait for a job that never runs)
  if (worker.ok()) {
    EXPECT_EQ((*worker)->rank(), 0);
    EXPECT_TRUE((*worker)->Finish().ok());
  }
  server.join();
  EXPECT_TRUE(worker.ok()) << worker.status().ToString();
}

// Filling a large table takes longer than the scheduler waits for a heartbeat here (200 ms): the
// server keeps its heartbeats going meanwhile, so it is not declared dead.
// A dense table of `rows` x 1024 floats, each from the seeded initialiser: slow to fill.
TableSpec BigUniform(const char* name, uint64_t rows) {
  TableSpec spec;
  spec.name = name;
  spec.rows = rows;
  spec.dim = 1024;
  spec.init = InitKind::kUniform;
  return spec;
}

// Worker 0 pulls row `key` of t: it holds the value `spec` initialises it to.
void ExpectInitialRow(LocalCluster& cluster, const Table& t, const TableSpec& spec, Key key) {
  std::vector<float> row(spec.dim);
  EXPECT_TRUE(cluster.client(0).Pull(t, {key}, row.data()).Wait().ok());
  EXPECT_EQ(row[7], InitialValue(spec, key, 7));
}

TEST(ServerFailure, ALongTableFillIsNoDeath) {
  LocalClusterConfig cfg;
  cfg.heartbeat_interval_ms = 30;
  cfg.heartbeat_timeout_ms = 200;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  const TableSpec spec = BigUniform("big", 1 << 16);  // 64M floats (256 MB): 0.35 s here
  const int64_t t0 = NowMs();
  auto t = cluster.client(0).CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RecordProperty("fill_ms", static_cast<int>(NowMs() - t0));
  ExpectInitialRow(cluster, *t, spec, 12345);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A table creation that failed (here: the servers took longer to fill it than the scheduler
// waits) may have succeeded on some servers. Created again with the same spec it is the same
// table: each server holds it once, not once per attempt (a restored server would otherwise
// fill the second from scratch, its checkpoint rows spent on the first).
TEST(ServerFailure, ARetriedTableCreationIsTheSameTable) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.table_timeout_ms = 10;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = BigUniform("big", 1 << 15);  // 32M floats: over 10 ms on each server
  auto both_hold = [&](uint64_t n) {
    return Eventually([&] { return cluster.server(0).stats().tables == n && cluster.server(1).stats().tables == n; },
                      20000);
  };
  auto create = [&](const TableSpec& s) {  // the scheduler waits 10 ms an attempt
    auto t = cluster.client(0).CreateTable(s);
    for (int tries = 1; !t.ok() && tries < 50; ++tries) t = cluster.client(0).CreateTable(s);
    return t;
  };
  auto first = cluster.client(0).CreateTable(spec);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), Code::kDeadlineExceeded) << first.status().ToString();
  // Both servers finish the first attempt meanwhile; the retry finds the table there.
  (void)both_hold(1);  // checked below
  auto again = create(spec);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectInitialRow(cluster, *again, spec, 12345);
  EXPECT_EQ(cluster.server(0).stats().tables, 1u);
  EXPECT_EQ(cluster.server(1).stats().tables, 1u);

  // Tried again with another spec, it is another table (a new id): what the failed attempt left
  // on the servers goes, so that each holds one table of that name.
  spec.name = "big2";
  ASSERT_FALSE(cluster.client(0).CreateTable(spec).ok());
  (void)both_hold(2);  // checked below
  TableSpec other = spec;
  other.rows = 64;
  other.init = InitKind::kNormal;
  auto made = create(other);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ExpectInitialRow(cluster, *made, other, 33);
  EXPECT_EQ(cluster.server(0).stats().tables, 2u);
  EXPECT_EQ(cluster.server(1).stats().tables, 2u);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST(ServerFailure, DeadServerEndsTheJobNamingIt) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 1;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = Dense("w", 8);
  spec.consistency = {Consistency::kAsp, 0};
  auto t = cluster.client(0).CreateTable(spec);
  ASSERT_TRUE(t.ok());
  cluster.StopServer(1);
  std::vector<float> v(32);
  int64_t start = NowMs();
  Status st;
  // Calls fail (not hang) once the scheduler declares server 1 dead.
  const int64_t limit = cluster.config().heartbeat_timeout_ms * 10;
  while (NowMs() - start < limit) {
    st = cluster.client(0).PullDense(*t, v.data()).WaitFor(limit);
    if (!st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("server 1"), std::string::npos) << st.ToString();
  cluster.FinishAndJoin().IgnoreError();
  EXPECT_EQ(cluster.scheduler_status().code(), Code::kAborted);
  // A server stopped mid-job says so as it goes: the job hears that, not its silence later.
  EXPECT_NE(cluster.scheduler_status().message().find(") stopped: Aborted: stopped before the job ended"),
            std::string::npos)
      << cluster.scheduler_status().ToString();
  EXPECT_NE(cluster.scheduler_status().message().find("server 1"), std::string::npos)
      << cluster.scheduler_status().ToString();
  // The stopped server says so too (pushpull-server exits 1, not 0, on a signal mid-job).
  EXPECT_EQ(cluster.server_status(1).code(), Code::kAborted) << cluster.server_status(1).ToString();
}

// So do BSP sums: a worker that pushes clock after clock without pulling (its clocks run ahead
// of a slower worker's) holds a sum of each on the server until the slower one catches up
// (uncounted, they would grow until the machine killed the server). Its push past the limit is
// refused, naming the sum.
TEST(ServerFailure, BspSumsOfAWorkerPushingAheadCountAgainstTheMemoryLimit) {
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.server_options = [](int, server::ServerOptions* o) { o->max_table_bytes = 1 << 20; };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec = AspZeros("w", 1024);  // 64 KB of parameters; a sum of it about 100 KB
  spec.dim = 16;
  spec.consistency = *ParseConsistency("bsp");
  Status refused;
  int64_t refused_at = -1;
  cluster.RunWorkers([&](Client& c, int w) {
    auto t = c.CreateTable(spec);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    if (w == 1) return;  // the slow one: at clock 0 throughout
    for (int clock = 0; clock < 40 && refused.ok(); ++clock) {
      refused = c.PushDense(*t, std::vector<float>(16384, 1.0f)).WaitFor(10000);
      if (!refused.ok())
        refused_at = clock;
      else
        ASSERT_TRUE(c.Clock().ok());
    }
  });
  ASSERT_EQ(refused.code(), Code::kResourceExhausted) << refused.ToString();
  EXPECT_GT(refused_at, 5);
  EXPECT_LT(refused_at, 20);
  EXPECT_NE(refused.message().find("worker 0's BSP sum of clock " + std::to_string(refused_at)), std::string::npos)
      << refused.ToString();
  EXPECT_NE(refused.message().find("--max_table_mb"), std::string::npos) << refused.ToString();
  EXPECT_LE(cluster.server(0).stats().table_bytes, uint64_t(1) << 20);
  // (The worker then stops on that setup error, and the job with it, as for a table past the
  // limit: docs/tuning.md.)
  cluster.FinishAndJoin().IgnoreError();
}

// A server's tables past --max_table_mb: a creation, or a push of new sparse keys, that would
// take them over is refused with ResourceExhausted naming the table, and the server goes on
// serving the rows it has (without the limit, a worker pushing ever new keys grows the server
// until the machine kills it). One update thread: the refused push applied nothing.
TEST(ServerFailure, TablesPastTheServersMemoryLimitAreRefusedAndTheServerGoesOn) {
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.server_options = [](int, server::ServerOptions* o) { o->max_table_bytes = 1 << 20; };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec big = AspZeros("big", 1 << 20);  // 16 MB of parameters
  auto refused = c.CreateTable(big);
  ASSERT_EQ(refused.status().code(), Code::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("server 0 refused table 'big': table 'big': its 1048576 rows"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("--max_table_mb"), std::string::npos) << refused.status().ToString();

  TableSpec spec = AspZeros("emb", 0);
  spec.sparse = true;
  spec.dim = 16;  // SGD: a row takes 64 bytes of parameters, 4 of step count, 32 of key index
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto keys = [](Key from, Key n) {
    std::vector<Key> k(n);
    for (Key i = 0; i < n; ++i) k[i] = from + i;
    return k;
  };
  ASSERT_TRUE(c.Push(*t, keys(0, 5000), std::vector<float>(5000 * 16, 1.0f)).WaitFor(10000).ok());
  EXPECT_EQ(cluster.server(0).stats().pushes, 1u);
  // 7,000 more rows do not fit in what is left of 1 MiB.
  Status st = c.Push(*t, keys(5000, 7000), std::vector<float>(7000 * 16, 1.0f)).WaitFor(10000);
  ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("server 0: table 'emb': "), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("past their limit of 1.0 MB (--max_table_mb"), std::string::npos) << st.ToString();
  // The refused push's step is not done: this worker's next calls fail with its reason.
  EXPECT_EQ(c.Clock().ToString(), st.ToString());
  // The server goes on for the other worker: the rows it had are there, pushes to them apply,
  // and the refused push applied nothing (new rows it made before the limit are at their
  // initial zeros).
  Client& other = cluster.client(1);
  auto t1 = other.CreateTable(spec);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  ASSERT_TRUE(other.Push(*t1, keys(0, 5000), std::vector<float>(5000 * 16, 1.0f)).WaitFor(10000).ok());
  std::vector<float> v(12000 * 16, -1.0f);
  ASSERT_TRUE(other.Pull(*t1, keys(0, 5000), v.data()).WaitFor(10000).ok());
  for (size_t i = 0; i < 5000 * 16; ++i) ASSERT_FLOAT_EQ(v[i], -0.2f) << i;
  ASSERT_TRUE(other.Pull(*t1, keys(5000, 100), v.data()).WaitFor(10000).ok());
  for (size_t i = 0; i < 100 * 16; ++i) ASSERT_EQ(v[i], 0.0f) << i;
  EXPECT_LE(cluster.server(0).stats().table_bytes.load(), size_t(1) << 20);
  EXPECT_EQ(cluster.FinishAndJoin().ToString(), st.ToString());
}

// With several update threads each stripe adds its own rows: the one that would pass the limit
// refuses its part, the request is answered with that error, and the server goes on.
TEST(ServerFailure, AStripePastTheMemoryLimitAnswersTheRequestWithIt) {
  LocalClusterConfig cfg;
  cfg.update_threads = 3;
  cfg.server_options = [](int, server::ServerOptions* o) { o->max_table_bytes = 1 << 20; };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AspZeros("emb", 0);
  spec.sparse = true;
  spec.dim = 16;
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<Key> k(20000);
  for (Key i = 0; i < k.size(); ++i) k[i] = i * 7919;
  // A pull makes the rows it reads, too (at their initial values): refused alike.
  std::vector<float> v(k.size() * 16);
  Status st = c.Pull(*t, k, v.data()).WaitFor(10000);
  ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  std::vector<Key> few(k.begin(), k.begin() + 100);
  ASSERT_TRUE(c.Push(*t, few, std::vector<float>(100 * 16, 1.0f)).WaitFor(10000).ok());
  ASSERT_TRUE(c.Pull(*t, few, v.data()).WaitFor(10000).ok());
  for (size_t i = 0; i < 100 * 16; ++i) ASSERT_FLOAT_EQ(v[i], -0.1f) << i;
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
