// A transport that delays messages on their way, for tests (beside FaultTransport, which drops,
// delays or duplicates chosen ones): every message that a socket of the chosen kinds receives is
// held back `delay_ms` from its arrival, in order, as a slow hop would hold it.
//
//   // Worker 0's requests to the scheduler reach its I/O thread 300 ms after the call made
//   // them: a client hands them over through an in-process pipe, whose receiving end is kPull.
//   cfg.worker_transport = [](int w) -> std::shared_ptr<Transport> {
//     if (w != 0) return nullptr;
//     return std::make_shared<DelayTransport>(NewZmqTransport(), 300, std::vector{SocketKind::kPull});
//   };
//
// Messages held when their socket goes are lost with it.
//
// Threading: thread-safe, like any Transport; each socket is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/transport.h"

namespace pushpull {

class DelayTransport : public Transport {
 public:
  DelayTransport(std::shared_ptr<Transport> inner, int delay_ms, std::vector<SocketKind> delayed_kinds);

  Result<std::unique_ptr<Socket>> MakeSocket(SocketKind kind, const SocketOptions& options) override;
  int Poll(PollItem* items, size_t n, int64_t timeout_ms) override;

 private:
  class DelaySocket;
  const std::shared_ptr<Transport> inner_;
  const int delay_ms_;
  const std::vector<SocketKind> delayed_kinds_;
};

}  // namespace pushpull
