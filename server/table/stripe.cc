// A stripe (server/table/stripe.h): its construction, its rows' memory (charged to the tables' limit
// as the arrays grow) and their growth, and the data path: pushes applied now (SSP/ASP) and reads
// for pulls, gathered or shared in place.
//
// Threading: the stripe's (server/table/stripe.h): one thread at a time, no lock. The tables' memory
// limit it charges is shared with the server's other stripes (atomics).
#include "server/table/stripe.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "server/table/stripe_runs.h"

namespace pushpull::table {

Stripe::Stripe(const TableSpec& spec, const opt::Optimizer* optimizer, uint64_t row_begin, uint64_t row_end, bool fill,
               std::shared_ptr<CopyOnWriteBudget> budget, std::shared_ptr<ByteBudget> memory)
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

void Stripe::Charge(size_t bytes, const std::string& what) {
  if (!memory_->TryTake(bytes)) throw TableMemoryExhausted(MemoryRefusal(spec_, *memory_, what, bytes));
  charged_ += bytes;
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
                               : "its " + std::to_string(n) +
                                     " rows on this server (parameters, optimizer slots, "
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

void Stripe::ApplyPush(const RowSelection& sel, const Key* keys, const float* grads, const opt::StepContext& ctx_in) {
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

std::shared_ptr<const float> Stripe::ReadOrShare(const RowSelection& sel, const Key* keys,
                                                 std::shared_ptr<float[]>* out) {
  size_t runs = 0;
  uint32_t first_row = 0;
  size_t first_len = 0;
  size_t at = 0;  // the selection index of the run's first row (runs come in selection order)
  const size_t row_floats = dim_;
  const uint32_t* rows = LocalRows(sel, keys);  // may add rows, which may move the arrays
  ForEachRun(
      sel, keys, rows, false,
      [&](uint32_t r, uint64_t, size_t len) {
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
      },
      /*by_selection=*/true);
  ReleaseRows();
  if (runs == 1) return Lend(first_row / block_rows_, Row(first_row));
  if (runs == 0) *out = NewFloatBuffer(0);
  return nullptr;
}

}  // namespace pushpull::table
