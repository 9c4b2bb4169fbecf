// One server's shard of one table: parameters and optimizer slots in contiguous arrays, split
// into stripes (server/table/stripe.h); update thread t owns stripes t, t + T, t + 2T, ... of T threads.
// A stripe is touched by one thread at a time, its update thread (or the I/O thread while that one
// is idle), so the hot path takes no lock; the I/O thread decides which stripe owns which row and
// hands work over through queues.
//
// Dense tables: the server's contiguous row range is cut into contiguous stripes: one per block
// (TableInfo::BlockRows, the unit clients send and copy-on-write copies) when it has at least T
// blocks, else T of equal size.
// Sparse tables: a row id belongs to stripe hash(id) % T; rows are created on first touch with
// their deterministic initial value.
//
// The shard's striping is fixed when it is made: Owns, StripeOf, Split and SplitRange are const
// and safe on any thread. Restore (server/table/shard_restore.cc) runs only while no update thread works
// on the shard; table_step and bsp_contributors belong to the I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/cluster.h"
#include "common/memory.h"
#include "optimizers/optimizer.h"
#include "server/table/copy_on_write.h"
#include "server/table/memory.h"
#include "server/table/stripe.h"

namespace pushpull::table {

// A shard's rows as a checkpoint holds them, in any striping: dense rows in row order from the
// shard's first, sparse rows in any order with their keys.
struct ShardRows {
  std::vector<Key> keys;                  // sparse: the key of each row; dense: empty
  FloatArray params;                      // rows * dim
  std::vector<std::vector<float>> slots;  // per optimizer slot, rows * dim
  std::vector<uint32_t> steps;            // per row: updates applied
  // Dense rows read for a restore (ReadServerCheckpoint's in_blocks): in pieces of
  // TableInfo::BlockRows rows, in row order, each with its params, slots and steps; the fields
  // above are then empty. A shard with a stripe per block takes the pieces as they are.
  std::vector<ShardRows> blocks;
  size_t rows() const {
    size_t n = steps.size();
    for (const ShardRows& b : blocks) n += b.rows();
    return n;
  }
};

class TableShard {
 public:
  // fill false: the stripes stay empty until Restore() (no pass initialising rows a checkpoint
  // is about to replace).
  // budget: shared by the server's shards (nullptr: unbounded). memory: the limit on what the
  // server's tables hold (nullptr: none); a dense shard over it throws TableMemoryExhausted.
  TableShard(const TableInfo& info, int server_rank, int num_threads, bool fill = true,
             std::shared_ptr<CopyOnWriteBudget> budget = nullptr, std::shared_ptr<ByteBudget> memory = nullptr);

  const TableInfo& info() const { return info_; }
  const TableSpec& spec() const { return info_.spec; }
  const opt::Optimizer* optimizer() const { return optimizer_.get(); }
  int num_stripes() const { return static_cast<int>(stripes_.size()); }
  // The update thread that owns stripe i (of the num_threads the shard was made for).
  int ThreadOf(int i) const { return i % num_threads_; }
  Stripe& stripe(int i) { return *stripes_[i]; }
  const Stripe& stripe(int i) const { return *stripes_[i]; }
  // This server's dense rows [row_begin, row_end).
  uint64_t row_begin() const { return row_begin_; }
  uint64_t row_end() const { return row_end_; }

  // Is this key this server's? (dense: in range; sparse: bucket owned here)
  bool Owns(Key key) const;
  // Sparse: every key is (a job with one server), so a message's keys need no check.
  bool OwnsEveryKey() const { return owns_every_key_; }
  int StripeOf(Key key) const;
  // Splits a message's rows into per-stripe selections (empty ones included).
  void Split(const Key* keys, uint64_t n, std::vector<RowSelection>* out) const;
  void SplitRange(uint64_t begin, uint64_t end, std::vector<RowSelection>* out) const;

  // Rebuilds every stripe from a checkpoint's rows of this shard (InvalidArgument naming what
  // does not fit: row count, dimension, slots, a key another server owns). Only while no update
  // thread works on the shard.
  Status Restore(ShardRows rows);

  // Bookkeeping owned by the I/O thread.
  // The schedule's step: updates this server applied (SSP/ASP: one per push it received, a call
  // sent in several requests counted on its first); under BSP the clock, one past the last one
  // applied.
  int64_t table_step = 0;
  // BSP: per open clock, the workers that pushed to it.
  std::map<int64_t, std::vector<uint8_t>> bsp_contributors;

 private:
  const TableInfo info_;
  const int server_rank_;
  const int num_threads_;
  uint64_t row_begin_ = 0, row_end_ = 0;
  bool owns_every_key_ = false;
  std::unique_ptr<opt::Optimizer> optimizer_;
  std::vector<uint64_t> stripe_offsets_;  // dense: stripe i owns [offsets[i], offsets[i+1])
  std::vector<std::unique_ptr<Stripe>> stripes_;
};

}  // namespace pushpull::table
