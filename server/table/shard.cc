// A server's shard of one table (server/table/shard.h): its stripes made, and a message's rows
// split over them (Owns, StripeOf, Split, SplitRange).
//
// Threading: the striping is fixed once the shard is made; the calls here only read it.
#include "server/table/shard.h"

#include <algorithm>
#include <string>

namespace pushpull::table {

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
          info.spec, *memory,
          "its " + std::to_string(rows) + " rows on this server (parameters, optimizer slots, step counts)", bytes));
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
    owns_every_key_ =
        std::all_of(info.bucket_owner.begin(), info.bucket_owner.end(), [&](uint16_t o) { return o == server_rank; });
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

}  // namespace pushpull::table
