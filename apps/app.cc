#include "apps/app.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/daemon/metrics.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/time.h"
#include "pushpull/pushpull.h"

#include <thread>

namespace pushpull {

namespace {
// The app's latest figures, written by its training thread and read by the metrics server's.
Mutex g_app_metrics_mu;
AppMetrics g_app_metrics GUARDED_BY(g_app_metrics_mu);
}  // namespace

AppMetrics AppMetricsNow() {
  MutexLock l(&g_app_metrics_mu);
  return g_app_metrics;
}

std::string WorkerMetricsText(const Client* client, const std::string& app) {
  MetricsText m;
  const MetricsText::Labels w = {{"worker", std::to_string(client ? client->rank() : -1)}};
  if (client) {
    const ClientStats s = client->stats();
    m.Gauge("pushpull_worker_clock", "The worker's clock (Clock() calls, from the start clock).",
            double(client->clock()), w);
    m.Counter("pushpull_worker_pushes_total", "Pushes sent.", double(s.pushes), w);
    m.Counter("pushpull_worker_pulls_total", "Pulls sent.", double(s.pulls), w);
    m.Counter("pushpull_worker_sent_bytes_total", "Bytes of keys and values sent.", double(s.bytes_sent), w);
    m.Counter("pushpull_worker_received_bytes_total", "Bytes of values received.", double(s.bytes_received), w);
    m.Gauge("pushpull_worker_max_staleness", "The largest staleness a pull was answered at, in clocks.",
            double(s.max_staleness), w);
    m.Counter("pushpull_worker_resent_total", "Requests sent again after a connection to a server dropped.",
              double(s.resent), w);
    m.Gauge("pushpull_worker_unanswered_bytes", "Payload of requests not answered yet.", double(s.unanswered_bytes), w);
    m.Counter("pushpull_worker_waits_for_room_total", "Calls that waited for room (--max_unanswered_mb).",
              double(s.waits_for_room), w);
  }
  const AppMetrics a = AppMetricsNow();
  MetricsText::Labels l = w;
  l.emplace_back("app", app);
  m.Gauge("pushpull_app_step", "The app's last training step (-1: none yet).", double(a.step), l);
  m.Gauge("pushpull_app_loss", "The last step's minibatch loss.", a.loss, l);
  m.Counter("pushpull_app_samples_total", "Examples trained on.", double(a.samples), l);
  for (const auto& [field, v] : a.epoch) {
    MetricsText::Labels f = l;
    f.emplace_back("field", field);
    m.Gauge("pushpull_app_last_epoch", "The last epoch's figures (--metrics_out's fields), by field.", v, f);
  }
  return m.str();
}

MetricsWriter::MetricsWriter(std::string path) : path_(std::move(path)) {
  if (!path_.empty() && !std::ofstream(path_, std::ios::app))
    status_ = Status::NotFound("cannot open --metrics_out file '" + path_ + "'");
}

Status MetricsWriter::Write(const std::map<std::string, double>& fields) const {
  {
    MutexLock l(&g_app_metrics_mu);
    g_app_metrics.epoch = fields;
  }
  if (path_.empty()) return Status::OK();
  std::ostringstream os;
  os.precision(8);
  os << "{";
  bool first = true;
  for (const auto& [k, v] : fields) {
    os << (first ? "" : ", ") << "\"" << k << "\": ";
    if (std::isfinite(v))
      os << v;
    else
      os << "null";
    first = false;
  }
  os << "}\n";
  std::ofstream f(path_, std::ios::app);
  if (!f) return Status::NotFound("cannot open --metrics_out file '" + path_ + "'");
  f << os.str();
  return f ? Status::OK() : Status::Internal("write to '" + path_ + "' failed");
}

Progress::Progress(std::string prefix, int interval_s)
    : prefix_(std::move(prefix)), interval_s_(interval_s), start_ms_(NowMs()), last_ms_(NowMs()) {}

void Progress::Update(int64_t step, double loss, int64_t samples) {
  {
    MutexLock l(&g_app_metrics_mu);
    g_app_metrics.step = step;
    g_app_metrics.loss = loss;
    g_app_metrics.samples = samples;
  }
  int64_t now = NowMs();
  if (interval_s_ <= 0 || now - last_ms_ < interval_s_ * 1000) return;
  double rate = (samples - last_samples_) * 1000.0 / std::max<int64_t>(1, now - last_ms_);
  PP_LOG(Info) << prefix_ << " step " << step << " loss " << loss << " samples/s " << int64_t(rate) << " elapsed "
               << (now - start_ms_) / 1000 << "s";
  last_ms_ = now;
  last_samples_ = samples;
}

std::string Figure(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), v != 0 && std::fabs(v) < 1e-3 ? "%.3g" : "%.4f", v);
  return buf;
}

std::string MissedTarget(const std::string& measure, double value, const char* op, double target,
                         const std::string& how) {
  return "missed target: " + measure + " " + Figure(value) + " " + op + " " + Figure(target) + " (" + how + ")";
}

bool EpochLines::Due(int epoch) {
  const int64_t now = NowMs();
  const bool due =
      every_s_ <= 0 || epoch >= last_epoch_ || logged_ < kFirstEpochLines || now - last_ms_ >= int64_t(every_s_) * 1000;
  if (due) {
    ++logged_;
    last_ms_ = now;
  }
  return due;
}

Status InjectionOptions::ParseRankMap(const std::string& flag, const std::string& text, std::map<int, double>* out) {
  size_t i = 0;
  while (i < text.size()) {
    size_t comma = text.find(',', i);
    std::string item = text.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    size_t colon = item.find(':');
    char* rank_end = nullptr;
    char* end = nullptr;
    long rank = colon == std::string::npos ? -1 : std::strtol(item.c_str(), &rank_end, 10);
    double v = colon == std::string::npos ? 0 : std::strtod(item.c_str() + colon + 1, &end);
    // Both parts whole numbers: the rank up to the colon, the value to the end ("x:50" and
    // "1abc:50" are no ranks).
    if (colon == std::string::npos || colon == 0 || !std::isdigit(static_cast<unsigned char>(item[0])) ||
        rank > 1000000 || rank_end != item.c_str() + colon || !end || end == item.c_str() + colon + 1 || *end != '\0' ||
        !(v >= 0) || !std::isfinite(v))
      return Status::InvalidArgument("--" + flag + ": '" + item + "' is not RANK:VALUE (e.g. 1:50)");
    (*out)[static_cast<int>(rank)] = v;
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  return Status::OK();
}

std::string InjectionOptions::Describe(int rank) const {
  std::ostringstream os;
  auto f = fixed_delay_ms.find(rank);
  if (f != fixed_delay_ms.end()) os << "fixed delay " << f->second << " ms per clock; ";
  if (random_delay_p > 0)
    os << "random delay: p=" << random_delay_p << " exponential mean " << random_delay_mean_ms << " ms per clock; ";
  auto s = slowdown.find(rank);
  if (s != slowdown.end()) os << "compute slowdown x" << s->second << "; ";
  std::string r = os.str();
  return r.empty() ? "" : r.substr(0, r.size() - 2);
}

Injector::Injector(const InjectionOptions& o, int rank, uint64_t seed)
    : o_(o), rank_(rank), state_(SplitMix64(seed * 31 + rank + 1)) {
  // (Said only when there is something to say: a run without injection is the common case.)
  if (const std::string what = o.Describe(rank); !what.empty())
    PP_LOG(Info) << "injection for worker " << rank << ": " << what;
}

void Injector::AfterStep(double compute_s) {
  double sleep_s = 0;
  auto f = o_.fixed_delay_ms.find(rank_);
  if (f != o_.fixed_delay_ms.end()) sleep_s += f->second / 1000.0;
  if (o_.random_delay_p > 0) {
    state_ = SplitMix64(state_);
    double u = ((state_ >> 11) + 0.5) / 9007199254740992.0;
    if (u < o_.random_delay_p) {
      state_ = SplitMix64(state_);
      double u2 = ((state_ >> 11) + 0.5) / 9007199254740992.0;
      sleep_s += -std::log(u2) * o_.random_delay_mean_ms / 1000.0;
    }
  }
  auto s = o_.slowdown.find(rank_);
  if (s != o_.slowdown.end() && s->second > 1) sleep_s += (s->second - 1) * compute_s;
  if (sleep_s > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(sleep_s * 1e6)));
    injected_s_ += sleep_s;
  }
}

namespace {
// Where a run of `epochs` epochs starts when the job is at `c` (see FirstEpoch).
Result<StartPoint> FirstEpochOf(int64_t c, int epochs, const std::function<int64_t(int)>& clock_after,
                                const char* app_name, bool replacement) {
  if (c == 0) return StartPoint{1, 0};
  for (int e = 1; e <= epochs; ++e) {
    const int64_t end = clock_after(e);
    if (end < c) continue;
    if (end > c && replacement) {
      PP_LOG(Info) << app_name << ": taking a dead worker's place in epoch " << e << " after its step "
                   << c - clock_after(e - 1) << " (clock " << c << ")";
      return StartPoint{e, c - clock_after(e - 1)};
    }
    if (end > c) break;
    if (e == epochs) {
      PP_LOG(Info) << app_name << ": the checkpoint (clock " << c << ") is after the last epoch, " << e
                   << ": nothing left to train; evaluating the restored model";
      return StartPoint{e + 1, 0};
    }
    PP_LOG(Info) << app_name << ": resuming after epoch " << e << " (clock " << c << ")";
    return StartPoint{e + 1, 0};
  }
  // Both are the run's flags against the checkpoint's: InvalidArgument, a setup error (exit 2: a
  // restart would only meet the same failure).
  if (epochs >= 1 && c > clock_after(epochs)) {
    int e = epochs + 1;
    while (e < epochs + 1000000 && clock_after(e) < c) ++e;
    if (clock_after(e) == c)
      return Status::InvalidArgument(std::string(app_name) + ": the checkpoint (clock " + std::to_string(c) +
                                     ") is after epoch " + std::to_string(e) +
                                     ", beyond this run's last (--epochs=" + std::to_string(epochs) +
                                     "): resume with --epochs=" + std::to_string(e) + " or more");
  }
  return Status::InvalidArgument(std::string(app_name) + ": restored at clock " + std::to_string(c) +
                                 ", which ends no epoch of this run (epochs end at clocks " +
                                 std::to_string(clock_after(1)) + ", " + std::to_string(clock_after(2)) +
                                 ", ...): resume with the data, batch size and workers of the checkpointed run");
}
}  // namespace

std::string RunDescription(const char* app_name, const std::function<int64_t(int)>& clock_after,
                           const std::string& what) {
  // The first three epochs' ends, whatever --epochs is: a run resumed to train longer counts
  // its clocks as the checkpointed one did. (fmnist_mlp's cosine schedule, as long as --epochs,
  // then goes on over the new length: a server restores a table under a changed learning-rate
  // schedule, saying so, and refuses only another shape, optimizer state or consistency model.)
  std::string s = std::string(app_name) + ": epochs end at clocks ";
  for (int e = 1; e <= 3; ++e) s += (e > 1 ? ", " : "") + std::to_string(clock_after(e));
  return s + ", ... (" + what + ")";
}

Result<StartPoint> FirstEpoch(Client& client, const AppOptions& app, const std::function<int64_t(int)>& clock_after,
                              const char* app_name, const std::string& run, const std::string& earlier_run) {
  const std::string& was = client.restored_run();
  if (!was.empty() && was != run && (earlier_run.empty() || was != earlier_run))
    return Status::InvalidArgument(std::string(app_name) + ": the checkpoint was taken by a run where \"" + was +
                                   "\"; this one: \"" + run +
                                   "\". Resume with the data, seed, batch size and workers of "
                                   "the checkpointed run");
  auto first = FirstEpochOf(client.clock(), app.epochs, clock_after, app_name, client.replacement());
  // Checkpoints asked for in a job without them fail now rather than after an epoch (a job
  // restored after its last epoch trains, and checkpoints, no more).
  if (first.ok() && first->epoch <= app.epochs && app.checkpoint_every_epochs > 0 && !client.checkpoints_enabled())
    return Status::InvalidArgument(std::string(app_name) +
                                   ": --checkpoint_every_epochs=" + std::to_string(app.checkpoint_every_epochs) +
                                   " needs checkpoints on (the scheduler's --checkpoint_dir)");
  // A replacement that takes a dead worker's place at the end of an epoch asks for the checkpoint
  // due there, as the dead one would have: the others may be waiting in it for this rank (the
  // scheduler answers at once when it was taken already).
  if (first.ok() && client.replacement() && first->skip == 0 && first->epoch > 1)
    PP_RETURN_IF_ERROR(CheckpointIfDue(client, app, first->epoch - 1, app_name, run));
  return first;
}

Status CheckpointIfDue(Client& client, const AppOptions& app, int epoch, const char* app_name, const std::string& run) {
  // Every N epochs, and after the last: the trained model is always in the newest checkpoint.
  if (app.checkpoint_every_epochs <= 0 || (epoch % app.checkpoint_every_epochs != 0 && epoch != app.epochs))
    return Status::OK();
  const int64_t t0 = NowMs();
  PP_RETURN_IF_ERROR(
      client.Checkpoint(run).Annotate(std::string(app_name) + " checkpoint after epoch " + std::to_string(epoch)));
  if (client.rank() == 0)
    PP_LOG(Info) << app_name << ": checkpoint after epoch " << epoch << " (clock " << client.clock() << ") in "
                 << NowMs() - t0 << " ms";
  return Status::OK();
}

Status CheckStaleness(const Future& f, const Consistency& c, const char* what) {
  int64_t bound = c.bound();
  if (bound >= 0 && f.staleness() > bound)
    return Status::Internal(std::string(what) + ": a pull observed staleness " + std::to_string(f.staleness()) +
                            " beyond the bound " + std::to_string(bound) + " of " + c.ToString());
  return Status::OK();
}

TraceWriter::TraceWriter(const std::string& pattern, int rank) {
  if (pattern.empty()) return;
  std::string path = pattern;
  auto at = path.find("%d");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(rank));
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) {
    status_ = Status::NotFound("cannot open --trace_out file '" + path + "': " + std::strerror(errno));
    return;
  }
  std::fprintf(f_, "clock,wall_s,loss,metric,staleness,kind\n");
}

void TraceWriter::Row(int64_t clock, double wall_s, double loss, double metric, int32_t staleness, bool eval) {
  if (!f_) return;
  std::fprintf(f_, "%lld,%.4f,%.6g,%s,%d,%s\n", static_cast<long long>(clock), wall_s, loss,
               std::isfinite(metric) ? std::to_string(metric).c_str() : "", staleness, eval ? "eval" : "step");
}

TraceWriter::~TraceWriter() {
  if (f_) std::fclose(f_);
}

}  // namespace pushpull
