// Bench "transport": pushpull's data path against real servers over tcp loopback on this
// machine, next to a raw ZeroMQ baseline that moves the same bytes the same way (raw_zmq.h),
// measured in the same run.
//
// pushpull side: a LocalCluster (scheduler + S servers as threads of this process, one update
// thread each, W clients). Tables are ASP with SGD so that neither consistency waits nor a heavy
// optimizer dominate. Dense cases PushDense/PullDense a whole table of the payload's size
// (dim 256 up to 1 MB, dim 1024 above); sparse cases Push/Pull fixed random u64 keys (dim 64)
// of a sparse table, in the order the servers hold them (Client::GroupByServer, what the library
// asks of a recurring key set); with more than one server, also in the order they were drawn
// ("sparse_ungrouped_" figures: the client gathers each server's rows). Pushes send one warm
// shared buffer zero-copy and pulls are read in place (into a PulledRows view).
//
// How runs go and what they count: harness.h.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/bench.h"
#include "apps/bench/harness.h"
#include "apps/bench/pushpull_side.h"
#include "apps/bench/raw_zmq.h"
#include "common/log.h"
#include "common/memory.h"
#include "optimizers/optimizer.h"
#include "tests/support/local_cluster.h"

namespace pushpull::bench {
namespace {

// What a case moves: a dense table, or a sparse one with its keys in server order (as
// GroupByServer leaves them) or in the order they were drawn.
enum class Layout { kDense, kSparse, kSparseUngrouped };
std::string LayoutPrefix(Layout l) {
  return l == Layout::kDense ? "" : l == Layout::kSparse ? "sparse_" : "sparse_ungrouped_";
}

struct Measured {
  RunResult r[3];    // throughput by Op
  RunResult lat[2];  // latency: push, pull
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
  // The data-path goals (docs/PERFORMANCE.md), checked against this run's figures.
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
      std::fprintf(stderr, "  %-52s %2d of %2d met (worst %.2f, %s)%s\n", what, t.met, t.n, t.worst,
                   t.worst_case.c_str(), t.failed ? (", " + std::to_string(t.failed) + " FAILED").c_str() : "");
    };
    const std::vector<std::string> large{"1MB", "16MB", "64MB"};
    std::fprintf(stderr, "\ntransport goals (docs/PERFORMANCE.md), this run:\n");
    line("push-then-pull >= 0.8 x raw, dense, 1 MB and up", tally("pushpull/", large, false, 0.8));
    line("push-then-pull >= 0.8 x raw, sparse, 1 MB and up", tally("sparse_pushpull/", large, false, 0.8));
    line("  the same, sparse keys in the order drawn (no goal)",
         tally("sparse_ungrouped_pushpull/", large, false, 0.8));
    line("4 KB pull p50 <= 1.3 x raw round trip, dense", tally("pull_p50/", {"4KB"}, true, 1.3));
    line("4 KB pull p50 <= 1.3 x raw round trip, sparse", tally("sparse_pull_p50/", {"4KB"}, true, 1.3));
    for (const Figure& f : figures_) {
      const double r = f.baseline > 0 ? f.value / f.baseline : NAN;
      if (f.name == "pull_2s_vs_1s/16MB/1w")
        std::fprintf(stderr, "  %-52s %.2f x (%s)\n", "16 MB dense pull, 2 servers beat 1", r,
                     r > 1.0 ? "met" : "not met");
      if (f.name == "pull_3stripes/16MB/1s1w")
        std::fprintf(stderr, "  %-52s %.2f x raw (zero-copy: a frame per stripe)\n",
                     "16 MB dense pull, 3 update threads", r);
      if (f.name == "sparse_pull_3stripes/16MB/1s1w")
        std::fprintf(stderr, "  %-52s %.2f x raw (zero-copy: a frame per stripe a request)\n",
                     "16 MB sparse pull, 3 update threads", r);
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
        const double fixed = double(server::ServerOptions().copy_on_write_budget_bytes);
        const double over = f.value - 3.2 * f.baseline;
        std::fprintf(stderr, "  %-52s %.3f x 4N, 3.2 x 4N %+.1f MiB (%s; fixed: the %.0f MiB copy-on-write budget)\n",
                     ("RSS <= 3.2 x 4N + fixed: " + f.name).c_str(), r, over / kMB, over <= fixed ? "met" : "not met",
                     fixed / kMB);
      }
    }
  }

  void RunShape(const Shape& sh) {
    const LocalClusterConfig lc = BenchCluster(sh.S, sh.W, cfg_.profile_update_threads);
    LocalCluster cl(lc);
    Status st = cl.Start();
    if (!st.ok()) {
      std::fprintf(stderr, "transport: cluster %s failed to start: %s\n", ShapeName(sh.S, sh.W).c_str(),
                   st.ToString().c_str());
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
      std::fprintf(stderr, "transport: cluster %s did not finish cleanly: %s\n", ShapeName(sh.S, sh.W).c_str(),
                   st.ToString().c_str());
  }

  void RunCase(LocalCluster& cl, const Shape& sh, std::vector<std::unique_ptr<RawClient>>& raw, size_t bytes,
               Layout layout) {
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
      ppd.push_back(std::make_unique<PushPullDriver>(cl.client(w), tables[w], floats, key_buffer, bufs, wait_ms));
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
      RunResult r = RunWorkers(
          W, bpo, [&](int w) { return RunLoop(*drivers[w], op, p, bar); }, lat_pool);
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
      if (cfg_.profile_raw)
        one(rwd, rw_failed, op, plan, &r, &l);
      else
        one(ppd, pp_failed, op, plan, &r, &l);
      ppd.clear();
      rwd.clear();
      const std::string name = std::string("profile_") +
                               (cfg_.profile_raw_sgd ? "raw_sgd_"
                                : cfg_.profile_raw   ? "raw_"
                                                     : "") +
                               LayoutPrefix(layout) + OpName(op) + (cfg_.profile_latency ? "_p50/" : "/") +
                               SizeName(bytes) + "/" + ShapeName(S, W);
      if (cfg_.profile_latency)
        Add(name, "us", r.ok ? Percentile(l, 0.5) : NAN, 0.0,
            r.ok ? "ops " + std::to_string(r.ops) : "FAILED: " + r.error);
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
    std::fprintf(stderr, "transport: %s%s/%s took %.1f s\n", LayoutPrefix(layout).c_str(), SizeName(bytes).c_str(),
                 ShapeName(S, W).c_str(), Now() - tc);
    const std::string suffix = "/" + SizeName(bytes) + "/" + ShapeName(S, W);
    const std::string pre = LayoutPrefix(layout);
    const std::string what =
        sparse ? "sparse table dim 64, " + std::to_string(rows) + " random keys" +
                     (layout == Layout::kSparse ? " in server order (GroupByServer)" : " in the order drawn") +
                     " (Push of a shared buffer, Pull into a view)"
               : "dense table " + std::to_string(rows) + "x" + std::to_string(dim) +
                     " (PushDense of a shared buffer, whole-table Pull into a view)";
    auto fail_note = [](const RunResult& a, const RunResult& b) {
      std::string e = !a.ok ? "pushpull FAILED: " + a.error : "";
      if (!b.ok) e += (e.empty() ? "" : "; ") + std::string("raw FAILED: ") + b.error;
      return e;
    };
    for (Op op : {Op::kPush, Op::kPull, Op::kPushPull}) {
      const RunResult& a = pp.r[int(op)];
      const RunResult& b = rw.r[int(op)];
      std::string note = what + ", ASP+SGD, " + std::to_string(thr.depth) + " ops in flight per worker, best of " +
                         std::to_string(reps) + " alternating runs" + (reps % 2 == 0 ? " (ABBA)" : "") +
                         PairNote(pairs[int(op)]) + (op == Op::kPushPull ? ", bytes of both directions" : "") +
                         ", ops pp/raw " + std::to_string(a.ops) + "/" + std::to_string(b.ops);
      std::string f = fail_note(a, b);
      if (!f.empty()) note = f;
      Add(pre + OpName(op) + suffix, "GB/s", a.ok ? a.gbps : NAN, b.ok ? b.gbps : 0.0, note);
    }
    for (int i = 0; i < 2; ++i) {
      const RunResult& a = pp.lat[i];
      const RunResult& b = rw.lat[i];
      const std::string op = i == 0 ? "push" : "pull";
      std::string note = what + ", ASP+SGD, one op at a time per worker, samples of " + std::to_string(lat_reps) +
                         " alternating runs pooled, ops pp/raw " + std::to_string(a.ops) + "/" + std::to_string(b.ops);
      std::string f = fail_note(a, b);
      if (!f.empty()) note = f;
      Add(pre + op + "_p50" + suffix, "us", a.ok ? a.p50_us : NAN, b.ok ? b.p50_us : 0.0, note);
      Add(pre + op + "_p99" + suffix, "us", a.ok ? a.p99_us : NAN, b.ok ? b.p99_us : 0.0, note);
    }
  }

  // A 16 MB dense pull from 2 servers against the same pull from 1: both clusters up at once and
  // their runs alternating (the shape runs above are minutes apart, and this machine's speed
  // drifts over minutes), best run of each. Twice the repetitions of the shape runs, each longer:
  // the two differ by less than single runs scatter here (docs/performance-notes.md).
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
          "pipelined depth 2, runs of " +
              std::to_string(int(plan.budget_s * 1000)) + " ms of the two alternating, best of " +
              std::to_string(reps));
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
          "dense 16MB whole-table Pull into a view from 1 server with " + std::to_string(K) +
              " update threads (a zero-copy values frame per stripe) vs raw ZeroMQ, pipelined depth " +
              std::to_string(plan.depth) + ", alternating, best of " + std::to_string(cfg_.reps));
  }

  // The same for a sparse table (dim 64, 65536 random keys, a Pull into a view): a request per block's keys,
  // each answered with a frame per stripe, each stripe's rows in place (kFlagByStripe), against
  // raw ZeroMQ sending the keys and moving the same bytes.
  void RunStripedSparsePull() {
    const size_t bytes = 16 * kMB;
    const int K = 3;
    const uint32_t dim = 64;
    const std::string name = "sparse_pull_3stripes/16MB/1s1w";
    LocalCluster cl(BenchCluster(1, 1, K));
    Status st = cl.Start();
    Result<Table> t = st.ok()
                          ? cl.client(0).CreateTable(MakeSpec("striped_sparse", true, 0, dim, opt::Kind::kSgd, Asp()))
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
          "sparse 16MB Pull into a view (dim 64, " + std::to_string(keys->size()) +
              " random keys) from 1 server with " + std::to_string(K) +
              " update threads (a zero-copy values frame per stripe a request) vs raw ZeroMQ, "
              "pipelined depth " +
              std::to_string(plan.depth) + ", alternating, best of " + std::to_string(cfg_.reps));
  }

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
            PullOptions whole_table;
            whole_table.view = &view;
            Future pull = with_pull ? c.Pull(*t, whole_table) : Future();
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
              "as server_rss_adam/" + tag +
                  " (the client's gradient, 4N bytes, is still "
                  "allocated here and subtracted), " +
                  what + "; the heap is trimmed before every figure");
        };
        rss_after(8, true, "server_rss_adam_during_pulls/" + tag,
                  "after 8 rounds of a pull and a push sent together: each push lands while the "
                  "pull's reply may still hold the parameters; it is written to another array "
                  "(copy-on-write) when the budget has room for the held one, which the stripe "
                  "then keeps as a spare while this goes on, else it waits for the reply to be sent");
        rss_after(8, false, "server_rss_adam_after_pulls/" + tag, "then after 8 pushes alone: the spare is dropped");
        grad.reset();
      }
    }
    if (!note.empty() && note.rfind("FAILED", 0) == 0) Add("server_rss_adam/" + tag, "bytes", NAN, 4.0 * N, note);
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
    // are noisy; shorter runs scatter single ratios by 0.2).
    cfg.budget_s = 0.3;
    cfg.lat_budget_s = 0.1;
    cfg.reps = 4;
  }
  if (const char* prof = std::getenv("PP_TRANSPORT_PROFILE")) {
    char op[32] = {0}, size[32] = {0}, side[32] = {0};
    int S = 0, W = 0;
    if (std::sscanf(prof, "%31[a-z_0-9]/%31[0-9KMB]/%ds%dw/%31s", op, size, &S, &W, side) < 4 || S < 1 || W < 1) {
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
      rep.Refuse("PP_TRANSPORT_PROFILE=" + std::string(prof) +
                 ": keys in the order drawn are measured with 2 servers or more");
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

}  // namespace
}  // namespace pushpull::bench

PP_BENCH(transport, pushpull::bench::RunTransportBench);
