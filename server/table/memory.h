// The limit on the memory a server's tables hold (ServerOptions::max_table_bytes, --max_table_mb):
// a byte count that every stripe of every table charges its rows, key index and BSP sums to, and
// the error a stripe throws when they would go past it.
//
// Threading: a ByteBudget is shared by the server's stripes and taken and given back by its
// update threads and its I/O thread at once: atomics only, no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/cluster.h"

namespace pushpull::table {

// Bytes under a limit, taken and given back by several threads.
class ByteBudget {
 public:
  explicit ByteBudget(size_t limit = std::numeric_limits<size_t>::max()) : limit_(limit) {}
  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  // Takes `bytes` if they fit under the limit.
  bool TryTake(size_t bytes) {
    size_t u = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || u > limit_ - bytes) return false;
    } while (!used_.compare_exchange_weak(u, u + bytes, std::memory_order_relaxed));
    return true;
  }
  // Takes them regardless.
  void Take(size_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void Give(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  // Would taking `bytes` go over the limit?
  bool WouldExceed(size_t bytes) const { return bytes > limit_ || used() > limit_ - bytes; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

// Thrown by a stripe that would take its server's tables past their memory limit
// (ServerOptions::max_table_bytes) to add rows; the stripe is as it was. The server answers the
// request that asked for the rows with ResourceExhausted and goes on.
class TableMemoryExhausted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The error for memory that the tables' limit (`memory`) refuses to `what` of table `spec`.
std::string MemoryRefusal(const TableSpec& spec, const ByteBudget& memory, const std::string& what, size_t bytes);

}  // namespace pushpull::table
