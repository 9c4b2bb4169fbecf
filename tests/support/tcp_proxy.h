// A TCP relay for fault tests: it listens on an ephemeral port of 127.0.0.1, connects each
// connection it accepts to its upstream and copies bytes both ways. Cut() drops every current
// connection; later connections are relayed as before. Cut(true) closes only the accepted side
// and leaves the upstream one open and silent, as a network blip often leaves a server's side
// (half-open: the server has not noticed its peer is gone when the peer reconnects).
// Hold() stops relaying one direction or both of the current connections: what is sent that way
// waits in the kernel's buffers, and a Cut() then loses it, as a dropped connection loses what
// was in flight. DropFromUpstream() loses chosen messages from upstream on connections accepted
// after it, whole (ZeroMQ's framing parsed, the stream left valid): as a server's answers are
// lost when it sends them before it has attached a worker's new connection. DropToUpstream() does
// the same the other way: a worker's requests lost with it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace pushpull {

class TcpProxy {
 public:
  TcpProxy() {
    listen_ = BoundSocket(&port_);
    if (listen(listen_, 16) != 0) std::abort();
    if (pipe(wake_) != 0) std::abort();
    thread_ = std::thread([this] { Loop(); });
  }
  ~TcpProxy() {
    stop_ = true;
    Wake();
    thread_.join();
    for (auto& p : pairs_) {
      close(p.first);
      close(p.second);
    }
    for (int fd : silent_) close(fd);
    close(listen_);
    close(wake_[0]);
    close(wake_[1]);
  }
  std::string address() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // A free port of 127.0.0.1 to listen on, as the kernel hands out ephemeral ones.
  static int FreePort() {
    int port = 0;
    close(BoundSocket(&port));
    return port;
  }
  // Where accepted connections go: a "tcp://127.0.0.1:PORT" address.
  void SetUpstream(const std::string& tcp_address) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    upstream_port_ = std::atoi(tcp_address.substr(tcp_address.rfind(':') + 1).c_str());
  }
  std::string upstream() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return "tcp://127.0.0.1:" + std::to_string(upstream_port_);
  }
  // to_upstream: bytes from the accepting side (the client) to upstream; from_upstream: the other
  // way. Until the next Cut(), which ends the hold.
  void Hold(bool to_upstream, bool from_upstream) {
    hold_up_ = to_upstream;
    hold_down_ = from_upstream;
    Wake();
  }
  void Cut(bool half_open = false) {
    half_open_ = half_open;
    cut_ = true;
    Wake();
    // The relay loop polls at least every 100 ms; 5 s without the cut done is a hung loop.
    for (int ms = 0; cut_; ++ms) {
      if (ms > 5000) std::abort();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  int accepted() const { return accepted_; }
  // Each whole message from upstream (its frames' bodies) on connections accepted from now on is
  // passed to drop(), on the relay's thread, with the milliseconds since its connection was
  // accepted: true loses it. ZeroMQ's commands pass unseen.
  using DropFn = std::function<bool(const std::vector<std::string>& frames, int64_t connection_age_ms)>;
  void DropFromUpstream(DropFn drop) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    drop_[1] = std::make_shared<DropFn>(std::move(drop));
  }
  // The same for messages to upstream: as a worker's requests are lost with a connection that
  // drops (or a worker that dies) before they are written.
  void DropToUpstream(DropFn drop) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    drop_[0] = std::make_shared<DropFn>(std::move(drop));
  }

 private:
  // The ZMTP 3 stream one way of one connection: its greeting (64 bytes), then frames (a
  // flags byte: 1 more, 2 long, 4 command; a size of 1 byte, or 8 in network order when long;
  // the body). A message's frames are kept until its last, then relayed or lost whole.
  struct Filter {
    std::shared_ptr<DropFn> drop;
    std::chrono::steady_clock::time_point accepted = std::chrono::steady_clock::now();
    size_t greeting_left = 64;
    std::string unparsed, message;
    std::vector<std::string> frames;
    void Feed(const char* p, size_t n, std::string* out) {
      unparsed.append(p, n);
      size_t pos = std::min(greeting_left, unparsed.size());
      out->append(unparsed, 0, pos);
      greeting_left -= pos;
      while (greeting_left == 0 && unparsed.size() - pos >= 2) {
        const uint8_t flags = uint8_t(unparsed[pos]);
        const size_t head = flags & 2 ? 9 : 2;
        if (unparsed.size() - pos < head) break;
        uint64_t size = 0;
        for (size_t i = 1; i < head; ++i) size = size << 8 | uint8_t(unparsed[pos + i]);
        if (unparsed.size() - pos - head < size) break;
        if (flags & 4) {
          out->append(unparsed, pos, head + size);
        } else {
          message.append(unparsed, pos, head + size);
          frames.push_back(unparsed.substr(pos + head, size));
          if (!(flags & 1)) {
            const auto age = std::chrono::steady_clock::now() - accepted;
            if (!(*drop)(frames, std::chrono::duration_cast<std::chrono::milliseconds>(age).count()))
              out->append(message);
            message.clear();
            frames.clear();
          }
        }
        pos += head + size;
      }
      unparsed.erase(0, pos);
    }
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }
  // A TCP socket bound to an ephemeral port of 127.0.0.1, which *port is set to.
  static int BoundSocket(int* port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    socklen_t n = sizeof a;
    getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
    *port = ntohs(a.sin_port);
    return s;
  }
  void Wake() {
    char c = 1;
    if (write(wake_[1], &c, 1) != 1) std::abort();
  }
  int Upstream() EXCLUDES(mu_) {
    int port;
    {
      MutexLock l(&mu_);
      port = upstream_port_;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(port);
    if (port == 0 || connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(s);
      return -1;
    }
    return s;
  }
  void Drop(size_t i) {
    close(pairs_[i].first);
    close(pairs_[i].second);
    pairs_.erase(pairs_.begin() + i);
    filters_.erase(filters_.begin() + i);
  }
  void Loop() EXCLUDES(mu_) {
    char buf[1 << 16];
    std::string filtered;
    while (!stop_) {
      if (cut_) {
        for (auto& p : pairs_) {
          close(p.first);
          if (half_open_)
            silent_.push_back(p.second);
          else
            close(p.second);
        }
        pairs_.clear();
        filters_.clear();
        hold_up_ = hold_down_ = false;
        cut_ = false;
      }
      std::vector<pollfd> fds{{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (auto& p : pairs_) {
        fds.push_back({p.first, static_cast<short>(hold_up_ ? 0 : POLLIN), 0});
        fds.push_back({p.second, static_cast<short>(hold_down_ ? 0 : POLLIN), 0});
      }
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      if (fds[1].revents) (void)!read(wake_[0], buf, sizeof buf);
      // Relays before accepting: the indexes of fds match pairs_ until then.
      for (size_t i = pairs_.size(); i-- > 0;) {
        bool gone = false;
        for (int side = 0; side < 2 && !gone; ++side) {
          if (!fds[2 + 2 * i + side].revents || (side ? hold_down_ : hold_up_)) continue;
          const int from = side ? pairs_[i].second : pairs_[i].first, to = side ? pairs_[i].first : pairs_[i].second;
          const ssize_t n = read(from, buf, sizeof buf);
          const char* data = buf;
          size_t len = n > 0 ? size_t(n) : 0;
          if (filters_[i][side] && len > 0) {
            filtered.clear();
            filters_[i][side]->Feed(buf, len, &filtered);
            data = filtered.data();
            len = filtered.size();
          }
          bool failed = false;
          for (size_t off = 0; off < len;) {
            const ssize_t w = write(to, data + off, len - off);
            if (w <= 0) {
              failed = true;
              break;
            }
            off += size_t(w);
          }
          gone = n <= 0 || failed;
        }
        if (gone) Drop(i);
      }
      if (fds[0].revents) {
        int c = accept(listen_, nullptr, nullptr);
        if (c < 0) continue;
        int u = Upstream();
        if (u < 0) {
          close(c);
          continue;
        }
        pairs_.emplace_back(c, u);
        {
          MutexLock l(&mu_);
          filters_.emplace_back();
          for (int side = 0; side < 2; ++side)
            if (drop_[side]) {
              filters_.back()[side] = std::make_unique<Filter>();
              filters_.back()[side]->drop = drop_[side];
            }
        }
        ++accepted_;
      }
    }
  }

  int listen_ = -1, port_ = 0, wake_[2] = {-1, -1};
  // What the test's thread sets for the relay loop's next connections. The only lock here.
  mutable Mutex mu_;
  int upstream_port_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<DropFn> drop_[2] GUARDED_BY(mu_);  // to and from upstream (null: nothing dropped)
  // The relay loop's own (the destructor reads them once it has joined the loop):
  std::vector<std::pair<int, int>> pairs_;  // accepted, upstream
  // pairs_'s, to upstream and from it (null: relayed as they come)
  std::vector<std::array<std::unique_ptr<Filter>, 2>> filters_;
  std::vector<int> silent_;  // upstream sides left open by Cut(true)
  std::atomic<bool> stop_{false}, cut_{false}, half_open_{false}, hold_up_{false}, hold_down_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace pushpull
