#include "apps/bench/raw_zmq.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "optimizers/optimizer.h"

namespace pushpull::bench {

void SetRawSocketOptions(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 100000);
  s.set(zmq::sockopt::rcvhwm, 100000);
  s.set(zmq::sockopt::sndbuf, 4 << 20);
  s.set(zmq::sockopt::rcvbuf, 4 << 20);
}

RawServer::RawServer(size_t max_reply_bytes, const opt::Optimizer* sgd)
    : router_(ctx_, zmq::socket_type::router), buf_(max_reply_bytes / 4 + 1, 1e-3f), sgd_(sgd) {
  SetRawSocketOptions(router_);
  router_.bind("tcp://127.0.0.1:*");
  address_ = router_.get(zmq::sockopt::last_endpoint);
  thread_ = std::thread([this] { Loop(); });
}

RawServer::~RawServer() {
  stop_ = true;
  thread_.join();
}

void RawServer::Loop() {
  SetThreadName("raw-server");
  std::vector<zmq::message_t> frames;
  while (!stop_) {
    zmq::pollitem_t item{static_cast<void*>(router_), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 50) <= 0) continue;
    for (int i = 0; i < 256; ++i) {
      frames.clear();
      while (true) {
        zmq::message_t m;
        if (!router_.recv(m, zmq::recv_flags::dontwait)) break;
        bool more = m.more();
        frames.push_back(std::move(m));
        if (!more) break;
      }
      if (frames.size() < 2) break;
      RawHeader h;
      std::memcpy(&h, frames[1].data(), std::min(sizeof h, frames[1].size()));
      router_.send(frames[0], zmq::send_flags::sndmore);
      // A request's bytes lie inside the buffer, whatever it asks (a bench, not a server).
      const size_t at = std::min<uint64_t>(h.offset / 4, buf_.size());
      if (h.op == 0) {
        if (sgd_ != nullptr) {
          const zmq::message_t& g = frames.back();
          const size_t n = std::min(g.size() / 4, buf_.size() - at);
          sgd_->ApplyTo(buf_.data() + at, buf_.data() + at, nullptr, static_cast<const float*>(g.data()), n,
                        opt::StepContext{});
          applied_floats_ += n;
        }
        uint64_t ack = 1;
        zmq::message_t a(&ack, sizeof ack);
        router_.send(a, zmq::send_flags::none);
      } else {
        zmq::message_t hm(&h, sizeof h);
        router_.send(hm, zmq::send_flags::sndmore);
        zmq::message_t payload(buf_.data() + at, std::min<uint64_t>(h.reply_bytes, (buf_.size() - at) * 4), NoFree,
                               nullptr);
        router_.send(payload, zmq::send_flags::none);
      }
    }
  }
}

RawClient::RawClient(const std::vector<std::string>& servers) {
  for (auto& a : servers) {
    dealers_.emplace_back(ctx_, zmq::socket_type::dealer);
    SetRawSocketOptions(dealers_.back());
    dealers_.back().set(zmq::sockopt::rcvtimeo, static_cast<int>(kWaitMs));
    dealers_.back().connect(a);
  }
}

RawDriver::RawDriver(RawClient& c, std::vector<size_t> part_floats, std::vector<size_t> part_key_bytes, int64_t wait_ms,
                     size_t block_bytes)
    : d_(c.dealers()),
      part_floats_(std::move(part_floats)),
      part_keys_(std::move(part_key_bytes)),
      got_(d_.size(), 0),
      wait_ms_(wait_ms) {
  for (size_t s = 0; s < part_floats_.size(); ++s) {
    const size_t bytes = part_floats_[s] * 4;
    const size_t block = block_bytes > 0 && part_keys_[s] == 0 ? block_bytes : std::max<size_t>(bytes, 1);
    std::vector<size_t> b;
    for (size_t off = 0; off < bytes; off += block) b.push_back(std::min(block, bytes - off));
    if (b.empty()) b.push_back(0);
    blocks_.push_back(std::move(b));
  }
  for (auto& d : d_) d.set(zmq::sockopt::rcvtimeo, static_cast<int>(wait_ms));
  size_t mx = 0, mk = 0;
  for (auto f : part_floats_) mx = std::max(mx, f);
  for (auto k : part_keys_) mk = std::max(mk, k);
  src_.assign(mx + 1, 1e-3f);
  keys_.assign(mk / 8 + 1, 7);
}

bool RawDriver::Idle(int ms) {
  for (size_t s = 0; s < d_.size(); ++s) {
    zmq::pollitem_t item{static_cast<void*>(d_[s]), 0, ZMQ_POLLIN, 0};
    if (!q_.empty() || got_[s] != 0 || zmq_poll(&item, 1, ms) > 0) {
      error_ = "raw: replies from server " + std::to_string(s) + " left over after the run";
      return false;
    }
  }
  return true;
}

}  // namespace pushpull::bench
