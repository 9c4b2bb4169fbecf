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
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/bench/bench.h"
#include "apps/bench/harness.h"
#include "apps/bench/pushpull_side.h"
#include "apps/bench/raw_zmq.h"
#include "common/log.h"
#include "tests/support/local_cluster.h"

namespace pushpull::bench {
namespace {

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
    std::fprintf(stderr, "\nzmq ceilings (the data-path goals against raw ZeroMQ on this machine), this run:\n");
    std::fprintf(stderr, "  %-62s %s\n", "1 MB push-then-pull, raw + SGD / raw (goal for pushpull: 0.8)",
                 range("raw_sgd_pushpull/").c_str());
    std::fprintf(stderr, "  %-62s %s\n", "1 MB push-then-pull, pushpull / (raw + SGD)",
                 range("pushpull_vs_raw_sgd/").c_str());
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
      if (t.ok())
        tables.push_back(t.value());
      else
        st = t.status();
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
        ppd.push_back(
            std::make_unique<PushPullDriver>(cl.client(w), tables[w], bytes / 4, nullptr, plan.depth, wait_ms));
        for (int k = 0; k < 2; ++k) {
          clients[k].push_back(std::make_unique<RawClient>(addrs[k]));
          rwd[k].push_back(std::make_unique<RawDriver>(*clients[k].back(), part_floats, part_keys, wait_ms));
        }
      }
      Barrier bar(W);
      auto run = [&](int side) -> bool {
        const double bpo = 2.0 * double(bytes);  // both directions, as the transport bench counts
        RunResult r =
            side == 0 ? RunWorkers(W, bpo, [&](int w) { return RunLoop(*ppd[w], Op::kPushPull, plan, bar); })
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
    if (!fin.ok())
      std::fprintf(stderr, "zmq_ceiling: cluster %s finish: %s\n", ShapeName(S, W).c_str(), fin.ToString().c_str());
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
        "(baseline): " +
            how + PairNote(r_sgd) + buf);
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
      if (t.ok())
        pp[i] = std::make_unique<PushPullDriver>(cl[i]->client(0), t.value(), bytes / 4, nullptr, 2, kWaitMs);
      else
        error = "pushpull: " + t.status().ToString();
    }
    // Sides: raw from 2 servers, raw from 1, then pushpull from 2 and from 1.
    const int sides = with_pushpull ? 4 : 2;
    double best[4] = {0, 0, 0, 0};
    Barrier bar(1);
    auto run = [&](int side) {
      RunResult r;
      auto pull = [&](auto& d) {
        return RunWorkers(1, double(bytes), [&](int) { return RunLoop(d, Op::kPull, plan, bar); });
      };
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
    const std::string how =
        ", 1 worker, pipelined depth " + std::to_string(plan.depth) + ", " +
        (with_pushpull ? "pushpull's pulls from 1 and 2 servers in the same rotation" : std::string("alternating")) +
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
          "pushpull's dense 16MB whole-table Pull into a view from 1 server (value) vs raw ZeroMQ's in 1MB requests "
          "(baseline)" +
              how);
      Add("pushpull_pull_2s_vs_1s/16MB/1w", "GB/s", best[2], best[3],
          "pushpull's dense 16MB whole-table Pull into a view from 2 servers (value) vs 1 (baseline)" + how +
              " (the transport bench's pull_2s_vs_1s/16MB/1w, measured beside raw's)");
    }
  }

  const Config cfg_;
};

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

PP_BENCH(zmq_ceiling, pushpull::bench::RunCeilingBench);
