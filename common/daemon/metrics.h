// Metrics for monitoring: a daemon's counters and gauges in the Prometheus text format, served
// over HTTP at /metrics (`--metrics_port`) for a Prometheus server, or anything that reads text,
// to scrape. No dependency beyond ZeroMQ: the endpoint is a ZMQ_STREAM socket, which speaks raw
// TCP, on a thread of its own, so the daemon's request loop never looks at it.
//
// Threading: MetricsText is a plain value. MetricsEndpoint calls `render` on its own thread, one
// request at a time: render must only read what is safe to read from another thread (atomics,
// or a snapshot under a lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pushpull/status.h"

namespace pushpull {

// Builds one exposition: each metric's HELP and TYPE lines once, then its samples.
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]*; label values are escaped here.
class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  void Counter(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  void Gauge(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  // A histogram from per-bucket (not cumulative) counts: counts[i] of observations equal to
  // bounds[i] or, past the last bound, larger (the +Inf bucket); sum: of all observations.
  void Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum, const Labels& labels = {});
  const std::string& str() const { return out_; }

 private:
  void Head(const std::string& name, const std::string& help, const char* type);
  void Sample(const std::string& name, const Labels& labels, double value);
  std::string out_;
  std::string last_head_;
};

// "a\"b\\c\nd" for a label value a"b\c<newline>d.
std::string EscapeLabelValue(const std::string& v);

// Serves GET /metrics (and HEAD) with what `render` returns, over HTTP/1.0: one request per
// connection, answered and closed. Anything else gets its HTTP error (404 for another path, 405
// for another method, 400 for a request line it cannot read, 431 for headers over 8 KiB) and the
// connection closed; a slow or silent client holds a slot at most 10 s, and at most 64 slots are
// held (the oldest goes first). Nothing a client sends can stop the daemon or its serving.
class MetricsEndpoint {
 public:
  ~MetricsEndpoint();  // stops serving (at most 100 ms)
  // Binds tcp://host:port (port 0: a free one) and starts serving. host: an interface address,
  // or 0.0.0.0 for all.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const std::string& host, int port,
                                                        std::function<std::string()> render);
  int port() const { return port_; }
  uint64_t requests() const { return requests_.load(); }  // answered, whatever status

  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr size_t kMaxConnections = 64;
  static constexpr int64_t kIdleMs = 10000;

 private:
  MetricsEndpoint() = default;
  void Loop();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::function<std::string()> render_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requests_{0};
  std::thread thread_;
};

// The answer to one HTTP request's head (its bytes up to the blank line): status line, headers
// and body. `render` is called only for GET or HEAD /metrics (HEAD: the body left out).
std::string HttpAnswer(const std::string& head, const std::function<std::string()>& render);

}  // namespace pushpull
