// Bench "optimizer": the effective memory bandwidth of each optimizer's Apply() against a
// STREAM-style triad measured in the same run over arrays of the same size. An update is one
// streaming pass, so bandwidth is its natural unit: bytes read plus bytes written per parameter,
// times parameters per second. Sizes are in units of 2^20 parameters ("16M" = 16 * 2^20).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/bench.h"
#include "optimizers/optimizer.h"
#include "optimizers/simd.h"

namespace pushpull::bench {
namespace {

constexpr size_t kMi = size_t(1) << 20;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float[], FreeDeleter>;

// 64-byte aligned (a cache line) and written once, so no page fault lands in a timed pass.
Array MakeArray(size_t n, float value) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  Array a(static_cast<float*>(std::aligned_alloc(64, bytes)));
  std::fill(a.get(), a.get() + n, value);
  return a;
}

// Best (shortest) wall time of `reps` calls of fn, after one unmeasured warm-up call.
template <class Fn>
double BestSeconds(int reps, Fn&& fn) {
  fn();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    fn();
    best = std::min(best, Now() - t0);
  }
  return best;
}

void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s, size_t n) {
  opt::simd::ForEach(n, [=](auto tag, size_t i) {
    using V = decltype(tag);
    opt::simd::Store(a + i, opt::simd::Load<V>(b + i) + s * opt::simd::Load<V>(c + i));
  });
}

void Axpy(float* __restrict a, const float* __restrict b, float s, size_t n) {
  opt::simd::ForEach(n, [=](auto tag, size_t i) {
    using V = decltype(tag);
    opt::simd::Store(a + i, opt::simd::Load<V>(a + i) + s * opt::simd::Load<V>(b + i));
  });
}

struct Case {
  const char* name;
  int bytes_per_param;
  const char* counted;
  opt::OptimizerConfig config;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  opt::OptimizerConfig c;
  cases.push_back({"sgd", 12, "12 B/param: read p,g; write p", c});
  c.momentum = 0.9f;
  cases.push_back({"sgd_momentum", 20, "20 B/param: read p,g,buf; write p,buf", c});
  c = opt::OptimizerConfig();
  c.kind = opt::Kind::kAdam;
  cases.push_back({"adam", 28, "28 B/param: read p,g,m,v; write p,m,v", c});
  c.kind = opt::Kind::kAdamW;
  c.weight_decay = 0.01f;
  cases.push_back({"adamw", 28, "28 B/param: read p,g,m,v; write p,m,v", c});
  c = opt::OptimizerConfig();
  c.kind = opt::Kind::kAdaGrad;
  c.initial_accumulator = 0.1f;
  cases.push_back({"adagrad", 20, "20 B/param: read p,g,accum; write p,accum", c});
  c = opt::OptimizerConfig();
  c.kind = opt::Kind::kFtrl;
  c.ftrl_l1 = 1e-4f;
  cases.push_back({"ftrl", 28, "28 B/param: read w,g,z,n; write w,z,n", c});
  return cases;
}

// Arrays for one size: parameters, gradient and up to two slots (the cases here use <= 2).
struct Arrays {
  explicit Arrays(size_t n)
      : n(n),
        param(MakeArray(n, 0.5f)),
        grad(MakeArray(n, 0.0f)),
        slot0(MakeArray(n, 0.0f)),
        slot1(MakeArray(n, 0.0f)) {
    // Small, varied, never denormal once squared: realistic gradients without slow paths.
    for (size_t i = 0; i < n; ++i) grad[i] = 1e-3f * (float(i % 17) - 7.5f);
  }
  void ResetSlots(const opt::Optimizer& o) {
    std::fill(param.get(), param.get() + n, 0.5f);
    std::fill(slot0.get(), slot0.get() + n, o.num_slots() > 0 ? o.slot_init(0) : 0.0f);
    std::fill(slot1.get(), slot1.get() + n, o.num_slots() > 1 ? o.slot_init(1) : 0.0f);
  }
  size_t n;
  Array param, grad, slot0, slot1;
};

// Applies `o` to [begin, end) of the arrays, at update count `step`.
void ApplyRange(const opt::Optimizer& o, Arrays& a, size_t begin, size_t end, int64_t step) {
  float* slots[2] = {a.slot0.get() + begin, a.slot1.get() + begin};
  opt::StepContext ctx;
  ctx.step = step;
  ctx.lr = 1e-3f;
  o.Apply(a.param.get() + begin, slots, a.grad.get() + begin, end - begin, ctx);
}

double GBps(double bytes, double seconds) { return bytes / seconds / 1e9; }

void RunOptimizerBench(Reporter& r, const Options& opts) {
  const std::vector<size_t> sizes =
      opts.quick ? std::vector<size_t>{kMi} : std::vector<size_t>{kMi, 16 * kMi, 64 * kMi};
  double adam_1thread = 0.0;
  std::unique_ptr<Arrays> arrays;
  for (size_t n : sizes) {
    const std::string size_name = "/" + std::to_string(n / kMi) + "M";
    // Short passes are the noisiest: they get the most repetitions.
    const int reps = opts.quick ? 3 : n <= kMi ? 50 : n <= 16 * kMi ? 15 : 8;
    arrays.reset();
    arrays = std::make_unique<Arrays>(n);
    Arrays& a = *arrays;

    const double triad_s = BestSeconds(reps, [&] { Triad(a.slot0.get(), a.param.get(), a.grad.get(), 0.5f, n); });
    const double triad = GBps(12.0 * n, triad_s);
    r.Add({"optimizer", "triad" + size_name, "GB/s", triad, 0.0,
           "12 B/elem: read b,c; write a (STREAM count: write-allocate reads not counted); "
           "1 thread"});
    // The optimizers' own access pattern (every array written is read first, so no
    // write-allocate traffic): a tighter bound than the triad, reported beside it.
    const double axpy_s = BestSeconds(reps, [&] { Axpy(a.slot0.get(), a.grad.get(), 0.5f, n); });
    r.Add({"optimizer", "axpy" + size_name, "GB/s", GBps(12.0 * n, axpy_s), triad,
           "12 B/elem: read a,b; write a (a += s*b); 1 thread; baseline triad"});

    for (const Case& c : Cases()) {
      const auto o = opt::Optimizer::Create(c.config);
      a.ResetSlots(*o);
      int64_t step = 0;
      const double s = BestSeconds(reps, [&] { ApplyRange(*o, a, 0, n, ++step); });
      const double value = GBps(double(c.bytes_per_param) * n, s);
      r.Add({"optimizer", c.name + size_name, "GB/s", value, triad,
             std::string(c.counted) + "; 1 thread; baseline triad"});
      if (c.config.kind == opt::Kind::kAdam) adam_1thread = value;
    }

    // Thread scaling on the largest size: Adam split into equal contiguous parts.
    if (n != sizes.back() || opts.threads < 2) continue;
    opt::OptimizerConfig adam_config;
    adam_config.kind = opt::Kind::kAdam;
    const auto adam = opt::Optimizer::Create(adam_config);
    a.ResetSlots(*adam);
    const int threads = opts.threads;
    int64_t step = 0;
    const double s = BestSeconds(reps, [&] {
      ++step;
      std::vector<std::thread> pool;
      const size_t chunk = (n / threads + 15) / 16 * 16;  // whole vectors per thread
      for (int t = 0; t < threads; ++t) {
        const size_t begin = std::min(n, t * chunk);
        const size_t end = t + 1 == threads ? n : std::min(n, begin + chunk);
        pool.emplace_back([&, begin, end] { ApplyRange(*adam, a, begin, end, step); });
      }
      for (auto& th : pool) th.join();
    });
    r.Add(
        {"optimizer", "adam_threads" + std::to_string(threads) + size_name, "GB/s", GBps(28.0 * n, s), adam_1thread,
         "28 B/param over " + std::to_string(threads) + " threads (thread start included); baseline adam on 1 thread"});
  }
}

}  // namespace
}  // namespace pushpull::bench

PP_BENCH(optimizer, pushpull::bench::RunOptimizerBench);
