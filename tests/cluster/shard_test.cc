// Server-side table state (server/table/shard.h): memory limits that refuse rows and BSP sums
// without changing anything, sparse rows made, kept and copied on write by block, recurring key
// lists, a BSP mean past the gradient limit; and through a running server, optimizer state that is
// part of a table's state (readable through a pull; sparse rows keep their own step counts) and
// lookups that add no rows.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "optimizers/optimizer.h"
#include "server/table/shard.h"
#include "tests/support/eventually.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// A stripe charges what it allocates for its rows (its arrays' room, which grows geometrically
// or, near the limit, by what is needed, and its key index) to the server's table memory: a
// write whose new rows would pass the limit throws, taking away the rows it had added, so the
// stripe is as it was and the limit never passed.
TEST(Shard, RowsPastTheMemoryLimitAreRefusedAndNothingChanges) {
  TableSpec spec = AdamSparse();
  const size_t row = table::Stripe::RowBytes(spec, 2);
  EXPECT_EQ(row, 3 * spec.dim * 4 + 4u);  // parameters, m and v, a step count
  const size_t limit = 100 * row + 4096;  // (the index of 100 keys: 256 slots of 16 bytes)
  auto memory = std::make_shared<table::ByteBudget>(limit);
  {
    table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, nullptr, memory);
    std::vector<table::RowSelection> sel;
    std::vector<Key> keys(60);
    for (Key i = 0; i < keys.size(); ++i) keys[i] = i;
    std::vector<float> g(keys.size() * spec.dim, 1.0f);
    t.Split(keys.data(), keys.size(), &sel);
    opt::StepContext ctx;
    t.stripe(0).ApplyPush(sel[0], keys.data(), g.data(), ctx);
    EXPECT_GE(memory->used(), 60 * row);
    EXPECT_LE(memory->used(), limit);
    std::vector<float> before(60 * spec.dim), after(60 * spec.dim);
    t.stripe(0).Read(sel[0], keys.data(), -1, before.data());
    // Keys 50 to 109: 10 known, 50 new rows: 110 do not fit.
    for (Key i = 0; i < keys.size(); ++i) keys[i] = 50 + i;
    t.Split(keys.data(), keys.size(), &sel);
    EXPECT_THROW(t.stripe(0).ApplyPush(sel[0], keys.data(), g.data(), ctx), table::TableMemoryExhausted);
    EXPECT_LE(memory->used(), limit);
    EXPECT_EQ(t.stripe(0).num_rows(), 60u);
    for (Key i = 0; i < keys.size(); ++i) keys[i] = i;
    t.Split(keys.data(), keys.size(), &sel);
    t.stripe(0).Read(sel[0], keys.data(), -1, after.data());
    EXPECT_EQ(before, after);
    // Rows up to the limit still come: near it the arrays grow by what is needed, not double.
    keys.resize(25);
    for (Key i = 0; i < keys.size(); ++i) keys[i] = 60 + i;
    t.Split(keys.data(), keys.size(), &sel);
    t.stripe(0).ApplyPush(sel[0], keys.data(), g.data(), ctx);
    EXPECT_EQ(t.stripe(0).num_rows(), 85u);
    EXPECT_LE(memory->used(), limit);
    // A dense shard past it is refused whole.
    const size_t used = memory->used();
    TableSpec dense = AdamSparse();
    dense.sparse = false;
    dense.rows = 100;
    EXPECT_THROW(table::TableShard(TableInfo::Make(1, dense, 1), 0, 2, true, nullptr, memory),
                 table::TableMemoryExhausted);
    EXPECT_EQ(memory->used(), used);
  }
  EXPECT_EQ(memory->used(), 0u);  // given back with the table
}

// BSP sums count against the same limit (a worker pushing clocks ahead without pulling holds a
// sum per clock): past it a push sums nothing and is refused, and applied or dropped sums give
// their bytes back.
TEST(Shard, BspSumsCountAgainstTheMemoryLimit) {
  TableSpec spec = AdamSparse();
  spec.sparse = false;
  spec.rows = 100;
  spec.optimizer.kind = opt::Kind::kSgd;
  auto memory = std::make_shared<table::ByteBudget>(std::numeric_limits<size_t>::max());
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, nullptr, memory);
  const size_t table = memory->used();
  ASSERT_GT(table, 0u);
  std::vector<Key> keys(100);
  for (Key i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<table::RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  std::vector<float> g(keys.size() * spec.dim, 1.0f);
  table::Stripe& s = t.stripe(0);
  s.Accumulate(0, 0, sel[0], keys.data(), g.data(), 1.0f);
  const size_t sum = memory->used() - table;
  EXPECT_GE(sum, 100 * spec.dim * sizeof(float));  // a sum of the table's size, counted
  // The same rows again in the clock (minibatches accumulated): no more room, nothing more counted
  // (not all new rows again).
  s.Accumulate(0, 0, sel[0], keys.data(), g.data(), 1.0f);
  s.Accumulate(0, 0, sel[0], keys.data(), g.data(), 1.0f);
  EXPECT_EQ(memory->used(), table + sum);
  s.Accumulate(0, 1, sel[0], keys.data(), g.data(), 1.0f);
  s.Accumulate(1, 0, sel[0], keys.data(), g.data(), 1.0f);  // worker 0 a clock ahead
  EXPECT_EQ(memory->used(), table + 3 * sum);
  s.DropAccumulated(1, 0);
  EXPECT_EQ(memory->used(), table + 2 * sum);
  opt::StepContext ctx;
  ctx.lr = 0.1f;
  s.ApplyAccumulated(0, ctx);
  EXPECT_EQ(memory->used(), table);
  // With room for the table and two sums: a third is refused, and nothing of it is summed.
  auto tight = std::make_shared<table::ByteBudget>(table + 2 * sum + sum / 2);
  table::TableShard u(TableInfo::Make(0, spec, 1), 0, 1, true, nullptr, tight);
  table::Stripe& v = u.stripe(0);
  v.Accumulate(0, 0, sel[0], keys.data(), g.data(), 1.0f);
  v.Accumulate(1, 0, sel[0], keys.data(), g.data(), 1.0f);
  EXPECT_THROW(v.Accumulate(2, 0, sel[0], keys.data(), g.data(), 1.0f), table::TableMemoryExhausted);
  EXPECT_EQ(tight->used(), table + 2 * sum);
  std::vector<float> before(keys.size() * spec.dim), after(before.size());
  v.Read(sel[0], keys.data(), -1, before.data());
  v.ApplyAccumulated(2, ctx);  // (no sum of clock 2: nothing to apply)
  v.Read(sel[0], keys.data(), -1, after.data());
  EXPECT_EQ(before, after);
  v.ApplyAccumulated(0, ctx);  // room again
  v.Accumulate(2, 0, sel[0], keys.data(), g.data(), 1.0f);
  EXPECT_EQ(tight->used(), table + 2 * sum);
}

// A sparse read of keys never seen creates their rows (initial values) as it goes, and the
// arrays grow under it while it copies.
TEST(Shard, SparseReadOfNewKeysGrowsTheStripe) {
  TableSpec spec = AdamSparse();
  spec.init = InitKind::kUniform;
  spec.init_scale = 0.5f;
  TableInfo info = TableInfo::Make(0, spec, 1);
  table::TableShard t(info, 0, 1);
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 3000; ++i) keys.push_back(SplitMix64(i));
  std::vector<table::RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  std::vector<float> out(keys.size() * spec.dim, NAN);
  t.stripe(0).Read(sel[0], keys.data(), -1, out.data());
  EXPECT_EQ(t.stripe(0).num_rows(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    for (uint32_t c = 0; c < spec.dim; ++c)
      ASSERT_EQ(out[i * spec.dim + c], InitialValue(spec, keys[i], c)) << "key " << i;
}

// A sparse stripe's spare stops matching once rows are added; it is dropped (its bytes given
// back) before the next copy-on-write takes from the budget, rather than kept counting against it.
TEST(Shard, CopyOnWriteDropsASparseSpareThatNoLongerFits) {
  const TableSpec spec = AdamSparse();
  const TableInfo info = TableInfo::Make(0, spec, 1);
  struct Run {
    size_t first = 0, second = 0;  // bytes the two copy-on-write writes take
    uint64_t overdrafts = 0;
    size_t used_after = 0;
  };
  // The same writes every time: a dry run with no limit finds the sizes, then one with room for
  // the second array only.
  auto run = [&](size_t limit) {
    Run out;
    auto budget = std::make_shared<table::CopyOnWriteBudget>(limit, 60000);
    table::TableShard t(info, 0, 1, true, budget);
    table::Stripe& s = t.stripe(0);
    opt::StepContext ctx;
    ctx.lr = 0.1f;
    auto push = [&](Key first, size_t n) {
      std::vector<Key> keys;
      for (size_t i = 0; i < n; ++i) keys.push_back(first + i);
      std::vector<table::RowSelection> sel;
      t.Split(keys.data(), keys.size(), &sel);
      const std::vector<float> g(n * spec.dim, 0.5f);
      s.ApplyPush(sel[0], keys.data(), g.data(), ctx);
    };
    push(0, 100);
    std::vector<Key> some{3};
    std::vector<table::RowSelection> sel;
    t.Split(some.data(), 1, &sel);
    std::shared_ptr<float[]> copied;
    std::shared_ptr<const float> v1 = s.ReadOrShare(sel[0], some.data(), &copied);  // one run: in place
    EXPECT_NE(v1, nullptr);
    out.first = s.WriteBudgetBytes();
    // New rows, more than the arrays have room for: copy-on-write, then the arrays grow; v1's
    // array is the spare (kept: fewer than 8 writes follow that need none).
    push(1000, 40);
    v1.reset();  // free now, but smaller than the parameters
    std::shared_ptr<const float> v2 = s.ReadOrShare(sel[0], some.data(), &copied);
    out.second = s.WriteBudgetBytes();
    push(0, 100);
    out.used_after = budget->used();
    out.overdrafts = budget->overdrafts;
    return out;
  };
  const Run dry = run(std::numeric_limits<size_t>::max());
  ASSERT_GT(dry.first, 0u);
  ASSERT_GT(dry.second, dry.first);
  EXPECT_EQ(dry.used_after, dry.second);  // only v2's array counts
  const Run tight = run(dry.second);
  EXPECT_EQ(tight.overdrafts, 0u);  // the old spare made room (this thread cannot wait)
  EXPECT_EQ(tight.used_after, dry.second);
}

// Rows added by pulls beside a held reply (an evaluation over new keys: pulls only, no write to
// age spares) keep no spare of the block they grew: the held array's copy-on-write budget comes
// back once the reply lets go of it, not at a later push.
TEST(Shard, RowsAddedBesideAHeldReplyKeepNoSpare) {
  const TableSpec spec = AdamSparse();
  const TableInfo info = TableInfo::Make(0, spec, 1);
  auto budget = std::make_shared<table::CopyOnWriteBudget>(std::numeric_limits<size_t>::max(), 60000);
  table::TableShard t(info, 0, 1, true, budget);
  table::Stripe& s = t.stripe(0);
  auto keyed = [&](Key first, size_t n, std::vector<Key>* keys, std::vector<table::RowSelection>* sel) {
    for (size_t i = 0; i < n; ++i) keys->push_back(first + i);
    t.Split(keys->data(), keys->size(), sel);
  };
  std::vector<Key> keys;
  std::vector<table::RowSelection> sel;
  keyed(0, 100, &keys, &sel);
  std::vector<float> out(100 * spec.dim);
  s.Read(sel[0], keys.data(), -1, out.data());  // rows 0..99, made by a pull
  std::vector<Key> one{3};
  std::vector<table::RowSelection> one_sel;
  t.Split(one.data(), 1, &one_sel);
  std::shared_ptr<float[]> copied;
  std::shared_ptr<const float> held = s.ReadOrShare(one_sel[0], one.data(), &copied);
  ASSERT_NE(held, nullptr);
  for (Key first : {1000, 2000, 3000}) {  // more rows, by pulls, while the reply holds the block
    std::vector<Key> more;
    std::vector<table::RowSelection> more_sel;
    keyed(first, 40, &more, &more_sel);
    std::vector<float> got(40 * spec.dim);
    s.Read(more_sel[0], more.data(), -1, got.data());
  }
  EXPECT_GT(budget->used(), 0u);  // (the held array, beside the block's new one)
  held.reset();
  EXPECT_EQ(budget->used(), 0u);
}

// A sparse stripe keeps recent key lists with their rows (Stripe::LocalRows): a list seen again
// is matched key by key, so one that differs in its last key only, or that has the same keys in
// another order, gets its own rows; a checkpoint restore, which numbers rows anew, forgets them.
TEST(Shard, RecurringKeyListsAreMatchedKeyByKey) {
  TableSpec spec;
  spec.name = "emb";
  spec.sparse = true;
  spec.dim = 2;
  spec.optimizer.kind = opt::Kind::kSgd;
  TableInfo info = TableInfo::Make(0, spec, 1);
  table::TableShard t(info, 0, 1);
  table::Stripe& s = t.stripe(0);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  std::vector<Key> a;
  for (uint64_t i = 0; i < 300; ++i) a.push_back(SplitMix64(i));
  std::vector<Key> b = a;
  b.back() = 12345;  // the same list but its last key
  std::vector<Key> rev(a.rbegin(), a.rend());
  auto sel_of = [&](const std::vector<Key>& keys) { return FirstStripeOf(t, keys); };
  auto push = [&](const std::vector<Key>& keys, float g) {
    std::vector<float> grads(keys.size() * 2, -g);  // SGD, lr 1: adds g
    s.ApplyPush(sel_of(keys), keys.data(), grads.data(), ctx);
  };
  auto read = [&](const std::vector<Key>& keys) {
    std::vector<float> out(keys.size() * 2, NAN);
    s.Read(sel_of(keys), keys.data(), -1, out.data());
    return out;
  };
  push(a, 1);
  push(a, 1);   // the list again
  push(b, 10);  // all of a's rows but the last, and a new row
  push(rev, 100);
  auto check = [&](const char* when) {
    std::vector<float> va = read(a), vb = read(b), vr = read(rev);
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = i + 1 < a.size() ? 112 : 102;
      ASSERT_EQ(va[i * 2], want) << when << ": key " << i;
      ASSERT_EQ(vr[(a.size() - 1 - i) * 2 + 1], want) << when << ": key " << i << " of the reversed list";
    }
    EXPECT_EQ(vb.back(), 10) << when;
  };
  check("before restoring");
  EXPECT_EQ(s.num_rows(), a.size() + 1);
  // Restore the same rows numbered in reverse: the kept lists' rows would now be wrong.
  std::vector<Key> keys = s.KeysByRow();
  const size_t n = keys.size();
  FloatArray params(n * 2);
  std::vector<Key> rkeys(n);
  for (size_t r = 0; r < n; ++r) {
    rkeys[n - 1 - r] = keys[r];
    params[(n - 1 - r) * 2] = s.row_params(r)[0];
    params[(n - 1 - r) * 2 + 1] = s.row_params(r)[1];
  }
  ASSERT_TRUE(s.Restore(rkeys, std::move(params), {}, std::vector<uint32_t>(n, 0)).ok());
  check("after restoring");
}

// A recurring key set whose rows are consecutive (made in the order it recurs) is walked as one
// run without looking at each row (Stripe::ForEachRun), yet a row that another push stepped
// further still gets its own step (lazy Adam's bias correction): the same as pushing every key
// on its own.
TEST(Shard, ARecurringKeySetsRowsKeepTheirOwnSteps) {
  const TableSpec spec = AdamSparse();
  const TableInfo info = TableInfo::Make(0, spec, 1);
  table::TableShard listed(info, 0, 1), alone(info, 0, 1);
  opt::StepContext ctx;
  ctx.lr = 0.1f;
  auto push = [&](table::TableShard& t, const std::vector<Key>& keys, float g) {
    std::vector<table::RowSelection> sel;
    t.Split(keys.data(), keys.size(), &sel);
    const std::vector<float> grads(keys.size() * spec.dim, g);
    t.stripe(0).ApplyPush(sel[0], keys.data(), grads.data(), ctx);
  };
  std::vector<Key> set;
  for (Key k = 0; k < 300; ++k) set.push_back(1000 + 7 * k);
  for (int round = 0; round < 3; ++round) {
    const float g = 0.5f + round;
    push(listed, set, g);  // (kept list from the second round on: one run)
    for (Key k : set) push(alone, {k}, g);
    for (Key k : {set[5], set[6], set[299]}) {  // these rows a step ahead of the others
      push(listed, {k}, -1.0f);
      push(alone, {k}, -1.0f);
    }
  }
  std::vector<float> a(set.size() * spec.dim), b(a.size());
  std::vector<table::RowSelection> sel;
  listed.Split(set.data(), set.size(), &sel);
  listed.stripe(0).Read(sel[0], set.data(), -1, a.data());
  alone.Split(set.data(), set.size(), &sel);
  alone.stripe(0).Read(sel[0], set.data(), -1, b.data());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_FLOAT_EQ(a[i], b[i]) << "row " << i / spec.dim;
}

// A keyed pull over several stripes reads each stripe's part on its own (Stripe::ReadOrShare):
// in place when its rows are one run in the selection's order, wherever the message holds its
// keys (a recurring key set's rows, made in the order it is pulled); else gathered in the
// selection's order (a key twice).
TEST(Shard, EachStripesPartOfAKeyedPullIsReadInPlaceOrInItsOrder) {
  const TableSpec spec = SgdSparse("over_stripes", 2, InitKind::kUniform);
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 3);
  ASSERT_EQ(t.num_stripes(), 3);
  std::vector<Key> keys;
  for (Key k = 0; k < 300; ++k) keys.push_back(k * 104729 + 11);
  std::vector<table::RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  std::vector<std::vector<float>> want(3);  // each stripe's rows, in its selection's order
  for (int i = 0; i < 3; ++i) {
    ASSERT_GT(sel[i].size(), 50u);
    ASSERT_GT(sel[i].pos(sel[i].size() - 1) - sel[i].pos(0) + 1, sel[i].size())
        << "positions scattered through the message";
    std::vector<float> all(keys.size() * spec.dim, NAN);
    t.stripe(i).Read(sel[i], keys.data(), -1, all.data());  // (makes the rows, in this order)
    for (size_t j = 0; j < sel[i].size(); ++j)
      for (uint32_t c = 0; c < spec.dim; ++c) want[i].push_back(all[sel[i].pos(j) * spec.dim + c]);
  }
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<float[]> copied;
    std::shared_ptr<const float> in_place = t.stripe(i).ReadOrShare(sel[i], keys.data(), &copied);
    ASSERT_NE(in_place, nullptr) << "stripe " << i << ": one run, sent in place";
    EXPECT_EQ(std::vector<float>(in_place.get(), in_place.get() + want[i].size()), want[i]) << "stripe " << i;
  }
  // The first key of stripe 0 twice, at both ends of the message: gathered, in order.
  std::vector<Key> twice = keys;
  twice.push_back(keys[sel[0].pos(0)]);
  t.Split(twice.data(), twice.size(), &sel);
  std::shared_ptr<float[]> copied;
  EXPECT_EQ(t.stripe(0).ReadOrShare(sel[0], twice.data(), &copied), nullptr);
  ASSERT_NE(copied, nullptr);
  std::vector<float> w = want[0];
  w.push_back(want[0][0]);
  w.push_back(want[0][1]);
  EXPECT_EQ(std::vector<float>(copied.get(), copied.get() + w.size()), w);
}

// A sparse stripe keeps its parameters in blocks of TableInfo::KeyedBlockRows rows, in the
// order rows were first touched, and copies on write a block at a time: a write to blocks no
// pull reply holds is in place, one to a held block moves that block only (its rows not written
// copied), and the reply keeps reading the version it was sent. A restore cuts rows into blocks.
TEST(Shard, SparseRowsAreCopiedOnWriteABlockAtATime) {
  const TableSpec spec = SgdSparse("blocks", 1 << 16);  // 256 KB rows: 4 to a block
  const uint32_t dim = spec.dim;
  const size_t block_bytes = 4 * size_t(dim) * sizeof(float);
  ASSERT_EQ(TableInfo::KeyedBlockRows(dim), 4u);
  auto budget = std::make_shared<table::CopyOnWriteBudget>();
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, budget);
  table::Stripe& s = t.stripe(0);
  EXPECT_EQ(s.block_rows(), 4u);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  auto sel = [&](const std::vector<Key>& keys) { return FirstStripeOf(t, keys); };
  auto push = [&](const std::vector<Key>& keys, float add) {  // SGD, lr 1: each row += add
    const std::vector<float> g(keys.size() * dim, -add);
    s.ApplyPush(sel(keys), keys.data(), g.data(), ctx);
  };
  auto range = [](Key first, Key end) {
    std::vector<Key> k;
    for (Key i = first; i < end; ++i) k.push_back(i);
    return k;
  };
  // Where row r's first and last value are (all of a row's values are alike here).
  auto expect_rows = [&](const std::vector<float>& want, const std::string& when) {
    ASSERT_EQ(s.num_rows(), want.size()) << when;
    for (size_t r = 0; r < want.size(); ++r) {
      EXPECT_EQ(s.row_params(r)[0], want[r]) << when << ": row " << r;
      EXPECT_EQ(s.row_params(r)[dim - 1], want[r]) << when << ": row " << r;
    }
  };
  const std::vector<Key> all = range(100, 110);  // rows 0 to 9: blocks {0-3} {4-7} {8, 9}
  push(all, 1.0f);
  expect_rows({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, "first push");
  for (size_t r : {1, 2, 3, 5, 9}) EXPECT_EQ(s.row_params(r), s.row_params(r - 1) + dim) << r;  // a block is contiguous

  // A pull reply of block 0's rows in place; one over two blocks is gathered.
  std::shared_ptr<float[]> copied;
  const std::vector<Key> first4 = range(100, 104), across = range(102, 106);
  std::shared_ptr<const float> v0 = s.ReadOrShare(sel(first4), first4.data(), &copied);
  ASSERT_NE(v0, nullptr);
  EXPECT_EQ(v0.get(), s.row_params(0));
  EXPECT_EQ(s.ReadOrShare(sel(across), across.data(), &copied), nullptr);
  ASSERT_NE(copied, nullptr);
  EXPECT_EQ(copied[3 * size_t(dim)], 1.0f);
  EXPECT_EQ(s.WriteBudgetBytes(), block_bytes);  // the held block's, not the stripe's

  // Writes to the other blocks: in place, nothing copied.
  const float* block1 = s.row_params(4);
  const float* block2 = s.row_params(8);
  push(range(104, 108), 1.0f);
  EXPECT_EQ(s.row_params(4), block1);
  EXPECT_EQ(s.row_params(0), v0.get());
  EXPECT_EQ(budget->used(), 0u);
  // Rows of the held block 0 and of block 2: block 0 moves (rows 2 and 3 brought over), block 2
  // stays; key 100 twice goes on from its first result.
  push({101, 108, 100, 100}, 1.0f);
  EXPECT_NE(s.row_params(0), v0.get());
  EXPECT_EQ(s.row_params(8), block2);
  EXPECT_EQ(budget->used(), block_bytes);  // the held block only
  expect_rows({3, 2, 1, 1, 2, 2, 2, 2, 2, 1}, "after writes beside a reply");
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(v0.get()[r * dim + dim - 1], 1.0f) << "the reply's row " << r;
  v0.reset();

  // BSP: rows 0 and 9 (not contiguous) while a reply holds block 2: blocks 0 and 2 written.
  const std::vector<Key> last2 = {108, 109};
  std::shared_ptr<const float> v2 = s.ReadOrShare(sel(last2), last2.data(), &copied);
  ASSERT_NE(v2, nullptr);
  const std::vector<Key> ends = {109, 100};
  const std::vector<float> g(2 * dim, -1.0f);
  s.Accumulate(0, 0, sel(ends), ends.data(), g.data(), 1.0f);
  s.ApplyAccumulated(0, ctx);
  expect_rows({4, 2, 1, 1, 2, 2, 2, 2, 2, 2}, "after a BSP clock");
  EXPECT_EQ(s.row_params(4), block1);
  EXPECT_EQ(v2.get()[0], 2.0f);
  EXPECT_EQ(v2.get()[dim + dim - 1], 1.0f);

  // New rows fill the last block, then start another, while a reply holds the last one: the
  // block moves (the reply's array is not grown under it).
  std::shared_ptr<const float> v3 = s.ReadOrShare(sel(last2), last2.data(), &copied);
  ASSERT_EQ(v3.get(), s.row_params(8));
  push(range(110, 113), 1.0f);
  expect_rows({4, 2, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1}, "rows added");
  EXPECT_NE(s.row_params(8), v3.get());
  EXPECT_EQ(s.row_params(11), s.row_params(8) + 3 * size_t(dim));
  EXPECT_EQ(v3.get()[dim + dim - 1], 2.0f);
  EXPECT_EQ(v2.get()[dim + dim - 1], 1.0f);
  v2.reset();
  v3.reset();

  // A restore of the same rows in reverse order: cut into blocks again.
  const std::vector<Key> keys = s.KeysByRow();
  const size_t n = keys.size();
  FloatArray params(n * dim);
  std::vector<Key> rkeys(n);
  for (size_t r = 0; r < n; ++r) {
    rkeys[n - 1 - r] = keys[r];
    std::memcpy(&params[(n - 1 - r) * dim], s.row_params(r), dim * sizeof(float));
  }
  ASSERT_TRUE(s.Restore(rkeys, std::move(params), {}, std::vector<uint32_t>(n, 0)).ok());
  expect_rows({1, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 2, 4}, "restored in reverse");
  EXPECT_EQ(s.row_params(3), s.row_params(0) + 3 * size_t(dim));
  push({100}, 1.0f);  // row 12 now
  EXPECT_EQ(s.row_params(12)[0], 5.0f);

  // A block's spare (here block 0's old array, counted against the budget) goes once 8 writes to
  // the stripe per block with a spare (Stripe::kSpareIdleWrites) went by without needing it,
  // whichever blocks they wrote.
  budget = std::make_shared<table::CopyOnWriteBudget>();
  table::TableShard t2(TableInfo::Make(0, spec, 1), 0, 1, true, budget);
  table::Stripe& s2 = t2.stripe(0);
  auto push2 = [&](const std::vector<Key>& keys) {
    std::vector<table::RowSelection> v;
    t2.Split(keys.data(), keys.size(), &v);
    const std::vector<float> g(keys.size() * dim, -1.0f);
    s2.ApplyPush(v[0], keys.data(), g.data(), ctx);
  };
  push2(all);
  auto hold_block0 = [&] {
    std::vector<table::RowSelection> v;
    t2.Split(first4.data(), first4.size(), &v);
    return s2.ReadOrShare(v[0], first4.data(), &copied);
  };
  const float* spare;
  {
    std::shared_ptr<const float> held = hold_block0();
    ASSERT_NE(held, nullptr);
    spare = held.get();
    push2({100});  // block 0 moves; its old array is the spare once the reply lets go
  }
  EXPECT_EQ(budget->used(), block_bytes);
  for (int i = 0; i < 7; ++i) push2({108});
  EXPECT_EQ(budget->used(), block_bytes) << "7 writes to another block";
  {  // The 8th write needs the spare (block 0 held again): it takes it rather than losing it first.
    std::shared_ptr<const float> held = hold_block0();
    push2({100});
    EXPECT_EQ(s2.row_params(0), spare);
  }
  EXPECT_EQ(budget->used(), block_bytes);  // the array just let go of is the spare now
  for (int i = 0; i < 7; ++i) push2({108});
  EXPECT_EQ(budget->used(), block_bytes) << "7 writes to another block";
  push2({108});
  EXPECT_EQ(budget->used(), 0u) << "the 8th";
}

// The key lists a stripe keeps, to match recurring key sets instead of looking their keys up,
// stay under their bounds (256 lists, 2^20 keys in all): the least recently used go first. Rows
// come out right whichever lists were kept.
TEST(Shard, KeptKeyListsStayUnderTheirBounds) {
  const TableSpec spec = SgdSparse("lists", 1);
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, std::make_shared<table::CopyOnWriteBudget>());
  table::Stripe& s = t.stripe(0);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  std::map<Key, float> want;
  auto push = [&](Key first, size_t n) {  // keys first to first + n, in a shuffled order
    std::vector<Key> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = first + (i * 7919) % n;
    std::vector<table::RowSelection> v;
    t.Split(keys.data(), keys.size(), &v);
    const std::vector<float> g(n, -1.0f);
    s.ApplyPush(v[0], keys.data(), g.data(), ctx);
    for (Key k : keys) want[k] += 1.0f;
  };
  const size_t big = (size_t(1) << 18) + 1;  // four such lists are over the bound
  const Key kBig = Key(1) << 40;
  push(0 * kBig, big);
  push(1 * kBig, big);
  push(2 * kBig, big);
  EXPECT_EQ(s.kept_list_keys(), 3 * big);
  push(0 * kBig, big);  // list 0 used again: list 1 is now the least recently used
  push(3 * kBig, big);
  EXPECT_EQ(s.kept_lists(), 3u);
  EXPECT_EQ(s.kept_list_keys(), 3 * big);
  push(1 * kBig, big);  // made again: one more goes
  EXPECT_EQ(s.kept_list_keys(), 3 * big);
  for (int i = 0; i < 300; ++i) push(Key(100 + i) << 20, 128);  // the smallest lists kept
  EXPECT_EQ(s.kept_lists(), 256u);
  EXPECT_EQ(s.kept_list_keys(), 256u * 128u);
  push(Key(100) << 20, 128);
  push(Key(399) << 20, 128);
  EXPECT_EQ(s.kept_lists(), 256u);
  // Every row, looked up by its key.
  std::vector<Key> keys;
  for (const auto& [k, v] : want) keys.push_back(k);
  std::vector<table::RowSelection> v;
  t.Split(keys.data(), keys.size(), &v);
  std::vector<float> got(keys.size());
  s.Read(v[0], keys.data(), -1, got.data());
  size_t wrong = 0;
  for (size_t i = 0; i < keys.size(); ++i) wrong += got[i] != want[keys[i]];
  EXPECT_EQ(wrong, 0u) << "of " << keys.size() << " rows";
}

// Through a running server: Adam's m and v are readable, and a row touched later gets its own
// bias correction (its first update moves it by lr * sign(g), like any row's first update).
TEST(Shard, AdamMomentsReadableThroughPullAndLazyPerRow) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AdamSparse();
  spec.consistency = {Consistency::kAsp, 0};
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok());
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(c.Push(*t, {1}, {1, 1, 1}).Wait().ok());
  ASSERT_TRUE(c.Push(*t, {2}, {2, 2, 2}).Wait().ok());  // row 2's first update
  std::vector<float> w(6), m(6), v(6);
  ASSERT_TRUE(c.Pull(*t, {1, 2}, w.data()).Wait().ok());
  ASSERT_TRUE(c.Pull(*t, SlotOf({1, 2}, 0, m.data())).Wait().ok());
  ASSERT_TRUE(c.Pull(*t, SlotOf({1, 2}, 1, v.data())).Wait().ok());
  const double b1 = 0.9, b2 = 0.999;
  EXPECT_NEAR(m[0], (1 - std::pow(b1, 3)), 1e-5);  // m after three gradients of 1
  EXPECT_NEAR(v[0], (1 - std::pow(b2, 3)), 1e-5);
  EXPECT_NEAR(m[3], (1 - b1) * 2, 1e-6);  // row 2: one gradient of 2
  EXPECT_NEAR(v[3], (1 - b2) * 4, 1e-6);
  EXPECT_NEAR(w[0], -0.3, 1e-4);  // three bias-corrected steps of lr
  EXPECT_NEAR(w[3], -0.1, 1e-4);  // step 1 for row 2, not step 4
  // A slot that does not exist is an error naming the optimizer.
  Status st = c.Pull(*t, SlotOf({1}, 5, m.data())).Wait();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("adam"), std::string::npos) << st.ToString();
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A server's threads flush denormals: Adam's first moment under gradients of 0 decays to 0 rather
// than sticking at a denormal, which every later update of it would pay a slow path for (0.1 *
// 0.9^k stops at 4 * 2^-149 from k of about 900).
TEST(Shard, DecayingStateReachesZeroNotADenormal) {
  LocalCluster cluster(LocalClusterConfig{});
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AdamSparse();
  spec.sparse = false;
  spec.rows = 1;
  spec.consistency = {Consistency::kAsp, 0};
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(c.PushDense(*t, std::vector<float>(spec.dim, 1.0f)).Wait().ok());
  for (int i = 0; i < 1000; ++i) c.PushDense(*t, std::vector<float>(spec.dim, 0.0f));
  std::vector<float> m(spec.dim, -1.0f);
  ASSERT_TRUE(c.Pull(*t, SlotOf({0}, 0, m.data())).Wait().ok());
  for (float x : m) EXPECT_EQ(x, 0.0f) << "m is " << x << (std::fpclassify(x) == FP_SUBNORMAL ? " (a denormal)" : "");
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// A BSP clock's mean is checked as each push is: a worker's pushes of a row within one clock,
// each under 2^60, may add up past it, which would make Adam's v Inf. That clock's update is not
// applied, and the apply says why.
TEST(Shard, ABspMeanPastTheGradientLimitIsNotApplied) {
  TableSpec spec = AdamSparse();
  spec.sparse = false;
  spec.rows = 4;
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true);
  std::vector<Key> keys{0, 1, 2, 3};
  std::vector<table::RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  table::Stripe& s = t.stripe(0);
  std::vector<float> before(4 * spec.dim), after(before.size());
  s.Read(sel[0], keys.data(), -1, before.data());
  const std::vector<float> huge(4 * spec.dim, 0.75f * opt::kMaxGradient);
  ASSERT_TRUE(opt::AllUsable(huge.data(), huge.size()));
  s.Accumulate(0, 0, sel[0], keys.data(), huge.data(), 1.0f);
  s.Accumulate(0, 0, sel[0], keys.data(), huge.data(), 1.0f);  // the same worker, the same clock
  opt::StepContext ctx;
  ctx.lr = 0.1f;
  ctx.grad_scale = 1.0f;  // one worker: its sum is the mean
  try {
    s.ApplyAccumulated(0, ctx);
    ADD_FAILURE() << "applied";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the BSP mean of clock 0 holds NaN, Inf or a value of 2^60"),
              std::string::npos)
        << e.what();
  }
  s.Read(sel[0], keys.data(), -1, after.data());
  EXPECT_EQ(before, after);
  std::vector<float> v(4 * spec.dim);
  s.Read(sel[0], keys.data(), 1, v.data());
  for (float x : v) EXPECT_EQ(x, 0.0f);
  // The clock's sums are gone either way; the next clock applies.
  s.Accumulate(1, 0, sel[0], keys.data(), huge.data(), 1.0f);
  s.ApplyAccumulated(1, ctx);
  s.Read(sel[0], keys.data(), 1, v.data());
  for (float x : v) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
}

// Lookup reads what Pull would, but a key a sparse table does not hold stays absent: it reads as
// its row would start (sparse_lr's held-out evaluation would otherwise add a row for every id it
// looks at, to the servers' memory and checkpoints). Over 2 servers and 2 stripes each.
TEST(Shard, LookupReadsUnseenKeysAsTheyWouldStartAndAddsNone) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.update_threads = 2;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  TableSpec spec = AdamSparse();
  spec.init = InitKind::kUniform;
  spec.init_scale = 0.5f;
  spec.consistency = {Consistency::kAsp, 0};
  auto t = c.CreateTable(spec);
  ASSERT_TRUE(t.ok());
  std::vector<Key> seen;
  for (Key k = 0; k < 2000; ++k) seen.push_back(k * 7919 + 1);
  ASSERT_TRUE(c.Push(*t, seen, std::vector<float>(seen.size() * spec.dim, 0.25f)).Wait().ok());
  auto table_bytes = [&] { return cluster.server(0).stats().table_bytes + cluster.server(1).stats().table_bytes; };
  // (Published every control pass: taken once it holds still.)
  uint64_t before = 0;
  ASSERT_TRUE(Eventually([&] {
    before = table_bytes();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return before > 0 && table_bytes() == before;
  }));
  // Seen and unseen keys interleaved, unseen ones far more (a table's growth would show).
  std::vector<Key> keys;
  for (Key k = 0; k < 60000; ++k) keys.push_back(k % 30 == 0 ? seen[k / 30] : (k << 20) + 3);
  std::vector<float> looked(keys.size() * spec.dim), pulled(keys.size() * spec.dim);
  ASSERT_TRUE(c.Lookup(*t, keys, looked.data()).Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 30 == 0) continue;
    for (uint32_t col = 0; col < spec.dim; ++col)
      ASSERT_EQ(looked[i * spec.dim + col], InitialValue(spec, keys[i], col)) << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(table_bytes(), before);
  // The same as a Pull, which then adds the unseen rows.
  ASSERT_TRUE(c.Pull(*t, keys, pulled.data()).Wait().ok());
  EXPECT_EQ(looked, pulled);
  EXPECT_TRUE(Eventually([&] { return table_bytes() > before; }));
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

}  // namespace
}  // namespace pushpull
