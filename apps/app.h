// What every training app shares: options common to all apps, the result summary, progress
// lines and the per-epoch metrics file. Apps take Options structs (flags live in
// apps/worker_main.cc), so tests can run an app in-process against a threads-only cluster.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "common/cluster.h"
#include "pushpull/status.h"

namespace pushpull {

class Client;
class Future;

// Stragglers, injected into a worker to study the consistency models (all seeded; a run that
// injects anything logs what). pushpull-worker's flags for them are apart from the others
// (apps/worker_main_experiment_flags.cc).
struct InjectionOptions {
  std::map<int, int> fixed_delay_ms;  // rank -> sleep this long every clock
  double random_delay_p = 0;          // every worker, each clock, with probability p ...
  double random_delay_mean_ms = 0;    // ... sleeps an exponential time with this mean
  std::map<int, double> slowdown;     // rank -> compute takes this many times as long
  // Parses "1:50,3:20" style lists; InvalidArgument naming the flag otherwise.
  static Status ParseRankMap(const std::string& flag, const std::string& text, std::map<int, double>* out);
  // What worker `rank` injects: "" when nothing.
  std::string Describe(int rank) const;
};

struct AppOptions {
  Consistency consistency;  // of every table the app creates
  int epochs = 10;
  int batch = 100;        // per worker
  float lr = -1;          // < 0: the app's default
  std::string optimizer;  // empty: the app's default
  uint64_t seed = 42;
  std::string metrics_out;       // append one JSON object per epoch when set
  double target = -1;            // loss (or accuracy) to reach; < 0: the app's default
  int progress_interval_s = 5;   // step progress line period (0: none)
  int progress_every_s = 10;     // epoch lines: the first few, then one at most this often, and the last (0: all)
  std::string trace_out;         // CSV, a row per clock (and per evaluation): clock,wall_s,loss,metric,staleness,kind
  int eval_every = 0;            // worker 0 also evaluates on a test subset every this many clocks
  int eval_subset = 1000;        // ... of this many examples (traced as the metric column)
  bool staleness_aware = false;  // tables divide the step by the push's staleness (Zhang et al.)
  InjectionOptions inject;
  int checkpoint_every_epochs = 0;  // checkpoint after every this many epochs and the last (0: never)
};

// Checkpoints at epoch ends, and resuming from one. A job restored from a checkpoint starts at the
// checkpoint's clock (Client::clock()); clock_after(e) is this app's clock at the end of epoch e
// (0 for e = 0). Returns the first epoch to run: 1 in a fresh job, the one after the checkpoint's
// otherwise; epochs + 1 when the checkpoint is at the last epoch's end (the job had trained, then
// was restarted before it ended: the app evaluates the restored model and ends); InvalidArgument
// when the clock ends no epoch of this run (other data, batch size or worker count) or is past
// its last epoch (fewer --epochs than the checkpointed run trained);
// InvalidArgument when checkpoints are asked for (app.checkpoint_every_epochs) in a job without
// them (the scheduler has no checkpoint directory): before training, not after the first epoch.
// A client that took a dead worker's place (Client::replacement()) may start mid-epoch: `skip` is
// then the steps of that epoch its predecessor had done (0 otherwise).
struct StartPoint {
  int epoch = 1;
  int64_t skip = 0;
};
// `run` says how this run counts its clocks (RunDescription): a job restored from a checkpoint
// taken by a run that counted them otherwise (another batch size, data or worker count) is
// InvalidArgument, naming both, rather than resumed at the wrong epoch. `earlier_run`: the same
// run in the shorter description that older checkpoints carry (without the seed, for linreg
// without the workers too), accepted as well; empty when no older checkpoint can match.
Result<StartPoint> FirstEpoch(Client& client, const AppOptions& app, const std::function<int64_t(int)>& clock_after,
                              const char* app_name, const std::string& run, const std::string& earlier_run = "");
// "fmnist_mlp: epochs end at clocks 938, 1876, ... (batch 64, 4 workers, 60000 examples)": the
// first epochs' ends and what they follow from (`what`).
std::string RunDescription(const char* app_name, const std::function<int64_t(int)>& clock_after,
                           const std::string& what);
// After epoch `epoch` (its last Clock() done): a checkpoint when AppOptions asks for one, every
// checkpoint_every_epochs epochs and after the last; it keeps `run`.
Status CheckpointIfDue(Client& client, const AppOptions& app, int epoch, const char* app_name, const std::string& run);

// Applies InjectionOptions after each step of one worker.
class Injector {
 public:
  Injector(const InjectionOptions& o, int rank, uint64_t seed);
  // compute_s: seconds the step's computation took (for the slowdown factor).
  void AfterStep(double compute_s);
  double injected_s() const { return injected_s_; }

 private:
  InjectionOptions o_;
  int rank_;
  uint64_t state_;
  double injected_s_ = 0;
};

// Fails loudly when a pull saw more staleness than the table's model allows.
Status CheckStaleness(const Future& f, const Consistency& c, const char* what);

// Per-clock CSV trace for the experiments.
class TraceWriter {
 public:
  // "%d" in path is replaced by the worker's rank (one file per worker).
  TraceWriter(const std::string& path, int rank);
  // A clock's row ("step": its minibatch loss, the app's metric when measured, its pull's
  // staleness), or with eval an epoch's evaluation by worker 0 ("eval": the test or held-out loss
  // and the app's evaluation metric), so that the two are never mixed up.
  void Row(int64_t clock, double wall_s, double loss, double metric, int32_t staleness, bool eval = false);
  bool enabled() const { return f_ != nullptr; }
  // NotFound when the file could not be opened: the app fails before it trains.
  const Status& status() const { return status_; }
  ~TraceWriter();

 private:
  FILE* f_ = nullptr;
  Status status_;
};

struct AppResult {
  bool reached_target = false;
  // A worker that evaluated its target and missed it: what it tells the job ("missed target:
  // loss 0.0123 > 0.0100 (1.5 x noise floor 0.0067)"); empty otherwise (reached, or another
  // worker evaluates).
  std::string missed_target;
  double final_metric = 0;    // loss or accuracy, as the app defines
  int32_t max_staleness = 0;  // largest staleness any pull observed
  double samples_per_s = 0;   // training throughput of this worker (data loading excluded)
  double wait_fraction = 0;   // share of step time spent waiting on pulls (fmnist_mlp)
  std::string summary;        // one line
};

// Appends JSON objects, one per line, to a file (opened per write: safe if the file is shared).
class MetricsWriter {
 public:
  // Opens the file once to append (NotFound in status() when it cannot: the app fails before it
  // trains, not at its first epoch's end).
  explicit MetricsWriter(std::string path);
  Status Write(const std::map<std::string, double>& fields) const;
  bool enabled() const { return !path_.empty(); }
  const Status& status() const { return status_; }

 private:
  std::string path_;
  Status status_;
};

// What a worker's /metrics shows of its app (pushpull-worker --metrics_port): the latest step
// (Progress::Update, every step) and the last epoch's fields (MetricsWriter::Write, whether or not
// it has a file). Process-wide: a worker process runs one app. Thread-safe.
struct AppMetrics {
  int64_t step = -1;                    // -1: no step yet
  double loss = 0;                      // the last step's minibatch loss
  int64_t samples = 0;                  // trained on so far
  std::map<std::string, double> epoch;  // the last epoch's fields ("epoch", "test_accuracy", ...)
};
AppMetrics AppMetricsNow();
// A worker's /metrics (Prometheus text): its client's counters (client may be null: not joined
// yet) and AppMetricsNow(), labelled with the worker's rank and the app's name.
std::string WorkerMetricsText(const Client* client, const std::string& app);

// The verdict of a missed target: "missed target: MEASURE VALUE OP TARGET (HOW)", HOW saying how
// the target was set ("--target", or the app's default and what it follows from).
std::string MissedTarget(const std::string& measure, double value, const char* op, double target,
                         const std::string& how);
// A figure in such a line: 4 decimals, or 3 significant digits for one below 0.001.
std::string Figure(double v);

// Which epochs an app logs a line for: the first kFirstEpochLines it runs (the run is seen to
// start, at what rate), then at most one every every_s seconds, and always the last (its final
// loss); every epoch when every_s is 0. A run of thousands of short epochs so logs a line every
// few seconds, not hundreds a second.
class EpochLines {
 public:
  static constexpr int kFirstEpochLines = 5;
  EpochLines(int every_s, int last_epoch) : every_s_(every_s), last_epoch_(last_epoch) {}
  // Whether epoch `epoch`'s line is due; counted as logged when it is.
  bool Due(int epoch);

 private:
  const int every_s_, last_epoch_;
  int logged_ = 0;
  int64_t last_ms_ = 0;
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
