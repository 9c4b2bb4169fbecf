// A TCP relay for fault tests: it listens on an ephemeral port of 127.0.0.1, connects each
// connection it accepts to its upstream and copies bytes both ways. Cut() drops every current
// connection; later connections are relayed as before. Cut(true) closes only the accepted side
// and leaves the upstream one open and silent, as a network blip often leaves a server's side
// (half-open: the server has not noticed its peer is gone when the peer reconnects).
// Hold() stops relaying one direction or both of the current connections: what is sent that way
// waits in the kernel's buffers, and a Cut() then loses it, as a dropped connection loses what
// was in flight.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  void SetUpstream(const std::string& tcp_address) {
    std::lock_guard<std::mutex> l(mu_);
    upstream_port_ = std::atoi(tcp_address.substr(tcp_address.rfind(':') + 1).c_str());
  }
  std::string upstream() const {
    std::lock_guard<std::mutex> l(mu_);
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

 private:
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
  int Upstream() {
    int port;
    {
      std::lock_guard<std::mutex> l(mu_);
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
  }
  void Loop() {
    char buf[1 << 16];
    while (!stop_) {
      if (cut_) {
        for (auto& p : pairs_) {
          close(p.first);
          if (half_open_) silent_.push_back(p.second);
          else close(p.second);
        }
        pairs_.clear();
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
          ssize_t n = read(from, buf, sizeof buf);
          for (ssize_t off = 0; n > 0 && off < n;) {
            ssize_t w = write(to, buf + off, n - off);
            if (w <= 0) {
              n = -1;
              break;
            }
            off += w;
          }
          gone = n <= 0;
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
        ++accepted_;
      }
    }
  }

  int listen_ = -1, port_ = 0, wake_[2] = {-1, -1};
  mutable std::mutex mu_;
  int upstream_port_ = 0;
  std::vector<std::pair<int, int>> pairs_;  // accepted, upstream: the loop's only
  std::vector<int> silent_;                 // upstream sides left open by Cut(true)
  std::atomic<bool> stop_{false}, cut_{false}, half_open_{false}, hold_up_{false}, hold_down_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace pushpull
