// Client::Pull(table, PullOptions): every read of rows is one call. The whole dense table or the
// rows of keys, copied into a buffer or read in place from a view, creating sparse keys or only
// looking them up, the parameters or an optimizer slot; options that do not fit together fail
// with InvalidArgument saying what is wrong, before anything is sent. A pull whose Future is
// dropped before it completed is given up, counted and logged, not silently.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/eventually.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// A dense table of 10 rows of 3 over 2 servers (rows 0-4 on one, 5-9 on the other), row r's
// values -0.01 * (3r, 3r + 1, 3r + 2) after one SGD push.
class PullOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cluster_ = std::make_unique<LocalCluster>(cfg);
    ASSERT_TRUE(cluster_->Start().ok());
    c_ = &cluster_->client(0);
    TableSpec spec = AspTable("dense", 10, 3);
    spec.init = InitKind::kZeros;
    auto t = c_->CreateTable(spec);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    dense_ = *t;
    std::vector<float> g(30);
    for (int i = 0; i < 30; ++i) g[i] = float(i);
    ASSERT_TRUE(c_->PushDense(dense_, g).Wait().ok());
  }
  void TearDown() override {
    if (cluster_) {
      EXPECT_TRUE(cluster_->FinishAndJoin().ok());
    }
  }
  static float Want(size_t row, size_t col) { return -0.01f * float(row * 3 + col); }

  std::unique_ptr<LocalCluster> cluster_;
  Client* c_ = nullptr;
  Table dense_;
};

TEST_F(PullOptionsTest, NoKeysReadTheWholeDenseTableIntoABufferOrAView) {
  std::vector<float> out(30, 7.0f);
  PullOptions o;  // every field at its default but the destination
  o.out = out.data();
  ASSERT_TRUE(c_->Pull(dense_, o).Wait().ok());
  for (size_t i = 0; i < 30; ++i) ASSERT_FLOAT_EQ(out[i], Want(i / 3, i % 3)) << i;
  // PullDense is the same pull.
  std::vector<float> again(30, 7.0f);
  ASSERT_TRUE(c_->PullDense(dense_, again.data()).Wait().ok());
  EXPECT_EQ(again, out);
  // In place: a part per server, the rows in row order.
  PulledRows view;
  ASSERT_TRUE(c_->Pull(dense_, WholeTableInto(&view)).Wait().ok());
  ASSERT_EQ(view.num_rows(), 10u);
  ASSERT_EQ(view.num_parts(), 2u);
  EXPECT_EQ(view.part_first_row(1), 5u);
  for (size_t r = 0; r < 10; ++r)
    for (size_t col = 0; col < 3; ++col) ASSERT_FLOAT_EQ(view.row(r)[col], Want(r, col)) << r;
  std::vector<float> copied(30, 7.0f);
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, out);
}

TEST_F(PullOptionsTest, KeysReadIntoAViewInKeyOrder) {
  // Both servers' rows, out of order, one twice.
  const std::vector<Key> keys = {9, 0, 5, 4, 9};
  PulledRows view;
  ASSERT_TRUE(c_->Pull(dense_, IntoView(keys, &view)).Wait().ok());
  ASSERT_EQ(view.num_rows(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    for (size_t col = 0; col < 3; ++col) ASSERT_FLOAT_EQ(view.row(i)[col], Want(keys[i], col)) << i;
  // The same as the copying pull.
  std::vector<float> out(keys.size() * 3), copied(keys.size() * 3);
  ASSERT_TRUE(c_->Pull(dense_, keys, out.data()).Wait().ok());
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, out);
  // A new pull into the view replaces what it held.
  ASSERT_TRUE(c_->Pull(dense_, IntoView({2}, &view)).Wait().ok());
  ASSERT_EQ(view.num_rows(), 1u);
  EXPECT_FLOAT_EQ(view.row(0)[0], Want(2, 0));
}

// Options that do not fit together are refused before anything is sent, saying what is wrong;
// a view they were to fill says so when read.
TEST_F(PullOptionsTest, OptionsThatDoNotFitAreInvalidArgumentSayingWhy) {
  auto sparse = c_->CreateTable(AspSparse("sparse", 2));
  ASSERT_TRUE(sparse.ok()) << sparse.status().ToString();
  std::vector<float> out(30);
  PulledRows view;
  auto refused = [&](const Table& t, const PullOptions& o, const std::string& says) {
    const uint64_t pulls = c_->stats().pulls;
    Status st = c_->Pull(t, o).Wait();
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << says << ": " << st.ToString();
    EXPECT_NE(st.message().find(says), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("'" + t.name + "'"), std::string::npos) << st.ToString();
    EXPECT_EQ(c_->stats().pulls, pulls) << says << ": nothing is sent";
  };
  PullOptions both;
  both.keys = KeysOf({1});
  both.out = out.data();
  both.view = &view;
  refused(dense_, both, "both PullOptions::out and view are set");
  EXPECT_THROW(view.num_rows(), std::logic_error);
  both.keys = nullptr;  // the whole table: the same
  refused(dense_, both, "both PullOptions::out and view are set");
  PullOptions neither;
  neither.keys = KeysOf({1});
  refused(dense_, neither, "no destination");
  refused(dense_, PullOptions{}, "no destination");
  PullOptions whole_slot;
  whole_slot.out = out.data();
  whole_slot.slot = 0;
  refused(dense_, whole_slot, "slot 0 without keys");
  refused(dense_, SlotOf({1}, -2, out.data()), "slot -2");
  PullOptions whole_sparse;
  whole_sparse.out = out.data();
  refused(*sparse, whole_sparse, "the table is sparse");
  whole_sparse.view = &view;
  whole_sparse.out = nullptr;
  refused(*sparse, whole_sparse, "the table is sparse");
  EXPECT_THROW(view.row(0), std::logic_error);
  // A row out of range, into a view too.
  refused(dense_, IntoView({3, 10}, &view), "row 10 out of range");
  // The keyed wrappers refuse null keys rather than read the whole table into a buffer sized
  // for keys.
  Status st = c_->Pull(dense_, KeyBuffer(), out.data()).Wait();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("no key buffer"), std::string::npos) << st.ToString();
  st = c_->Lookup(dense_, KeyBuffer(), out.data()).Wait();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  // No keys to read: nothing to write, so no destination is needed.
  PullOptions none;
  none.keys = KeysOf({});
  EXPECT_TRUE(c_->Pull(dense_, none).Wait().ok());
  // A slot the optimizer lacks: the server refuses it, naming the optimizer.
  st = c_->Pull(dense_, SlotOf({1}, 0, out.data())).Wait();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("does not exist for optimizer sgd"), std::string::npos) << st.ToString();
  // After all that the client goes on (none of it is sticky).
  ASSERT_TRUE(c_->Pull(dense_, {1}, out.data()).Wait().ok());
  EXPECT_FLOAT_EQ(out[0], Want(1, 0));
}

// create = false: a sparse table's keys it does not hold read as their rows would start and are
// not added, into a buffer or a view: a lookup of more keys than the servers' memory limit
// allows succeeds, where the pull that creates them is refused.
TEST(PullOptionsLookup, ALookupAddsNoSparseKeysIntoABufferOrAView) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.server_options = [](int, server::ServerOptions* o) { o->max_table_bytes = 256 << 10; };
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AspSparse("ids", 4);
  spec.init = InitKind::kUniform;
  spec.init_scale = 0.5f;
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(c.Push(*t, {7}, {1, 1, 1, 1}).Wait().ok());
  std::vector<float> seven(4);
  ASSERT_TRUE(c.Pull(*t, {7}, seven.data()).Wait().ok());
  // 40000 keys (about 800 KB of rows over the two servers' 512 KB), key 7 among them.
  std::vector<Key> keys;
  for (Key k = 0; k < 40000; ++k) keys.push_back(k == 123 ? 7 : (k << 24) + 11);
  auto check = [&](const float* row, size_t i) {
    for (uint32_t col = 0; col < spec.dim; ++col) {
      const float want = keys[i] == 7 ? seven[col] : InitialValue(spec, keys[i], col);
      ASSERT_EQ(row[col], want) << "key " << keys[i] << " col " << col;
    }
  };
  PullOptions lookup;
  lookup.keys = KeysOf(keys);
  std::vector<float> out(keys.size() * spec.dim);
  lookup.out = out.data();
  lookup.create = false;
  ASSERT_TRUE(c.Pull(*t, lookup).Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_NO_FATAL_FAILURE(check(&out[i * spec.dim], i));
  PulledRows view;
  lookup.out = nullptr;
  lookup.view = &view;
  ASSERT_TRUE(c.Pull(*t, lookup).Wait().ok());
  ASSERT_EQ(view.num_rows(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_NO_FATAL_FAILURE(check(view.row(i), i));
  // Lookup is the same call.
  std::vector<float> looked(out.size());
  ASSERT_TRUE(c.Lookup(*t, keys, looked.data()).Wait().ok());
  EXPECT_EQ(looked, out);
  // The pull that creates them does not fit.
  Status st = c.Pull(*t, keys, out.data()).Wait();
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  cluster.FinishAndJoin().IgnoreError();
}

// slot >= 0 reads an optimizer's state instead of the parameters: Adam's m and v of some rows,
// into a buffer or a view; a lookup of a key not there reads the slot's starting value.
TEST(PullOptionsSlot, ASlotReadsTheOptimizerStateIntoABufferOrAView) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AspSparse("adam", 2);
  spec.optimizer.kind = opt::Kind::kAdam;
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<Key> keys = {3, uint64_t{1} << 40};
  ASSERT_TRUE(c.Push(*t, keys, {1, 1, 2, 2}).Wait().ok());
  const double b1 = 0.9, b2 = 0.999;
  std::vector<float> m(4, -1.0f);
  ASSERT_TRUE(c.Pull(*t, SlotOf(keys, 0, m.data())).Wait().ok());
  EXPECT_NEAR(m[0], (1 - b1) * 1, 1e-6);
  EXPECT_NEAR(m[2], (1 - b1) * 2, 1e-6);
  PulledRows v;
  PullOptions of_v;
  of_v.keys = KeysOf(keys);
  of_v.view = &v;
  of_v.slot = 1;
  ASSERT_TRUE(c.Pull(*t, of_v).Wait().ok());
  ASSERT_EQ(v.num_rows(), 2u);
  EXPECT_NEAR(v.row(0)[1], (1 - b2) * 1, 1e-6);
  EXPECT_NEAR(v.row(1)[1], (1 - b2) * 4, 1e-6);
  // The parameters are not what was read.
  std::vector<float> w(4);
  ASSERT_TRUE(c.Pull(*t, keys, w.data()).Wait().ok());
  EXPECT_NE(w[0], m[0]);
  // A key not there, looked up: m starts at 0.
  PullOptions unseen = SlotOf({99}, 0, m.data());
  unseen.create = false;
  m.assign(4, -1.0f);
  ASSERT_TRUE(c.Pull(*t, unseen).Wait().ok());
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(m[1], 0.0f);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Two workers on one server and a BSP table, worker a one clock ahead: its next pull waits for
// b's Clock(), so a pull's Future can go while the pull is pending.
struct AheadByOne {
  AheadByOne()
      : cluster([] {
          LocalClusterConfig cfg;
          cfg.workers = 2;
          return cfg;
        }()) {}
  // Call with ASSERT_TRUE.
  bool Start() {
    if (!cluster.Start().ok()) return false;
    a = &cluster.client(0);
    b = &cluster.client(1);
    TableSpec spec = CounterTable(4, {Consistency::kBsp, 0});
    spec.name = "bsp";
    Result<Table> made_a = a->CreateTable(spec), made_b = b->CreateTable(spec);
    if (!made_a.ok() || !made_b.ok()) return false;
    t = *made_a;
    return a->Clock().ok();
  }
  LocalCluster cluster;
  Client* a = nullptr;
  Client* b = nullptr;
  Table t;
};

// A pull into a buffer whose last Future goes before it completed is given up (its buffer left as
// it was, so that it may go too), as client.h says; that is counted in ClientStats::pulls_dropped
// and logged once per client, naming the table, not silent. Pulls given up by a wait that expired,
// pulls that completed, and pulls into a view (which go on) are not counted.
TEST(PullOptionsDropped, ADroppedPullIsGivenUpCountedAndLoggedOnce) {
  AheadByOne job;
  ASSERT_TRUE(job.Start());
  Client& a = *job.a;
  Client& b = *job.b;
  EXPECT_EQ(a.stats().pulls_dropped, 0u);
  std::vector<float> out(8, 42.0f);
  testing::internal::CaptureStderr();
  {
    Future dropped = a.PullDense(job.t, out.data());  // clock 1: waits for b
    EXPECT_FALSE(dropped.Ready());
  }
  EXPECT_EQ(a.stats().pulls_dropped, 1u);
  PulledRows view;
  {
    Future in_view = a.Pull(job.t, WholeTableInto(&view));  // goes on: its rows land in the view
    Future keyed = a.Pull(job.t, {1, 2}, out.data());       // given up too
  }
  EXPECT_EQ(a.stats().pulls_dropped, 2u);
  const std::string logged = testing::internal::GetCapturedStderr();
  const std::string line = "its last Future went before the pull completed";
  const size_t first = logged.find(line);
  ASSERT_NE(first, std::string::npos) << logged;
  EXPECT_EQ(logged.find(line, first + 1), std::string::npos) << "logged once per client:\n" << logged;
  EXPECT_NE(logged.find("dense pull from table 'bsp'"), std::string::npos) << logged;
  EXPECT_NE(logged.find("pulls_dropped"), std::string::npos) << logged;
  // A wait that expired gave the pull up already (the caller heard DeadlineExceeded): not counted.
  {
    Future waited = a.PullDense(job.t, out.data());
    EXPECT_EQ(waited.WaitFor(20).code(), Code::kDeadlineExceeded);
  }
  EXPECT_EQ(a.stats().pulls_dropped, 2u);
  ASSERT_TRUE(b.Clock().ok());  // the pulls are answered now
  std::vector<float> after(8);
  ASSERT_TRUE(a.PullDense(job.t, after.data()).WaitFor(10000).ok());  // (answered after the others)
  for (float x : out) EXPECT_EQ(x, 42.0f);                            // nothing written for those given up
  ASSERT_TRUE(Eventually([&] {
    try {
      return view.row(3) != nullptr;
    } catch (const std::logic_error&) {  // (not landed yet)
      return false;
    }
  }));
  EXPECT_EQ(view.row(3)[1], after[7]);
  // A pull that completed, then dropped: nothing given up.
  { ASSERT_TRUE(a.PullDense(job.t, out.data()).WaitFor(10000).ok()); }
  EXPECT_EQ(a.stats().pulls_dropped, 2u);
  EXPECT_EQ(b.stats().pulls_dropped, 0u);
  EXPECT_TRUE(job.cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
