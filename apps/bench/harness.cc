#include "apps/bench/harness.h"

#include <chrono>
#include <cmath>
#include <cstdio>

namespace pushpull::bench {

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

std::string ShapeName(int S, int W) { return std::to_string(S) + "s" + std::to_string(W) + "w"; }

void Barrier::Arrive() {
  MutexLock l(&mu_);
  const int gen = gen_;
  if (++count_ == n_) {
    count_ = 0;
    ++gen_;
    cv_.SignalAll();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (gen_ == gen && cv_.WaitUntil(&mu_, deadline)) {
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

std::string PairNote(std::vector<double> r) {
  if (r.empty()) return "";
  std::sort(r.begin(), r.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, ", pair ratios %.2f / %.2f / %.2f (min / median / max)", r.front(),
                r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2, r.back());
  return buf;
}

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

void FigureLog::Add(const std::string& name, const std::string& unit, double value, double baseline,
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

}  // namespace pushpull::bench
