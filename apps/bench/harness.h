// The harness of the transport and zmq_ceiling benches: a driver's measured run on W worker
// threads, best-of-N runs of two or more sides in alternation or rotation, and the figures they
// report against their baselines.
//
// A driver moves one operation's bytes (pushpull's client, or raw ZeroMQ). Duck-typed interface:
//   bool Issue(Op);          start one operation; false on an error
//   bool WaitOldest();       wait for the oldest one in flight; false on an error or a deadline
//   size_t outstanding();    operations in flight
//   std::string error();     what went wrong
//
// Every run: warm-up operations first; latency runs wait for each operation before the next
// (p50/p99 over all workers' samples); throughput runs keep up to `depth` operations in flight per
// worker (4 up to 1 MB, 2 above), and count bytes of float payload (push-then-pull counts both
// directions) over the span from the first worker's start to the last worker's end.
// GB/s = 1e9 bytes/s; sizes are binary (1MB = 2^20 bytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/bench.h"
#include "common/mutex.h"

namespace pushpull::bench {

constexpr int64_t kWaitMs = 20000;  // every wait is bounded (data-path waits: see the cases' wait_ms)
constexpr size_t kKB = 1024, kMB = 1024 * 1024;

enum class Op { kPush = 0, kPull = 1, kPushPull = 2 };
const char* OpName(Op op);

std::string SizeName(size_t bytes);               // "4KB", "16MB"
std::string ShapeName(int servers, int workers);  // "2s4w"

// A reusable barrier whose wait is bounded by kWaitMs (a failed thread still arrives).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Arrive() EXCLUDES(mu_);

 private:
  const int n_;
  Mutex mu_;
  CondVar cv_;  // signalled when the last thread of a generation arrives
  int count_ GUARDED_BY(mu_) = 0;
  int gen_ GUARDED_BY(mu_) = 0;
};

// How one measured run goes.
struct Plan {
  bool serial = true;  // latency: wait for each op before the next
  int depth = 1;       // throughput: ops in flight per worker
  int warmup = 2;      // unmeasured ops first
  int min_iters = 3;   // measured ops per worker, at least ...
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

// The p-quantile (0 < p <= 1) of `v`, nearest rank; NaN when empty.
double Percentile(std::vector<double> v, double p);

// The ratios of the alternating pairs of runs, for the note: the figure's ratio is best over
// best, and the pairs say how far single runs spread around it on this machine.
std::string PairNote(std::vector<double> r);

// One worker's run of `op` on driver `d` as `p` says; every worker arrives at `bar` between its
// warm-up and its measured operations.
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

// Runs fn(w) -> WorkerResult on W threads and aggregates; the latency samples also go to
// *lat_pool when given.
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

// A cluster shape: S servers, W workers.
struct Shape {
  int S, W;
  bool sparse;  // also the sparse cases for this shape
};

// What a bench measures and how long; the profile fields are the transport bench's.
struct Config {
  bool quick = false;
  std::vector<size_t> sizes;
  std::vector<size_t> sparse_sizes;
  std::vector<size_t> ungrouped_sizes;  // sparse shapes with S > 1: keys in the order drawn too
  std::vector<Shape> shapes;
  double budget_s = 0.2;      // per repetition, throughput runs
  double lat_budget_s = 0.1;  // per repetition, latency runs
  int reps = 4;               // pushpull/raw repetitions, alternating
  int ssp_iters_max = 400;
  // Profiling aid (env PP_TRANSPORT_PROFILE=OP/SIZE/SsWw[/raw|/raw_sgd], e.g. pushpull/16MB/1s1w,
  // pull_p50/4KB/2s2w or sparse_pushpull/1MB/1s1w): only that throughput (or latency) run, pushpull side (or raw side,
  // or raw with servers that apply each push with SGD, as in the zmq_ceiling bench), for
  // budget_s; no RSS, no SSP.
  int profile_op = -1;
  bool profile_raw = false;
  bool profile_raw_sgd = false;    // side "raw_sgd": the raw servers apply each push with SGD (zmq_ceiling)
  bool profile_latency = false;    // OP_p50: one op at a time, p50 latency
  int profile_update_threads = 1;  // env PP_TRANSPORT_PROFILE_K: update threads per server
  double ssp_budget_s = 2.0;
};

// The plans of a case moving `bytes` an operation.
Plan LatencyPlan(const Config& cfg, size_t bytes);
Plan ThroughputPlan(const Config& cfg, size_t bytes);

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

// A bench's figures: reported as they are measured, and kept for the summary it prints last.
// Threading: the bench's own thread only (as Reporter).
class FigureLog {
 protected:
  FigureLog(Reporter& rep, const char* bench) : rep_(rep), bench_(bench) {}
  void Add(const std::string& name, const std::string& unit, double value, double baseline, const std::string& note);

  std::vector<Figure> figures_;  // this run's, for the summary

 private:
  Reporter& rep_;
  const char* const bench_;
};

}  // namespace pushpull::bench
