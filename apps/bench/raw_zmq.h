// The raw ZeroMQ baseline of the transport and zmq_ceiling benches: the same bytes moved the
// same way as pushpull moves them, with nothing of pushpull's in between.
//
// Per server one thread with its own context and one ROUTER bound to tcp://127.0.0.1 (ephemeral
// port); per worker one context and one DEALER per server. "push" sends [op][keys?][payload]
// zero-copy from a preallocated buffer and gets an 8-byte ack; "pull" sends [op][keys?] and gets
// [op][payload] zero-copy from the server's preallocated buffer; "pushpull" does both. The
// payload is split over the S servers as pushpull splits it. Socket buffers are set as pushpull
// sets them (4 MiB SO_SNDBUF/RCVBUF). The received payload is not copied anywhere (neither is a
// pushpull pull).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "apps/bench/harness.h"

namespace pushpull::opt {
class Optimizer;
}  // namespace pushpull::opt

namespace pushpull::bench {

// The first frame of every raw request (and of a pull's reply).
struct RawHeader {
  uint8_t op = 0;  // 0 push, 1 pull
  uint8_t has_keys = 0;
  uint64_t reply_bytes = 0;  // pull: payload bytes to send back
  uint64_t offset = 0;       // where in the server's buffer the request's bytes start (blocks)
};

// The deallocator of a zero-copy frame whose buffer outlives it.
inline void NoFree(void*, void*) {}

// What pushpull's ConfigureSocket() sets that matters for bulk transfer; nothing else of it.
void SetRawSocketOptions(zmq::socket_t& s);

// A raw server: one thread answering requests from its own buffer of floats (1e-3f each).
class RawServer {
 public:
  // sgd: when set, each push's values are applied to the server's buffer with this optimizer's
  // kernel before the ack (pulls then send the updated buffer): the one pass over a gradient a
  // server-side optimizer cannot skip, and nothing else (the zmq_ceiling bench). Not owned.
  explicit RawServer(size_t max_reply_bytes, const opt::Optimizer* sgd = nullptr);
  ~RawServer();
  const std::string& address() const { return address_; }
  // Gradient floats the SGD applied so far (0 without one).
  uint64_t applied_floats() const { return applied_floats_.load(); }

 private:
  void Loop();

  // The socket and buffer belong to the server's thread once it runs.
  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::vector<float> buf_;
  const opt::Optimizer* const sgd_;
  std::atomic<uint64_t> applied_floats_{0};
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One raw client: its own context and one DEALER per server. One worker thread uses it.
class RawClient {
 public:
  explicit RawClient(const std::vector<std::string>& servers);
  std::vector<zmq::socket_t>& dealers() { return dealers_; }

 private:
  zmq::context_t ctx_;
  std::vector<zmq::socket_t> dealers_;
};

// The raw side's driver (harness.h): one worker's operations over its RawClient's dealers.
// Issue() and WaitOldest() are defined here so that RunLoop's calls to them inline, as pushpull's
// driver's do.
class RawDriver {
 public:
  // part_floats[s]: floats to/from server s; keys: key bytes per server part (0: dense).
  // block_bytes > 0 (dense only): each part goes as requests of at most that many bytes, sent
  // one after the other, as pushpull sends a large dense table a block a request.
  RawDriver(RawClient& c, std::vector<size_t> part_floats, std::vector<size_t> part_key_bytes, int64_t wait_ms,
            size_t block_bytes = 0);

  bool Issue(Op op) {
    try {
      for (size_t s = 0; s < d_.size(); ++s) {
        const bool keyed = part_keys_[s] > 0;
        if (op != Op::kPull) {
          size_t at = 0;
          for (size_t block : blocks_[s]) {
            RawHeader h{0, keyed, 0, at};
            at += block;
            zmq::message_t hm(&h, sizeof h);
            d_[s].send(hm, zmq::send_flags::sndmore);
            if (keyed) {
              zmq::message_t km(keys_.data(), part_keys_[s], NoFree, nullptr);
              d_[s].send(km, zmq::send_flags::sndmore);
            }
            zmq::message_t vm(src_.data(), block, NoFree, nullptr);
            d_[s].send(vm, zmq::send_flags::none);
          }
        }
        if (op != Op::kPush) {
          size_t at = 0;
          for (size_t block : blocks_[s]) {
            RawHeader h{1, keyed, block, at};
            at += block;
            zmq::message_t hm(&h, sizeof h);
            d_[s].send(hm, keyed ? zmq::send_flags::sndmore : zmq::send_flags::none);
            if (keyed) {
              zmq::message_t km(keys_.data(), part_keys_[s], NoFree, nullptr);
              d_[s].send(km, zmq::send_flags::none);
            }
          }
        }
      }
    } catch (const zmq::error_t& e) {
      error_ = std::string("raw send: ") + e.what();
      return false;
    }
    q_.push_back(op == Op::kPushPull ? 2 : 1);
    return true;
  }
  bool WaitOldest() {
    if (q_.empty()) return true;
    const int per_block = q_.front();
    q_.pop_front();
    for (size_t s = 0; s < d_.size(); ++s) {
      const int need = per_block * static_cast<int>(blocks_[s].size());
      while (got_[s] < need) {
        // One reply (multipart), received and dropped: the payload is not copied.
        while (true) {
          zmq::message_t m;
          if (!d_[s].recv(m)) {
            error_ = "raw: no reply within " + std::to_string(wait_ms_) + " ms";
            return false;
          }
          if (!m.more()) break;
        }
        ++got_[s];
      }
      got_[s] -= need;
    }
    return true;
  }
  size_t outstanding() const { return q_.size(); }
  // Once every op was waited for: true when no reply is left over, none counted ahead and none
  // arriving within `ms` (a driver that miscounted its block replies would take one op's replies
  // for another's, and no wait would run out to say so).
  bool Idle(int ms);
  std::string error() const { return error_; }

 private:
  std::vector<zmq::socket_t>& d_;
  std::vector<size_t> part_floats_, part_keys_;
  std::vector<std::vector<size_t>> blocks_;  // per server: the bytes of each request's values
  std::vector<int> got_;
  int64_t wait_ms_;
  std::vector<float> src_;
  std::vector<uint64_t> keys_;
  std::deque<int> q_;
  std::string error_;
};

}  // namespace pushpull::bench
