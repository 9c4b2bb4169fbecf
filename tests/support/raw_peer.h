// A peer that speaks the wire protocol to a live server by hand (an independent ZeroMQ DEALER), for
// tests of what a server does with requests no Client would send.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/wire.h"

namespace pushpull {

// An independent DEALER speaking to a live server, impersonating worker 1.
class RawPeer {
 public:
  // routing_id: named, as a client names its receive socket in every request's reply_to.
  explicit RawPeer(const std::string& address, const std::string& routing_id = "")
      : sock_(ctx_, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    if (!routing_id.empty()) sock_.set(zmq::sockopt::routing_id, routing_id);
    sock_.connect(address);
  }
  void SendRaw(std::vector<zmq::message_t> frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      sock_.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  void Send(const Header& h, const std::vector<Key>& keys, const std::vector<float>& values) {
    std::vector<zmq::message_t> f;
    std::string e = EncodeHeader(h);
    f.emplace_back(e.data(), e.size());
    f.emplace_back(keys.data(), keys.size() * sizeof(Key));
    f.emplace_back(values.data(), values.size() * sizeof(float));
    SendRaw(std::move(f));
  }
  // The next reply, or a Header with type kHeartbeat when none came within the deadline.
  Header Reply(int ms = 5000) {
    Header h;
    zmq::pollitem_t it{static_cast<void*>(sock_), 0, ZMQ_POLLIN, 0};
    Poll(&it, 1, ms);
    if (!(it.revents & ZMQ_POLLIN)) return h;
    std::vector<zmq::message_t> frames;
    RecvFrames(sock_, &frames);
    Message m;
    EXPECT_TRUE(Decode(&frames, &m).ok());
    return m.header;
  }
  bool Silent(int ms = 300) {
    zmq::pollitem_t it{static_cast<void*>(sock_), 0, ZMQ_POLLIN, 0};
    Poll(&it, 1, ms);
    return !(it.revents & ZMQ_POLLIN);
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t sock_;
};

}  // namespace pushpull
