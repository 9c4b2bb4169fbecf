// A peer that speaks the wire protocol to a live server by hand (its own ZeroMQ DEALER, no Client), for
// tests of what a server does with requests no Client would send.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/transport.h"
#include "common/wire.h"

namespace pushpull {

// An independent DEALER speaking to a live server, impersonating worker 1.
class RawPeer {
 public:
  // routing_id: named, as a client names its receive socket in every request's reply_to.
  explicit RawPeer(const std::string& address, const std::string& routing_id = "") {
    SocketOptions o;
    o.linger_ms = 0;
    o.routing_id = routing_id;
    auto sock = transport_->MakeSocket(SocketKind::kDealer, o);
    EXPECT_TRUE(sock.ok()) << sock.status().ToString();
    sock_ = std::move(*sock);
    EXPECT_TRUE(sock_->Connect(address).ok());
  }
  void SendRaw(std::vector<Frame> frames) {
    std::vector<Frame*> parts;
    for (Frame& f : frames) parts.push_back(&f);
    bool would_block = false;
    EXPECT_TRUE(sock_->Send(parts.data(), parts.size(), /*dont_wait=*/false, &would_block).ok());
  }
  void Send(const Header& h, const std::vector<Key>& keys, const std::vector<float>& values) {
    std::vector<Frame> f;
    std::string e = EncodeHeader(h);
    f.emplace_back(e.data(), e.size());
    f.emplace_back(keys.data(), keys.size() * sizeof(Key));
    f.emplace_back(values.data(), values.size() * sizeof(float));
    SendRaw(std::move(f));
  }
  // The next reply, or a Header with type kHeartbeat when none came within the deadline.
  Header Reply(int ms = 5000) {
    Header h;
    std::vector<Frame> frames;
    if (!sock_->Recv(&frames, 8, ms)) return h;
    Message m;
    EXPECT_TRUE(Decode(&frames, &m).ok());
    return m.header;
  }
  bool Silent(int ms = 300) {
    PollItem it(sock_.get());
    transport_->Poll(&it, 1, ms);
    return !it.ready;
  }

 private:
  const std::shared_ptr<Transport> transport_ = NewZmqTransport();
  std::unique_ptr<Socket> sock_;
};

}  // namespace pushpull
