// What every training app shares: options common to all apps, the result summary, progress
// lines and the per-epoch metrics file. Apps take Options structs (flags live in
// worker/worker_main.cc), so tests can run an app in-process against a threads-only cluster.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "common/cluster.h"
#include "common/status.h"

namespace pushpull {

class Client;

struct AppOptions {
  Consistency consistency;        // of every table the app creates
  int epochs = 10;
  int batch = 100;                // per worker
  float lr = -1;                  // < 0: the app's default
  std::string optimizer;          // empty: the app's default
  uint64_t seed = 42;
  std::string metrics_out;        // append one JSON object per epoch when set
  double target = -1;             // loss (or accuracy) to reach; < 0: the app's default
  int progress_interval_s = 5;    // progress line period
};

struct AppResult {
  bool reached_target = false;
  double final_metric = 0;        // loss or accuracy, as the app defines
  int32_t max_staleness = 0;      // largest staleness any pull observed
  std::string summary;            // one line
};

// Appends JSON objects, one per line, to a file (opened per write: safe if the file is shared).
class MetricsWriter {
 public:
  explicit MetricsWriter(std::string path) : path_(std::move(path)) {}
  Status Write(const std::map<std::string, double>& fields) const;
  bool enabled() const { return !path_.empty(); }

 private:
  std::string path_;
};

// Rate-limited progress: prints "step N loss L samples/s S" at most every interval seconds.
class Progress {
 public:
  Progress(std::string prefix, int interval_s);
  void Update(int64_t step, double loss, int64_t samples);

 private:
  std::string prefix_;
  int interval_s_;
  int64_t start_ms_, last_ms_;
  int64_t last_samples_ = 0;
};

}  // namespace pushpull
