// Copy-on-write in a shard's stripes (server/table/shard.h): a pull reply sent from the parameters
// in place keeps seeing the version it was taken at while pushes go to another array, within the
// copy-on-write budget, and what it does when memory runs out.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/time.h"
#include "optimizers/optimizer.h"
#include "server/table/shard.h"
#include "tests/support/alloc_fault.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// A pull reply sent from the parameters in place (ShareRows) keeps seeing the version it was
// taken at: later updates (a whole-range push written out of place, a partial one, a keyed one)
// go to another array, and rows they do not touch carry over. Held arrays are reused once free.
// 8 rows of dim 2 with SGD: with ctx.lr 1, a push of -1 adds 1 to every value it touches.
TableSpec EightBySgd() {
  TableSpec spec;
  spec.name = "w";
  spec.rows = 8;
  spec.dim = 2;
  spec.optimizer.kind = opt::Kind::kSgd;
  return spec;
}

// EightBySgd as one shard of one stripe, SGD steps at lr 1, and the selection of all 8 rows.
struct EightRows {
  table::TableShard t{TableInfo::Make(0, EightBySgd(), 1), 0, 1};
  table::Stripe& s = t.stripe(0);
  opt::StepContext ctx = [] {
    opt::StepContext c;
    c.lr = 1.0f;
    return c;
  }();
  std::vector<table::RowSelection> all = [this] {
    std::vector<table::RowSelection> v;
    t.SplitRange(0, 8, &v);
    return v;
  }();
};

TEST(ShardCopyOnWrite, SharedRowsAreASnapshotUnderCopyOnWrite) {
  EightRows e;
  table::TableShard& t = e.t;
  table::Stripe& s = e.s;
  const opt::StepContext& ctx = e.ctx;
  const std::vector<table::RowSelection>& all = e.all;
  std::vector<table::RowSelection> part;
  t.SplitRange(2, 5, &part);
  auto read = [&] {
    std::vector<float> out(16);
    s.Read(all[0], nullptr, -1, out.data());
    return out;
  };
  const std::vector<float> minus1(16, -1.0f);        // SGD, lr 1: each push adds 1
  s.ApplyPush(all[0], nullptr, minus1.data(), ctx);  // all rows 1
  const std::vector<Key> keys{7};
  std::vector<table::RowSelection> keyed;
  t.Split(keys.data(), 1, &keyed);
  EXPECT_EQ(s.CopyOnWriteBytes(keyed[0]), 0u);  // nothing holds the parameters: no copy
  std::shared_ptr<const float> v1 = s.ShareRows(0);
  // What a write would copy first while v1 holds them (the server's inline decision uses it).
  EXPECT_EQ(s.CopyOnWriteBytes(all[0]), 0u);                        // rewrites every row
  EXPECT_EQ(s.CopyOnWriteBytes(part[0]), 5u * 2 * sizeof(float));   // the 5 rows outside 2..4
  EXPECT_EQ(s.CopyOnWriteBytes(keyed[0]), 7u * 2 * sizeof(float));  // keyed: the rows beyond its one
  s.ApplyPush(all[0], nullptr, minus1.data(), ctx);                 // out of place: all rows 2
  std::shared_ptr<const float> v2 = s.ShareRows(0);
  s.ApplyPush(part[0], nullptr, minus1.data(), ctx);       // rows 2..4 -> 3, the others copied
  s.ApplyPush(keyed[0], keys.data(), minus1.data(), ctx);  // row 7 -> 3 (in place now)
  for (int i = 0; i < 16; ++i) EXPECT_EQ(v1.get()[i], 1.0f) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(v2.get()[i], 2.0f) << i;
  std::vector<float> now = read();
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 2; ++c) EXPECT_EQ(now[r * 2 + c], (r >= 2 && r < 5) || r == 7 ? 3.0f : 2.0f) << "row " << r;
  // A third array held at once: written out of place into a fresh one.
  std::shared_ptr<const float> v3 = s.ShareRows(0);
  s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
  EXPECT_EQ(v3.get()[0], 2.0f);
  EXPECT_EQ(v3.get()[4], 3.0f);
  EXPECT_EQ(read()[0], 3.0f);
  EXPECT_EQ(read()[4], 4.0f);
  // Once no reply holds them, an old array is reused as the spare; writes stay correct.
  v1.reset();
  v2.reset();
  v3.reset();
  std::shared_ptr<const float> v4 = s.ShareRows(0);
  s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
  EXPECT_EQ(v4.get()[0], 3.0f);
  EXPECT_EQ(read()[0], 4.0f);
  EXPECT_EQ(read()[4], 5.0f);
  // The spare is memory only while pulls overlap pushes: dropped after 8 writes that need none.
  v4.reset();
  const size_t with_spare = s.bytes();
  for (int i = 0; i < 8; ++i) s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
  EXPECT_EQ(s.bytes(), with_spare - 16 * sizeof(float));
  EXPECT_EQ(read()[0], 12.0f);
}

// The copy-on-write budget bounds the arrays pull replies hold beside the current one: over it,
// a write waits for a reply to let go (then writes in place, or reuses the freed spare), and
// after the deadline copies anyway; on a thread that may not wait (the server's I/O thread) it
// copies at once. What counts against it is given back when replies let go.
TEST(ShardCopyOnWrite, CopyOnWriteStaysWithinItsBudget) {
  TableInfo info = TableInfo::Make(0, EightBySgd(), 1);
  const size_t array = 16 * sizeof(float);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  const std::vector<float> minus1(16, -1.0f);  // SGD, lr 1: each push adds 1
  std::vector<table::RowSelection> all;
  // Starts a push on a thread that may wait (as the server's update threads) and returns once it
  // waits: the budget counts it.
  auto waiting_push = [&](table::Stripe& s, table::CopyOnWriteBudget& b, std::atomic<bool>* applied) {
    const uint64_t before = b.waits;
    std::thread t([&s, &all, &minus1, &ctx, applied] {
      table::CopyOnWriteBudget::SetThisThreadMayWait(true);
      s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
      *applied = true;
    });
    for (int i = 0; i < 10000 && b.waits == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return t;
  };

  {  // Budget 0: no copy at all; the write waits for the reply, then writes in place.
    auto budget = std::make_shared<table::CopyOnWriteBudget>(0, 60000);
    table::TableShard t(info, 0, 1, true, budget);
    t.SplitRange(0, 8, &all);
    table::Stripe& s = t.stripe(0);
    std::shared_ptr<const float> v1 = s.ShareRows(0);
    const float before = v1.get()[3];
    EXPECT_EQ(s.WriteBudgetBytes(), array);
    EXPECT_TRUE(budget->WouldExceed(s.WriteBudgetBytes()));
    std::atomic<bool> applied{false};
    std::thread writer = waiting_push(s, *budget, &applied);
    ASSERT_EQ(budget->waits, 1u);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(applied);           // still waiting for the reply
    EXPECT_EQ(v1.get()[3], before);  // which still reads what it was sent with
    const float* where = v1.get();
    v1.reset();  // the reply is sent
    writer.join();
    EXPECT_TRUE(applied);
    std::vector<float> out(16);
    s.Read(all[0], nullptr, -1, out.data());
    EXPECT_EQ(out[3], before + 1.0f);
    EXPECT_EQ(s.row_params(0), where);  // in place: no second array was made
    EXPECT_EQ(budget->used(), 0u);
    EXPECT_EQ(budget->overdrafts, 0u);
  }
  {  // Room for one array beside the current one.
    auto budget = std::make_shared<table::CopyOnWriteBudget>(array, 60000);
    table::TableShard t(info, 0, 1, true, budget);
    t.SplitRange(0, 8, &all);
    table::Stripe& s = t.stripe(0);
    std::shared_ptr<const float> v1 = s.ShareRows(0);
    EXPECT_FALSE(budget->WouldExceed(s.WriteBudgetBytes()));
    s.ApplyPush(all[0], nullptr, minus1.data(), ctx);  // copy-on-write, no wait
    EXPECT_EQ(budget->used(), array);
    EXPECT_EQ(budget->waits, 0u);
    std::shared_ptr<const float> v2 = s.ShareRows(0);  // both arrays held now
    EXPECT_TRUE(budget->WouldExceed(s.WriteBudgetBytes()));
    std::atomic<bool> applied{false};
    std::thread writer = waiting_push(s, *budget, &applied);
    ASSERT_EQ(budget->waits, 1u);
    const float first = v1.get()[0];
    v1.reset();  // the spare (v1's array) is free: the write goes there
    writer.join();
    EXPECT_EQ(budget->used(), array);  // v2's array, held, counts now
    EXPECT_EQ(v2.get()[0], first + 1.0f);
    std::vector<float> out(16);
    s.Read(all[0], nullptr, -1, out.data());
    EXPECT_EQ(out[0], first + 2.0f);
    v2.reset();
    EXPECT_EQ(budget->used(), array);  // the stripe keeps it as its spare ...
    for (int i = 0; i < 8; ++i) s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
    EXPECT_EQ(budget->used(), 0u);  // ... until 8 writes needed none
    EXPECT_EQ(budget->overdrafts, 0u);
  }
  {  // Replies that are never let go: a thread that may not wait copies over the budget at once;
     // one that may, after the deadline.
    auto budget = std::make_shared<table::CopyOnWriteBudget>(0, 50);
    table::TableShard t(info, 0, 1, true, budget);
    t.SplitRange(0, 8, &all);
    table::Stripe& s = t.stripe(0);
    std::shared_ptr<const float> v1 = s.ShareRows(0);
    const float before = v1.get()[5];
    s.ApplyPush(all[0], nullptr, minus1.data(), ctx);  // this thread: no waiting
    EXPECT_EQ(budget->waits, 0u);
    EXPECT_EQ(budget->overdrafts, 1u);
    EXPECT_EQ(budget->used(), array);
    std::shared_ptr<const float> v2 = s.ShareRows(0);
    table::CopyOnWriteBudget::SetThisThreadMayWait(true);
    const int64_t t0 = NowMs();
    s.ApplyPush(all[0], nullptr, minus1.data(), ctx);  // waits 50 ms, then copies
    table::CopyOnWriteBudget::SetThisThreadMayWait(false);
    EXPECT_GE(NowMs() - t0, 50);
    EXPECT_EQ(budget->waits, 1u);
    EXPECT_EQ(budget->overdrafts, 2u);
    EXPECT_EQ(budget->used(), 2 * array);
    EXPECT_EQ(v1.get()[5], before);
    EXPECT_EQ(v2.get()[5], before + 1.0f);
    std::vector<float> out(16);
    s.Read(all[0], nullptr, -1, out.data());
    EXPECT_EQ(out[5], before + 2.0f);
    v1.reset();
    v2.reset();
    for (int i = 0; i < 8; ++i) s.ApplyPush(all[0], nullptr, minus1.data(), ctx);
    EXPECT_EQ(budget->used(), 0u);
  }
}

// A keyed push while a reply holds the parameters writes the rows it updates out of place and
// copies the others; a key given twice is updated twice, the second time from the first's
// result, as in place.
TEST(ShardCopyOnWrite, KeyedPushUnderCopyOnWriteWritesOutOfPlace) {
  EightRows e;
  table::TableShard& t = e.t;
  table::Stripe& s = e.s;
  const opt::StepContext& ctx = e.ctx;
  const std::vector<table::RowSelection>& all = e.all;
  const std::vector<float> minus1(16, -1.0f);        // SGD, lr 1: each push adds 1
  s.ApplyPush(all[0], nullptr, minus1.data(), ctx);  // all rows 1
  auto push_keys = [&](const std::vector<Key>& keys) {
    std::vector<table::RowSelection> sel;
    t.Split(keys.data(), keys.size(), &sel);
    s.ApplyPush(sel[0], keys.data(), minus1.data(), ctx);
  };
  push_keys({4});  // in place: row 4 is 2, one step ahead of the others
  std::shared_ptr<const float> v1 = s.ShareRows(0);
  push_keys({5, 2, 5});  // row 5 twice, in two runs: the second from the first's result
  std::shared_ptr<const float> v2 = s.ShareRows(0);
  // Row 3, then one run of rows 2, 3, 4 (consecutive, with equal step counts) of which row 3
  // was just written: it goes on from its new value, rows 2 and 4 from the held array.
  push_keys({3, 2, 3, 4});
  std::vector<float> now(16);
  s.Read(all[0], nullptr, -1, now.data());
  const float want1[8] = {1, 1, 1, 1, 2, 1, 1, 1}, want2[8] = {1, 1, 2, 1, 2, 3, 1, 1},
              want3[8] = {1, 1, 3, 3, 3, 3, 1, 1};
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(v1.get()[r * 2 + c], want1[r]) << "row " << r;
      EXPECT_EQ(v2.get()[r * 2 + c], want2[r]) << "row " << r;
      EXPECT_EQ(now[r * 2 + c], want3[r]) << "row " << r;
    }
}

// A keyed push beside held replies writes the blocks it moves out of place, tracking the rows it
// wrote a word (64 rows) at a time. Over blocks of several words, a partial last word and block,
// runs across word ends and keys twice in one push (a second run over rows written and not), with
// optimizer slots and per-row steps, its result is bit for bit the in-place one's, and the replies
// held keep what they read (blocks of a word or less would not test the word tracking).
TEST(ShardCopyOnWrite, KeyedPushesBesideHeldRepliesMatchInPlaceOnesOverManyWords) {
  for (opt::Kind kind : {opt::Kind::kAdam, opt::Kind::kSgd}) {
    SCOPED_TRACE(kind == opt::Kind::kAdam ? "adam" : "sgd with momentum");
    TableSpec spec = SgdSparse("words", 1310);  // 200 rows a block
    spec.optimizer.kind = kind;
    spec.optimizer.lr = 0.01f;
    if (kind == opt::Kind::kSgd) spec.optimizer.momentum = 0.9f;
    const uint32_t dim = spec.dim;
    table::TableShard held_t(TableInfo::Make(0, spec, 1), 0, 1), plain_t(TableInfo::Make(0, spec, 1), 0, 1);
    table::Stripe &held_s = held_t.stripe(0), &plain_s = plain_t.stripe(0);
    ASSERT_EQ(held_s.block_rows(), 200u);
    opt::StepContext ctx;
    ctx.lr = 0.01f;
    std::mt19937_64 rng(kind == opt::Kind::kAdam ? 7 : 8);
    auto push = [&](const std::vector<Key>& keys) {
      std::vector<float> g(keys.size() * dim);
      for (float& x : g) x = float(int(rng() % 2001) - 1000) / 1000.0f;
      held_s.ApplyPush(FirstStripeOf(held_t, keys), keys.data(), g.data(), ctx);
      plain_s.ApplyPush(FirstStripeOf(plain_t, keys), keys.data(), g.data(), ctx);
    };
    std::vector<Key> all(330);  // rows 0-199 and 200-329 (two words, then 2 rows of a third)
    for (Key k = 0; k < all.size(); ++k) all[k] = 10 * k + 3;
    push(all);
    ASSERT_EQ(held_s.num_rows(), 330u);
    const int slots = held_t.optimizer()->num_slots();
    ASSERT_GE(slots, 1);
    struct Held {
      std::shared_ptr<const float> rows;
      std::vector<float> read;
    };
    std::vector<Held> held;
    auto hold = [&](uint64_t row) {
      const uint64_t first = row / 200 * 200, n = std::min<uint64_t>(200, 330 - first);
      std::shared_ptr<const float> p = held_s.ShareRows(first);  // (sparse: local rows are global ones)
      ASSERT_NE(p, nullptr);
      held.push_back({p, std::vector<float>(held_s.row_params(first), held_s.row_params(first) + n * dim)});
    };
    auto check_held = [&](const Held& h, int step) {
      ASSERT_EQ(std::memcmp(h.rows.get(), h.read.data(), h.read.size() * sizeof(float)), 0) << "step " << step;
    };
    // Rows near word and block ends, runs over them, keys twice.
    const uint64_t edges[] = {0, 62, 63, 64, 65, 127, 128, 190, 199, 200, 262, 263, 264, 265, 327, 328, 329};
    auto some_keys = [&] {
      std::vector<Key> keys;
      for (int part = 0, parts = 1 + int(rng() % 4); part < parts; ++part) {
        const uint64_t start = rng() % 3 ? edges[rng() % std::size(edges)] : rng() % 330;
        const uint64_t len = 1 + rng() % (rng() % 2 ? 8 : 140);
        for (uint64_t r = start; r < std::min<uint64_t>(330, start + len); ++r) keys.push_back(all[r]);
        if (rng() % 3 == 0) keys.push_back(all[rng() % 330]);  // a row of a run again, or another
      }
      return keys;
    };
    for (int step = 0; step < 300; ++step) {
      if (rng() % 3 == 0 && held.size() < 4) hold(rng() % 330);
      if (rng() % 4 == 0 && !held.empty()) {
        const size_t i = rng() % held.size();
        check_held(held[i], step);
        held.erase(held.begin() + i);
      }
      push(some_keys());
      for (uint64_t r = 0; r < 330; ++r)
        ASSERT_EQ(std::memcmp(held_s.row_params(r), plain_s.row_params(r), dim * sizeof(float)), 0)
            << "step " << step << ": row " << r;
      for (int k = 0; k < slots; ++k)
        ASSERT_EQ(std::memcmp(held_s.slot(k), plain_s.slot(k), 330 * dim * sizeof(float)), 0) << "step " << step;
      ASSERT_EQ(std::memcmp(held_s.steps(), plain_s.steps(), 330 * sizeof(uint32_t)), 0) << "step " << step;
    }
    for (const Held& h : held) check_held(h, 300);
  }
}

// Random pushes (new keys, repeated keys, recurring key lists sent whole) and pulls, with pull
// replies held in place across later pushes and let go of in any order: every pull reads what a
// plain model holds, and every held reply keeps reading what it was sent (copy-on-write a block
// at a time, spares reused and aged), whatever blocks the pushes touch.
TEST(ShardCopyOnWrite, RandomWritesBesideHeldRepliesMatchAPlainModel) {
  const TableSpec spec = SgdSparse("random", 1 << 14);  // 64 KB rows: 16 to a block
  const uint32_t dim = spec.dim;
  auto budget = std::make_shared<table::CopyOnWriteBudget>();
  // A memory limit that new rows reach part way (the lists' 320 rows take about 21 MB).
  auto memory = std::make_shared<table::ByteBudget>(size_t(24) << 20);
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, budget, memory);
  table::Stripe& s = t.stripe(0);
  ASSERT_EQ(s.block_rows(), 16u);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  std::map<Key, float> model;  // every value of a row is alike
  std::mt19937_64 rng(12345);
  auto sel_of = [&](const std::vector<Key>& keys) { return FirstStripeOf(t, keys); };
  auto push = [&](const std::vector<Key>& keys) {
    std::vector<float> g(keys.size() * dim), add(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      add[i] = float(int(rng() % 19) - 9);
      std::fill(g.begin() + i * dim, g.begin() + (i + 1) * dim, -add[i]);
    }
    s.ApplyPush(sel_of(keys), keys.data(), g.data(), ctx);
    for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] += add[i];
  };
  struct Held {
    std::shared_ptr<const float> rows;
    std::vector<float> want;  // per key
  };
  std::vector<Held> held;
  auto check_held = [&](const Held& h, const std::string& when) {
    for (size_t i = 0; i < h.want.size(); ++i) {
      ASSERT_EQ(h.rows.get()[i * dim], h.want[i]) << when << ": held row " << i;
      ASSERT_EQ(h.rows.get()[i * dim + dim - 1], h.want[i]) << when << ": held row " << i;
    }
  };
  auto pull = [&](const std::vector<Key>& keys, const std::string& when) {
    std::shared_ptr<float[]> copied;
    std::shared_ptr<const float> in_place = s.ReadOrShare(sel_of(keys), keys.data(), &copied);
    const float* got = in_place ? in_place.get() : copied.get();
    Held h{in_place, {}};
    for (size_t i = 0; i < keys.size(); ++i) {
      const float want = model[keys[i]];
      ASSERT_EQ(got[i * dim], want) << when << ": key " << keys[i];
      ASSERT_EQ(got[i * dim + dim - 1], want) << when << ": key " << keys[i];
      h.want.push_back(want);
    }
    if (in_place && held.size() < 6) held.push_back(std::move(h));
  };
  // Two recurring lists of 160 keys, made in order (in place when pulled whole), and a pool.
  std::vector<Key> list1, list2;
  for (Key k = 0; k < 160; ++k) {
    list1.push_back(1000 + k);
    list2.push_back(5000 + k * 3);
  }
  push(list1);
  push(list2);
  auto some_keys = [&] {  // a few keys of the lists and new ones, some twice
    std::vector<Key> keys;
    for (int i = 0, n = 1 + int(rng() % 20); i < n; ++i) {
      const uint64_t r = rng() % 3;
      keys.push_back(r == 0 ? list1[rng() % 160] : r == 1 ? list2[rng() % 160] : 9000 + rng() % 200);
    }
    return keys;
  };
  auto run_of = [&](size_t max_len) {  // consecutive keys of a list (rows in one block or two)
    const std::vector<Key>& l = rng() % 2 ? list1 : list2;
    const size_t n = 1 + rng() % max_len, a = rng() % (160 - n + 1);
    return std::vector<Key>(l.begin() + a, l.begin() + a + n);
  };
  // A write that may fail: out of memory for a block's new array (or for new rows), or past the
  // memory limit (new rows). Then it changed nothing.
  int failed = 0;
  auto write_or_fail = [&](const std::function<void()>& write, const std::function<void()>& on_success) {
    fault::FailAllocation fail(16 * size_t(dim) * sizeof(float), int(rng() % 3));
    try {
      write();
      EXPECT_FALSE(fail.fired());
      on_success();
    } catch (const std::bad_alloc&) {
      EXPECT_TRUE(fail.fired());
      ++failed;
    } catch (const table::TableMemoryExhausted&) {
      ++failed;
    }
  };
  int shared = 0, clocks = 0;
  for (int step = 0; step < 900; ++step) {
    const std::string when = "step " + std::to_string(step);
    switch (rng() % 9) {
      case 0: push(list1); break;
      case 1: push(list2); break;
      case 2: {  // a few keys of the lists and new ones, some twice (past the memory limit: refused)
        const std::vector<Key> keys = some_keys();
        try {
          push(keys);
        } catch (const table::TableMemoryExhausted&) {
          ++failed;
        }
        break;
      }
      case 3:
        pull(rng() % 2 ? list1 : list2, when);
        ++shared;
        break;
      case 4: pull(run_of(10), when); break;  // a run inside a list (in place when it stays in one block)
      case 5:
        if (!held.empty()) {
          const size_t i = rng() % held.size();
          check_held(held[i], when);
          held.erase(held.begin() + i);
        }
        break;
      case 6:
      case 7: {  // a BSP clock: up to 3 workers' sums (runs of a list, or scattered keys), applied once
        std::map<Key, float> sum;
        for (int w = 0, workers = 1 + int(rng() % 3); w < workers; ++w) {
          const std::vector<Key> keys = rng() % 2 ? run_of(40) : some_keys();
          std::vector<float> g(keys.size() * dim);
          std::map<Key, float> mine;
          for (size_t i = 0; i < keys.size(); ++i) {
            const float add = float(int(rng() % 19) - 9);
            std::fill(g.begin() + i * dim, g.begin() + (i + 1) * dim, -add);
            mine[keys[i]] += add;
          }
          try {
            s.Accumulate(clocks, w, sel_of(keys), keys.data(), g.data(), 1.0f);
          } catch (const table::TableMemoryExhausted&) {
            continue;  // (this worker's push refused: its sum is not there)
          }
          for (auto [k, v] : mine) sum[k] += v;
        }
        write_or_fail([&] { s.ApplyAccumulated(clocks, ctx); },
                      [&] {
                        for (auto [k, v] : sum) model[k] += v;
                      });
        s.ApplyAccumulated(clocks++, ctx);  // (applied or dropped: nothing more)
        break;
      }
      case 8: {
        const std::vector<Key> keys = rng() % 2 ? run_of(40) : some_keys();
        write_or_fail([&] { push(keys); }, [] {});
        break;
      }
    }
    if (step % 50 == 0)
      for (const Held& h : held) check_held(h, when);
  }
  for (const Held& h : held) check_held(h, "at the end");
  held.clear();
  EXPECT_GT(shared, 50);
  EXPECT_GT(clocks, 100);
  EXPECT_GT(failed, 20);
  EXPECT_EQ(budget->overdrafts, 0u);
  pull(list1, "after every reply let go of");
  pull(list2, "after every reply let go of");
}

// Out of memory for a block's copy-on-write array part way through a push (replies hold the
// blocks it writes): the blocks it began are undone, so no row is written and the replies keep
// their values; a row the push added stays, at its initial value; the next push goes through. A
// BSP clock out of memory for a block's array or for its sum is not applied, and dropped.
TEST(ShardCopyOnWrite, OutOfMemoryForACopyOnWriteArrayWritesNoRow) {
  const TableSpec spec = SgdSparse("oom", 1 << 16);  // 256 KB rows: 4 to a block
  const uint32_t dim = spec.dim;
  const size_t block_bytes = 4 * size_t(dim) * sizeof(float);
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1, true, std::make_shared<table::CopyOnWriteBudget>());
  table::Stripe& s = t.stripe(0);
  opt::StepContext ctx;
  ctx.lr = 1.0f;
  auto sel = [&](const std::vector<Key>& keys) { return FirstStripeOf(t, keys); };
  auto push = [&](const std::vector<Key>& keys) {  // SGD, lr 1: each row += 1
    const std::vector<float> g(keys.size() * dim, -1.0f);
    s.ApplyPush(sel(keys), keys.data(), g.data(), ctx);
  };
  auto expect_rows = [&](const std::vector<float>& want, const std::string& when) {
    ASSERT_EQ(s.num_rows(), want.size()) << when;
    for (size_t r = 0; r < want.size(); ++r)
      for (size_t i : {size_t(0), size_t(dim) - 1}) EXPECT_EQ(s.row_params(r)[i], want[r]) << when << ": row " << r;
  };
  push({100, 101, 102, 103, 104, 105, 106, 107, 108, 109});  // rows 0 to 9: blocks {0-3} {4-7} {8, 9}
  std::shared_ptr<float[]> copied;
  const std::vector<Key> block0 = {100, 101, 102, 103}, block1 = {104, 105, 106, 107};
  std::shared_ptr<const float> v0 = s.ReadOrShare(sel(block0), block0.data(), &copied);
  std::shared_ptr<const float> v1 = s.ReadOrShare(sel(block1), block1.data(), &copied);
  ASSERT_NE(v0, nullptr);
  ASSERT_NE(v1, nullptr);
  {
    // Rows 1 (block 0), 10 (new, block 2) and 5 (block 1): block 0 gets its new array, block 1's
    // allocation fails.
    fault::FailAllocation fail(block_bytes, 1);
    EXPECT_THROW(push({101, 110, 105}), std::bad_alloc);
    EXPECT_TRUE(fail.fired());
  }
  expect_rows({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, "after the failed push");
  for (const auto& v : {v0, v1})
    for (size_t r = 0; r < 4; ++r) EXPECT_EQ(v.get()[r * dim + dim - 1], 1.0f) << "a reply's row " << r;
  push({101, 110, 105});
  expect_rows({1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1}, "after the next push");
  EXPECT_EQ(v1.get()[dim], 1.0f);
  v0.reset();
  v1.reset();
  push({101, 105});
  expect_rows({1, 3, 1, 1, 1, 3, 1, 1, 1, 1, 1}, "after the replies are sent");

  // A BSP clock out of memory the same way: nothing written, and the clock dropped. Block 0
  // moves to its spare (no allocation); block 2, which has none, cannot get a new array.
  const std::vector<Key> block2 = {108, 109, 110};
  v0 = s.ReadOrShare(sel(block0), block0.data(), &copied);
  std::shared_ptr<const float> v2 = s.ReadOrShare(sel(block2), block2.data(), &copied);
  ASSERT_NE(v0, nullptr);
  ASSERT_NE(v2, nullptr);
  const std::vector<Key> rows_1_9 = {101, 109};
  const std::vector<float> g(2 * dim, -1.0f);
  s.Accumulate(0, 0, sel(rows_1_9), rows_1_9.data(), g.data(), 1.0f);
  {
    fault::FailAllocation fail(3 * size_t(dim) * sizeof(float), 0);
    EXPECT_THROW(s.ApplyAccumulated(0, ctx), std::bad_alloc);
    EXPECT_TRUE(fail.fired());
  }
  expect_rows({1, 3, 1, 1, 1, 3, 1, 1, 1, 1, 1}, "after the failed clock");
  s.ApplyAccumulated(0, ctx);
  expect_rows({1, 3, 1, 1, 1, 3, 1, 1, 1, 1, 1}, "the failed clock applied again");
  s.Accumulate(1, 0, sel(rows_1_9), rows_1_9.data(), g.data(), 1.0f);
  s.ApplyAccumulated(1, ctx);
  expect_rows({1, 4, 1, 1, 1, 3, 1, 1, 1, 2, 1}, "the next clock");
  EXPECT_EQ(v0.get()[dim], 3.0f);
  EXPECT_EQ(v2.get()[dim], 1.0f);
  // Out of memory for a clock's sum: the same.
  s.Accumulate(2, 0, sel(rows_1_9), rows_1_9.data(), g.data(), 1.0f);
  {
    fault::FailAllocation fail(2 * size_t(dim) * sizeof(float), 0);
    EXPECT_THROW(s.ApplyAccumulated(2, ctx), std::bad_alloc);
    EXPECT_TRUE(fail.fired());
  }
  s.ApplyAccumulated(2, ctx);
  expect_rows({1, 4, 1, 1, 1, 3, 1, 1, 1, 2, 1}, "a clock whose sum could not be made");
}

}  // namespace
}  // namespace pushpull
