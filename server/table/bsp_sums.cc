// BSP in a stripe (server/table/stripe.h): each worker's gradients summed per clock (Accumulate), the
// clock's sums added up in worker order and applied once (ApplyAccumulated), so that a BSP run is
// bitwise reproducible whatever order the pushes arrived in, and a dead worker's sum dropped. The
// sums are charged to the tables' memory limit.
//
// Threading: the stripe's (server/table/stripe.h): one thread at a time, no lock.
#include "server/table/stripe.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/table/stripe_runs.h"

namespace pushpull::table {

void Stripe::Accumulate(int64_t clock, int worker, const RowSelection& sel, const Key* keys, const float* grads,
                        float grad_scale) {
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
                        std::to_string(cap) +
                        " rows; a worker's pushes are summed until every worker has finished "
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

}  // namespace pushpull::table
