// A stripe of a server's shard of one table (server/table/shard.h): a part of its rows, with
// their parameters, optimizer slots and step counts, which one update thread owns.
// A stripe keeps its parameters in blocks of rows (a dense stripe: one; a sparse one: blocks of
// TableInfo::KeyedBlockRows rows in first-touch order), each its own array: what a pull reply
// holds and a write copies while it is held (copy-on-write) is a block, not the stripe.
//
// Its definitions, by job:
//   server/table/stripe.cc         construction, rows and their memory, pushes and reads
//   server/table/sparse_rows.cc    a sparse stripe's keys to local rows, rows made on first touch
//   server/table/copy_on_write.cc  writing blocks that pull replies hold, and lending them to replies
//   server/table/bsp_sums.cc       BSP: gradients summed per clock and worker, applied once a clock
//   server/table/shard_restore.cc  Restore() from a checkpoint's rows
//   server/table/stripe_runs.h     ForEachRun, the runs of rows that pushes and reads work on
//
// Threading: one thread at a time and no lock: the update thread that owns the stripe, or the
// I/O thread while no update thread works on it (small requests run inline, checkpoints;
// server/update_threads.h orders the hand-over). Only the arrays it lends to pull replies
// (ShareRows, ReadOrShare) leave it: ZeroMQ's threads read them and drop their references, never
// write them (server/table/copy_on_write.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/cluster.h"
#include "common/memory.h"
#include "optimizers/optimizer.h"
#include "server/table/copy_on_write.h"
#include "server/table/memory.h"
#include "server/table/row_index.h"

namespace pushpull::table {

// Rows of one message that fall in one stripe: either a contiguous range of global rows whose
// values start at message row `first_pos`, or a list of message positions (keyed): every key of
// the message in order (`all_keys`, when one stripe holds them all), or those listed.
struct RowSelection {
  bool is_range = false;
  bool all_keys = false;
  uint64_t range_begin = 0, range_end = 0;  // global row ids, range
  uint64_t first_pos = 0;                   // message row index of range_begin
  uint64_t num_keys = 0;                    // all_keys: the message's
  std::vector<uint32_t> positions;          // keyed, not all_keys: indexes into the message's keys
  size_t size() const { return is_range ? range_end - range_begin : all_keys ? num_keys : positions.size(); }
  uint64_t pos(size_t i) const { return all_keys ? i : positions[i]; }  // keyed: the i-th row's message position
};

class Stripe {
 public:
  // A dense stripe starts with its rows at their initial values, unless `fill` is false (a stripe
  // about to be restored from a checkpoint: no rows until Restore()).
  // Its rows are charged to `memory` (nullptr: unbounded) as they are made, and given back
  // when it goes: adding rows past the limit throws TableMemoryExhausted.
  Stripe(const TableSpec& spec, const opt::Optimizer* optimizer, uint64_t row_begin, uint64_t row_end, bool fill = true,
         std::shared_ptr<CopyOnWriteBudget> budget = nullptr, std::shared_ptr<ByteBudget> memory = nullptr);
  ~Stripe();
  Stripe(const Stripe&) = delete;
  Stripe& operator=(const Stripe&) = delete;

  // The calls below that may add sparse rows (every keyed one) throw TableMemoryExhausted, or
  // std::bad_alloc for the rows, before they change anything: no gradient applied, no row read,
  // the rows they added taken away again. A write out of memory for a block's copy-on-write
  // array (ApplyPush, ApplyAccumulated) applies nothing either, but keeps the rows it added, at
  // their initial values (as a pull of them would have made them); a BSP clock that fails so is
  // dropped. So does a keyed read out of memory for its reply buffer (ReadOrShare). (The machine
  // out of memory later in a call, say for a BSP sum, may leave it part done.)

  // Applies gradients now (SSP/ASP). grads holds dim floats per message row.
  void ApplyPush(const RowSelection& sel, const Key* keys, const float* grads, const opt::StepContext& ctx);
  // BSP: adds worker `worker`'s gradients into its accumulator for `clock`.
  void Accumulate(int64_t clock, int worker, const RowSelection& sel, const Key* keys, const float* grads,
                  float grad_scale);
  // BSP: applies the sum over workers of `clock` once, scaled by ctx.grad_scale, then drops it.
  // The sum is taken in worker order, so a BSP run is bitwise reproducible whatever order the
  // pushes arrived in.
  void ApplyAccumulated(int64_t clock, const opt::StepContext& ctx);
  // BSP: forgets worker `worker`'s sum for `clock` (a worker that died before finishing it).
  void DropAccumulated(int64_t clock, int worker);
  // Copies rows (parameters, or optimizer slot `slot` >= 0) into out (dim floats per message row).
  // create false (a sparse stripe's Lookup): a key it does not hold reads as its row would start
  // and is not added; nothing here changes then.
  void Read(const RowSelection& sel, const Key* keys, int slot, float* out, bool create = true);
  // A keyed pull of parameters: when its rows are consecutive local rows in the selection's order
  // (one run: a recurring key set pulled in the order its rows were made, or ascending dense
  // rows), those rows in place, as ShareRows gives them; otherwise nullptr, and the rows gathered
  // into *out (allocated here, dim floats per row of the selection, in its order). Each key is
  // looked up once either way.
  std::shared_ptr<const float> ReadOrShare(const RowSelection& sel, const Key* keys, std::shared_ptr<float[]>* out);
  // The parameters from global row `row` on, in place, for a pull reply to send without a copy:
  // the returned reference keeps this version of the array alive and unchanged (the next write
  // to the stripe goes to another array while it is held). Dense stripes only (one block).
  std::shared_ptr<const float> ShareRows(uint64_t row);

  // Bytes the next ApplyPush of `sel` would copy first because a pull reply still holds the
  // parameters (copy-on-write: every row of the held blocks the selection does not write; for
  // keys an estimate, the held rows beyond their count: more when keys repeat or fall in blocks
  // no reply holds, all of them when a key adds a row).
  // Read only while no update thread works on this stripe.
  size_t CopyOnWriteBytes(const RowSelection& sel) const;
  // Bytes a write may take from the copy-on-write budget: those of every block's array that a
  // pull reply holds with no free spare of the same size beside it to write to (0 when none; an
  // upper bound: a write takes only its blocks'). The I/O thread, which must not wait, adds them
  // up over the stripes a request writes to and hands the request to the update threads when
  // they do not fit. Same caveat.
  size_t WriteBudgetBytes() const;

  size_t num_rows() const { return steps_.size(); }
  // The key lists LocalRows keeps (at most kReusedLists), and their keys in all (at most
  // kMaxReusedKeys).
  size_t kept_lists() const;
  size_t kept_list_keys() const;
  size_t bytes() const;
  // One row's parameters, optimizer slots and step count. The memory limit is charged what a
  // stripe allocates for them (the arrays' capacity, which grows geometrically) and for its key
  // index, as the arrays grow.
  static size_t RowBytes(const TableSpec& spec, int num_slots);

  // Checkpoints (server/checkpoint/shard_file.h) read a stripe's rows as they are, row by row: only while
  // no update thread works on it. Sparse: the key of each row; dense rows are [row_begin, +n).
  std::vector<Key> KeysByRow() const { return index_.KeysByRow(); }
  // Parameters: local row r's, and rows [r, r + n) are contiguous when they are in one block
  // (block_rows() rows from a multiple of it).
  uint64_t block_rows() const { return block_rows_; }
  const float* row_params(size_t r) const { return Row(r); }
  const float* slot(int s) const { return slots_[s].data(); }
  const uint32_t* steps() const { return steps_.data(); }
  // Replaces the stripe's state with rows from a checkpoint (keys: sparse only; slots: one array
  // per optimizer slot; steps: one per row). The caller has checked the shapes; a key given twice
  // is InvalidArgument, rows past the tables' memory limit ResourceExhausted.
  Status Restore(std::vector<Key> keys, FloatArray params, std::vector<std::vector<float>> slots,
                 std::vector<uint32_t> steps);

 private:
  // Local index of a row, creating sparse rows on first touch.
  uint32_t LocalRow(Key key);
  // Sparse: the local row of each of a keyed selection's keys, in selection order, creating rows
  // on first touch (every row a write will touch exists before it starts); valid until the next
  // call; rows_one_run_ then says whether they are consecutive (row i is the first's + i). nullptr
  // for ranges and dense keys (their rows are arithmetic). Key lists recur: a
  // worker pushes gradients for the keys it pulled, and a recurring key set is pushed and pulled
  // every step. A list of kMinReusedKeys to kMaxReusedKeys keys is kept with its rows (the last
  // kReusedLists such lists), and the same list again is matched key by key, sequentially,
  // instead of looked up: the lookups of random keys are one cache miss each.
  const uint32_t* LocalRows(const RowSelection& sel, const Key* keys);
  // After the rows of a list too long to keep were used: their memory goes (4 bytes a key).
  void ReleaseRows() {
    if (rows_scratch_.capacity() > kMaxReusedKeys) std::vector<uint32_t>().swap(rows_scratch_);
  }
  // A block of parameters: its current array, and the spare (see blocks_ below).
  struct Block {
    std::shared_ptr<ParamArray> params;
    std::shared_ptr<ParamArray> spare;
    uint64_t spare_needed_at = 0;  // writes_ when a write last needed the spare
    bool spared = false;           // listed in spared_
    bool lent = false;             // listed in lent_
  };
  float* Row(size_t r) const { return blocks_[r / block_rows_].params->data() + (r % block_rows_) * dim_; }
  size_t BlockSize(size_t b) const { return std::min<size_t>(block_rows_, num_rows() - b * block_rows_); }
  // Before writing block b's parameters: while a pull reply holds its current array (ShareRows),
  // moves to another one, copying every row of the block outside [keep_begin, keep_end) (rows
  // of the block) into it. Returns where rows in that range are to be read from (the held array:
  // the caller writes them out of place), or the current array when nothing holds it. `held`
  // keeps the held array alive until the caller is done reading it (the reply may release it
  // meanwhile).
  // With the budget spent, it first waits for a reply to let go of the current array or the spare.
  const float* BeginWrite(size_t b, uint64_t keep_begin, uint64_t keep_end, std::shared_ptr<ParamArray>* held);
  // A pull reply's reference to block b's current array at `p`: letting go of it wakes a waiting
  // write.
  std::shared_ptr<const float> Lend(size_t b, const float* p);
  static bool SpareFree(const Block& k);
  // Room in the blocks for rows [from, rows), `from` the stripe's row count (the blocks before
  // are full). A block a reply holds is never moved: only the one `from` is in may grow, and it
  // was written first (BeginWrite).
  void ReserveBlocks(size_t from, size_t rows);
  // Drops rows from `rows` on (their blocks keep their room).
  void TruncateRows(size_t rows);
  // The blocks a write (ApplyPush, ApplyAccumulated) writes, each made writable (BeginWrite) before
  // any is written: out of memory for one then leaves the stripe as it was (Undo gives the blocks
  // begun their rows back). Counts a write to the stripe, and after it drops the spares of blocks
  // no write needed in the last kSpareIdleWrites writes per block that has one.
  struct BlockWrites {
    explicit BlockWrites(Stripe* stripe);
    BlockWrites(const BlockWrites&) = delete;
    BlockWrites& operator=(const BlockWrites&) = delete;
    ~BlockWrites();                                                // lets go of the held arrays, then ages the spares
    void Begin(size_t b, uint64_t keep_begin, uint64_t keep_end);  // BeginWrite, once a block
    // Begins the block of each of rows[0, n) (null: a dense stripe's one block), each keeping
    // the stripe's rows [keep_begin, keep_end) that it holds; a throw undoes them first.
    void BeginRows(const uint32_t* rows, size_t n, uint64_t keep_begin, uint64_t keep_end);
    const float* in(size_t b) const { return s->write_in_[b]; }  // where block b's rows are read from
    void Undo();                                                 // after a Begin or TrackRows threw
    // Keyed writes, after BeginRows: which rows of each block moved to another array were
    // written, so that its others are brought over once (CopyUnwritten). Out of memory for that
    // undoes the blocks begun.
    void TrackRows();
    // Rows [r, r + len) of one block moved to another array are written now: returns whether
    // any of them was before (a key given twice), and then first brings over the others of them,
    // so that the run can be read from the new array.
    bool MarkWritten(size_t r, size_t len);
    void CopyUnwritten();  // the rows of the moved blocks that were not written, from the held arrays
    void CopyUnwrittenOf(size_t b, size_t lo, size_t hi);  // block b's rows [lo, hi) not written
    Stripe* const s;
  };
  std::shared_ptr<ParamArray> NewParams(size_t n) const;  // counted against this stripe's budget when not current
  // Adds n rows at their initial values (keys: sparse rows' keys; else first_key on), the arrays'
  // growth charged to the memory limit. Out of memory or past the limit, throws with the stripe
  // as it was.
  void AppendRows(uint64_t first_key, size_t n, const Key* keys);
  // Takes `bytes` from the memory limit for `what`, or throws TableMemoryExhausted.
  void Charge(size_t bytes, const std::string& what);
  void Uncharge(size_t bytes) {  // gives back what a Charge took (its allocation failed)
    memory_->Give(bytes);
    charged_ -= bytes;
  }
  // rows: LocalRows(sel, keys) (nullptr: computed from the range or dense keys). Defined in
  // server/table/stripe_runs.h, which the stripe's sources include.
  template <typename F>
  void ForEachRun(const RowSelection& sel, const Key* keys, const uint32_t* rows, bool match_steps, F&& f,
                  bool by_selection = false);

  const TableSpec spec_;
  const opt::Optimizer* const optimizer_;
  const uint32_t dim_;
  const uint64_t row_begin_;  // dense: first global row of this stripe
  const uint64_t block_rows_;
  // Parameters, per block: shared with pull replies in flight (copy-on-write, see BeginWrite).
  // While pushes land during pull replies, the array last written before is kept as the block's
  // spare for the next switch; it is dropped once kSpareIdleWrites writes to the stripe per block
  // with a spare went by without needing it (so a recurring key set's blocks, each written once
  // in a round of requests, keep theirs), so a block holds the extra copy only while pulls and
  // pushes overlap. Arrays other than the current ones count against the server's copy-on-write
  // budget.
  static constexpr uint32_t kSpareIdleWrites = 8;
  static constexpr size_t kPrefetchAhead = 16;  // LocalRows: index slots asked for ahead
  // Kept lists: at most kReusedLists, of kMaxReusedKeys keys in all (a recurring key set sent
  // in requests of a block each makes one list per block: up to 64 a call, and workers with key
  // sets of their own make their own).
  static constexpr size_t kMinReusedKeys = 128, kMaxReusedKeys = size_t(1) << 20, kReusedLists = 256;
  const std::shared_ptr<CopyOnWriteBudget> budget_;
  const std::shared_ptr<ByteBudget> memory_;  // the server's tables' memory limit
  size_t charged_ = 0;                        // what this stripe's arrays and index took of it
  size_t cap_rows_ = 0;                       // rows the blocks, slots_ and steps_ have room for
  std::vector<Block> blocks_;     // rows [b * block_rows_, +block_rows_) in blocks_[b]; more may be made ahead, empty
  std::vector<uint32_t> lent_;    // blocks lent to a pull reply, maybe still held (pruned by Lend)
  std::vector<uint32_t> spared_;  // blocks with a spare
  uint64_t writes_ = 0;           // writes to the stripe (BlockWrites)
  // ApplyPush, per block it writes: where its rows are read from, and the array that keeps them.
  std::vector<const float*> write_in_;
  std::vector<std::shared_ptr<ParamArray>> write_held_;
  std::vector<uint32_t> written_blocks_;
  std::vector<uint64_t> write_bits_;   // BlockWrites::TrackRows: a bit per row of each moved block
  std::vector<size_t> write_bits_at_;  // per block: where its bits start in write_bits_
  std::vector<std::vector<float>> slots_;
  std::vector<uint32_t> steps_;  // per row: updates applied (lazy Adam bias correction)
  RowIndex index_;               // sparse: id -> local row
  struct KeyList {               // LocalRows: a recent key list and its rows
    std::vector<Key> keys;
    std::vector<uint32_t> rows;
    bool one_run = false;  // rows are consecutive (a key set made in the order it recurs)
    uint64_t last_use = 0;
  };
  bool rows_one_run_ = false;  // LocalRows' last rows are consecutive
  std::vector<KeyList> key_lists_;
  uint64_t key_list_uses_ = 0;
  std::vector<uint32_t> rows_scratch_;  // LocalRows of a list not kept

  struct Accumulator {
    std::vector<float> sum;                          // dim floats per local row touched
    std::vector<uint32_t> rows;                      // local rows, in first-touch order
    std::unordered_map<uint32_t, uint32_t> slot_of;  // local row -> index into rows
    size_t charged = 0;                              // against the tables' memory limit (in charged_ too)
  };
  // A BSP sum's bytes a row: its floats, its row number, an index entry (about).
  size_t SumRowBytes() const { return dim_ * sizeof(float) + sizeof(uint32_t) + 32; }
  void DropSum(Accumulator& acc) {
    Uncharge(acc.charged);
    acc.charged = 0;
  }
  std::map<int64_t, std::map<int, Accumulator>> bsp_;  // clock -> worker -> its sum
};

}  // namespace pushpull::table
