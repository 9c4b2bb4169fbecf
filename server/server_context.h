// What every part of one server reads: its options, its rank once registered, whether it was
// asked to stop, and its counters (server/server.h).
//
// Threading: options are constant; rank is set once by the I/O thread after registration; stop
// and the counters are atomics, read and written from any thread (the metrics thread reads them).
#pragma once

#include <atomic>

#include "server/server.h"

namespace pushpull::server {

struct ServerContext {
  explicit ServerContext(const ServerOptions& o) : options(o) {}
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  const ServerOptions options;
  std::atomic<int> rank{-1};  // -1 before registration
  std::atomic<bool> stop{false};
  ServerStats stats;
};

}  // namespace pushpull::server
