#include "server/server_metrics.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/log.h"
#include "common/memory.h"

namespace pushpull::server {

ServerMetrics::ServerMetrics(ServerContext* ctx, const Tables* tables, const MinClock* min_clock,
                             const CheckpointWriter* checkpoint, const ControlChannel* control)
    : ctx_(ctx), tables_(tables), min_clock_(min_clock), checkpoint_(checkpoint), control_(control) {}

Status ServerMetrics::Serve(const std::string& host, int port) {
  PP_ASSIGN_OR_RETURN(endpoint_, MetricsEndpoint::Start(host, port, [this] { return Render(); }));
  return Status::OK();
}

void ServerMetrics::CopyBudgetCounters() {
  const table::CopyOnWriteBudget& cow = *tables_->cow_budget();
  ctx_->stats.copy_on_write_waits = cow.waits.load();
  ctx_->stats.copy_on_write_overdrafts = cow.overdrafts.load();
}

void ServerMetrics::Update() {
  CopyBudgetCounters();
  ctx_->stats.table_bytes = tables_->memory().used();
  if (!endpoint_) return;
  const int64_t min_live = min_clock_->min_live();
  MutexLock l(&mu_);
  snapshot_.slowest_clock = min_live == std::numeric_limits<int64_t>::max() ? -1 : min_live;
  snapshot_.staleness = min_clock_->staleness();
  snapshot_.membership_version = control_->membership().version;
}

void ServerMetrics::LogStats(int64_t now) {
  const ServerStats& stats = ctx_->stats;
  const double s = std::max<int64_t>(1, now - logged_.at) / 1000.0;
  const uint64_t pushes = stats.pushes, pulls = stats.pulls, clocks = stats.clocks;
  const uint64_t in = stats.bytes_in, out = stats.bytes_out;
  const int64_t min_live = min_clock_->min_live();
  char line[512];
  std::snprintf(line, sizeof line,
                "stats, last %.1f s: %.0f pushes/s, %.0f pulls/s, %.0f clocks/s, in %.1f MB/s, "
                "out %.1f MB/s; slowest live worker at clock %lld, %llu pulls parked, "
                "max staleness %lld; so far %llu malformed, %llu refused, %llu duplicates; "
                "%.1f MB resident",
                s, (pushes - logged_.pushes) / s, (pulls - logged_.pulls) / s, (clocks - logged_.clocks) / s,
                (in - logged_.bytes_in) / s / 1e6, (out - logged_.bytes_out) / s / 1e6,
                static_cast<long long>(min_live == std::numeric_limits<int64_t>::max() ? -1 : min_live),
                static_cast<unsigned long long>(stats.parked_now.load()),
                static_cast<long long>(stats.max_staleness.load()),
                static_cast<unsigned long long>(stats.bad_messages.load()),
                static_cast<unsigned long long>(stats.rejected.load()),
                static_cast<unsigned long long>(stats.duplicates.load()), ResidentBytes() / 1e6);
  std::string ckpt;
  if (checkpoint_->last_at_ms() > 0)
    ckpt = "; last checkpoint at clock " + std::to_string(checkpoint_->last_clock()) + ", " +
           std::to_string((now - checkpoint_->last_at_ms()) / 1000) + " s ago";
  const table::CopyOnWriteBudget& cow = *tables_->cow_budget();
  std::string spare;
  if (cow.used() > 0 || cow.waits > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; copy-on-write %.1f of %.1f MB, %llu writes waited for a reply (%llu over budget)",
                  cow.used() / 1e6, cow.limit() / 1e6, static_cast<unsigned long long>(cow.waits.load()),
                  static_cast<unsigned long long>(cow.overdrafts.load()));
    spare = buf;
  }
  std::string tables;
  const table::ByteBudget& memory = tables_->memory();
  if (memory.limit() != std::numeric_limits<size_t>::max()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; tables hold %.1f of %.1f MB", memory.used() / 1e6, memory.limit() / 1e6);
    tables = buf;
  }
  PP_LOG(Info) << line << tables << spare << ckpt;
  logged_ = {now, pushes, pulls, clocks, in, out};
}

std::string ServerMetrics::Render() const {
  Snapshot snap;
  {
    MutexLock l(&mu_);
    snap = snapshot_;
  }
  const ServerStats& stats = ctx_->stats;
  const table::CopyOnWriteBudget& cow = *tables_->cow_budget();
  const table::ByteBudget& memory = tables_->memory();
  const MetricsText::Labels server = {{"server", std::to_string(ctx_->rank.load())}};
  MetricsText m;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    m.Counter(std::string("pushpull_server_") + name, help, double(v), server);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    m.Gauge(std::string("pushpull_server_") + name, help, v, server);
  };
  counter("pushes_total", "Push requests taken to apply (refused ones count in refused_total).", stats.pushes);
  counter("pulls_total", "Pull requests taken to answer.", stats.pulls);
  counter("clocks_total", "Clock requests taken.", stats.clocks);
  counter("malformed_total", "Messages dropped or answered with an error because they did not decode.",
          stats.bad_messages);
  counter("refused_total", "Well-formed requests refused (a wrong shape, a non-finite gradient, a limit).",
          stats.rejected);
  counter("duplicates_total", "Requests asked again after a reconnect: answered once, never run twice.",
          stats.duplicates);
  counter("received_bytes_total", "Bytes received in requests (headers and keys included).", stats.bytes_in);
  counter("sent_bytes_total", "Bytes of values sent in pull replies.", stats.bytes_out);
  counter("parked_pulls_total", "Pulls that waited for slower workers (SSP, BSP).", stats.parked_pulls);
  gauge("parked_pulls", "Pulls waiting for slower workers now.", double(stats.parked_now.load()));
  gauge("slowest_worker_clock", "The clock of the slowest live worker (-1: none yet).", double(snap.slowest_clock));
  gauge("max_staleness", "The largest staleness a pull was answered at, in clocks.",
        double(stats.max_staleness.load()));
  {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
    for (int b = 0; b < consistency::StalenessHistogram::kBuckets; ++b) {
      if (b + 1 < consistency::StalenessHistogram::kBuckets) bounds.push_back(b);
      counts.push_back(snap.staleness.counts()[b]);
      sum += double(b) * double(snap.staleness.counts()[b]);  // (the last bucket at its bound: a lower bound)
    }
    m.Histogram("pushpull_server_pull_staleness", "Clocks a pull's answer was behind its worker's clock.", bounds,
                counts, sum, server);
  }
  gauge("tables", "Tables this server holds a shard of.", double(stats.tables.load()));
  gauge("table_bytes", "What this server's tables hold (parameters, optimizer slots, steps, key index).",
        double(memory.used()));
  if (memory.limit() != std::numeric_limits<size_t>::max())
    gauge("table_bytes_limit", "The limit on table_bytes (--max_table_mb).", double(memory.limit()));
  gauge("copy_on_write_bytes", "Parameter arrays that pull replies still hold while pushes moved on.",
        double(cow.used()));
  gauge("copy_on_write_budget_bytes", "The limit on copy_on_write_bytes (--copy_on_write_budget_mb).",
        double(cow.limit()));
  counter("copy_on_write_waits_total", "Pushes that waited for a pull reply to be sent (the budget spent).",
          cow.waits.load());
  counter("copy_on_write_overdrafts_total", "Pushes that copied over the budget after --copy_on_write_wait_ms.",
          cow.overdrafts.load());
  counter("checkpoints_total", "Checkpoint files this server wrote.", stats.checkpoints);
  gauge("membership_version", "The scheduler's membership version this server holds.", double(snap.membership_version));
  gauge("resident_bytes", "The server process's resident memory.", double(ResidentBytes()));
  return m.str();
}

}  // namespace pushpull::server
