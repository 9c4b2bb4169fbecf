// Copy-on-write of a stripe's blocks: the copy-on-write budget (server/table/copy_on_write.h), lending a
// block's current array to a pull reply (Lend, ShareRows), moving a write off an array a reply
// holds (BeginWrite: the spare, a new array within the budget, or a wait for a reply to let go),
// and BlockWrites, which makes every block a write touches writable before any is written.
//
// Threading: the Stripe members here run as the stripe's others do (server/table/stripe.h: one thread at
// a time, no lock); WriteBudgetBytes and CopyOnWriteBytes are the I/O thread's, while no update
// thread works on the stripe. A lent array is read and let go of by ZeroMQ's threads; a reference
// count of one plus an acquire fence orders their reads before the next write to it. The budget's
// mutex is a leaf: BeginWrite's `ready` check under it frees no array and takes no other lock.
#include "server/table/copy_on_write.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <string>

#include "common/log.h"
#include "common/time.h"
#include "server/table/stripe.h"

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

namespace pushpull::table {

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

const float* Stripe::BeginWrite(size_t b, uint64_t keep_begin, uint64_t keep_end,
                                std::shared_ptr<ParamArray>* held_array) {
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
      if (blocks_[l].params.use_count() != 1)
        lent_[kept++] = l;
      else
        blocks_[l].lent = false;
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

}  // namespace pushpull::table
