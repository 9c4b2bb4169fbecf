// Bench "transport": pushpull's data path against real servers over tcp loopback on this
// machine, next to a raw ZeroMQ baseline that moves the same bytes the same way, measured in the
// same run.
//
// pushpull side: a LocalCluster (scheduler + S servers as threads of this process, one update
// thread each, W clients). Tables are ASP with SGD so that neither consistency waits nor a heavy
// optimizer dominate. Dense cases PushDense/PullDense a whole table of the payload's size
// (dim 256 up to 1 MB, dim 1024 above); sparse cases Push/Pull fixed random u64 keys (dim 64)
// of a sparse table, in the order the servers hold them (Client::GroupByServer, what the library
// asks of a recurring key set); with more than one server, also in the order they were drawn
// ("sparse_ungrouped_" figures: the client gathers each server's rows). Pushes send one warm
// shared buffer zero-copy and pulls are read in place (PullDenseView, PullView).
//
// Raw baseline: per server one thread with its own context and one ROUTER bound to
// tcp://127.0.0.1 (ephemeral port); per worker one thread with its own context and one DEALER
// per server. "push" sends [op][keys?][payload] zero-copy from a preallocated buffer and gets an
// 8-byte ack; "pull" sends [op][keys?] and gets [op][payload] zero-copy from the server's
// preallocated buffer; "pushpull" does both. The payload is split over the S servers like
// pushpull splits it. Socket buffers are set as pushpull sets them (4 MiB SO_SNDBUF/RCVBUF).
// The received payload is not copied anywhere (neither is a pushpull pull).
//
// Both sides: warm-up iterations first; latency runs wait for each op before the next (p50/p99
// over all workers' samples); throughput runs keep up to `depth` ops in flight per worker
// (4 up to 1 MB, 2 above), and count bytes of float payload (push-then-pull counts both
// directions) over the span from the first worker's start to the last worker's end.
// GB/s = 1e9 bytes/s; sizes are binary (1MB = 2^20 bytes).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/log.h"
#include "common/memory.h"
#include "apps/bench/bench.h"
#include "tests/support/local_cluster.h"
#include "optimizers/optimizer.h"

namespace pushpull::bench {
namespace {

constexpr int64_t kWaitMs = 20000;  // every wait is bounded (data-path waits: see CaseWaitMs)
// LocalCluster's 1.5 s default declares a server dead here under 64 MB x 4 workers: its heartbeat
// goes out from the same I/O thread that moves the data (reported; not what this bench measures).
constexpr int kHeartbeatTimeoutMs = 10000;
constexpr size_t kKB = 1024, kMB = 1024 * 1024;

enum class Op { kPush = 0, kPull = 1, kPushPull = 2 };
const char* OpName(Op op) {
  switch (op) {
    case Op::kPush: return "push";
    case Op::kPull: return "pull";
    case Op::kPushPull: return "pushpull";
  }
  return "?";
}

std::string SizeName(size_t bytes) {
  if (bytes >= kMB) return std::to_string(bytes / kMB) + "MB";
  return std::to_string(bytes / kKB) + "KB";
}

// A reusable barrier whose wait is bounded (a failed thread still arrives).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Arrive() {
    std::unique_lock<std::mutex> l(mu_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait_for(l, std::chrono::milliseconds(kWaitMs), [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

// How one measured run goes.
struct Plan {
  bool serial = true;   // latency: wait for each op before the next
  int depth = 1;        // throughput: ops in flight per worker
  int warmup = 2;       // unmeasured ops first
  int min_iters = 3;    // measured ops per worker, at least ...
  int max_iters = 100000;
  double budget_s = 0.2;  // ... and until this much time has passed
};

struct WorkerResult {
  bool ok = true;
  std::string error;
  int64_t n = 0;
  double t0 = 0, t1 = 0;
  std::vector<double> lat_us;
};

struct RunResult {
  bool ok = true;
  std::string error;
  double gbps = 0;  // aggregate over workers
  double p50_us = 0, p99_us = 0;
  int64_t ops = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

// The ratios of the alternating pairs of runs, for the note: the figure's ratio is best over
// best, and the pairs say how far single runs spread around it on this machine.
std::string PairNote(std::vector<double> r) {
  if (r.empty()) return "";
  std::sort(r.begin(), r.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, ", pair ratios %.2f / %.2f / %.2f (min / median / max)", r.front(),
                r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2, r.back());
  return buf;
}

// Driver interface (duck-typed): bool Issue(Op); bool WaitOldest(); size_t outstanding();
// std::string error().
template <class Driver>
WorkerResult RunLoop(Driver& d, Op op, const Plan& p, Barrier& bar) {
  WorkerResult r;
  auto fail = [&]() {
    r.ok = false;
    r.error = d.error();
  };
  for (int i = 0; i < p.warmup && r.ok; ++i)
    if (!d.Issue(op) || !d.WaitOldest()) fail();
  bar.Arrive();
  if (!r.ok) return r;
  r.t0 = Now();
  while (r.ok && (r.n < p.min_iters || (r.n < p.max_iters && Now() - r.t0 < p.budget_s))) {
    if (p.serial) {
      const double ts = Now();
      if (!d.Issue(op) || !d.WaitOldest()) {
        fail();
        break;
      }
      r.lat_us.push_back((Now() - ts) * 1e6);
    } else {
      if (!d.Issue(op)) {
        fail();
        break;
      }
      if (static_cast<int>(d.outstanding()) >= p.depth && !d.WaitOldest()) {
        fail();
        break;
      }
    }
    ++r.n;
  }
  while (r.ok && d.outstanding() > 0)
    if (!d.WaitOldest()) fail();
  r.t1 = Now();
  return r;
}

// Runs fn(w) -> WorkerResult on W threads and aggregates.
template <class Fn>
RunResult RunWorkers(int W, double bytes_per_op, Fn&& fn, std::vector<double>* lat_pool = nullptr) {
  std::vector<WorkerResult> res(W);
  std::vector<std::thread> th;
  for (int w = 0; w < W; ++w) th.emplace_back([&, w] { res[w] = fn(w); });
  for (auto& t : th) t.join();
  RunResult out;
  double t0 = 1e300, t1 = 0;
  std::vector<double> lat;
  for (auto& r : res) {
    if (!r.ok) {
      out.ok = false;
      if (out.error.empty()) out.error = r.error;
      continue;
    }
    t0 = std::min(t0, r.t0);
    t1 = std::max(t1, r.t1);
    out.ops += r.n;
    lat.insert(lat.end(), r.lat_us.begin(), r.lat_us.end());
  }
  if (!out.ok) return out;
  out.gbps = bytes_per_op * out.ops / std::max(1e-9, t1 - t0) / 1e9;
  if (lat_pool) lat_pool->insert(lat_pool->end(), lat.begin(), lat.end());
  out.p50_us = Percentile(lat, 0.50);
  out.p99_us = Percentile(lat, 0.99);
  return out;
}

// ---------------------------------------------------------------------------------------------
// pushpull side

struct TableSet {
  std::vector<Table> per_worker;  // the same table as each client knows it
  size_t floats = 0;
  uint32_t dim = 0;
  std::vector<Key> keys;  // sparse
};

class PushPullDriver {
 public:
  // keys: a sparse case's key set (shared: sent zero-copy, as the raw baseline sends its keys);
  // null for a dense table.
  PushPullDriver(Client& c, const Table& t, size_t floats, Client::KeyBuffer keys, int bufs,
                 int64_t wait_ms)
      : c_(c), t_(t), keys_(std::move(keys)), wait_ms_(wait_ms),
        src_(std::make_shared<const std::vector<float>>(floats, 1e-3f)),
        views_(std::max(bufs, 1)) {}  // one per op in flight: a slot is reused once its op is done
  // Pulls still in flight land in views_: wait for them (a Future whose wait expires is
  // abandoned: the client then drops its reply).
  ~PushPullDriver() {
    for (auto& fs : q_)
      for (auto& f : fs) f.WaitFor(100).IgnoreError();
  }

  bool Issue(Op op) {
    std::vector<Future> fs;
    if (op != Op::kPull) {
      // A warm shared gradient buffer, sent zero-copy (as the raw baseline sends its buffer).
      fs.push_back(keys_ ? c_.Push(t_, keys_, src_) : c_.PushDense(t_, src_));
    }
    if (op != Op::kPush) {
      PulledRows* view = &views_[slot_];
      slot_ = (slot_ + 1) % views_.size();
      // The zero-copy views (values read in place, as the raw baseline reads its frames).
      fs.push_back(keys_ ? c_.PullView(t_, keys_, view) : c_.PullDenseView(t_, view));
    }
    q_.push_back(std::move(fs));
    return true;
  }
  bool WaitOldest() {
    if (q_.empty()) return true;
    std::vector<Future> fs = std::move(q_.front());
    q_.pop_front();
    for (auto& f : fs) {
      Status st = f.WaitFor(wait_ms_);
      if (!st.ok()) {
        error_ = st.ToString();
        for (auto& g : fs) g.WaitFor(100).IgnoreError();  // abandon the rest of this op
        return false;
      }
    }
    return true;
  }
  size_t outstanding() const { return q_.size(); }
  std::string error() const { return error_; }

 private:
  Client& c_;
  Table t_;
  const Client::KeyBuffer keys_;
  const int64_t wait_ms_;
  std::shared_ptr<const std::vector<float>> src_;
  std::vector<PulledRows> views_;
  size_t slot_ = 0;
  std::deque<std::vector<Future>> q_;
  std::string error_;
};

// ---------------------------------------------------------------------------------------------
// raw ZeroMQ side

struct RawHeader {
  uint8_t op = 0;  // 0 push, 1 pull
  uint8_t has_keys = 0;
  uint64_t reply_bytes = 0;  // pull: payload bytes to send back
  uint64_t offset = 0;       // where in the server's buffer the request's bytes start (blocks)
};

void NoFree(void*, void*) {}

void SetRawSocketOptions(zmq::socket_t& s) {
  // What ConfigureSocket() sets that matters for bulk transfer; nothing else of pushpull.
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 100000);
  s.set(zmq::sockopt::rcvhwm, 100000);
  s.set(zmq::sockopt::sndbuf, 4 << 20);
  s.set(zmq::sockopt::rcvbuf, 4 << 20);
}

class RawServer {
 public:
  // sgd: when set, each push's values are applied to the server's buffer with this optimizer's
  // kernel before the ack (pulls then send the updated buffer): the one pass over a gradient a
  // server-side optimizer cannot skip, and nothing else (the "ceiling" bench below).
  explicit RawServer(size_t max_reply_bytes, const opt::Optimizer* sgd = nullptr)
      : router_(ctx_, zmq::socket_type::router), buf_(max_reply_bytes / 4 + 1, 1e-3f), sgd_(sgd) {
    SetRawSocketOptions(router_);
    router_.bind("tcp://127.0.0.1:*");
    address_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~RawServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }
  // Gradient floats the SGD applied so far (0 without one).
  uint64_t applied_floats() const { return applied_floats_.load(); }

 private:
  void Loop() {
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

  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::vector<float> buf_;
  const opt::Optimizer* const sgd_;
  std::atomic<uint64_t> applied_floats_{0};
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One raw client: its own context and one DEALER per server.
class RawClient {
 public:
  explicit RawClient(const std::vector<std::string>& servers) {
    for (auto& a : servers) {
      dealers_.emplace_back(ctx_, zmq::socket_type::dealer);
      SetRawSocketOptions(dealers_.back());
      dealers_.back().set(zmq::sockopt::rcvtimeo, static_cast<int>(kWaitMs));
      dealers_.back().connect(a);
    }
  }
  std::vector<zmq::socket_t>& dealers() { return dealers_; }

 private:
  zmq::context_t ctx_;
  std::vector<zmq::socket_t> dealers_;
};

class RawDriver {
 public:
  // part_floats[s]: floats to/from server s; keys: key bytes per server part (0: dense).
  // block_bytes > 0 (dense only): each part goes as requests of at most that many bytes, sent
  // one after the other, as pushpull sends a large dense table a block a request.
  RawDriver(RawClient& c, std::vector<size_t> part_floats, std::vector<size_t> part_key_bytes,
            int64_t wait_ms, size_t block_bytes = 0)
      : d_(c.dealers()), part_floats_(std::move(part_floats)), part_keys_(std::move(part_key_bytes)),
        got_(d_.size(), 0), wait_ms_(wait_ms) {
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
  bool Idle(int ms) {
    for (size_t s = 0; s < d_.size(); ++s) {
      zmq::pollitem_t item{static_cast<void*>(d_[s]), 0, ZMQ_POLLIN, 0};
      if (!q_.empty() || got_[s] != 0 || zmq_poll(&item, 1, ms) > 0) {
        error_ = "raw: replies from server " + std::to_string(s) + " left over after the run";
        return false;
      }
    }
    return true;
  }
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

// ---------------------------------------------------------------------------------------------

TableSpec MakeSpec(const std::string& name, bool sparse, uint64_t rows, uint32_t dim,
                   opt::Kind kind, Consistency c) {
  TableSpec s;
  s.name = name;
  s.sparse = sparse;
  s.rows = sparse ? 0 : rows;
  s.dim = dim;
  s.init = InitKind::kZeros;
  s.optimizer.kind = kind;
  s.optimizer.lr = 1e-4f;
  s.consistency = c;
  return s;
}

Consistency Asp() {
  Consistency c;
  c.model = Consistency::kAsp;
  return c;
}

// The in-process cluster every case runs on: S servers with K update threads each (1: what a
// server defaults to on this 2-core machine), W workers.
LocalClusterConfig BenchCluster(int S, int W, int K = 1) {
  LocalClusterConfig lc;
  lc.servers = S;
  lc.workers = W;
  lc.update_threads = K;
  lc.request_timeout_ms = static_cast<int>(kWaitMs);
  lc.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
  return lc;
}

std::string ShapeName(int S, int W) { return std::to_string(S) + "s" + std::to_string(W) + "w"; }

// What a case moves: a dense table, or a sparse one with its keys in server order (as
// GroupByServer leaves them) or in the order they were drawn.
enum class Layout { kDense, kSparse, kSparseUngrouped };
std::string LayoutPrefix(Layout l) {
  return l == Layout::kDense ? "" : l == Layout::kSparse ? "sparse_" : "sparse_ungrouped_";
}

struct Shape {
  int S, W;
  bool sparse;  // also the sparse cases for this shape
};

struct Config {
  bool quick = false;
  std::vector<size_t> sizes;
  std::vector<size_t> sparse_sizes;
  std::vector<size_t> ungrouped_sizes;  // sparse shapes with S > 1: keys in the order drawn too
  std::vector<Shape> shapes;
  double budget_s = 0.2;      // per repetition, throughput runs
  double lat_budget_s = 0.1;  // per repetition, latency runs
  int reps = 4;           // pushpull/raw repetitions, alternating
  int ssp_iters_max = 400;
  // Profiling aid (env PP_TRANSPORT_PROFILE=OP/SIZE/SsWw[/raw|/raw_sgd], e.g. pushpull/16MB/1s1w,
  // pull_p50/4KB/2s2w or sparse_pushpull/1MB/1s1w): only that throughput (or latency) run, pushpull side (or raw side,
  // or raw with servers that apply each push with SGD, as in the zmq_ceiling bench), for
  // budget_s; no RSS, no SSP.
  int profile_op = -1;
  bool profile_raw = false;
  bool profile_raw_sgd = false;  // side "raw_sgd": the raw servers apply each push with SGD (zmq_ceiling)
  bool profile_latency = false;  // OP_p50: one op at a time, p50 latency
  int profile_update_threads = 1;  // env PP_TRANSPORT_PROFILE_K: update threads per server
  double ssp_budget_s = 2.0;
};

Plan LatencyPlan(const Config& cfg, size_t bytes) {
  Plan p;
  p.serial = true;
  p.warmup = bytes >= 16 * kMB ? 1 : (bytes >= kMB ? 3 : 30);
  p.min_iters = bytes >= 64 * kMB ? 2 : (bytes >= 16 * kMB ? 3 : 5);
  p.budget_s = cfg.lat_budget_s;
  return p;
}
Plan ThroughputPlan(const Config& cfg, size_t bytes) {
  Plan p = LatencyPlan(cfg, bytes);
  p.budget_s = cfg.budget_s;
  p.serial = false;
  p.depth = bytes > kMB ? 2 : 4;
  return p;
}

struct Measured {
  RunResult r[3];        // throughput by Op
  RunResult lat[2];      // latency: push, pull
};

// Pull runs of drivers a and b, alternating `reps` times, which goes first alternating too
// (ABBA); best[0] and best[1] get each one's best throughput. Returns the first error, or "".
template <class A, class B>
std::string BestOfAlternatingPulls(A& a, B& b, const Plan& plan, size_t bytes, int reps, double best[2]) {
  Barrier bar(1);
  for (int rep = 0; rep < reps; ++rep) {
    for (int side : {rep % 2, 1 - rep % 2}) {
      RunResult r = side == 0 ? RunWorkers(1, double(bytes), [&](int) { return RunLoop(a, Op::kPull, plan, bar); })
                              : RunWorkers(1, double(bytes), [&](int) { return RunLoop(b, Op::kPull, plan, bar); });
      if (!r.ok) return r.error;
      best[side] = std::max(best[side], r.gbps);
    }
  }
  return "";
}

// Starts the cluster and creates a dense table of `bytes` (dim 1024) through its first client.
Result<Table> StartWithDenseTable(LocalCluster& cl, const std::string& name, size_t bytes) {
  const uint32_t dim = 1024;
  Status st = cl.Start();
  if (!st.ok()) return st;
  return cl.client(0).CreateTable(MakeSpec(name, false, bytes / 4 / dim, dim, opt::Kind::kSgd, Asp()));
}

// The SGD of the transport bench's tables (MakeSpec's), for raw servers that apply pushes.
const opt::Optimizer* BenchSgd() {
  static const std::unique_ptr<opt::Optimizer> sgd =
      opt::Optimizer::Create(MakeSpec("sgd", false, 1, 1, opt::Kind::kSgd, Asp()).optimizer);
  return sgd.get();
}

// A bench's figures: reported as they are measured, and kept for the summary it prints last.
class FigureLog {
 protected:
  FigureLog(Reporter& rep, const char* bench) : rep_(rep), bench_(bench) {}
  void Add(const std::string& name, const std::string& unit, double value, double baseline,
           const std::string& note) {
    Figure f;
    f.bench = bench_;
    f.name = name;
    f.unit = unit;
    f.value = value;
    f.baseline = baseline;
    f.note = note;
    rep_.Add(f);
    figures_.push_back(f);
  }
  std::vector<Figure> figures_;  // this run's, for the summary

 private:
  Reporter& rep_;
  const char* const bench_;
};

// Runs one case (a table of `bytes`) on both sides and reports its figures.
class TransportBench : public FigureLog {
 public:
  TransportBench(Reporter& rep, const Config& cfg) : FigureLog(rep, "transport"), cfg_(cfg) {}

  void Run() {
    SetLogLevel(LogLevel::kWarning);
    const double t0 = Now();
    if (cfg_.profile_op >= 0) {
      for (const Shape& sh : cfg_.shapes) RunShape(sh);
      return;
    }
    RunRss(16 * kMB);
    RunRss(64 * kMB);
    for (const Shape& sh : cfg_.shapes) RunShape(sh);
    RunSplitPull();
    RunStripedPull();
    RunStripedSparsePull();
    RunSsp();
    SetLogLevel(LogLevel::kInfo);
    std::fprintf(stderr, "transport bench: %.1f s\n", Now() - t0);
    PrintGoals();
  }

 private:
  // The data-path goals (issue 5, docs/PERFORMANCE.md), checked against this run's figures.
  void PrintGoals() const {
    struct Tally {
      int met = 0, n = 0, failed = 0;
      double worst = NAN;
      std::string worst_case;
    };
    auto tally = [&](const std::string& prefix, const std::vector<std::string>& sizes, bool lower_is_better,
                     double goal) {
      Tally t;
      for (const Figure& f : figures_) {
        if (f.name.rfind(prefix, 0) != 0) continue;
        const std::string size = f.name.substr(prefix.size(), f.name.find('/', prefix.size()) - prefix.size());
        if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) continue;
        ++t.n;
        if (f.baseline <= 0 || !std::isfinite(f.value)) {  // a side failed: not met, and said so
          ++t.failed;
          continue;
        }
        const double r = f.value / f.baseline;
        if (lower_is_better ? r <= goal : r >= goal) ++t.met;
        if (std::isnan(t.worst) || (lower_is_better ? r > t.worst : r < t.worst)) t.worst = r, t.worst_case = f.name;
      }
      return t;
    };
    auto line = [](const char* what, const Tally& t) {
      if (t.n == 0) return;
      std::fprintf(stderr, "  %-52s %2d of %2d met (worst %.2f, %s)%s\n", what, t.met, t.n, t.worst, t.worst_case.c_str(),
                   t.failed ? (", " + std::to_string(t.failed) + " FAILED").c_str() : "");
    };
    const std::vector<std::string> large{"1MB", "16MB", "64MB"};
    std::fprintf(stderr, "\ntransport goals (issue 5), this run:\n");
    line("push-then-pull >= 0.8 x raw, dense, 1 MB and up", tally("pushpull/", large, false, 0.8));
    line("push-then-pull >= 0.8 x raw, sparse, 1 MB and up", tally("sparse_pushpull/", large, false, 0.8));
    line("  the same, sparse keys in the order drawn (no goal)", tally("sparse_ungrouped_pushpull/", large, false, 0.8));
    line("4 KB pull p50 <= 1.3 x raw round trip, dense", tally("pull_p50/", {"4KB"}, true, 1.3));
    line("4 KB pull p50 <= 1.3 x raw round trip, sparse", tally("sparse_pull_p50/", {"4KB"}, true, 1.3));
    for (const Figure& f : figures_) {
      const double r = f.baseline > 0 ? f.value / f.baseline : NAN;
      if (f.name == "pull_2s_vs_1s/16MB/1w")
        std::fprintf(stderr, "  %-52s %.2f x (%s)\n", "16 MB dense pull, 2 servers beat 1", r, r > 1.0 ? "met" : "not met");
      if (f.name == "pull_3stripes/16MB/1s1w")
        std::fprintf(stderr, "  %-52s %.2f x raw (zero-copy: a frame per stripe)\n", "16 MB dense pull, 3 update threads", r);
      if (f.name == "sparse_pull_3stripes/16MB/1s1w")
        std::fprintf(stderr, "  %-52s %.2f x raw (zero-copy: a frame per stripe a request)\n", "16 MB sparse pull, 3 update threads", r);
      if (f.name.rfind("server_rss_adam/", 0) == 0 && f.name != "server_rss_adam/16M") {
        // The same goal without choosing the fixed part: what each float more costs, between
        // this N and 16M floats (the overhead, whatever it is, drops out).
        for (const Figure& g : figures_)
          if (g.name == "server_rss_adam/16M" && f.baseline > g.baseline)
            std::fprintf(stderr, "  %-52s %.3f x 4 bytes per float more (%s)\n",
                         ("RSS slope, 16M to " + f.name.substr(16) + " floats").c_str(),
                         (f.value - g.value) / (f.baseline - g.baseline),
                         (f.value - g.value) / (f.baseline - g.baseline) <= 3.2 ? "met" : "not met");
      }
      if (f.name.rfind("server_rss_adam", 0) == 0) {
        // The fixed overhead: the server's copy-on-write budget, whatever N.
        const double fixed = double(ServerOptions().copy_on_write_budget_bytes);
        const double over = f.value - 3.2 * f.baseline;
        std::fprintf(stderr, "  %-52s %.3f x 4N, 3.2 x 4N %+.1f MiB (%s; fixed: the %.0f MiB copy-on-write budget)\n",
                     ("RSS <= 3.2 x 4N + fixed: " + f.name).c_str(), r, over / kMB,
                     over <= fixed ? "met" : "not met", fixed / kMB);
      }
    }
  }

  void RunShape(const Shape& sh) {
    const LocalClusterConfig lc = BenchCluster(sh.S, sh.W, cfg_.profile_update_threads);
    LocalCluster cl(lc);
    Status st = cl.Start();
    if (!st.ok()) {
      std::fprintf(stderr, "transport: cluster %s failed to start: %s\n",
                   ShapeName(sh.S, sh.W).c_str(), st.ToString().c_str());
      return;
    }
    size_t max_bytes = 0;
    for (auto b : cfg_.sizes) max_bytes = std::max(max_bytes, b);
    if (sh.sparse)
      for (auto b : cfg_.sparse_sizes) max_bytes = std::max(max_bytes, b);
    if (sh.sparse && sh.S > 1)
      for (auto b : cfg_.ungrouped_sizes) max_bytes = std::max(max_bytes, b);
    {
      std::vector<std::unique_ptr<RawServer>> servers;
      std::vector<std::string> addrs;
      for (int s = 0; s < sh.S; ++s) {
        // pull replies of a sparse part can be a little over bytes/S (uneven buckets)
        servers.push_back(std::make_unique<RawServer>(max_bytes / sh.S + max_bytes / 8 + 4096,
                                                      cfg_.profile_raw_sgd ? BenchSgd() : nullptr));
        addrs.push_back(servers.back()->address());
      }
      std::vector<std::unique_ptr<RawClient>> raw_clients;
      for (int w = 0; w < sh.W; ++w) raw_clients.push_back(std::make_unique<RawClient>(addrs));

      for (size_t bytes : cfg_.sizes) RunCase(cl, sh, raw_clients, bytes, Layout::kDense);
      if (sh.sparse) {
        for (size_t bytes : cfg_.sparse_sizes) RunCase(cl, sh, raw_clients, bytes, Layout::kSparse);
        if (sh.S > 1)
          for (size_t bytes : cfg_.ungrouped_sizes) RunCase(cl, sh, raw_clients, bytes, Layout::kSparseUngrouped);
      }
      raw_clients.clear();
      servers.clear();
    }
    st = cl.FinishAndJoin();
    if (!st.ok())
      std::fprintf(stderr, "transport: cluster %s did not finish cleanly: %s\n",
                   ShapeName(sh.S, sh.W).c_str(), st.ToString().c_str());
  }

  void RunCase(LocalCluster& cl, const Shape& sh, std::vector<std::unique_ptr<RawClient>>& raw,
               size_t bytes, Layout layout) {
    const int S = sh.S, W = sh.W;
    const bool sparse = layout != Layout::kDense;
    const uint32_t dim = sparse ? 64 : (bytes <= kMB ? 256 : 1024);
    const size_t floats = bytes / 4;
    const uint64_t rows = floats / dim;
    const std::string tname = LayoutPrefix(layout) + SizeName(bytes);
    TableSpec spec = MakeSpec(tname, sparse, rows, dim, opt::Kind::kSgd, Asp());
    std::vector<Table> tables(W);
    for (int w = 0; w < W; ++w) {
      auto t = cl.client(w).CreateTable(spec);
      if (!t.ok()) {
        std::fprintf(stderr, "transport: create %s: %s\n", tname.c_str(), t.status().ToString().c_str());
        return;
      }
      tables[w] = t.value();
    }
    // Sparse: fixed random keys (the same for every worker) and the per-server parts they make.
    std::vector<Key> keys;
    std::vector<size_t> part_floats(S, 0), part_keys(S, 0);
    if (sparse) {
      TableInfo info = TableInfo::Make(0, spec, S);
      for (uint64_t i = 0; i < rows; ++i) {
        Key k = SplitMix64(i * 0x9E3779B97F4A7C15ull + bytes);
        keys.push_back(k);
        part_floats[info.OwnerOf(k)] += dim;
        part_keys[info.OwnerOf(k)] += sizeof(Key);
      }
      if (layout == Layout::kSparse) {
        auto order = cl.client(0).GroupByServer(tables[0], &keys);
        if (!order.ok()) {
          std::fprintf(stderr, "transport: grouping keys: %s\n", order.status().ToString().c_str());
          return;
        }
      }
    } else {
      TableInfo info = TableInfo::Make(0, spec, S);
      for (int s = 0; s < S; ++s) part_floats[s] = (info.row_offsets[s + 1] - info.row_offsets[s]) * dim;
    }
    Measured pp, rw;
    const Plan lat = LatencyPlan(cfg_, bytes), thr = ThroughputPlan(cfg_, bytes);
    const int bufs = thr.depth;
    // Generous for this box (~50 MB/s for everything in flight) but short enough that a lost
    // reply costs seconds, not minutes.
    const int64_t wait_ms = 2000 + static_cast<int64_t>(double(bytes) * W * thr.depth * 2 / 50e6 * 1e3);
    // pushpull and raw runs alternate (pp, raw, pp, raw, ...) so that load from elsewhere on this
    // shared box hits both alike; throughput: the best repetition; latency: all samples pooled.
    // After a failed run the other runs of the case on that side are skipped (same error).
    const Client::KeyBuffer key_buffer = sparse ? std::make_shared<const std::vector<Key>>(keys) : nullptr;
    std::vector<std::unique_ptr<PushPullDriver>> ppd;
    std::vector<std::unique_ptr<RawDriver>> rwd;
    for (int w = 0; w < W; ++w) {
      ppd.push_back(std::make_unique<PushPullDriver>(cl.client(w), tables[w], floats,
                                                     key_buffer, bufs, wait_ms));
      rwd.push_back(std::make_unique<RawDriver>(*raw[w], part_floats, part_keys, wait_ms));
    }
    Barrier bar(W);
    RunResult pp_failed, rw_failed;
    const int reps = cfg_.reps;  // (even by default: each side goes first as often)
    // Small-message latency runs are short (budget 0.1 s): twice as many alternations, so that a
    // burst of load elsewhere on the box weighs less on either side's pooled percentiles.
    const int lat_reps = bytes <= 64 * 1024 ? 2 * reps : reps;
    auto one = [&](auto& drivers, RunResult& failed, Op op, const Plan& p, RunResult* best,
                   std::vector<double>* lat_pool, std::vector<double>* runs = nullptr) {
      if (!failed.ok) {
        *best = failed;
        return;
      }
      double bpo = double(bytes) * (op == Op::kPushPull ? 2 : 1);
      std::vector<double> lat;
      RunResult r = RunWorkers(W, bpo, [&](int w) { return RunLoop(*drivers[w], op, p, bar); },
                               lat_pool);
      if (!r.ok) {
        failed = r;
        *best = r;
        return;
      }
      if (best->ops == 0 || r.gbps > best->gbps) *best = r;
      if (runs) runs->push_back(r.gbps);
    };
    // Runs alternate, and which side goes first alternates too (ABBA): neither always runs
    // right after the other's allocations. *pairs: each pair's throughput ratio, pushpull / raw.
    auto both = [&](Op op, Plan p, RunResult* pp_out, RunResult* rw_out, std::vector<double>* pairs = nullptr) {
      std::vector<double> pp_lat, rw_lat, pp_runs, rw_runs;
      for (int rep = 0; rep < (p.serial ? lat_reps : reps); ++rep) {
        if (rep > 0) p.warmup = std::max(1, p.warmup / 4);
        if (rep % 2 == 0) {
          one(ppd, pp_failed, op, p, pp_out, &pp_lat, &pp_runs);
          one(rwd, rw_failed, op, p, rw_out, &rw_lat, &rw_runs);
        } else {
          one(rwd, rw_failed, op, p, rw_out, &rw_lat, &rw_runs);
          one(ppd, pp_failed, op, p, pp_out, &pp_lat, &pp_runs);
        }
      }
      if (pairs)
        for (size_t i = 0; i < std::min(pp_runs.size(), rw_runs.size()); ++i)
          if (rw_runs[i] > 0) pairs->push_back(pp_runs[i] / rw_runs[i]);
      if (pp_out->ok) pp_out->p50_us = Percentile(pp_lat, 0.5), pp_out->p99_us = Percentile(pp_lat, 0.99);
      if (rw_out->ok) rw_out->p50_us = Percentile(rw_lat, 0.5), rw_out->p99_us = Percentile(rw_lat, 0.99);
    };
    const double tc = Now();
    if (cfg_.profile_op >= 0) {
      const Op op = static_cast<Op>(cfg_.profile_op);
      RunResult r;
      std::vector<double> l;
      const Plan& plan = cfg_.profile_latency ? lat : thr;
      if (cfg_.profile_raw) one(rwd, rw_failed, op, plan, &r, &l);
      else one(ppd, pp_failed, op, plan, &r, &l);
      ppd.clear();
      rwd.clear();
      const std::string name = std::string("profile_") + (cfg_.profile_raw_sgd ? "raw_sgd_" : cfg_.profile_raw ? "raw_" : "") +
                               LayoutPrefix(layout) + OpName(op) +
                               (cfg_.profile_latency ? "_p50/" : "/") + SizeName(bytes) + "/" + ShapeName(S, W);
      if (cfg_.profile_latency)
        Add(name, "us", r.ok ? Percentile(l, 0.5) : NAN, 0.0, r.ok ? "ops " + std::to_string(r.ops) : "FAILED: " + r.error);
      else
        Add(name, "GB/s", r.ok ? r.gbps : NAN, 0.0, r.ok ? "ops " + std::to_string(r.ops) : "FAILED: " + r.error);
      return;
    }
    both(Op::kPush, lat, &pp.lat[0], &rw.lat[0]);
    both(Op::kPull, lat, &pp.lat[1], &rw.lat[1]);
    std::vector<double> pairs[3];  // per op: each alternating pair's ratio
    for (Op op : {Op::kPush, Op::kPull, Op::kPushPull}) both(op, thr, &pp.r[int(op)], &rw.r[int(op)], &pairs[int(op)]);
    ppd.clear();
    rwd.clear();
    std::fprintf(stderr, "transport: %s%s/%s took %.1f s\n", LayoutPrefix(layout).c_str(),
                 SizeName(bytes).c_str(), ShapeName(S, W).c_str(), Now() - tc);
    const std::string suffix = "/" + SizeName(bytes) + "/" + ShapeName(S, W);
    const std::string pre = LayoutPrefix(layout);
    const std::string what =
        sparse ? "sparse table dim 64, " + std::to_string(rows) + " random keys" +
                     (layout == Layout::kSparse ? " in server order (GroupByServer)" : " in the order drawn") +
                     " (Push of a shared buffer, PullView)"
               : "dense table " + std::to_string(rows) + "x" + std::to_string(dim) + " (PushDense of a shared buffer, PullDenseView)";
    auto fail_note = [](const RunResult& a, const RunResult& b) {
      std::string e = !a.ok ? "pushpull FAILED: " + a.error : "";
      if (!b.ok) e += (e.empty() ? "" : "; ") + std::string("raw FAILED: ") + b.error;
      return e;
    };
    for (Op op : {Op::kPush, Op::kPull, Op::kPushPull}) {
      const RunResult& a = pp.r[int(op)];
      const RunResult& b = rw.r[int(op)];
      std::string note = what + ", ASP+SGD, " + std::to_string(thr.depth) +
                         " ops in flight per worker, best of " + std::to_string(reps) + " alternating runs" +
                         (reps % 2 == 0 ? " (ABBA)" : "") +
                         PairNote(pairs[int(op)]) +
                         (op == Op::kPushPull ? ", bytes of both directions" : "") +
                         ", ops pp/raw " + std::to_string(a.ops) + "/" + std::to_string(b.ops);
      std::string f = fail_note(a, b);
      if (!f.empty()) note = f;
      Add(pre + OpName(op) + suffix, "GB/s", a.ok ? a.gbps : NAN, b.ok ? b.gbps : 0.0, note);
    }
    for (int i = 0; i < 2; ++i) {
      const RunResult& a = pp.lat[i];
      const RunResult& b = rw.lat[i];
      const std::string op = i == 0 ? "push" : "pull";
      std::string note = what + ", ASP+SGD, one op at a time per worker, samples of " +
                         std::to_string(lat_reps) + " alternating runs pooled, ops pp/raw " +
                         std::to_string(a.ops) + "/" + std::to_string(b.ops);
      std::string f = fail_note(a, b);
      if (!f.empty()) note = f;
      Add(pre + op + "_p50" + suffix, "us", a.ok ? a.p50_us : NAN, b.ok ? b.p50_us : 0.0, note);
      Add(pre + op + "_p99" + suffix, "us", a.ok ? a.p99_us : NAN, b.ok ? b.p99_us : 0.0, note);
    }
  }

  // A 16 MB dense pull from 2 servers against the same pull from 1: both clusters up at once and
  // their runs alternating (the shape runs above are minutes apart, and this machine's speed
  // drifts over minutes), best run of each. Twice the repetitions of the shape runs, each longer:
  // the two differ by less than single runs scatter here (docs/PERFORMANCE.md).
  void RunSplitPull() {
    const size_t bytes = 16 * kMB;
    const std::string name = "pull_2s_vs_1s/16MB/1w";
    std::unique_ptr<LocalCluster> cl[2];
    std::unique_ptr<PushPullDriver> drv[2];
    for (int i = 0; i < 2; ++i) {
      cl[i] = std::make_unique<LocalCluster>(BenchCluster(i + 1, 1));
      auto t = StartWithDenseTable(*cl[i], "split", bytes);
      if (!t.ok()) {
        Add(name, "GB/s", NAN, 0.0, "FAILED: " + t.status().ToString());
        return;
      }
      drv[i] = std::make_unique<PushPullDriver>(cl[i]->client(0), t.value(), bytes / 4, nullptr, 2, kWaitMs);
    }
    Plan plan = ThroughputPlan(cfg_, bytes);
    const int reps = cfg_.quick ? cfg_.reps : 2 * cfg_.reps;
    if (!cfg_.quick) plan.budget_s = std::max(plan.budget_s, 0.5);
    double best[2] = {0, 0};  // 2 servers, 1 server
    const std::string error = BestOfAlternatingPulls(*drv[1], *drv[0], plan, bytes, reps, best);
    for (int i = 0; i < 2; ++i) {
      drv[i].reset();
      Status st = cl[i]->FinishAndJoin();
      if (!st.ok()) std::fprintf(stderr, "transport: split-pull cluster finish: %s\n", st.ToString().c_str());
    }
    if (!error.empty())
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + error);
    else
      Add(name, "GB/s", best[0], best[1],
          "dense 16MB pull throughput with 2 servers (value) vs 1 server (baseline), 1 worker, "
          "pipelined depth 2, runs of " + std::to_string(int(plan.budget_s * 1000)) +
              " ms of the two alternating, best of " + std::to_string(reps));
  }

  // A 16 MB dense pull from a server with 3 update threads, whose rows are then split into 3
  // stripes, each sent from its parameters in place in a values frame of its own, against raw
  // ZeroMQ moving the same bytes: pulls stay zero-copy whatever the update threads (the shape
  // runs above all have one).
  void RunStripedPull() {
    const size_t bytes = 16 * kMB;
    const int K = 3;
    const std::string name = "pull_3stripes/16MB/1s1w";
    LocalCluster cl(BenchCluster(1, 1, K));
    auto t = StartWithDenseTable(cl, "striped", bytes);
    if (!t.ok()) {
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + t.status().ToString());
      return;
    }
    const Plan plan = ThroughputPlan(cfg_, bytes);
    double best[2] = {0, 0};  // pushpull, raw
    std::string error;
    {
      RawServer server(bytes + 4096);
      RawClient raw(std::vector<std::string>{server.address()});
      PushPullDriver pp(cl.client(0), t.value(), bytes / 4, nullptr, plan.depth, kWaitMs);
      RawDriver rw(raw, {bytes / 4}, {0}, kWaitMs);
      error = BestOfAlternatingPulls(pp, rw, plan, bytes, cfg_.reps, best);
    }
    Status st = cl.FinishAndJoin();
    if (!st.ok()) std::fprintf(stderr, "transport: striped-pull cluster finish: %s\n", st.ToString().c_str());
    if (!error.empty())
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + error);
    else
      Add(name, "GB/s", best[0], best[1],
          "dense 16MB PullDenseView from 1 server with " + std::to_string(K) +
              " update threads (a zero-copy values frame per stripe) vs raw ZeroMQ, pipelined depth " +
              std::to_string(plan.depth) + ", alternating, best of " + std::to_string(cfg_.reps));
  }

  // The same for a sparse table (dim 64, 65536 random keys, PullView): a request per block's keys,
  // each answered with a frame per stripe, each stripe's rows in place (kFlagByStripe), against
  // raw ZeroMQ sending the keys and moving the same bytes.
  void RunStripedSparsePull() {
    const size_t bytes = 16 * kMB;
    const int K = 3;
    const uint32_t dim = 64;
    const std::string name = "sparse_pull_3stripes/16MB/1s1w";
    LocalCluster cl(BenchCluster(1, 1, K));
    Status st = cl.Start();
    Result<Table> t = st.ok() ? cl.client(0).CreateTable(MakeSpec("striped_sparse", true, 0, dim, opt::Kind::kSgd, Asp()))
                              : Result<Table>(st);
    if (!t.ok()) {
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + t.status().ToString());
      return;
    }
    auto keys = std::make_shared<std::vector<Key>>();
    for (uint64_t i = 0; i < bytes / 4 / dim; ++i) keys->push_back(SplitMix64(i * 0x9E3779B97F4A7C15ull + 7));
    const Plan plan = ThroughputPlan(cfg_, bytes);
    double best[2] = {0, 0};  // pushpull, raw
    std::string error;
    {
      RawServer server(bytes + keys->size() * sizeof(Key) + 4096);
      RawClient raw(std::vector<std::string>{server.address()});
      PushPullDriver pp(cl.client(0), t.value(), bytes / 4, keys, plan.depth, kWaitMs);
      RawDriver rw(raw, {bytes / 4}, {keys->size() * sizeof(Key)}, kWaitMs);
      error = BestOfAlternatingPulls(pp, rw, plan, bytes, cfg_.reps, best);
    }
    st = cl.FinishAndJoin();
    if (!st.ok()) std::fprintf(stderr, "transport: striped sparse pull cluster finish: %s\n", st.ToString().c_str());
    if (!error.empty())
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + error);
    else
      Add(name, "GB/s", best[0], best[1],
          "sparse 16MB PullView (dim 64, " + std::to_string(keys->size()) + " random keys) from 1 server with " +
              std::to_string(K) + " update threads (a zero-copy values frame per stripe a request) vs raw ZeroMQ, "
              "pipelined depth " + std::to_string(plan.depth) + ", alternating, best of " + std::to_string(cfg_.reps));
  }

  // Starts `cl` and creates a dense SGD table of `bytes` (rows of 1024 floats) on it.
  // Resident memory of a dense Adam table of N floats on a server (a thread here), with the
  // server's default copy-on-write budget: 16M floats (64 MB of parameters, as much as the
  // budget) and 64M (256 MB, more than it).
  void RunRss(size_t N) {
    const uint32_t dim = 256;
    const std::string tag = std::to_string(N / kMB) + "M";
    const LocalClusterConfig lc = BenchCluster(1, 1);
    const double budget = double(lc.copy_on_write_budget_bytes);
    LocalCluster cl(lc);
    Status st = cl.Start();
    if (!st.ok()) {
      std::fprintf(stderr, "transport: rss cluster: %s\n", st.ToString().c_str());
      return;
    }
    Client& c = cl.client(0);
    malloc_trim(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t before = ResidentBytes();
    TableSpec spec = MakeSpec("adam_" + tag, false, N / dim, dim, opt::Kind::kAdam, Asp());
    auto t = c.CreateTable(spec);
    std::string note;
    if (!t.ok()) {
      note = "FAILED: " + t.status().ToString();
    } else {
      const size_t created = ResidentBytes();
      std::vector<float> g(N, 1e-3f);  // the client's gradient, handed over (freed once sent)
      st = c.PushDense(*t, std::move(g)).WaitFor(kWaitMs);
      if (!st.ok()) note = "FAILED: " + st.ToString();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let zmq release buffers
      malloc_trim(0);
      const size_t after = ResidentBytes();
      if (note.empty()) {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "process RSS delta (/proc/self/statm) from before CreateTable to after one "
                      "PushDense of all %zu floats (dim %u, 1 server, 1 update thread) was "
                      "applied and its buffers freed (client gradient and server receive buffer "
                      "are gone by then); baseline = 4N bytes; RSS right after CreateTable: "
                      "+%.1f MB; copy-on-write budget %.0f MiB",
                      N, dim, (double(created) - double(before)) / 1e6, budget / kMB);
        note = buf;
        Add("server_rss_adam/" + tag, "bytes", double(after) - double(before), 4.0 * N, note);
        // The same table while pushes arrive during pull replies (copy-on-write: the write goes
        // to another array while the budget allows, and the stripe keeps it as a spare while this
        // goes on; else it waits for the reply to be sent), then after plain pushes (the spare is
        // dropped after 8 writes that do not need it).
        auto grad = std::make_shared<const std::vector<float>>(N, 1e-3f);
        auto rss_after = [&](int rounds, bool with_pull, const std::string& name, const char* what) {
          for (int i = 0; i < rounds && st.ok(); ++i) {
            PulledRows view;
            Future pull = with_pull ? c.PullDenseView(*t, &view) : Future();
            Future push = c.PushDense(*t, grad);
            st = pull.WaitFor(kWaitMs);
            if (st.ok()) st = push.WaitFor(kWaitMs);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          malloc_trim(0);
          const size_t rss = ResidentBytes();
          if (!st.ok()) {
            std::fprintf(stderr, "transport: %s: %s\n", name.c_str(), st.ToString().c_str());
            return;
          }
          Add(name, "bytes", double(rss) - double(before) - double(N) * 4, 4.0 * N,
              "as server_rss_adam/" + tag + " (the client's gradient, 4N bytes, is still "
              "allocated here and subtracted), " + what + "; the heap is trimmed before every figure");
        };
        rss_after(8, true, "server_rss_adam_during_pulls/" + tag,
                  "after 8 rounds of a pull and a push sent together: each push lands while the "
                  "pull's reply may still hold the parameters; it is written to another array "
                  "(copy-on-write) when the budget has room for the held one, which the stripe "
                  "then keeps as a spare while this goes on, else it waits for the reply to be sent");
        rss_after(8, false, "server_rss_adam_after_pulls/" + tag,
                  "then after 8 pushes alone: the spare is dropped");
        grad.reset();
      }
    }
    if (!note.empty() && note.rfind("FAILED", 0) == 0)
      Add("server_rss_adam/" + tag, "bytes", NAN, 4.0 * N, note);
    st = cl.FinishAndJoin();
    if (!st.ok()) std::fprintf(stderr, "transport: rss cluster finish: %s\n", st.ToString().c_str());
  }

  // 4 workers pushing to 2 servers with SSP(2): push, clock, pull on a ~1 MB dense table.
  void RunSsp() {
    const int S = 2, W = 4;
    const uint32_t dim = 256;
    const size_t floats = kMB / 4;
    const LocalClusterConfig lc = BenchCluster(S, W);
    LocalCluster cl(lc);
    Status st = cl.Start();
    if (!st.ok()) {
      std::fprintf(stderr, "transport: ssp cluster: %s\n", st.ToString().c_str());
      return;
    }
    Consistency ssp;
    ssp.model = Consistency::kSsp;
    ssp.staleness = 2;
    TableSpec spec = MakeSpec("ssp_1MB", false, floats / dim, dim, opt::Kind::kSgd, ssp);
    std::vector<Table> tables(W);
    for (int w = 0; w < W; ++w) {
      auto t = cl.client(w).CreateTable(spec);
      if (!t.ok()) {
        std::fprintf(stderr, "transport: ssp table: %s\n", t.status().ToString().c_str());
        return;
      }
      tables[w] = t.value();
    }
    std::vector<std::string> err(W);
    std::vector<double> t0(W), t1(W);
    std::atomic<int> iters{0};
    Barrier bar(W);
    const int warm = 5;
    cl.RunWorkers([&](Client& c, int w) {
      std::vector<float> src(floats, 1e-3f), out(floats, 0.0f);
      auto step = [&]() -> bool {
        Future push = c.PushDense(tables[w], std::vector<float>(src));
        Status s = c.Clock();
        if (s.ok()) s = c.PullDense(tables[w], out.data()).WaitFor(kWaitMs);
        if (s.ok()) s = push.WaitFor(kWaitMs);
        if (!s.ok() && err[w].empty()) err[w] = s.ToString();
        return s.ok();
      };
      bool ok = true;
      double tw = Now();
      for (int i = 0; i < warm && ok; ++i) ok = step();
      tw = Now() - tw;
      // Worker 0 picks the iteration count from its warm-up pace; all run the same count, so
      // nobody is left waiting at the end for a worker that stopped early.
      if (w == 0) {
        int n = static_cast<int>(cfg_.ssp_budget_s / std::max(1e-6, tw / warm));
        iters = std::max(10, std::min(cfg_.ssp_iters_max, n));
      }
      bar.Arrive();
      t0[w] = Now();
      const int n = iters.load();
      for (int i = 0; i < n && ok; ++i) ok = step();
      t1[w] = Now();
    });
    std::string e;
    for (auto& x : err)
      if (!x.empty() && e.empty()) e = x;
    const double span = *std::max_element(t1.begin(), t1.end()) - *std::min_element(t0.begin(), t0.end());
    const double updates = double(W) * iters.load();
    int64_t maxst = 0;
    for (int s = 0; s < S; ++s) maxst = std::max<int64_t>(maxst, cl.server(s).stats().max_staleness);
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%d workers x %d iterations of PushDense (1MB, %u x %u, SGD), Clock, PullDense "
                  "(waited), SSP(2), 2 servers x 1 update thread; an update = one worker's "
                  "whole-table push applied (acknowledged); max staleness seen %lld",
                  W, iters.load(), unsigned(floats / dim), dim, static_cast<long long>(maxst));
    if (!e.empty())
      Add("ssp_updates/1MB/2s4w", "updates/s", NAN, 0.0, "FAILED: " + e);
    else
      Add("ssp_updates/1MB/2s4w", "updates/s", updates / span, 0.0, buf);
    st = cl.FinishAndJoin();
    if (!st.ok()) std::fprintf(stderr, "transport: ssp cluster finish: %s\n", st.ToString().c_str());
  }

  const Config cfg_;
};


// Bench "zmq_ceiling": where the transport goals' ceilings lie on this machine, measured with raw
// ZeroMQ alone, so that a goal pushpull misses can be told apart from one no parameter server
// over ZeroMQ could meet here.
//
// - "raw_sgd_pushpull/1MB/SsWw": the raw baseline of the transport bench whose servers also
//   apply each push to their buffer with the SGD kernel pushpull's servers use (one pass over the
//   gradient, the least a server-side optimizer does: no check, no header, no request record, no
//   copy-on-write), against the plain raw baseline, which never reads a pushed byte. Its ratio is
//   the most a parameter server with server-side SGD could reach against that baseline here;
//   "pushpull_vs_raw_sgd/1MB/SsWw" is pushpull against it, in the same rotation of runs.
// - "raw_pull_2s_vs_1s/16MB/1w" and "raw_blocks_pull_2s_vs_1s/16MB/1w": the transport bench's
//   split-pull figure for raw ZeroMQ, a 16 MB dense pull from 2 servers against 1, with each
//   server's part in one message, and in 1 MB messages sent one after the other (pushpull's
//   blocks, which is how pushpull's own 1-server pull goes).
class CeilingBench : public FigureLog {
 public:
  CeilingBench(Reporter& rep, const Config& cfg) : FigureLog(rep, "zmq_ceiling"), cfg_(cfg) {}

  void Run() {
    SetLogLevel(LogLevel::kWarning);
    const double t0 = Now();
    for (const Shape& sh : cfg_.shapes) RunSgd(sh, kMB);
    RunRawSplitPull(0, "raw_pull_2s_vs_1s/16MB/1w", false);
    RunRawSplitPull(kMB, "raw_blocks_pull_2s_vs_1s/16MB/1w", true);
    SetLogLevel(LogLevel::kInfo);
    std::fprintf(stderr, "zmq_ceiling bench: %.1f s\n", Now() - t0);
    PrintSummary();
  }

 private:
  // The ceilings next to the transport goals they bound (docs/PERFORMANCE.md).
  void PrintSummary() const {
    auto range = [&](const std::string& prefix) {
      double lo = NAN, hi = NAN;
      std::string failed;
      for (const Figure& f : figures_) {
        if (f.name.rfind(prefix, 0) != 0) continue;
        if (!(f.baseline > 0) || !std::isfinite(f.value)) {
          failed = " (some FAILED)";
          continue;
        }
        const double r = f.value / f.baseline;
        lo = std::isnan(lo) ? r : std::min(lo, r);
        hi = std::isnan(hi) ? r : std::max(hi, r);
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.2f to %.2f over the shapes%s", lo, hi, failed.c_str());
      return std::string(buf);
    };
    std::fprintf(stderr, "\nzmq ceilings (issue 5's goals against raw ZeroMQ on this machine), this run:\n");
    std::fprintf(stderr, "  %-62s %s\n", "1 MB push-then-pull, raw + SGD / raw (goal for pushpull: 0.8)",
                 range("raw_sgd_pushpull/").c_str());
    std::fprintf(stderr, "  %-62s %s\n", "1 MB push-then-pull, pushpull / (raw + SGD)", range("pushpull_vs_raw_sgd/").c_str());
    const std::pair<const char*, const char*> pulls[] = {
        {"raw_pull_2s_vs_1s/16MB/1w", "16 MB pull, raw, one message a server, 2 servers / 1"},
        {"raw_blocks_pull_2s_vs_1s/16MB/1w", "16 MB pull, raw, 1 MB messages, 2 servers / 1"},
        {"pushpull_pull_2s_vs_1s/16MB/1w", "16 MB pull, pushpull, 2 servers / 1 (same rotation)"},
        {"pushpull_vs_raw_blocks_pull/16MB/1s1w", "16 MB pull, 1 server, pushpull / raw in 1 MB messages"}};
    for (const auto& [name, what] : pulls)
      for (const Figure& f : figures_)
        if (f.name == name)
          std::fprintf(stderr, "  %-62s %.2f x (%.2f against %.2f GB/s)\n", what,
                       f.baseline > 0 ? f.value / f.baseline : NAN, f.value, f.baseline);
  }

  // Dense push-then-pull of `bytes`: pushpull, raw ZeroMQ and raw ZeroMQ + SGD, their runs in a
  // rotation whose first side moves on each repetition; best run of each side.
  void RunSgd(const Shape& sh, size_t bytes) {
    const int S = sh.S, W = sh.W;
    const std::string suffix = "/" + SizeName(bytes) + "/" + ShapeName(S, W);
    LocalCluster cl(BenchCluster(S, W));
    Status st = cl.Start();
    const uint32_t dim = 256;
    const TableSpec spec = MakeSpec("ceiling" + suffix, false, bytes / 4 / dim, dim, opt::Kind::kSgd, Asp());
    std::vector<Table> tables;
    for (int w = 0; st.ok() && w < W; ++w) {
      auto t = cl.client(w).CreateTable(spec);
      if (t.ok()) tables.push_back(t.value());
      else st = t.status();
    }
    if (!st.ok()) {
      Add("raw_sgd_pushpull" + suffix, "GB/s", NAN, 0.0, "FAILED: " + st.ToString());
      Add("pushpull_vs_raw_sgd" + suffix, "GB/s", NAN, 0.0, "FAILED: " + st.ToString());
      return;
    }
    const TableInfo info = TableInfo::Make(0, spec, S);
    std::vector<size_t> part_floats(S), part_keys(S, 0);
    for (int s = 0; s < S; ++s) part_floats[s] = (info.row_offsets[s + 1] - info.row_offsets[s]) * dim;
    const Plan plan = ThroughputPlan(cfg_, bytes);
    const int64_t wait_ms = 2000 + static_cast<int64_t>(double(bytes) * W * plan.depth * 2 / 50e6 * 1e3);
    std::string error;
    double best[3] = {0, 0, 0};  // pushpull, raw, raw + SGD
    std::vector<double> pp_runs, sgd_runs, raw_runs;
    uint64_t applied = 0;  // gradient floats the SGD servers applied
    {
      std::vector<std::unique_ptr<RawServer>> servers[2];  // plain, SGD
      std::vector<std::string> addrs[2];
      for (int k = 0; k < 2; ++k)
        for (int s = 0; s < S; ++s) {
          servers[k].push_back(std::make_unique<RawServer>(bytes / S + 4096, k == 1 ? BenchSgd() : nullptr));
          addrs[k].push_back(servers[k].back()->address());
        }
      std::vector<std::unique_ptr<RawClient>> clients[2];
      std::vector<std::unique_ptr<PushPullDriver>> ppd;
      std::vector<std::unique_ptr<RawDriver>> rwd[2];
      for (int w = 0; w < W; ++w) {
        ppd.push_back(std::make_unique<PushPullDriver>(cl.client(w), tables[w], bytes / 4, nullptr, plan.depth, wait_ms));
        for (int k = 0; k < 2; ++k) {
          clients[k].push_back(std::make_unique<RawClient>(addrs[k]));
          rwd[k].push_back(std::make_unique<RawDriver>(*clients[k].back(), part_floats, part_keys, wait_ms));
        }
      }
      Barrier bar(W);
      auto run = [&](int side) -> bool {
        const double bpo = 2.0 * double(bytes);  // both directions, as the transport bench counts
        RunResult r = side == 0 ? RunWorkers(W, bpo, [&](int w) { return RunLoop(*ppd[w], Op::kPushPull, plan, bar); })
                                : RunWorkers(W, bpo, [&](int w) { return RunLoop(*rwd[side - 1][w], Op::kPushPull, plan, bar); });
        if (!r.ok) {
          error = (side == 0 ? "pushpull: " : side == 1 ? "raw: " : "raw + SGD: ") + r.error;
          return false;
        }
        best[side] = std::max(best[side], r.gbps);
        (side == 0 ? pp_runs : side == 1 ? raw_runs : sgd_runs).push_back(r.gbps);
        return true;
      };
      for (int rep = 0; rep < 2 * cfg_.reps && error.empty(); ++rep)
        for (int k = 0; k < 3 && error.empty(); ++k) run((rep + k) % 3);
      for (int k = 0; k < 2 && error.empty(); ++k)
        for (auto& d : rwd[k])
          if (error.empty() && !d->Idle(20)) error = d->error();
      for (auto& server : servers[1]) applied += server->applied_floats();
    }
    Status fin = cl.FinishAndJoin();
    if (!fin.ok()) std::fprintf(stderr, "zmq_ceiling: cluster %s finish: %s\n", ShapeName(S, W).c_str(), fin.ToString().c_str());
    if (error.empty() && applied == 0) error = "raw + SGD: its servers applied no push";
    if (!error.empty()) {
      Add("raw_sgd_pushpull" + suffix, "GB/s", NAN, 0.0, "FAILED: " + error);
      Add("pushpull_vs_raw_sgd" + suffix, "GB/s", NAN, 0.0, "FAILED: " + error);
      return;
    }
    std::vector<double> r_sgd, r_pp;  // per repetition: raw + SGD / raw, pushpull / raw + SGD
    for (size_t i = 0; i < raw_runs.size(); ++i) {
      if (raw_runs[i] > 0) r_sgd.push_back(sgd_runs[i] / raw_runs[i]);
      if (sgd_runs[i] > 0) r_pp.push_back(pp_runs[i] / sgd_runs[i]);
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "; SGD applied to %llu gradient floats in all; pushpull %.2f GB/s (%.2f x raw)",
                  static_cast<unsigned long long>(applied), best[0], best[1] > 0 ? best[0] / best[1] : NAN);
    const std::string how = "dense " + SizeName(bytes) + " push-then-pull, " + std::to_string(plan.depth) +
                            " ops in flight per worker, pushpull / raw / raw + SGD in rotation, best of " +
                            std::to_string(2 * cfg_.reps) + " runs of each";
    Add("raw_sgd_pushpull" + suffix, "GB/s", best[2], best[1],
        "raw ZeroMQ whose servers apply each push with pushpull's SGD kernel (value) vs plain raw ZeroMQ "
        "(baseline): " + how + PairNote(r_sgd) + buf);
    Add("pushpull_vs_raw_sgd" + suffix, "GB/s", best[0], best[2],
        "pushpull (value) vs raw ZeroMQ + SGD (baseline): " + how + PairNote(r_pp));
  }

  // Raw ZeroMQ's 16 MB dense pull from 2 servers (value) against 1 (baseline), 1 worker, depth
  // 2, best of twice the transport bench's repetitions (as its split pull). With pushpull: its
  // own pulls from 1 and 2 servers join the rotation, so that the four are measured in the same
  // minutes (this machine's speed drifts over minutes).
  void RunRawSplitPull(size_t block_bytes, const std::string& name, bool with_pushpull) {
    const size_t bytes = 16 * kMB;
    Plan plan = ThroughputPlan(cfg_, bytes);
    const int reps = cfg_.quick ? cfg_.reps : 2 * cfg_.reps;
    if (!cfg_.quick) plan.budget_s = std::max(plan.budget_s, 0.5);
    std::vector<std::unique_ptr<RawServer>> servers;
    for (int s = 0; s < 3; ++s) servers.push_back(std::make_unique<RawServer>(bytes + 4096));
    RawClient one(std::vector<std::string>{servers[0]->address()});
    RawClient two(std::vector<std::string>{servers[1]->address(), servers[2]->address()});
    RawDriver d1(one, {bytes / 4}, {0}, kWaitMs, block_bytes);
    RawDriver d2(two, {bytes / 8, bytes / 8}, {0, 0}, kWaitMs, block_bytes);
    std::unique_ptr<LocalCluster> cl[2];
    std::unique_ptr<PushPullDriver> pp[2];  // 1 server, 2 servers
    std::string error;
    for (int i = 0; with_pushpull && i < 2 && error.empty(); ++i) {
      cl[i] = std::make_unique<LocalCluster>(BenchCluster(i + 1, 1));
      auto t = StartWithDenseTable(*cl[i], "ceiling_split", bytes);
      if (t.ok()) pp[i] = std::make_unique<PushPullDriver>(cl[i]->client(0), t.value(), bytes / 4, nullptr, 2, kWaitMs);
      else error = "pushpull: " + t.status().ToString();
    }
    // Sides: raw from 2 servers, raw from 1, then pushpull from 2 and from 1.
    const int sides = with_pushpull ? 4 : 2;
    double best[4] = {0, 0, 0, 0};
    Barrier bar(1);
    auto run = [&](int side) {
      RunResult r;
      auto pull = [&](auto& d) { return RunWorkers(1, double(bytes), [&](int) { return RunLoop(d, Op::kPull, plan, bar); }); };
      r = side == 0 ? pull(d2) : side == 1 ? pull(d1) : pull(*pp[3 - side]);
      if (!r.ok) error = (side < 2 ? "raw: " : "pushpull: ") + r.error;
      best[side] = std::max(best[side], r.gbps);
    };
    for (int rep = 0; rep < reps && error.empty(); ++rep)
      for (int k = 0; k < sides && error.empty(); ++k) run((rep + k) % sides);
    if (error.empty() && !d1.Idle(20)) error = d1.error();
    if (error.empty() && !d2.Idle(20)) error = d2.error();
    for (int i = 0; i < 2; ++i) {
      pp[i].reset();
      if (!cl[i]) continue;
      Status st = cl[i]->FinishAndJoin();
      if (!st.ok()) std::fprintf(stderr, "zmq_ceiling: split-pull cluster finish: %s\n", st.ToString().c_str());
    }
    const std::string how = ", 1 worker, pipelined depth " + std::to_string(plan.depth) + ", " +
                            (with_pushpull ? "pushpull's pulls from 1 and 2 servers in the same rotation"
                                           : std::string("alternating")) +
                            ", best of " + std::to_string(reps);
    if (!error.empty()) {
      Add(name, "GB/s", NAN, 0.0, "FAILED: " + error);
      if (with_pushpull) {
        Add("pushpull_vs_raw_blocks_pull/16MB/1s1w", "GB/s", NAN, 0.0, "FAILED: " + error);
        Add("pushpull_pull_2s_vs_1s/16MB/1w", "GB/s", NAN, 0.0, "FAILED: " + error);
      }
      return;
    }
    Add(name, "GB/s", best[0], best[1],
        "raw ZeroMQ dense 16MB pull from 2 servers (value) vs 1 server (baseline), " +
            std::string(block_bytes > 0 ? "in requests of " + SizeName(block_bytes) +
                                              " sent one after the other, each for its own part of the server's buffer"
                                        : "one request per server") +
            how + " (cf. transport pull_2s_vs_1s/16MB/1w)");
    if (with_pushpull) {
      Add("pushpull_vs_raw_blocks_pull/16MB/1s1w", "GB/s", best[3], best[1],
          "pushpull's dense 16MB PullDenseView from 1 server (value) vs raw ZeroMQ's in 1MB requests (baseline)" + how);
      Add("pushpull_pull_2s_vs_1s/16MB/1w", "GB/s", best[2], best[3],
          "pushpull's dense 16MB PullDenseView from 2 servers (value) vs 1 (baseline)" + how +
              " (the transport bench's pull_2s_vs_1s/16MB/1w, measured beside raw's)");
    }
  }

  const Config cfg_;
};

void RunTransportBench(Reporter& rep, const Options& o) {
  Config cfg;
  cfg.quick = o.quick;
  if (o.quick) {
    cfg.sizes = {4 * kKB, kMB, 16 * kMB};
    cfg.sparse_sizes = {kMB};
    cfg.shapes = {{1, 1, true}, {2, 1, false}};
    cfg.budget_s = 0.07;
    cfg.lat_budget_s = 0.05;
    cfg.reps = 2;
    cfg.ssp_iters_max = 60;
    cfg.ssp_budget_s = 0.5;
  } else {
    cfg.sizes = {4 * kKB, 64 * kKB, kMB, 16 * kMB, 64 * kMB};
    cfg.sparse_sizes = {4 * kKB, 64 * kKB, kMB, 16 * kMB};
    cfg.ungrouped_sizes = {kMB};
    cfg.shapes = {{1, 1, true}, {2, 1, true}, {1, 2, false}, {2, 2, false}, {1, 4, false}, {2, 4, true}};
    // Long enough that a 16 MB run moves a few dozen operations (these shared 2-core machines
    // are noisy; shorter runs moved single ratios by 0.2).
    cfg.budget_s = 0.3;
    cfg.lat_budget_s = 0.1;
    cfg.reps = 4;
  }
  if (const char* prof = std::getenv("PP_TRANSPORT_PROFILE")) {
    char op[32] = {0}, size[32] = {0}, side[32] = {0};
    int S = 0, W = 0;
    if (std::sscanf(prof, "%31[a-z_0-9]/%31[0-9KMB]/%ds%dw/%31s", op, size, &S, &W, side) < 4 || S < 1 ||
        W < 1) {
      rep.Refuse("PP_TRANSPORT_PROFILE=" + std::string(prof) + ": want OP/SIZE/SsWw[/raw|/raw_sgd]");
      return;
    }
    std::string ops = op;
    const bool ungrouped = ops.rfind("sparse_ungrouped_", 0) == 0;
    const bool sparse = ungrouped || ops.rfind("sparse_", 0) == 0;
    if (sparse) ops = ops.substr(ungrouped ? 17 : 7);
    if (ops.size() > 4 && ops.compare(ops.size() - 4, 4, "_p50") == 0) {
      cfg.profile_latency = true;
      ops.resize(ops.size() - 4);
    }
    for (int o = 0; o < 3; ++o)
      if (ops == OpName(static_cast<Op>(o))) cfg.profile_op = o;
    size_t bytes = std::strtoull(size, nullptr, 10) * (std::strchr(size, 'M') ? kMB : kKB);
    if (cfg.profile_op < 0 || bytes == 0) {
      rep.Refuse("PP_TRANSPORT_PROFILE=" + std::string(prof) + ": unknown op or size");
      return;
    }
    if (side[0] != 0 && std::string(side) != "raw" && std::string(side) != "raw_sgd") {
      rep.Refuse("PP_TRANSPORT_PROFILE=" + std::string(prof) + ": the side is raw or raw_sgd (none: pushpull's)");
      return;
    }
    cfg.profile_raw_sgd = std::string(side) == "raw_sgd";
    cfg.profile_raw = cfg.profile_raw_sgd || std::string(side) == "raw";
    cfg.sizes.clear();
    cfg.sparse_sizes.clear();
    cfg.ungrouped_sizes.clear();
    (ungrouped ? cfg.ungrouped_sizes : sparse ? cfg.sparse_sizes : cfg.sizes).push_back(bytes);
    if (ungrouped && S < 2) {
      rep.Refuse("PP_TRANSPORT_PROFILE=" + std::string(prof) + ": keys in the order drawn are measured with 2 servers or more");
      return;
    }
    cfg.shapes = {{S, W, sparse}};
    const char* pb = std::getenv("PP_TRANSPORT_PROFILE_S");  // seconds of the run (default 5)
    cfg.budget_s = cfg.lat_budget_s = pb ? std::max(0.05, std::atof(pb)) : 5.0;
    cfg.reps = 1;
    if (const char* k = std::getenv("PP_TRANSPORT_PROFILE_K")) cfg.profile_update_threads = std::max(1, std::atoi(k));
  }
  TransportBench(rep, cfg).Run();
}

void RunCeilingBench(Reporter& rep, const Options& o) {
  Config cfg;
  cfg.quick = o.quick;
  cfg.shapes = {{1, 1, false}, {2, 1, false}, {1, 2, false}, {2, 2, false}, {1, 4, false}, {2, 4, false}};
  cfg.budget_s = o.quick ? 0.07 : 0.3;
  cfg.reps = o.quick ? 1 : 4;
  if (o.quick) cfg.shapes = {{1, 1, false}, {2, 1, false}};
  CeilingBench(rep, cfg).Run();
}

}  // namespace
}  // namespace pushpull::bench

PP_BENCH(transport, pushpull::bench::RunTransportBench);
PP_BENCH(zmq_ceiling, pushpull::bench::RunCeilingBench);
