// The ZeroMQ transport (common/transport.h).
#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/transport.h"

namespace pushpull {
namespace {

class ZmqWatch final : public ConnectionWatch {
 public:
  explicit ZmqWatch(zmq::socket_t pair) : pair_(std::move(pair)) {}
  zmq::socket_t& pair() { return pair_; }

  bool Next(ConnectionEvent* event) override {
    while (true) {
      zmq::message_t a, b;
      if (!pair_.recv(a, zmq::recv_flags::dontwait)) return false;
      if (a.size() < sizeof(uint16_t) || !a.more() || !pair_.recv(b)) return false;
      uint16_t code = 0;
      std::memcpy(&code, a.data(), sizeof(code));
      event->endpoint.assign(static_cast<const char*>(b.data()), b.size());
      if (code == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        event->kind = ConnectionEvent::kConnected;
        return true;
      }
      if (code == ZMQ_EVENT_DISCONNECTED) {
        event->kind = ConnectionEvent::kDisconnected;
        return true;
      }
    }
  }

 private:
  zmq::socket_t pair_;  // the PAIR end of the socket's monitor
};

class ZmqSocket final : public Socket {
 public:
  ZmqSocket(zmq::context_t& ctx, SocketKind kind, zmq::socket_t sock)
      : ctx_(ctx), kind_(kind), sock_(std::move(sock)) {}

  SocketKind kind() const override { return kind_; }
  zmq::socket_t& socket() { return sock_; }

  Result<std::string> Bind(const std::string& endpoint) override {
    try {
      sock_.bind(endpoint);
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE)
        return Status::Unavailable("bind " + endpoint + ": " + e.what() +
                                   " (another process listens there: another --port, or 0 for any free one)");
      return Status::Unavailable("bind " + endpoint + ": " + e.what());
    }
    return sock_.get(zmq::sockopt::last_endpoint);
  }

  Status Connect(const std::string& endpoint) override {
    try {
      sock_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      return Status::Unavailable("connect " + endpoint + ": " + e.what());
    }
    return Status::OK();
  }

  Status Disconnect(const std::string& endpoint) override {
    try {
      sock_.disconnect(endpoint);
    } catch (const zmq::error_t& e) {
      return Status::Unavailable("disconnect " + endpoint + ": " + e.what());
    }
    return Status::OK();
  }

  Status Send(Frame* const* frames, size_t n, bool dont_wait, bool* would_block) override {
    *would_block = false;
    try {
      for (size_t i = 0; i < n; ++i) {
        zmq::send_flags flags = i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none;
        // Once the first frame is taken, ZeroMQ takes the rest of the message.
        if (i == 0 && dont_wait) flags = flags | zmq::send_flags::dontwait;
        if (!sock_.send(*frames[i], flags)) {
          if (i == 0) {
            *would_block = true;
            return Status::OK();
          }
          return Status::Unavailable("send would block in the middle of a message");
        }
      }
    } catch (const zmq::error_t& e) {
      return Status::Unavailable(e.what());
    }
    return Status::OK();
  }

  bool Recv(std::vector<Frame>* frames, size_t max_frames, int64_t wait_ms) override {
    frames->clear();
    const bool wait = wait_ms > 0;
    if (wait)  // an option store, no system call (a wait past INT_MAX ms would wrap: clamped)
      sock_.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::min<int64_t>(wait_ms, std::numeric_limits<int>::max())));
    while (true) {
      zmq::message_t m;
      zmq::recv_result_t r;
      try {
        r = sock_.recv(m, wait && frames->empty() ? zmq::recv_flags::none : zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& e) {
        // A signal (SIGTERM, the daemons' stop request) interrupted the wait: nothing received.
        // Only the first frame is waited for, so no message is left half read.
        if (e.num() != EINTR) throw;
        return !frames->empty();
      }
      if (!r) return !frames->empty();
      const bool more = m.more();
      if (frames->size() < max_frames) frames->push_back(std::move(m));
      if (!more) return true;
    }
  }

  Result<std::unique_ptr<ConnectionWatch>> WatchConnections() override {
    static std::atomic<uint64_t> serial{0};
    const std::string ep = "inproc://pp-monitor-" + std::to_string(serial++);
    if (zmq_socket_monitor(sock_.handle(), ep.c_str(), ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
      return Status::Internal(std::string("socket monitor: ") + zmq_strerror(zmq_errno()));
    try {
      zmq::socket_t pair(ctx_, zmq::socket_type::pair);
      pair.set(zmq::sockopt::linger, 0);
      pair.connect(ep);
      return std::unique_ptr<ConnectionWatch>(new ZmqWatch(std::move(pair)));
    } catch (const zmq::error_t& e) {
      return Status::Internal(std::string("socket monitor: ") + e.what());
    }
  }

 private:
  zmq::context_t& ctx_;
  const SocketKind kind_;
  zmq::socket_t sock_;
};

class ZmqTransport final : public Transport {
 public:
  explicit ZmqTransport(int io_threads) : ctx_(std::max(1, io_threads)) {}

  Result<std::unique_ptr<Socket>> MakeSocket(SocketKind kind, const SocketOptions& o) override {
    zmq::socket_type type = zmq::socket_type::dealer;
    switch (kind) {
      case SocketKind::kRouter: type = zmq::socket_type::router; break;
      case SocketKind::kDealer: type = zmq::socket_type::dealer; break;
      case SocketKind::kPush: type = zmq::socket_type::push; break;
      case SocketKind::kPull: type = zmq::socket_type::pull; break;
    }
    try {
      zmq::socket_t sock(ctx_, type);
      sock.set(zmq::sockopt::linger, o.linger_ms);
      sock.set(zmq::sockopt::sndhwm, o.send_hwm);
      sock.set(zmq::sockopt::rcvhwm, o.recv_hwm);
      if (o.network) {
        sock.set(zmq::sockopt::heartbeat_ivl, 1000);
        sock.set(zmq::sockopt::heartbeat_timeout, 10000);
        sock.set(zmq::sockopt::sndbuf, 4 << 20);
        sock.set(zmq::sockopt::rcvbuf, 4 << 20);
      }
      if (kind == SocketKind::kRouter) {
        sock.set(zmq::sockopt::router_mandatory, 1);
        // A peer that reconnects (its TCP connection dropped: a network blip) under the routing
        // id it had takes its place at once, even before this side has noticed the old
        // connection is gone.
        sock.set(zmq::sockopt::router_handover, 1);
      }
      if (o.max_msg_bytes > 0) sock.set(zmq::sockopt::maxmsgsize, o.max_msg_bytes);
      if (!o.routing_id.empty()) sock.set(zmq::sockopt::routing_id, o.routing_id);
      if (!o.reconnect) sock.set(zmq::sockopt::reconnect_ivl, -1);
      return std::unique_ptr<Socket>(new ZmqSocket(ctx_, kind, std::move(sock)));
    } catch (const zmq::error_t& e) {
      return Status::Unavailable(std::string("socket: ") + e.what());
    }
  }

  int Poll(PollItem* items, size_t n, int64_t timeout_ms) override {
    constexpr size_t kOnStack = 32;
    zmq_pollitem_t stack[kOnStack];
    std::vector<zmq_pollitem_t> heap;
    zmq_pollitem_t* z = stack;
    if (n > kOnStack) {
      heap.resize(n);
      z = heap.data();
    }
    for (size_t i = 0; i < n; ++i) {
      zmq::socket_t& target = items[i].socket ? static_cast<ZmqSocket*>(items[i].socket)->socket()
                                              : static_cast<ZmqWatch*>(items[i].watch)->pair();
      z[i] = zmq_pollitem_t{target.handle(), 0, ZMQ_POLLIN, 0};
      items[i].ready = false;
    }
    const int rc = zmq_poll(z, static_cast<int>(n), static_cast<long>(timeout_ms));
    if (rc <= 0) return 0;  // a timeout, or EINTR: a signal arrived
    int ready = 0;
    for (size_t i = 0; i < n; ++i) {
      items[i].ready = (z[i].revents & ZMQ_POLLIN) != 0;
      ready += items[i].ready;
    }
    return ready;
  }

 private:
  zmq::context_t ctx_;
};

}  // namespace

std::shared_ptr<Transport> NewZmqTransport(int io_threads) { return std::make_shared<ZmqTransport>(io_threads); }

}  // namespace pushpull
