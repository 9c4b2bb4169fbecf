// A server's rows split into stripes, one per update thread or block (server/table/shard.h), seen
// through a client: pulls are sent from each stripe in place and see exactly the pushes before
// them, and large calls go as a request per block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "server/table/shard.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// S servers with K update threads each (K stripes per table), one worker.
LocalClusterConfig Striped(int servers, int update_threads) {
  LocalClusterConfig cfg;
  cfg.servers = servers;
  cfg.workers = 1;
  cfg.update_threads = update_threads;
  return cfg;
}

// With several update threads a server's rows are split into stripes; a dense pull is sent
// from each stripe's parameters in place, one values frame per stripe, and keeps seeing the
// version it was sent from while pushes go on (copy-on-write, per stripe). Keyed pulls that span
// stripes are gathered by every stripe's thread into one buffer.
TEST(Stripes, DensePullIsSentFromEveryStripeInPlace) {
  LocalCluster cluster(Striped(2, 3));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  const TableSpec spec = AspTable("striped", 4096, 16);  // 128 KB a server: pushes go to the update threads
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const size_t n = spec.rows * spec.dim;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = float(i % 1000) - 500.0f;
  ASSERT_TRUE(c.PushDense(*t, g).Wait().ok());
  std::vector<float> once(n);
  ASSERT_TRUE(c.PullDense(*t, once.data()).Wait().ok());
  for (size_t i : {size_t(0), size_t(17), n / 2, n - 1}) EXPECT_FLOAT_EQ(once[i], -0.01f * g[i]) << i;

  PulledRows view;
  ASSERT_TRUE(c.Pull(*t, WholeTableInto(&view)).Wait().ok());
  ASSERT_EQ(view.num_parts(), 6u);  // 2 servers x 3 stripes
  uint64_t next_row = 0;
  for (size_t i = 0; i < view.num_parts(); ++i) {
    EXPECT_EQ(view.part_first_row(i), next_row) << i;
    ASSERT_EQ(view.part_floats(i) % spec.dim, 0u) << i;
    EXPECT_EQ(view.part(i)[0], once[next_row * spec.dim]) << i;
    next_row += view.part_floats(i) / spec.dim;
  }
  EXPECT_EQ(next_row, spec.rows);
  std::vector<float> copied(n, 7.0f);
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, once);

  // A second push while the view holds the first version: the view does not move.
  ASSERT_TRUE(c.PushDense(*t, g).Wait().ok());
  std::vector<float> twice(n);
  ASSERT_TRUE(c.PullDense(*t, twice.data()).Wait().ok());
  EXPECT_NE(twice, once);
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, once);
  for (size_t i : {size_t(5), n / 3, n - 2}) EXPECT_FLOAT_EQ(twice[i], -0.02f * g[i]) << i;

  // Keys out of order, across servers and stripes.
  const std::vector<Key> keys = {4095, 0, 2048, 1000, 3000, 1};
  std::vector<float> rows(keys.size() * spec.dim);
  ASSERT_TRUE(c.Pull(*t, keys, rows.data()).Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i)
    for (uint32_t d = 0; d < spec.dim; ++d)
      EXPECT_EQ(rows[i * spec.dim + d], twice[keys[i] * spec.dim + d]) << keys[i] << "," << d;

  // A sparse table: rows hash to stripes; keyed pushes and pulls span all of them.
  const TableSpec sp = AspSparse("striped_sparse", 4);
  auto st = c.CreateTable(sp);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<Key> skeys;
  for (Key k = 0; k < 3000; ++k) skeys.push_back(k * 0x9E3779B97F4A7C15ull);
  std::vector<float> sg(skeys.size() * sp.dim);
  for (size_t i = 0; i < sg.size(); ++i) sg[i] = float(i % 7) - 3.0f;
  ASSERT_TRUE(c.Push(*st, skeys, sg).Wait().ok());
  std::vector<Key> back(skeys.rbegin(), skeys.rend());
  std::vector<float> sv(back.size() * sp.dim);
  ASSERT_TRUE(c.Pull(*st, back, sv.data()).Wait().ok());
  for (size_t i = 0; i < back.size(); ++i)
    for (uint32_t d = 0; d < sp.dim; ++d)
      ASSERT_FLOAT_EQ(sv[i * sp.dim + d], -0.01f * sg[(skeys.size() - 1 - i) * sp.dim + d]) << i << "," << d;

  // The same pulls read in place (into a view): row(i) is key i's values, as the copying pull put
  // them, whichever server, stripe and frame holds them; a key asked twice is there twice. Rows
  // of dense views are found by row(i) too.
  std::vector<Key> twice_asked = back;
  twice_asked.push_back(back[17]);
  twice_asked.push_back(back[0]);
  PulledRows sview;
  ASSERT_TRUE(c.Pull(*st, IntoView(twice_asked, &sview)).Wait().ok());
  ASSERT_EQ(sview.num_rows(), twice_asked.size());
  for (size_t i = 0; i < back.size(); ++i)
    ASSERT_EQ(std::memcmp(sview.row(i), &sv[i * sp.dim], sp.dim * sizeof(float)), 0) << i;
  EXPECT_EQ(std::memcmp(sview.row(back.size()), &sv[17 * sp.dim], sp.dim * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(sview.row(back.size() + 1), &sv[0], sp.dim * sizeof(float)), 0);
  std::vector<float> scopied(twice_asked.size() * sp.dim);
  sview.CopyTo(scopied.data());
  EXPECT_EQ(std::vector<float>(scopied.begin(), scopied.begin() + sv.size()), sv);
  EXPECT_THROW(sview.row(twice_asked.size()), std::out_of_range);
  PulledRows dview;
  ASSERT_TRUE(c.Pull(*t, IntoView(keys, &dview)).Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(std::memcmp(dview.row(i), &rows[i * spec.dim], spec.dim * sizeof(float)), 0) << keys[i];
  for (size_t r : {size_t(0), size_t(1), size_t(2047), size_t(2048), spec.rows - 1})
    EXPECT_EQ(std::memcmp(view.row(r), &once[r * spec.dim], spec.dim * sizeof(float)), 0) << r;  // the old version
  // A failed pull into a view leaves nothing of the earlier one readable: reading it says why.
  EXPECT_EQ(c.Pull(*t, IntoView({1, spec.rows}, &dview)).Wait().code(), Code::kInvalidArgument);
  EXPECT_THROW(dview.num_rows(), std::logic_error);
  EXPECT_THROW(dview.row(0), std::logic_error);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Fewer rows than stripes (some stripes empty), tiny and wide rows, small pulls (gathered into
// one frame per server) and large ones (a frame per stripe that holds rows).
TEST(Stripes, EmptyStripesAndEveryPullSize) {
  LocalCluster cluster(Striped(2, 5));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  for (uint64_t rows : {1, 2, 3, 7, 11}) {
    for (uint32_t dim : {1u, 3u, 2048u, 16384u}) {
      const std::string name = "t" + std::to_string(rows) + "x" + std::to_string(dim);
      auto t = c.CreateTable(AspTable(name, rows, dim));
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      std::vector<float> g(rows * dim);
      for (size_t i = 0; i < g.size(); ++i) g[i] = float(i % 97) + 1;
      ASSERT_TRUE(c.PushDense(*t, g).Wait().ok());
      std::vector<float> out(rows * dim, 9.0f);
      ASSERT_TRUE(c.PullDense(*t, out.data()).Wait().ok());
      for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(out[i], -0.01f * g[i]) << name << " " << i;
      PulledRows v;
      ASSERT_TRUE(c.Pull(*t, WholeTableInto(&v)).Wait().ok());
      std::vector<float> copied(rows * dim, 9.0f);
      v.CopyTo(copied.data());
      EXPECT_EQ(copied, out) << name;
      uint64_t next = 0;
      for (size_t i = 0; i < v.num_parts(); ++i) {
        EXPECT_EQ(v.part_first_row(i), next) << name << " part " << i;
        next += v.part_floats(i) / dim;
      }
      EXPECT_EQ(next, rows) << name;
      const size_t per_server = (rows + 1) / 2 * dim * sizeof(float);
      if (per_server <= 64 * 1024) {
        EXPECT_LE(v.num_parts(), 2u) << name << ": small pulls come in one frame per server";
      }
      if (rows >= 7 && dim == 16384) {
        EXPECT_GT(v.num_parts(), 2u) << name << ": large pulls come a frame per stripe";
      }
    }
  }
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Pushes and pulls not waited for: each pull waits on the update threads behind the pushes
// before it, and the pushes after it (dense ones, and small keyed ones that copy the stripes a
// reply still holds) do not change what it sends.
TEST(Stripes, QueuedPullsSeeExactlyTheEarlierPushes) {
  LocalCluster cluster(Striped(1, 3));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  const uint64_t rows = 30000;
  const uint32_t dim = 16;
  auto t = c.CreateTable(AspTable("queued", rows, dim));
  ASSERT_TRUE(t.ok());
  auto g = std::make_shared<const std::vector<float>>(rows * dim, 1.0f);
  const int n = 40;
  std::vector<std::vector<float>> outs(n, std::vector<float>(rows * dim));
  std::vector<PulledRows> views(n);
  std::vector<Future> fs;
  const std::vector<Key> keyed = {0, rows - 1, rows / 3, rows / 2};
  for (int i = 0; i < n; ++i) {
    fs.push_back(c.PushDense(*t, g));
    fs.push_back(i % 2 ? c.PullDense(*t, outs[i].data()) : c.Pull(*t, WholeTableInto(&views[i])));
    if (i % 5 == 0) fs.push_back(c.Push(*t, keyed, std::vector<float>(keyed.size() * dim, 1.0f)));
  }
  for (auto& f : fs) ASSERT_TRUE(f.Wait().ok());
  for (int i = 0; i < n; ++i) {
    std::vector<float>& o = outs[i];
    if (i % 2 == 0) views[i].CopyTo(o.data());
    const int keyed_before = (i + 4) / 5;  // rounds j < i with j % 5 == 0 (round i's comes after its pull)
    for (uint64_t r : {uint64_t(1), rows / 4, rows - 2})
      EXPECT_NEAR(o[r * dim], -0.01f * (i + 1), 1e-4) << i << " " << r;
    EXPECT_NEAR(o[0], -0.01f * (i + 1 + keyed_before), 1e-4) << i;
    EXPECT_NEAR(o[(rows - 1) * dim + dim - 1], -0.01f * (i + 1 + keyed_before), 1e-4) << i;
  }
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A dense table of more than a block a server (TableInfo::BlockRows: 1 MB) is held in a stripe
// per block, round robin over the update threads, and a client sends a whole-table push or pull
// as a request per block, so that a server applies one block while the next one arrives and
// sends a pull's first block before it has read the last. Each block's request stands alone: a
// non-finite gradient refuses the blocks that hold it (as each server's part of a push split
// over servers is refused), and the refusal fails the pushing worker's Clock after it, which no
// server counts; clip_norm still clips by the whole push's norm.
TEST(Stripes, LargeDenseCallsGoABlockARequest) {
  // 4 KB rows, 256 to a block: each server holds 5 whole blocks and one of 100 rows.
  const uint64_t block = 256, per_server = 5 * block + 100;
  const TableSpec spec = AspTable("blocks", 2 * per_server, 1024);
  const TableInfo info = TableInfo::Make(0, spec, 2);
  ASSERT_EQ(info.BlockRows(1), block);
  table::TableShard shard(info, 1, 4);
  ASSERT_EQ(shard.num_stripes(), 6);
  std::vector<table::RowSelection> sel;
  shard.SplitRange(per_server, 2 * per_server, &sel);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sel[i].range_begin, per_server + i * block) << i;
    EXPECT_EQ(sel[i].size(), i < 5 ? block : 100) << i;
    EXPECT_EQ(shard.ThreadOf(i), i % 4) << i;
  }
  EXPECT_EQ(table::TableShard(TableInfo::Make(0, AspTable("small", 3 * block, 1024), 1), 0, 4).num_stripes(), 4)
      << "fewer blocks than update threads: a stripe per thread";
  TableSpec huge = AspTable("huge", 1 << 20, 1024);  // 4 GB: 64 blocks of 64 MB, not 4096 of 1 MB
  EXPECT_EQ(TableInfo::Make(0, huge, 1).BlockRows(0), (1u << 20) / TableInfo::kMaxBlocks);
  huge.dim = 1 << 20;  // a row over a block: a row a block
  EXPECT_EQ(TableInfo::Make(0, huge, 1).BlockRows(0), 16384u);

  LocalClusterConfig two_workers = Striped(2, 4);
  two_workers.workers = 2;  // (worker 1 reads what worker 0's refused push left)
  LocalCluster cluster(two_workers);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const size_t n = spec.rows * spec.dim;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = float(i % 1013) - 500.0f;
  ASSERT_TRUE(c.PushDense(*t, g).Wait().ok());
  for (int s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).stats().pushes.load(), 6u) << "server " << s;
  std::vector<float> out(n);
  ASSERT_TRUE(c.PullDense(*t, out.data()).Wait().ok());
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], -0.01f * g[i]) << i;
  PulledRows view;
  ASSERT_TRUE(c.Pull(*t, WholeTableInto(&view)).Wait().ok());
  ASSERT_EQ(view.num_parts(), 12u);  // a frame per block: each is one stripe, sent in place
  for (size_t i = 0; i < 12; ++i) {
    const uint64_t first = (i / 6) * per_server + (i % 6) * block;
    EXPECT_EQ(view.part_first_row(i), first) << i;
    EXPECT_EQ(view.part_floats(i), (i % 6 < 5 ? block : 100) * spec.dim) << i;
  }
  std::vector<float> copied(n);
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, out);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).stats().pulls.load(), 12u) << "server " << s;

  // A NaN in server 1's third block: that block is refused, the others are applied.
  std::vector<float> bad(n, 1.0f);
  const size_t nan_row = per_server + 2 * block + 7;
  bad[nan_row * spec.dim + 3] = std::nanf("");
  Status st = c.PushDense(*t, bad).Wait();
  EXPECT_EQ(st.code(), Code::kDiverged) << st.ToString();
  auto t1 = cluster.client(1).CreateTable(spec);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  std::vector<float> after(n);
  ASSERT_TRUE(cluster.client(1).PullDense(*t1, after.data()).Wait().ok());
  for (uint64_t row :
       {uint64_t(0), per_server - 1, per_server + 2 * block - 1, per_server + 3 * block, 2 * per_server - 1})
    EXPECT_FLOAT_EQ(after[row * spec.dim], out[row * spec.dim] - 0.01f) << row;
  for (uint64_t row : {per_server + 2 * block, nan_row}) EXPECT_EQ(after[row * spec.dim], out[row * spec.dim]) << row;
  EXPECT_EQ(c.Clock().ToString(), st.ToString());  // (not sent)
  EXPECT_EQ(c.Finish().ToString(), st.ToString());
  EXPECT_EQ(cluster.server(0).stats().clocks, 0u);
  EXPECT_EQ(cluster.server(1).stats().clocks, 0u);
  EXPECT_TRUE(c.Leave(st).ok());
  cluster.FinishAndJoin().IgnoreError();

  // clip_norm: two blocks on one server, 3 in the first and 4 in the second: each clipped by the
  // whole push's norm, 5 (by its own, the first would move by 1).
  LocalCluster one(Striped(1, 1));
  ASSERT_TRUE(one.Start().ok());
  TableSpec clipped = AspTable("clipped_blocks", 2 * block, 1024);
  clipped.init = InitKind::kZeros;
  clipped.optimizer.lr = 1.0f;
  clipped.optimizer.clip_norm = 1.0f;
  auto ct = one.client(0).CreateTable(clipped);
  ASSERT_TRUE(ct.ok()) << ct.status().ToString();
  std::vector<float> cg(2 * block * 1024, 0.0f);
  cg[0] = 3.0f;
  cg[block * 1024] = 4.0f;
  ASSERT_TRUE(one.client(0).PushDense(*ct, cg).Wait().ok());
  EXPECT_EQ(one.server(0).stats().pushes.load(), 2u);
  std::vector<float> w(cg.size());
  ASSERT_TRUE(one.client(0).PullDense(*ct, w.data()).Wait().ok());
  EXPECT_FLOAT_EQ(w[0], -0.6f);
  EXPECT_FLOAT_EQ(w[block * 1024], -0.8f);
  EXPECT_TRUE(one.FinishAndJoin().ok());
}

// A sparse call sends each server's part as requests of at most a block's keys
// (TableInfo::KeysPerRequest: KeyedBlockRows, more when that would make over kMaxBlocks), in call
// order, so that a recurring key set's rows are made and copied on write block by block; keys
// in server order go zero-copy, others gathered, and every row lands in its place either way,
// also from replies that hold each stripe's rows in turn (two update threads).
TEST(Stripes, LargeSparseCallsGoABlockARequest) {
  const TableSpec sp = AspSparse("sparse_blocks", 16384);  // 64 KB rows: 16 to a block
  const TableInfo info = TableInfo::Make(0, sp, 2);
  ASSERT_EQ(TableInfo::KeyedBlockRows(sp.dim), 16u);
  EXPECT_EQ(info.KeysPerRequest(40), 16u);
  EXPECT_EQ(info.KeysPerRequest(16 * TableInfo::kMaxBlocks), 16u);
  EXPECT_EQ(info.KeysPerRequest(16 * TableInfo::kMaxBlocks + 1), 17u);  // at most kMaxBlocks requests
  EXPECT_EQ(TableInfo::KeyedBlockRows(1u << 20), 1u);                   // a row over a block: one a request
  EXPECT_EQ(TableInfo::Make(0, AspTable("dense", 100, sp.dim), 1).KeysPerRequest(40), 40u);  // dense: one

  LocalCluster cluster(Striped(2, 2));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  auto t = c.CreateTable(sp);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<Key> drawn;
  for (Key i = 1; i <= 90; ++i) drawn.push_back(SplitMix64(i));
  std::vector<Key> keys = drawn;
  ASSERT_TRUE(c.GroupByServer(*t, &keys).ok());
  ASSERT_NE(keys, drawn) << "the order drawn is not the servers' (each server's keys are gathered)";
  uint64_t requests[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    const uint64_t n = std::count_if(keys.begin(), keys.end(), [&](Key k) { return info.OwnerOf(k) == s; });
    ASSERT_GT(n, 16u) << "server " << s << " gets more than a block";
    requests[s] = (n + 15) / 16;
  }
  std::vector<float> g(keys.size() * sp.dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(i % 997) - 400.0f;
  ASSERT_TRUE(c.Push(*t, keys, g).Wait().ok());
  for (int s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).stats().pushes.load(), requests[s]) << "server " << s;
  std::vector<float> out(g.size());
  ASSERT_TRUE(c.Pull(*t, keys, out.data()).Wait().ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(out[i], -0.01f * g[i]) << i;
  for (int s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).stats().pulls.load(), requests[s]) << "server " << s;
  PulledRows view;
  ASSERT_TRUE(c.Pull(*t, IntoView(keys, &view)).Wait().ok());
  std::vector<float> copied(g.size());
  view.CopyTo(copied.data());
  EXPECT_EQ(copied, out);
  // Two update threads: a reply holds each stripe's rows in turn, a frame each, sent in place
  // (kFlagByStripe), and the client places them by key.
  EXPECT_GT(view.num_parts(), requests[0] + requests[1]);
  // A key twice in one request (keys[5] again at 3, both in server 0's first request): its
  // stripe's rows are gathered (not one run), and both places get it.
  ASSERT_EQ(info.OwnerOf(keys[5]), 0);
  std::vector<Key> twice = keys;
  twice.insert(twice.begin() + 3, keys[5]);
  std::vector<float> out2(twice.size() * sp.dim);
  ASSERT_TRUE(c.Pull(*t, twice, out2.data()).Wait().ok());
  for (size_t i = 0; i < twice.size(); ++i) {
    const size_t at = i < 3 ? i : i == 3 ? 5 : i - 1;
    ASSERT_EQ(std::memcmp(&out2[i * sp.dim], &out[at * sp.dim], sp.dim * sizeof(float)), 0) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(view.row(i)[sp.dim - 1], out[i * sp.dim + sp.dim - 1]) << i;
  // The keys in the order drawn (each server's gathered): the same rows, in their places.
  std::vector<float> mixed(g.size());
  ASSERT_TRUE(c.Pull(*t, drawn, mixed.data()).Wait().ok());
  PulledRows mixed_view;
  ASSERT_TRUE(c.Pull(*t, IntoView(drawn, &mixed_view)).Wait().ok());
  for (size_t i = 0; i < drawn.size(); ++i) {
    const size_t at = std::find(keys.begin(), keys.end(), drawn[i]) - keys.begin();
    ASSERT_EQ(std::memcmp(&mixed[i * sp.dim], &out[at * sp.dim], sp.dim * sizeof(float)), 0) << i;
    ASSERT_EQ(std::memcmp(mixed_view.row(i), &out[at * sp.dim], sp.dim * sizeof(float)), 0) << i;
  }
  std::vector<float> g2(g.size());  // pushed in the order drawn: the row of key drawn[i] gets g2's i-th
  for (size_t i = 0; i < g2.size(); ++i) g2[i] = float(i % 101);
  ASSERT_TRUE(c.Push(*t, drawn, g2).Wait().ok());
  ASSERT_TRUE(c.Pull(*t, drawn, mixed.data()).Wait().ok());
  for (size_t i = 0; i < drawn.size(); ++i) {
    const size_t at = std::find(keys.begin(), keys.end(), drawn[i]) - keys.begin();
    for (uint32_t d : {0u, sp.dim - 1})
      ASSERT_FLOAT_EQ(mixed[i * sp.dim + d], out[at * sp.dim + d] - 0.01f * g2[i * sp.dim + d]) << i;
  }
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// Keyed pulls of a dense table over several stripes (rows by range, not by hash) are gathered
// in the keys' order, whatever their size; a sparse table's are sent a stripe a frame.
TEST(Stripes, KeyedPullsOverStripesLandInTheirPlaces) {
  LocalCluster cluster(Striped(1, 3));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  const uint64_t rows = 3000;
  const uint32_t dim = 64;
  auto dense = c.CreateTable(AspTable("dense_keyed", rows, dim));
  auto sparse = c.CreateTable(AspSparse("sparse_keyed", dim));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<Key> keys;
  for (Key k = 0; k < rows; ++k) keys.push_back((k * 7919) % rows);  // every row, shuffled
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(i % 1009);
  for (const Table& t : {*dense, *sparse}) {
    ASSERT_TRUE(c.Push(t, keys, g).Wait().ok()) << t.name;
    std::vector<float> out(g.size());
    ASSERT_TRUE(c.Pull(t, keys, out.data()).Wait().ok()) << t.name;
    for (size_t i = 0; i < keys.size(); i += 97) {  // against pulls of one key (one small frame)
      std::vector<float> one(dim);
      ASSERT_TRUE(c.Pull(t, {keys[i]}, one.data()).Wait().ok());
      ASSERT_EQ(std::memcmp(one.data(), &out[i * dim], dim * sizeof(float)), 0) << t.name << " " << i;
    }
    PulledRows view;
    ASSERT_TRUE(c.Pull(t, IntoView(keys, &view)).Wait().ok()) << t.name;
    for (size_t i = 0; i < keys.size(); i += 97)
      ASSERT_EQ(std::memcmp(view.row(i), &out[i * dim], dim * sizeof(float)), 0) << t.name << " " << i;
    if (t.sparse) {
      EXPECT_EQ(view.num_parts(), 3u) << "a frame per stripe";
    }
  }
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// The learning-rate schedule steps once a push a server receives, not once a request: a call
// split into a request per block (dense) or per block's keys (sparse) takes one step, on its
// first request (kFlagContinues on the others).
TEST(Stripes, AScheduleStepsOncePerPushWhateverItsRequests) {
  LocalCluster cluster(Striped(1, 2));
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  auto warm = [](TableSpec s) {
    s.init = InitKind::kZeros;
    s.optimizer.lr = 1.0f;
    s.optimizer.schedule.warmup_steps = 4;  // lr 0.25, 0.5, 0.75, 1 for steps 0 to 3
    return s;
  };
  const TableSpec dense = warm(AspTable("warm_dense", 2 * 256 + 10, 1024));  // 3 blocks
  const TableSpec sparse = warm(AspSparse("warm_sparse", 16384));            // 16 keys a request
  auto td = c.CreateTable(dense);
  auto ts = c.CreateTable(sparse);
  ASSERT_TRUE(td.ok() && ts.ok());
  std::vector<Key> keys;
  for (Key k = 1; k <= 40; ++k) keys.push_back(k * 7919);
  const std::vector<float> gd(dense.rows * dense.dim, 1.0f), gs(keys.size() * sparse.dim, 1.0f);
  std::vector<float> od(gd.size()), os(gs.size());
  for (float want : {-0.25f, -0.75f, -1.5f}) {
    ASSERT_TRUE(c.PushDense(*td, gd).Wait().ok());
    ASSERT_TRUE(c.Push(*ts, keys, gs).Wait().ok());
    ASSERT_TRUE(c.PullDense(*td, od.data()).Wait().ok());
    ASSERT_TRUE(c.Pull(*ts, keys, os.data()).Wait().ok());
    for (uint64_t row : {uint64_t(0), uint64_t(255), uint64_t(256), uint64_t(511), dense.rows - 1})
      EXPECT_FLOAT_EQ(od[row * dense.dim + 5], want) << "dense row " << row;
    for (size_t i : {size_t(0), size_t(15), size_t(16), size_t(39)})
      EXPECT_FLOAT_EQ(os[i * sparse.dim + 5], want) << "sparse key " << i;
  }
  EXPECT_EQ(cluster.server(0).stats().pushes.load(), 3u * 3 + 3u * 3) << "3 requests a push, of each table";
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
