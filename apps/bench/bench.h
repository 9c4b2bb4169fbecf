// The pushpull-bench framework: benches register themselves with PP_BENCH from their own .cc
// file in apps/bench/; bench_main.cc runs the ones the --filter picks. Each result is a Figure,
// written as one JSON line to the --out file the moment it is measured (a crash keeps what was
// measured before it) and echoed as a table row on stdout:
//   {"bench": "optimizer", "case": "adam/16M", "value": 9.1, "unit": "GB/s",
//    "baseline": 11.2, "ratio": 0.81, "note": "..."}
// "ratio" is value/baseline and null when there is no baseline (baseline 0); "note" (what was
// counted, how) is left out when empty.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pushpull::bench {

struct Figure {
  std::string bench;  // the registered bench, e.g. "optimizer"
  std::string name;   // the case, e.g. "adam/16M"; written as "case"
  std::string unit;   // e.g. "GB/s", "us", "msg/s"
  double value = 0.0;
  double baseline = 0.0;  // 0: none
  std::string note;       // optional: what is counted
};

struct Options {
  bool quick = false;  // small sizes and few repetitions: a smoke run, not a measurement
  std::string filter;  // substring of the bench names to run; empty runs all
  int threads = 2;     // the most threads a scaling figure may use
};

// Threading: not thread-safe; call Add() from the bench's own thread.
class Reporter {
 public:
  // Appends to `out` (bench_main truncates it first); nullptr: stdout only.
  explicit Reporter(std::FILE* out) : out_(out) {}

  void Add(Figure f) {
    const bool has_ratio = f.baseline != 0.0 && std::isfinite(f.baseline);
    const double ratio = has_ratio ? f.value / f.baseline : 0.0;
    if (out_ != nullptr) {
      std::string line = "{\"bench\": " + Quote(f.bench) + ", \"case\": " + Quote(f.name) +
                         ", \"value\": " + Number(f.value) + ", \"unit\": " + Quote(f.unit) +
                         ", \"baseline\": " + (f.baseline != 0.0 ? Number(f.baseline) : "null") +
                         ", \"ratio\": " + (has_ratio ? Number(ratio) : "null");
      if (!f.note.empty()) line += ", \"note\": " + Quote(f.note);
      line += "}\n";
      std::fputs(line.c_str(), out_);
      std::fflush(out_);
    }
    if (rows_++ == 0) {
      std::printf("%-12s %-24s %12s %-6s %12s %7s  %s\n", "bench", "case", "value", "unit", "baseline", "ratio",
                  "note");
    }
    char ratio_text[32] = "-";
    if (has_ratio) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", ratio);
    char baseline_text[32] = "-";
    if (f.baseline != 0.0) std::snprintf(baseline_text, sizeof baseline_text, "%.4g", f.baseline);
    std::printf("%-12s %-24s %12.4g %-6s %12s %7s  %s\n", f.bench.c_str(), f.name.c_str(), f.value, f.unit.c_str(),
                baseline_text, ratio_text, f.note.c_str());
    std::fflush(stdout);
  }

  int rows() const { return rows_; }
  // A bench that cannot run as asked (a malformed setting): said on stderr, and the run exits 2.
  void Refuse(const std::string& why) {
    std::fprintf(stderr, "pushpull-bench: %s\n", why.c_str());
    refused_ = true;
  }
  bool refused() const { return refused_; }

 private:
  static std::string Number(double v) {
    if (!std::isfinite(v)) return "null";  // JSON has no NaN or Inf
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
  }
  static std::string Quote(const std::string& s) {
    std::string r = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') {
        r += '\\';
        r += ch;
      } else if (static_cast<unsigned char>(ch) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        r += buf;
      } else {
        r += ch;
      }
    }
    return r + "\"";
  }

  std::FILE* out_;
  int rows_ = 0;
  bool refused_ = false;
};

using BenchFn = std::function<void(Reporter&, const Options&)>;

struct Registered {
  std::string name;
  BenchFn fn;
};

// In registration order (link order of the bench objects). A function-local static, so that
// registrars in any translation unit may run before main() in any order.
inline std::vector<Registered>& Registry() {
  static std::vector<Registered> benches;
  return benches;
}

struct Registrar {
  Registrar(const char* name, BenchFn fn) { Registry().push_back({name, std::move(fn)}); }
};

// Seconds on a monotonic clock, for timing a measured pass.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace pushpull::bench

// PP_BENCH(optimizer, RunOptimizerBench) registers bench "optimizer"; at namespace scope in a
// apps/bench/*.cc file. fn: void(Reporter&, const Options&).
#define PP_BENCH(name, fn) static const ::pushpull::bench::Registrar pp_bench_registrar_##name(#name, fn)
