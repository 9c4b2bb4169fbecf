// Stripe::ForEachRun: how the stripe's pushes, reads and BSP sums walk a selection's rows, in runs
// that one optimizer call or one copy handles. A template, defined here for the stripe's sources
// (server/table/stripe.cc, server/table/bsp_sums.cc) to inline into their loops; include it from nowhere else.
//
// Threading: the stripe's (server/table/stripe.h): one thread at a time, no lock.
#pragma once

#include <algorithm>
#include <cstdint>

#include "server/table/stripe.h"

namespace pushpull::table {

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

}  // namespace pushpull::table
