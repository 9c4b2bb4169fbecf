// A shard rebuilt from a checkpoint's rows (ShardRows, server/table/shard.h): checked against the
// shard's shape, split over its stripes (dense by row range, sparse by key hash), each stripe's
// state replaced; the checkpoint's pages are given back as they are copied, so that a restore
// holds about one copy of the table.
//
// Threading: only while no update thread works on the shard (it is restored as it is made, before
// any request reaches it); no lock.
#include "server/table/shard.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/memory.h"

namespace pushpull::table {

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
    bool each_a_stripe = !spec.sparse && in.keys.empty() && in.steps.empty() && in.blocks.size() == stripes_.size();
    for (size_t i = 0; each_a_stripe && i < in.blocks.size(); ++i) {
      const ShardRows& b = in.blocks[i];
      each_a_stripe = b.blocks.empty() && b.keys.empty() &&
                      b.steps.size() == stripe_offsets_[i + 1] - stripe_offsets_[i] &&
                      b.params.size() == b.steps.size() * dim && b.slots.size() == nslots &&
                      std::all_of(b.slots.begin(), b.slots.end(),
                                  [&](const std::vector<float>& sl) { return sl.size() == b.params.size(); });
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
      for (size_t k = 0; k < b.slots.size(); ++k)
        joined.slots[k].insert(joined.slots[k].end(), b.slots[k].begin(), b.slots[k].end());
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

}  // namespace pushpull::table
