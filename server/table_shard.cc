#include "server/table_shard.h"

#include <algorithm>
#include <cassert>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/time.h"

// ThreadSanitizer does not model standalone fences, so the order that a reference count of one
// plus an acquire fence gives (a reply's reads of an array before the next write to it, below)
// is told to it by hand in sanitizer builds.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define PP_TSAN_RELEASE(p) __tsan_release(p)
#define PP_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define PP_TSAN_RELEASE(p) ((void)0)
#define PP_TSAN_ACQUIRE(p) ((void)0)
#endif

namespace pushpull {

bool ByteBudget::TryTake(size_t bytes) {
  size_t u = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || u > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(u, u + bytes, std::memory_order_relaxed));
  return true;
}

void CopyOnWriteBudget::Give(size_t bytes) {
  bytes_.Give(bytes);
  Released();
}

void CopyOnWriteBudget::Released() {
  // Seen by a waiter that registered before its last look at the arrays; one that registers
  // later looks after this release. (A missed wake-up would cost one slice of WaitUntil.)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_relaxed) == 0) return;
  { MutexLock l(&mu_); }
  cv_.SignalAll();
}

namespace {
thread_local bool this_thread_may_wait = false;
}
void CopyOnWriteBudget::SetThisThreadMayWait(bool may) { this_thread_may_wait = may; }
bool CopyOnWriteBudget::ThisThreadMayWait() { return this_thread_may_wait; }

template <typename Ready>
bool CopyOnWriteBudget::WaitUntil(int64_t until_ms, Ready&& ready) {
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with Released()'s
  MutexLock l(&mu_);
  bool ok = true;
  while (!ready()) {
    const int64_t left = until_ms - NowMs();
    if (left <= 0) {
      ok = false;
      break;
    }
    cv_.WaitForMs(&mu_, std::min<int64_t>(left, 10));
  }
  l.Unlock();
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

Stripe::Stripe(const TableSpec& spec, const opt::Optimizer* optimizer, uint64_t row_begin,
               uint64_t row_end, bool fill, std::shared_ptr<CopyOnWriteBudget> budget,
               std::shared_ptr<ByteBudget> memory)
    : spec_(spec),
      optimizer_(optimizer),
      dim_(spec.dim),
      row_begin_(row_begin),
      block_rows_(spec.sparse ? TableInfo::KeyedBlockRows(spec.dim) : std::max<uint64_t>(1, row_end - row_begin)),
      budget_(budget ? std::move(budget) : std::make_shared<CopyOnWriteBudget>()),
      memory_(memory ? std::move(memory) : std::make_shared<ByteBudget>()) {
  slots_.resize(optimizer_->num_slots());
  if (!spec.sparse && fill) AppendRows(row_begin, row_end - row_begin, nullptr);
}

Stripe::~Stripe() { memory_->Give(charged_); }

size_t Stripe::bytes() const {
  size_t b = steps_.capacity() * 4;
  for (const Block& k : blocks_) {
    b += k.params->capacity() * 4;
    if (k.spare) b += k.spare->capacity() * 4;
  }
  for (auto& s : slots_) b += s.capacity() * 4;
  for (auto& l : key_lists_) b += l.keys.capacity() * sizeof(Key) + l.rows.capacity() * 4;
  return b;
}

size_t Stripe::RowBytes(const TableSpec& spec, int num_slots) {
  return (1 + size_t(num_slots)) * spec.dim * sizeof(float) + sizeof(uint32_t);
}

namespace {
// The error for memory that the tables' limit refuses to `what`.
std::string MemoryRefusal(const TableSpec& spec, const ByteBudget& memory, const std::string& what, size_t bytes) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "table '%s': %s (%.1f MB) would take this server's tables past their limit of %.1f MB "
                "(--max_table_mb; %.1f MB in use)", spec.name.c_str(), what.c_str(), bytes / 1e6, memory.limit() / 1e6,
                memory.used() / 1e6);
  return buf;
}
}  // namespace

void Stripe::Charge(size_t bytes, const std::string& what) {
  if (!memory_->TryTake(bytes)) throw TableMemoryExhausted(MemoryRefusal(spec_, *memory_, what, bytes));
  charged_ += bytes;
}

void Stripe::Uncharge(size_t bytes) {
  memory_->Give(bytes);
  charged_ -= bytes;
}

void Stripe::AppendRows(uint64_t first_key, size_t n, const Key* keys) {
  const size_t old = steps_.size(), need = old + n;
  std::shared_ptr<ParamArray> held;
  // The block with room left that the first rows go to is written: moved off an array a reply
  // holds (to one with room for the rows in use only). Rows past it go to blocks no reply holds.
  if (old % block_rows_ != 0) {
    BeginWrite(old / block_rows_, 0, 0, &held);
    // The array a reply holds is no spare for this block, which the rows below make longer: not
    // kept (kept, it would hold copy-on-write budget through a phase of pulls only, which age no
    // spares; the reply frees it once sent).
    if (held) blocks_[old / block_rows_].spare.reset();
  }
  if (need > cap_rows_) {
    // Sparse rows come one at a time: the arrays double, or near the limit grow by what is needed.
    const size_t row = RowBytes(spec_, optimizer_->num_slots());
    size_t cap = std::max(need, 2 * cap_rows_);
    if (memory_->WouldExceed((cap - cap_rows_) * row)) cap = need;
    const size_t bytes = (cap - cap_rows_) * row;
    Charge(bytes, spec_.sparse ? "room for rows " + std::to_string(cap_rows_) + " to " + std::to_string(cap) +
                                     " (parameters, optimizer slots, step counts)"
                               : "its " + std::to_string(n) + " rows on this server (parameters, optimizer slots, "
                                 "step counts)");
    const size_t blocks_before = blocks_.size();
    try {
      // Every array has its room before any grows: out of memory here leaves the stripe as it was.
      ReserveBlocks(old, cap);
      for (auto& s : slots_) s.reserve(cap * dim_);
      steps_.reserve(cap);
    } catch (...) {
      blocks_.resize(blocks_before);  // (blocks made for the room: empty)
      Uncharge(bytes);
      throw;
    }
    cap_rows_ = cap;
  } else {
    // The blocks these rows go to (already counted): the first may be the array BeginWrite moved
    // to. Only those: walking every block to cap_rows_ for each new key would be thousands of
    // blocks a key right after the arrays doubled.
    ReserveBlocks(old, std::min(cap_rows_, ((need - 1) / block_rows_ + 1) * block_rows_));
  }
  for (size_t b = old / block_rows_; b * block_rows_ < need; ++b)
    blocks_[b].params->resize(std::min<size_t>(block_rows_, need - b * block_rows_) * dim_);
  for (size_t i = 0; i < n; ++i) {
    Key k = keys ? keys[i] : first_key + i;
    float* p = Row(old + i);
    if (spec_.init == InitKind::kZeros) {
      std::memset(p, 0, dim_ * sizeof(float));
    } else {
      for (uint32_t c = 0; c < dim_; ++c) p[c] = InitialValue(spec_, k, c);
    }
  }
  for (size_t s = 0; s < slots_.size(); ++s)
    slots_[s].resize((old + n) * dim_, optimizer_->slot_init(static_cast<int>(s)));
  steps_.resize(old + n, 0);
}

void Stripe::ReserveBlocks(size_t from, size_t rows) {
  for (size_t b = from / block_rows_; b * block_rows_ < rows; ++b) {
    while (b >= blocks_.size()) {
      std::shared_ptr<ParamArray> params = NewParams(0);  // (first: a throw adds no block)
      blocks_.emplace_back();
      blocks_.back().params = std::move(params);
    }
    const size_t need = std::min<size_t>(block_rows_, rows - b * block_rows_) * dim_;
    if (blocks_[b].params->capacity() < need) blocks_[b].params->reserve(need);
  }
}

void Stripe::TruncateRows(size_t rows) {
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const size_t first = b * block_rows_, in = rows > first ? std::min<size_t>(block_rows_, rows - first) : 0;
    if (blocks_[b].params->size() > in * dim_) blocks_[b].params->resize(in * dim_);
  }
  for (auto& sl : slots_) sl.resize(rows * dim_);
  steps_.resize(rows);
}

std::shared_ptr<ParamArray> Stripe::NewParams(size_t n) const {
  auto a = std::make_shared<ParamArray>(n);
  a->budget = budget_;
  return a;
}

bool Stripe::SpareFree(const Block& k) {
  return k.spare && k.spare.use_count() == 1 && k.spare->size() == k.params->size();
}

size_t Stripe::WriteBudgetBytes() const {
  size_t bytes = 0;
  for (uint32_t b : lent_) {
    const Block& k = blocks_[b];
    if (k.params.use_count() != 1 && !SpareFree(k)) bytes += k.params->capacity() * sizeof(float);
  }
  return bytes;
}

const float* Stripe::BeginWrite(size_t b, uint64_t keep_begin, uint64_t keep_end, std::shared_ptr<ParamArray>* held_array) {
  Block& k = blocks_[b];
  std::shared_ptr<ParamArray>& cur = k.params;
  // Room to list the block's spare first: nothing after the budget is taken may throw.
  if (!k.spared && spared_.size() == spared_.capacity()) spared_.reserve(std::max<size_t>(8, 2 * spared_.size()));
  // Another array: the spare when no reply holds it any more (warm: a fresh array of 64 MB or
  // more is a fresh mmap that page-faults on every touch), else a new one if the budget allows
  // the held array to stay beside it; else wait for a reply to let go of one of them.
  std::shared_ptr<ParamArray> next;  // the spare, once no reply holds it ...
  bool taken = false;                // ... or else held_bytes taken from the budget for a new one
  const size_t held_bytes = cur->capacity() * sizeof(float);
  int64_t until = 0;
  bool took = false;  // by done(): the bytes for a new array
  // Under the budget's lock: so it must not free an array (that gives bytes back, which takes the
  // lock); a spare let go of, of whatever size, is for the loop to use or drop.
  auto done = [&] {
    return cur.use_count() == 1 || (k.spare && k.spare.use_count() == 1) || (took = budget_->TryTake(held_bytes));
  };
  while (!next && !taken) {
    if (cur.use_count() == 1) {
      // Nothing else holds it: any reply that did has been sent, and the acquire fence orders
      // its sender's reads (ZeroMQ released its reference with an acq_rel decrement) before
      // the writes that follow.
      std::atomic_thread_fence(std::memory_order_acquire);
      PP_TSAN_ACQUIRE(cur.get());
      return cur->data();
    }
    if (k.spare && k.spare.use_count() == 1 && k.spare->size() != cur->size()) {
      k.spare.reset();  // sparse rows were added since: of no use, and it counts against the budget
    }
    if (SpareFree(k)) {
      std::atomic_thread_fence(std::memory_order_acquire);
      PP_TSAN_ACQUIRE(k.spare.get());
      next = std::move(k.spare);
      // The spare becomes current and the held array the spare: what counts moves with it.
      std::swap(next->counted, cur->counted);
      continue;
    }
    if ((taken = budget_->TryTake(held_bytes))) continue;
    if (until == 0) {
      if (CopyOnWriteBudget::ThisThreadMayWait()) ++budget_->waits;
      until = CopyOnWriteBudget::ThisThreadMayWait() ? NowMs() + budget_->wait_ms() : -1;
    }
    if (until >= 0 && budget_->WaitUntil(until, done)) {
      taken = took;  // else a reply let go of an array: look again
      continue;
    }
    if (cur.use_count() == 1 || SpareFree(k)) continue;
    // Only a slow or stalled reader holds an array this long.
    ++budget_->overdrafts;
    PP_LOG(Warning) << "table '" << spec_.name << "': a pull reply holds " << held_bytes / 1e6 << " MB of parameters"
                    << (until < 0 ? " (on a thread that does not wait)"
                                  : " after " + std::to_string(budget_->wait_ms()) + " ms (a slow or stalled reader)")
                    << "; copying them over the copy-on-write budget (" << budget_->used() / 1e6 << " of "
                    << budget_->limit() / 1e6 << " MB in use)";
    budget_->Take(held_bytes);
    taken = true;
  }
  if (!next) {
    try {
      next = NewParams(cur->size());
    } catch (...) {  // out of memory: the budget taken for it goes back
      budget_->Give(held_bytes);
      throw;
    }
    cur->counted = held_bytes;
  }
  k.spare_needed_at = writes_;
  if (!k.spared) {
    spared_.push_back(static_cast<uint32_t>(b));
    k.spared = true;
  }
  const float* held = cur->data();
  float* out = next->data();
  const size_t n = cur->size(), kb = std::min(n, keep_begin * dim_), ke = std::max(kb, std::min(n, keep_end * dim_));
  std::memcpy(out, held, kb * sizeof(float));
  std::memcpy(out + ke, held + ke, (n - ke) * sizeof(float));
  k.spare = cur;  // reusable once the reply that holds it is sent (an older spare is let go)
  *held_array = std::move(cur);
  cur = std::move(next);
  return held;
}

std::shared_ptr<const float> Stripe::Lend(size_t b, const float* p) {
  Block& k = blocks_[b];
  if (!k.lent) {
    // Blocks no reply holds any more leave the list first: it stays as long as the blocks held.
    size_t kept = 0;
    for (uint32_t l : lent_) {
      if (blocks_[l].params.use_count() != 1) lent_[kept++] = l;
      else blocks_[l].lent = false;
    }
    lent_.resize(kept);
    lent_.push_back(static_cast<uint32_t>(b));
    k.lent = true;
  }
  return std::shared_ptr<const float>(p, [keep = k.params, budget = budget_](const float*) mutable {
    PP_TSAN_RELEASE(keep.get());  // (the reply's reads are done)
    keep.reset();
    budget->Released();
  });
}

size_t Stripe::CopyOnWriteBytes(const RowSelection& sel) const {
  size_t held = 0;
  for (uint32_t b : lent_)
    if (blocks_[b].params.use_count() != 1) held += BlockSize(b);
  return (held - std::min<uint64_t>(held, sel.size())) * dim_ * sizeof(float);
}

std::shared_ptr<const float> Stripe::ShareRows(uint64_t row) {
  const size_t r = row - row_begin_;
  return Lend(r / block_rows_, Row(r));
}

uint32_t Stripe::LocalRow(Key key) {
  if (!spec_.sparse) return static_cast<uint32_t>(key - row_begin_);
  const uint32_t found = index_.Find(key);
  if (found != RowIndex::kNone) return found;
  // Local rows are 32-bit, kNone excluded: a stripe holds fewer (the row after the last would
  // wrap to 0, silently).
  if (steps_.size() >= RowIndex::kNone)
    throw TableMemoryExhausted("table '" + spec_.name + "': a stripe holds at most " +
                               std::to_string(RowIndex::kNone) + " rows (more servers, or --update_threads)");
  uint32_t r = static_cast<uint32_t>(steps_.size());
  if (const size_t grow = index_.GrowthBytes(index_.size() + 1); grow > 0) {
    Charge(grow, "a larger key index");
    try {
      index_.Reserve(index_.size() + 1);  // may throw: nothing changed yet
    } catch (...) {
      Uncharge(grow);
      throw;
    }
  }
  AppendRows(key, 1, &key);  // may throw: the index does not have the key yet
  index_.Insert(key, r);     // has room: does not throw
  return r;
}

size_t Stripe::kept_lists() const {
  size_t n = 0;
  for (const KeyList& l : key_lists_) n += !l.keys.empty();
  return n;
}

size_t Stripe::kept_list_keys() const {
  size_t n = 0;
  for (const KeyList& l : key_lists_) n += l.keys.size();
  return n;
}

const uint32_t* Stripe::LocalRows(const RowSelection& sel, const Key* keys) {
  if (!spec_.sparse || sel.is_range) return nullptr;
  const size_t n = sel.size();
  auto key_at = [&](size_t i) { return keys[sel.pos(i)]; };
  const bool keep = n >= kMinReusedKeys && n <= kMaxReusedKeys;
  if (keep) {
    for (KeyList& l : key_lists_) {
      if (l.keys.size() != n) continue;
      size_t i = 0;
      while (i < n && l.keys[i] == key_at(i)) ++i;
      if (i == n) {
        l.last_use = ++key_list_uses_;
        rows_one_run_ = l.one_run;
        return l.rows.data();
      }
    }
  }
  std::vector<uint32_t>* rows = &rows_scratch_;
  KeyList* list = nullptr;
  if (keep) {
    // An empty slot, or a new one while there is room; else the least recently used list is
    // replaced. More lists go, least recently used first, while they would hold over
    // kMaxReusedKeys keys.
    size_t kept = n;
    for (const KeyList& c : key_lists_) kept += c.keys.size();
    auto least_used = [&](const KeyList* other) {
      KeyList* l = nullptr;
      for (KeyList& c : key_lists_)
        if (&c != other && !c.keys.empty() && (!l || c.last_use < l->last_use)) l = &c;
      return l;
    };
    for (KeyList& c : key_lists_)
      if (c.keys.empty()) list = &c;  // (one let go of below before)
    if (!list && key_lists_.size() < kReusedLists) {
      key_lists_.emplace_back();
      list = &key_lists_.back();
    }
    if (!list) list = least_used(nullptr);  // (the lists are full, so none is empty)
    kept -= list->keys.size();
    while (kept > kMaxReusedKeys) {
      KeyList* old = least_used(list);
      if (!old) break;
      kept -= old->keys.size();
      *old = KeyList();
    }
    list->last_use = ++key_list_uses_;
    rows = &list->rows;
  }
  const size_t rows_before = num_rows();
  size_t i = 0;
  try {
    if (list) list->keys.resize(n);
    rows->resize(n);
    Key* kept = list ? list->keys.data() : nullptr;
    // The index slot of the key kPrefetchAhead entries on is asked of the cache first, so that the
    // lookups of random keys overlap their cache misses instead of taking them one at a time.
    for (; i < n; ++i) {
      if (i + kPrefetchAhead < n) index_.Prefetch(key_at(i + kPrefetchAhead));
      const Key k = key_at(i);
      if (kept) kept[i] = k;
      (*rows)[i] = LocalRow(k);
    }
  } catch (...) {
    // A row that could not be added: the rows this call added go again, so that a refused
    // request leaves the stripe, and the memory limit, as they were; the list is not whole, so
    // it matches nothing.
    for (size_t j = 0; j < i; ++j) {
      const uint32_t r = index_.Find(key_at(j));
      if (r != RowIndex::kNone && r >= rows_before) index_.Erase(key_at(j));
    }
    // (The arrays keep the room they grew into, and it stays charged: the memory is held.)
    TruncateRows(rows_before);
    rows->clear();
    if (list) list->keys.clear();
    throw;
  }
  const uint32_t* r = rows->data();
  bool one_run = true;
  for (size_t j = 1; j < n && one_run; ++j) one_run = r[j] == r[0] + j;
  rows_one_run_ = one_run;
  if (list) list->one_run = one_run;
  return r;
}

// Calls f(local_row, message_pos, nrows) for maximal runs of consecutive local rows that are
// consecutive in the message too (and, when match_steps, share a step count) and in one block:
// one optimizer call per run keeps a dense update a single vectorised pass, and a sparse one
// over keys whose rows were created in the same order (a recurring key set) too.
// by_selection: runs need be consecutive in the selection only, not in the message (a caller
// that places rows by selection index; message_pos is then not the run's place).
template <typename F>
void Stripe::ForEachRun(const RowSelection& sel, const Key* keys, const uint32_t* rows, bool match_steps, F&& f,
                        bool by_selection) {
  const size_t n = sel.size();
  // Every key of the selection on consecutive rows, in order (a recurring key set), and every
  // key of the message or placed by selection: runs end only at blocks' ends and where step
  // counts differ, found without looking at each row's.
  if (rows && rows_one_run_ && (sel.all_keys || by_selection)) {
    for (size_t i = 0; i < n;) {
      const uint32_t r = static_cast<uint32_t>(rows[0] + i);
      const uint64_t block_end = (r / block_rows_ + 1) * block_rows_;
      size_t len = std::min<size_t>(n - i, block_end - r);
      if (match_steps) {
        const uint32_t* st = steps_.data() + r;
        size_t same = 1;
        while (same < len && st[same] == st[0]) ++same;
        len = same;
      }
      f(r, i, len);
      i += len;
    }
    return;
  }
  auto row_at = [&](size_t idx) -> uint32_t {
    if (rows) return rows[idx];
    return static_cast<uint32_t>((sel.is_range ? sel.range_begin + idx : keys[sel.pos(idx)]) - row_begin_);
  };
  size_t i = 0;
  while (i < n) {
    const uint64_t pos = sel.is_range ? sel.first_pos + i : sel.pos(i);
    const uint32_t r = row_at(i);
    const uint64_t block_end = (r / block_rows_ + 1) * block_rows_;
    size_t len = 1;
    while (i + len < n) {
      const uint64_t pos2 = sel.is_range ? sel.first_pos + i + len : sel.pos(i + len);
      const uint32_t r2 = row_at(i + len);
      if ((pos2 != pos + len && !by_selection) || r2 != r + len || r2 >= block_end ||
          (match_steps && steps_[r2] != steps_[r]))
        break;
      ++len;
    }
    f(r, pos, len);
    i += len;
  }
}

Stripe::BlockWrites::BlockWrites(Stripe* stripe) : s(stripe) {
  s->write_in_.resize(s->blocks_.size(), nullptr);
  s->write_held_.resize(s->blocks_.size());
  s->write_bits_at_.resize(s->blocks_.size());
  s->written_blocks_.reserve(s->blocks_.size());
  ++s->writes_;
}

Stripe::BlockWrites::~BlockWrites() {
  for (uint32_t b : s->written_blocks_) {
    s->write_in_[b] = nullptr;
    s->write_held_[b].reset();
  }
  s->written_blocks_.clear();
  // Spares of blocks no write needed for a while go (after the write: a spare it used or made
  // was needed now).
  const uint64_t idle = kSpareIdleWrites * std::max<size_t>(1, s->spared_.size());
  size_t kept = 0;
  for (uint32_t b : s->spared_) {
    Block& k = s->blocks_[b];
    if (k.spare && s->writes_ - k.spare_needed_at < idle) {
      s->spared_[kept++] = b;
    } else {
      k.spare.reset();
      k.spared = false;
    }
  }
  s->spared_.resize(kept);
}

void Stripe::BlockWrites::Begin(size_t b, uint64_t keep_begin, uint64_t keep_end) {
  if (s->write_in_[b]) return;
  s->write_in_[b] = s->BeginWrite(b, keep_begin, keep_end, &s->write_held_[b]);
  s->written_blocks_.push_back(static_cast<uint32_t>(b));
}

void Stripe::BlockWrites::BeginRows(const uint32_t* rows, size_t n, uint64_t keep_begin, uint64_t keep_end) {
  try {
    for (size_t i = 0; i < n;) {
      const size_t b = rows ? rows[i] / s->block_rows_ : 0;
      const uint64_t first = b * s->block_rows_, last = first + s->block_rows_;
      Begin(b, std::clamp(keep_begin, first, last) - first, std::clamp(keep_end, first, last) - first);
      if (!rows) break;
      while (i < n && rows[i] >= first && rows[i] < last) ++i;  // (this block's)
    }
  } catch (...) {
    Undo();
    throw;
  }
}

namespace {
// Bit arrays: bits [b, e) of w, a word at a time.
template <typename F>
void ForEachWordOf(size_t b, size_t e, F&& f) {  // f(word index, mask of its bits in [b, e))
  while (b < e) {
    const size_t i = b >> 6, lo = b & 63, hi = std::min<size_t>(64, lo + (e - b));
    f(i, (hi == 64 ? ~uint64_t(0) : (uint64_t(1) << hi) - 1) & (~uint64_t(0) << lo));
    b += hi - lo;
  }
}
// The first bit in [b, e) that is `set`, else e.
size_t FindBit(const uint64_t* w, size_t b, size_t e, bool set) {
  while (b < e) {
    const size_t i = b >> 6;
    const uint64_t x = (set ? w[i] : ~w[i]) & (~uint64_t(0) << (b & 63));
    if (x) return std::min(e, (i << 6) + size_t(__builtin_ctzll(x)));
    b = (i + 1) << 6;
  }
  return e;
}
}  // namespace

void Stripe::BlockWrites::TrackRows() {
  const size_t words = (s->block_rows_ + 63) / 64;
  size_t moved = 0;
  for (uint32_t b : s->written_blocks_)
    if (s->write_in_[b] != s->blocks_[b].params->data()) s->write_bits_at_[b] = moved++ * words;
  try {
    s->write_bits_.assign(moved * words, 0);
  } catch (...) {
    Undo();
    throw;
  }
}

bool Stripe::BlockWrites::MarkWritten(size_t r, size_t len) {
  const size_t b = r / s->block_rows_, first = b * s->block_rows_;
  assert(s->write_in_[b] != s->blocks_[b].params->data());  // a moved block's: only those have bits
  uint64_t* w = &s->write_bits_[s->write_bits_at_[b]];
  const size_t lo = r - first, hi = lo + len;
  bool again = false;
  ForEachWordOf(lo, hi, [&](size_t i, uint64_t mask) { again |= (w[i] & mask) != 0; });
  if (again) CopyUnwrittenOf(b, lo, hi);
  ForEachWordOf(lo, hi, [&](size_t i, uint64_t mask) { w[i] |= mask; });
  return again;
}

void Stripe::BlockWrites::CopyUnwritten() {
  for (uint32_t b : s->written_blocks_)
    if (s->write_in_[b] != s->blocks_[b].params->data()) CopyUnwrittenOf(b, 0, s->BlockSize(b));
}

void Stripe::BlockWrites::CopyUnwrittenOf(size_t b, size_t lo, size_t hi) {
  const size_t dim = s->dim_;
  const uint64_t* w = &s->write_bits_[s->write_bits_at_[b]];
  const float* in = s->write_in_[b];
  float* const out = s->blocks_[b].params->data();
  for (size_t x = FindBit(w, lo, hi, false); x < hi;) {
    const size_t y = FindBit(w, x, hi, true);
    std::memcpy(out + x * dim, in + x * dim, (y - x) * dim * sizeof(float));
    x = FindBit(w, y, hi, false);
  }
}

void Stripe::BlockWrites::Undo() {
  // Nothing is written yet: a block moved to another array gets all its rows from the held one.
  for (uint32_t b : s->written_blocks_) {
    ParamArray& now = *s->blocks_[b].params;
    if (s->write_in_[b] != now.data()) std::memcpy(now.data(), s->write_in_[b], now.size() * sizeof(float));
  }
}

void Stripe::ApplyPush(const RowSelection& sel, const Key* keys, const float* grads,
                       const opt::StepContext& ctx_in) {
  const uint32_t* rows = LocalRows(sel, keys);  // first: adding rows may move the arrays
  // While a reply holds a block's array, the block's rows pushed are written out of place (read
  // from the held array, written to the new one: no extra pass) and its others copied: a
  // range's by BeginWrite, keyed rows' below, once it is known which were written. Blocks the
  // push does not write stay where they are.
  // Every block the push writes is made writable before any is written: out of memory for one
  // then leaves the stripe as it was.
  // A range keeps the rows it writes (the others copied now); keys keep every row (the rows not
  // written are copied below).
  BlockWrites begun(this);
  if (sel.is_range) {
    begun.BeginRows(nullptr, sel.size(), sel.range_begin - row_begin_, sel.range_end - row_begin_);
  } else {
    begun.BeginRows(rows, sel.size(), 0, num_rows());
    begun.TrackRows();
  }
  float* slot_ptrs[8];
  ForEachRun(sel, keys, rows, true, [&](uint32_t r, uint64_t pos, size_t len) {
    const size_t b = r / block_rows_, at = (r % block_rows_) * dim_;
    const float* in = begun.in(b);
    float* const base = blocks_[b].params->data();
    opt::StepContext ctx = ctx_in;
    for (size_t k = 0; k < len; ++k) ++steps_[r + k];
    ctx.step = steps_[r];
    for (size_t s = 0; s < slots_.size(); ++s) slot_ptrs[s] = &slots_[s][size_t(r) * dim_];
    float* out = base + at;
    const float* src = in + at;
    // Keyed, out of place: a key given twice in one push is applied twice, the second time to
    // the first's result, as in place; this run's rows not yet written are brought over first.
    if (in != base && !sel.is_range && begun.MarkWritten(r, len)) src = out;
    optimizer_->ApplyTo(src, out, slot_ptrs, grads + pos * dim_, len * dim_, ctx);
  });
  if (!sel.is_range) begun.CopyUnwritten();
  ReleaseRows();
}

void Stripe::Accumulate(int64_t clock, int worker, const RowSelection& sel, const Key* keys,
                        const float* grads, float grad_scale) {
  const uint32_t* rows = LocalRows(sel, keys);
  auto& of_clock = bsp_[clock];
  Accumulator& acc = of_clock[worker];
  // Room for every row of the push first, counted against the tables' memory limit (a worker
  // that pushes clocks ahead without pulling holds a sum per clock): past it, or out of memory,
  // nothing of the push is summed.
  // (Each row new, at most; never more than the stripe's rows. A push of rows summed already this
  // clock, a worker accumulating minibatches, adds none: counted when room might be short.)
  size_t most = acc.rows.size() + std::min<size_t>(sel.size(), num_rows() - std::min(num_rows(), acc.rows.size()));
  if (most > acc.rows.capacity()) {
    size_t fresh = 0;
    ForEachRun(sel, keys, rows, false, [&](uint32_t r, uint64_t, size_t len) {
      for (size_t k = 0; k < len; ++k) fresh += acc.slot_of.count(r + k) == 0;
    });
    most = acc.rows.size() + fresh;
  }
  if (most > acc.rows.capacity()) {
    const size_t cap = std::max<size_t>({16, 2 * acc.rows.size(), most});
    const size_t bytes = (cap - acc.rows.capacity()) * SumRowBytes();
    bool charged = false;
    try {
      Charge(bytes, "worker " + std::to_string(worker) + "'s BSP sum of clock " + std::to_string(clock) + " (" +
                        std::to_string(cap) + " rows; a worker's pushes are summed until every worker has finished "
                        "their clock)");
      charged = true;
      acc.rows.reserve(cap);
      acc.sum.reserve(cap * dim_);
      acc.slot_of.reserve(cap);
    } catch (...) {
      if (charged) Uncharge(bytes);
      if (acc.rows.empty()) {  // (a sum made for this push: none left behind, it would hold the clock open)
        of_clock.erase(worker);
        if (of_clock.empty()) bsp_.erase(clock);
      }
      ReleaseRows();
      throw;
    }
    acc.charged += bytes;
  }
  ForEachRun(sel, keys, rows, false, [&](uint32_t r, uint64_t pos, size_t len) {
    for (size_t k = 0; k < len; ++k) {
      auto [it, fresh] = acc.slot_of.try_emplace(r + k, static_cast<uint32_t>(acc.rows.size()));
      if (fresh) {  // (neither allocates now)
        acc.rows.push_back(r + k);
        acc.sum.resize(acc.sum.size() + dim_, 0.0f);
      }
      float* dst = &acc.sum[size_t(it->second) * dim_];
      const float* g = grads + (pos + k) * dim_;
      for (uint32_t c = 0; c < dim_; ++c) dst[c] += grad_scale * g[c];
    }
  });
  ReleaseRows();
}

void Stripe::ApplyAccumulated(int64_t clock, const opt::StepContext& ctx_in) {
  auto it = bsp_.find(clock);
  if (it == bsp_.end()) return;
  // The clock's sums go however this ends: applied, or, out of memory before any row is written
  // (for the sum or a block's copy-on-write array), not applied here at all (kept, sums out of
  // memory would stay for ever).
  struct DropClock {
    Stripe* s;
    decltype(bsp_)::iterator it;
    ~DropClock() {
      for (auto& [w, acc] : it->second) s->DropSum(acc);
      s->bsp_.erase(it);
    }
  } drop{this, it};
  // Rows any worker touched, ascending; then the sum in worker order (deterministic).
  std::vector<uint32_t> rows;
  for (auto& [w, acc] : it->second) rows.insert(rows.end(), acc.rows.begin(), acc.rows.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const bool contiguous = !rows.empty() && rows.back() - rows.front() + 1 == rows.size();
  std::unordered_map<uint32_t, uint32_t> pos_of;
  if (!contiguous)
    for (uint32_t i = 0; i < rows.size(); ++i) pos_of.emplace(rows[i], i);
  std::vector<float> total(rows.size() * dim_, 0.0f);
  for (auto& [w, acc] : it->second) {
    for (size_t i = 0; i < acc.rows.size(); ++i) {
      uint32_t p = contiguous ? acc.rows[i] - rows.front() : pos_of[acc.rows[i]];
      float* dst = &total[size_t(p) * dim_];
      const float* src = &acc.sum[i * dim_];
      for (uint32_t c = 0; c < dim_; ++c) dst[c] += src[c];
    }
  }
  // Each push was checked (AllUsable), but a worker's several pushes of a row in one clock add up:
  // a mean past kMaxGradient would make Adam's v, AdaGrad's and FTRL's sums Inf and freeze or
  // poison the rows without an error. Not applied, and said (the server logs a clock whose
  // apply failed).
  if (!opt::AllUsableScaled(total.data(), total.size(), ctx_in.grad_scale))
    throw std::runtime_error("table '" + spec_.name + "': the BSP mean of clock " + std::to_string(clock) +
                             " holds NaN, Inf or a value of 2^60 or more (several pushes of a row in one clock "
                             "summed past it): this stripe's update of that clock is not applied");
  // Per block written, while a reply holds its array: contiguous rows [lo, hi) are written out
  // of place (the block's other rows copied by BeginWrite); others, the block is copied first
  // and written in place. Every block is made writable before any is written (out of memory for
  // one leaves the stripe as it was).
  const uint64_t lo = rows.empty() ? 0 : rows.front(), hi = rows.empty() ? 0 : uint64_t(rows.back()) + 1;
  BlockWrites begun(this);
  begun.BeginRows(rows.data(), rows.size(), contiguous ? lo : 0, contiguous ? hi : 0);
  float* slot_ptrs[8];
  size_t n = rows.size(), i = 0;
  while (i < n) {
    // Runs of consecutive local rows in one block with equal steps: one optimizer call each.
    uint32_t r = rows[i];
    size_t len = 1;
    while (i + len < n && rows[i + len] == r + len && (r + len) % block_rows_ != 0 && steps_[r + len] == steps_[r])
      ++len;
    const size_t b = r / block_rows_, first = b * block_rows_;
    const float* in = begun.in(b);
    for (size_t k = 0; k < len; ++k) ++steps_[r + k];
    opt::StepContext ctx = ctx_in;
    ctx.step = steps_[r];
    for (size_t s = 0; s < slots_.size(); ++s) slot_ptrs[s] = &slots_[s][size_t(r) * dim_];
    const size_t at = (r - first) * dim_;
    float* out = blocks_[b].params->data() + at;
    optimizer_->ApplyTo(contiguous ? in + at : out, out, slot_ptrs, &total[i * dim_], len * dim_, ctx);
    i += len;
  }
}

void Stripe::DropAccumulated(int64_t clock, int worker) {
  auto it = bsp_.find(clock);
  if (it == bsp_.end()) return;
  auto sum = it->second.find(worker);
  if (sum == it->second.end()) return;
  DropSum(sum->second);
  it->second.erase(sum);
  if (it->second.empty()) bsp_.erase(it);
}

void Stripe::Read(const RowSelection& sel, const Key* keys, int slot, float* out, bool create) {
  if (!create && spec_.sparse) {
    for (size_t i = 0, n = sel.size(); i < n; ++i) {
      const uint64_t pos = sel.pos(i);
      const Key k = keys[pos];
      float* dst = out + pos * dim_;
      const uint32_t r = index_.Find(k);
      if (r != RowIndex::kNone) {
        std::memcpy(dst, slot < 0 ? Row(r) : &slots_[slot][size_t(r) * dim_], dim_ * sizeof(float));
      } else if (slot < 0) {
        for (uint32_t c = 0; c < dim_; ++c) dst[c] = spec_.init == InitKind::kZeros ? 0.0f : InitialValue(spec_, k, c);
      } else {
        std::fill(dst, dst + dim_, optimizer_->slot_init(slot));
      }
    }
    return;
  }
  const uint32_t* rows = LocalRows(sel, keys);  // may add rows, which may move the arrays
  ForEachRun(sel, keys, rows, false, [&](uint32_t r, uint64_t pos, size_t len) {
    const float* src = slot < 0 ? Row(r) : &slots_[slot][size_t(r) * dim_];
    std::memcpy(out + pos * dim_, src, len * dim_ * sizeof(float));
  });
  ReleaseRows();
}

Status Stripe::Restore(std::vector<Key> keys, FloatArray params, std::vector<std::vector<float>> slots,
                       std::vector<uint32_t> steps) {
  if (steps.size() >= RowIndex::kNone)
    return Status::ResourceExhausted("table '" + spec_.name + "': " + std::to_string(steps.size()) +
                                     " rows for one stripe, over its " + std::to_string(RowIndex::kNone) +
                                     " (more servers, or --update_threads)");
  // What the restored rows hold, and an index with room for their keys.
  const size_t bytes = steps.size() * RowBytes(spec_, optimizer_->num_slots()) +
                       (spec_.sparse ? RowIndex().GrowthBytes(keys.size()) : 0);
  memory_->Give(charged_);  // (the BSP sums' too: they go with it)
  charged_ = 0;
  bsp_.clear();
  cap_rows_ = 0;
  if (!memory_->TryTake(bytes))
    return Status::ResourceExhausted(
        MemoryRefusal(spec_, *memory_, "its " + std::to_string(steps.size()) + " rows from the checkpoint", bytes));
  charged_ = bytes;
  cap_rows_ = steps.size();
  blocks_.clear();
  lent_.clear();
  spared_.clear();
  // A block's rows as they are when they are all; else copied a block at a time from the last,
  // the checkpoint's pages given back as they are copied (about one copy of the rows at a time).
  const size_t rows = steps.size(), nblocks = (rows + block_rows_ - 1) / block_rows_;
  blocks_.resize(nblocks);
  if (nblocks == 1) {
    blocks_[0].params = NewParams(0);
    static_cast<FloatArray&>(*blocks_[0].params) = std::move(params);
  }
  for (size_t b = nblocks; nblocks > 1 && b-- > 0;) {
    const size_t first = b * block_rows_, n = std::min<size_t>(block_rows_, rows - first);
    blocks_[b].params = NewParams(n * dim_);
    std::memcpy(blocks_[b].params->data(), params.data() + first * dim_, n * dim_ * sizeof(float));
    ReleaseTail(params.data(), first * dim_ * sizeof(float), params.size() * sizeof(float));
  }
  slots_ = std::move(slots);
  steps_ = std::move(steps);
  index_.Clear();
  key_lists_.clear();
  for (uint32_t r = 0; r < keys.size(); ++r) {
    if (index_.Find(keys[r]) != RowIndex::kNone)
      return Status::InvalidArgument("table '" + spec_.name + "': the checkpoint holds row " + std::to_string(keys[r]) +
                                     " twice");
    index_.Insert(keys[r], r);
  }
  return Status::OK();
}

Status TableShard::Restore(ShardRows in) {
  const TableSpec& spec = info_.spec;
  const size_t dim = spec.dim, nslots = static_cast<size_t>(optimizer_->num_slots());
  if (!in.blocks.empty()) {
    // Dense rows in blocks: a stripe per block takes its piece as it is; another striping (fewer
    // blocks than update threads: a small shard) gets them joined first.
    bool each_a_stripe = !spec.sparse && in.keys.empty() && in.steps.empty() &&
                         in.blocks.size() == stripes_.size();
    for (size_t i = 0; each_a_stripe && i < in.blocks.size(); ++i) {
      const ShardRows& b = in.blocks[i];
      each_a_stripe = b.blocks.empty() && b.keys.empty() && b.steps.size() == stripe_offsets_[i + 1] - stripe_offsets_[i] &&
                      b.params.size() == b.steps.size() * dim && b.slots.size() == nslots &&
                      std::all_of(b.slots.begin(), b.slots.end(), [&](const std::vector<float>& sl) { return sl.size() == b.params.size(); });
    }
    if (each_a_stripe) {
      for (size_t i = 0; i < in.blocks.size(); ++i) {
        ShardRows& b = in.blocks[i];
        PP_RETURN_IF_ERROR(stripes_[i]->Restore({}, std::move(b.params), std::move(b.slots), std::move(b.steps)));
      }
      return Status::OK();
    }
    ShardRows joined;
    joined.keys = std::move(in.keys);
    joined.slots.resize(in.blocks.front().slots.size());
    const size_t total = in.rows();
    joined.params.reserve(total * dim);
    for (auto& sl : joined.slots) sl.reserve(total * dim);
    joined.steps.reserve(total);
    for (ShardRows& b : in.blocks) {
      if (!b.blocks.empty() || b.slots.size() != joined.slots.size())
        return Status::InvalidArgument("table '" + spec.name + "': checkpoint blocks do not match");
      joined.params.insert(joined.params.end(), b.params.begin(), b.params.end());
      for (size_t k = 0; k < b.slots.size(); ++k) joined.slots[k].insert(joined.slots[k].end(), b.slots[k].begin(), b.slots[k].end());
      joined.steps.insert(joined.steps.end(), b.steps.begin(), b.steps.end());
      b = ShardRows();  // (let go as joined)
    }
    return Restore(std::move(joined));
  }
  const size_t n = in.rows();
  if (in.params.size() != n * dim || in.slots.size() != nslots)
    return Status::InvalidArgument("table '" + spec.name + "': checkpoint rows do not match dim " +
                                   std::to_string(dim) + " with " + std::to_string(nslots) + " optimizer slots");
  for (auto& s : in.slots)
    if (s.size() != n * dim) return Status::InvalidArgument("table '" + spec.name + "': checkpoint slot size differs");
  if (spec.sparse ? in.keys.size() != n : (!in.keys.empty() || n != row_end_ - row_begin_))
    return Status::InvalidArgument("table '" + spec.name + "': checkpoint holds " + std::to_string(n) +
                                   " rows, this server owns " +
                                   (spec.sparse ? std::string("keyed rows") : std::to_string(row_end_ - row_begin_)));
  const int S = num_stripes();
  if (!spec.sparse) {
    // Dense: stripe i holds rows [stripe_offsets_[i], stripe_offsets_[i+1]), contiguous in the
    // checkpoint too. One stripe takes the arrays as they are; several copy their rows from the
    // last stripe to the first, the checkpoint's pages given back as they are copied, so that a
    // restore holds about one copy of the table, not two.
    if (S == 1) return stripes_[0]->Restore({}, std::move(in.params), std::move(in.slots), std::move(in.steps));
    for (int i = S - 1; i >= 0; --i) {
      const size_t b = stripe_offsets_[i] - row_begin_, e = stripe_offsets_[i + 1] - row_begin_;
      FloatArray params(in.params.begin() + b * dim, in.params.begin() + e * dim);
      std::vector<std::vector<float>> slots;
      for (auto& sl : in.slots) slots.emplace_back(sl.begin() + b * dim, sl.begin() + e * dim);
      std::vector<uint32_t> steps(in.steps.begin() + b, in.steps.begin() + e);
      ReleaseTail(in.params.data(), b * dim * sizeof(float), n * dim * sizeof(float));
      for (auto& sl : in.slots) ReleaseTail(sl.data(), b * dim * sizeof(float), n * dim * sizeof(float));
      ReleaseTail(in.steps.data(), b * sizeof(uint32_t), n * sizeof(uint32_t));
      PP_RETURN_IF_ERROR(stripes_[i]->Restore({}, std::move(params), std::move(slots), std::move(steps)));
    }
    return Status::OK();
  }
  // Sparse: each row to the stripe its key hashes to.
  std::vector<std::vector<uint32_t>> of(S);
  for (size_t r = 0; r < n; ++r) {
    const Key k = in.keys[r];
    if (!Owns(k))
      return Status::InvalidArgument("table '" + spec.name + "': checkpoint row " + std::to_string(k) +
                                     " belongs to server " + std::to_string(info_.OwnerOf(k)));
    of[StripeOf(k)].push_back(static_cast<uint32_t>(r));
  }
  for (int i = 0; i < S; ++i) {
    const auto& rows = of[i];
    std::vector<Key> keys(rows.size());
    FloatArray params(rows.size() * dim);
    std::vector<std::vector<float>> slots(nslots, std::vector<float>(rows.size() * dim));
    std::vector<uint32_t> steps(rows.size());
    for (size_t j = 0; j < rows.size(); ++j) {
      const size_t r = rows[j];
      keys[j] = in.keys[r];
      std::memcpy(&params[j * dim], &in.params[r * dim], dim * sizeof(float));
      for (size_t s = 0; s < nslots; ++s) std::memcpy(&slots[s][j * dim], &in.slots[s][r * dim], dim * sizeof(float));
      steps[j] = in.steps[r];
    }
    PP_RETURN_IF_ERROR(stripes_[i]->Restore(std::move(keys), std::move(params), std::move(slots), std::move(steps)));
  }
  return Status::OK();
}

std::shared_ptr<const float> Stripe::ReadOrShare(const RowSelection& sel, const Key* keys,
                                                 std::shared_ptr<float[]>* out) {
  size_t runs = 0;
  uint32_t first_row = 0;
  size_t first_len = 0;
  size_t at = 0;  // the selection index of the run's first row (runs come in selection order)
  const size_t row_floats = dim_;
  const uint32_t* rows = LocalRows(sel, keys);  // may add rows, which may move the arrays
  ForEachRun(sel, keys, rows, false, [&](uint32_t r, uint64_t, size_t len) {
    if (runs++ == 0) {  // maybe the only one: copied only once a second run shows up
      first_row = r;
      first_len = len;
      at = len;
      return;
    }
    if (runs == 2) {
      *out = NewFloatBuffer(sel.size() * row_floats);
      std::memcpy(out->get(), Row(first_row), first_len * row_floats * sizeof(float));
    }
    std::memcpy(out->get() + at * row_floats, Row(r), len * row_floats * sizeof(float));
    at += len;
  }, /*by_selection=*/true);
  ReleaseRows();
  if (runs == 1) return Lend(first_row / block_rows_, Row(first_row));
  if (runs == 0) *out = NewFloatBuffer(0);
  return nullptr;
}

TableShard::TableShard(const TableInfo& info, int server_rank, int num_threads, bool fill,
                       std::shared_ptr<CopyOnWriteBudget> budget, std::shared_ptr<ByteBudget> memory)
    : info_(info), server_rank_(server_rank), num_threads_(num_threads) {
  optimizer_ = opt::Optimizer::Create(info.spec.optimizer);
  if (!info.spec.sparse) {
    row_begin_ = info.row_offsets[server_rank];
    row_end_ = info.row_offsets[server_rank + 1];
    uint64_t rows = row_end_ - row_begin_;
    // Refused whole, naming the shard's size (its stripes charge their parts as they are made).
    const size_t bytes = rows * Stripe::RowBytes(info.spec, optimizer_->num_slots());
    if (fill && memory && memory->WouldExceed(bytes))
      throw TableMemoryExhausted(MemoryRefusal(
          info.spec, *memory, "its " + std::to_string(rows) + " rows on this server (parameters, optimizer slots, step counts)",
          bytes));
    // A stripe per block when there are at least as many blocks as update threads; else one per
    // update thread, of equal size (a small table: a block then spans stripes).
    const uint64_t block = info.BlockRows(server_rank);
    const uint64_t blocks = (rows + block - 1) / block;
    if (blocks >= uint64_t(num_threads)) {
      for (uint64_t b = 0; b < blocks; ++b) stripe_offsets_.push_back(row_begin_ + b * block);
      stripe_offsets_.push_back(row_end_);
    } else {
      for (int i = 0; i <= num_threads; ++i) stripe_offsets_.push_back(row_begin_ + rows * i / num_threads);
    }
    const int num_stripes = static_cast<int>(stripe_offsets_.size()) - 1;
    for (int i = 0; i < num_stripes; ++i)
      stripes_.push_back(std::make_unique<Stripe>(info.spec, optimizer_.get(), stripe_offsets_[i],
                                                  stripe_offsets_[i + 1], fill, budget, memory));
  } else {
    for (int i = 0; i < num_threads; ++i)
      stripes_.push_back(std::make_unique<Stripe>(info.spec, optimizer_.get(), 0, 0, true, budget, memory));
    owns_every_key_ = std::all_of(info.bucket_owner.begin(), info.bucket_owner.end(),
                                  [&](uint16_t o) { return o == server_rank; });
  }
}

bool TableShard::Owns(Key key) const {
  if (info_.spec.sparse) return info_.bucket_owner[TableInfo::BucketOf(key)] == server_rank_;
  return key >= row_begin_ && key < row_end_;
}

int TableShard::StripeOf(Key key) const {
  int n = num_stripes();
  if (n == 1) return 0;
  if (info_.spec.sparse) return TableInfo::SparseStripeOf(key, n);
  auto it = std::upper_bound(stripe_offsets_.begin(), stripe_offsets_.end(), key);
  return static_cast<int>(it - stripe_offsets_.begin()) - 1;
}

void TableShard::Split(const Key* keys, uint64_t n, std::vector<RowSelection>* out) const {
  out->assign(num_stripes(), RowSelection());
  if (num_stripes() == 1) {
    (*out)[0].all_keys = true;
    (*out)[0].num_keys = n;
    return;
  }
  for (uint64_t i = 0; i < n; ++i) (*out)[StripeOf(keys[i])].positions.push_back(static_cast<uint32_t>(i));
}

void TableShard::SplitRange(uint64_t begin, uint64_t end, std::vector<RowSelection>* out) const {
  out->assign(num_stripes(), RowSelection());
  for (int i = 0; i < num_stripes(); ++i) {
    RowSelection& s = (*out)[i];
    s.is_range = true;
    s.range_begin = std::max(begin, stripe_offsets_[i]);
    s.range_end = std::min(end, stripe_offsets_[i + 1]);
    if (s.range_end < s.range_begin) s.range_end = s.range_begin;
    s.first_pos = s.range_begin - begin;
  }
}

}  // namespace pushpull
