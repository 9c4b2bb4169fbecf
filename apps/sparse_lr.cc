#include "apps/sparse_lr.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "common/log.h"
#include "common/time.h"
#include "pushpull/pushpull.h"

namespace pushpull {
namespace {

// A minibatch's unique ids and, per example, the positions of its ids in that list.
struct Batch {
  std::vector<Key> keys;
  std::vector<uint32_t> slots;  // examples * (active + 1), the bias included
  std::vector<uint8_t> labels;
  std::unordered_map<Key, uint32_t> index;  // Build's scratch: key -> slot before GroupByServer

  void Build(const std::vector<CtrExample>& ex, int n, Key bias_id) {
    keys.clear();
    slots.clear();
    labels.resize(n);
    index.clear();
    auto slot_of = [&](Key k) {
      auto [it, fresh] = index.try_emplace(k, static_cast<uint32_t>(keys.size()));
      if (fresh) keys.push_back(k);
      return it->second;
    };
    for (int i = 0; i < n; ++i) {
      for (Key id : ex[i].ids) slots.push_back(slot_of(id));
      slots.push_back(slot_of(bias_id));
      labels[i] = ex[i].label;
    }
  }
  // Puts the keys in the order the servers hold them (Client::GroupByServer: the push is then
  // sent in slices of the gradient, gathered nowhere); the slots follow their keys.
  Status GroupByServer(Client& client, const Table& t) {
    PP_ASSIGN_OR_RETURN(auto order, client.GroupByServer(t, &keys));
    where.resize(keys.size());
    for (uint32_t i = 0; i < order.size(); ++i) where[order[i]] = i;
    for (uint32_t& s : slots) s = where[s];
    return Status::OK();
  }

 private:
  std::vector<uint32_t> where;
};

double Sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }

}  // namespace

Status RunSparseLr(Client& client, const AppOptions& app, const SparseLrOptions& o, AppResult* result) {
  const int rank = client.rank(), W = client.num_workers();
  PP_ASSIGN_OR_RETURN(auto gen, CtrGenerator::Create(o.data, static_cast<uint64_t>(rank)));
  const Key bias_id = o.data.id_space;  // outside the generator's ids
  const int per_example = o.data.active + 1;
  if (app.batch < 1 || app.epochs < 1 || o.examples_total < W)
    return Status::InvalidArgument("sparse_lr: batch, epochs and examples must be positive");

  TableSpec spec;
  spec.name = "sparse_lr.w";
  spec.sparse = true;
  spec.dim = 1;
  spec.consistency = app.consistency;
  spec.optimizer.staleness_aware = app.staleness_aware;
  PP_ASSIGN_OR_RETURN(spec.optimizer.kind, opt::ParseKind(app.optimizer.empty() ? "ftrl" : app.optimizer));
  spec.optimizer.lr = app.lr > 0 ? app.lr : 0.05f;
  spec.optimizer.ftrl_alpha = app.lr > 0 ? app.lr : o.ftrl_alpha;
  spec.optimizer.ftrl_beta = o.ftrl_beta;
  spec.optimizer.ftrl_l1 = o.ftrl_l1;
  spec.optimizer.ftrl_l2 = o.ftrl_l2;
  spec.optimizer.initial_accumulator = 0.1f;
  PP_ASSIGN_OR_RETURN(auto table, client.CreateTable(spec));

  // Held-out set (worker 0 evaluates): examples, their unique ids, the optimal log loss.
  std::vector<CtrExample> held;
  Batch held_batch;
  std::map<int, size_t> held_prefix_keys;  // examples -> ids they use
  double optimal = 0;
  double optimal_subset = 0;  // the same over the first eval_subset examples (periodic gaps)
  if (rank == 0) {
    PP_ASSIGN_OR_RETURN(auto hg, CtrGenerator::Create(o.data, kCtrHeldOutStream));
    held.resize(o.heldout);
    std::vector<double> p(o.heldout);
    std::vector<uint8_t> y(o.heldout);
    for (int i = 0; i < o.heldout; ++i) {
      hg.Next(&held[i]);
      p[i] = held[i].p;
      y[i] = held[i].label;
    }
    PP_ASSIGN_OR_RETURN(optimal, LogLoss(p, y));
    held_batch.Build(held, o.heldout, bias_id);
    // Ids are numbered in first-touch order, so the first m examples use ids below a prefix.
    int m = std::min(app.eval_subset, o.heldout);
    PP_ASSIGN_OR_RETURN(optimal_subset, LogLoss(std::vector<double>(p.begin(), p.begin() + m),
                                                std::vector<uint8_t>(y.begin(), y.begin() + m)));
    uint32_t max_slot = 0;
    for (size_t i = 0; i < size_t(m) * per_example; ++i) max_slot = std::max(max_slot, held_batch.slots[i]);
    held_prefix_keys[m] = max_slot + 1;
    PP_LOG(Info) << "sparse_lr: held-out set of " << o.heldout << " examples, " << held_batch.keys.size()
                 << " distinct ids, optimal log loss " << optimal;
  }
  // Evaluates on the first `m` held-out examples (their ids come first in held_batch.keys).
  auto evaluate = [&](double* logloss, double* auc, int m) -> Status {
    size_t nkeys = m == o.heldout ? held_batch.keys.size() : held_prefix_keys[m];
    std::vector<float> w(nkeys);
    std::vector<Key> keys(held_batch.keys.begin(), held_batch.keys.begin() + nkeys);
    // (Lookup: ids the training never drew read as their start, 0, and are not added to the table.)
    PP_RETURN_IF_ERROR(client.Lookup(table, std::move(keys), w.data()).Wait());
    std::vector<double> p(m);
    std::vector<uint8_t> y(m);
    for (int i = 0; i < m; ++i) {
      double z = 0;
      for (int j = 0; j < per_example; ++j) z += w[held_batch.slots[size_t(i) * per_example + j]];
      p[i] = Sigmoid(z);
      y[i] = held[i].label;
    }
    PP_ASSIGN_OR_RETURN(*logloss, LogLoss(p, y));
    auto a = Auc(p, y);  // (NaN for a subset of one class: the periodic gap needs only the loss)
    *auc = a.ok() ? *a : NAN;
    return Status::OK();
  };

  const int64_t mine = o.examples_total / W;
  const int64_t per_eval = (mine + app.epochs - 1) / app.epochs;
  MetricsWriter metrics(app.metrics_out);
  TraceWriter trace(app.trace_out, rank);
  PP_RETURN_IF_ERROR(metrics.status());
  PP_RETURN_IF_ERROR(trace.status());
  Injector injector(app.inject, rank, app.seed);
  std::vector<CtrExample> ex(app.batch);
  Batch b;
  std::vector<float> w, grad;
  int64_t done = 0, start = NowMs();
  double logloss = NAN, auc = NAN;
  double wait_s = 0, compute_s = 0;  // pulls; the gradient (as fmnist_mlp counts them)
  // Epoch e ends once min(mine, per_eval * e) examples are done, a clock per batch.
  auto examples_after = [&](int e) { return std::min(mine, per_eval * e); };
  auto clock_after = [&](int e) {
    int64_t clocks = 0;
    for (int k = 1; k <= e; ++k) clocks += (examples_after(k) - examples_after(k - 1) + app.batch - 1) / app.batch;
    return clocks;
  };
  const std::string run =
      RunDescription("sparse_lr", clock_after,
                     Count(app.epochs, "epoch") + ", batch " + std::to_string(app.batch) + ", " + Count(W, "worker") +
                         ", " + std::to_string(o.examples_total) + " examples, seed " + std::to_string(o.data.seed));
  // (Older checkpoints do not name the seed: one matches a run with the default seed only.)
  const std::string earlier =
      o.data.seed != 42
          ? ""
          : RunDescription("sparse_lr", clock_after,
                           Count(app.epochs, "epoch") + ", batch " + std::to_string(app.batch) + ", " +
                               Count(W, "worker") + ", " + std::to_string(o.examples_total) + " examples");
  PP_ASSIGN_OR_RETURN(auto first, FirstEpoch(client, app, clock_after, "sparse_lr", run, earlier));
  // Resuming: the examples of the skipped epochs are drawn and dropped (the stream is seeded).
  if (first.epoch <= app.epochs) {
    if (examples_after(first.epoch - 1) > 0 || first.skip > 0)
      PP_LOG(Info) << "sparse_lr: resuming at clock " << client.clock() << ": drawing and dropping the examples "
                   << "trained before it from the seeded stream (about "
                   << examples_after(first.epoch - 1) + first.skip * app.batch << " examples; a few seconds a million)";
    for (; done < examples_after(first.epoch - 1); ++done) gen.Next(&ex[0]);
    // Taking a dead worker's place mid-epoch: the batches it had done, likewise.
    const int64_t until = examples_after(first.epoch);
    for (int64_t k = 0; k < first.skip && done < until; ++k)
      for (int64_t n = std::min<int64_t>(app.batch, until - done); n > 0; --n, ++done) gen.Next(&ex[0]);
  }
  // What this run trains, and its rate, leave the skipped examples out: they were drawn and
  // dropped, not trained on, and the time to skip them is no training time.
  const int64_t skipped = done;
  start = NowMs();
  Progress progress("sparse_lr", app.progress_interval_s);  // (from here: its rate leaves the skip out)
  EpochLines lines(app.progress_every_s, app.epochs);
  if (first.epoch > app.epochs && rank == 0) {  // restored after the last epoch
    PP_RETURN_IF_ERROR(evaluate(&logloss, &auc, o.heldout).Annotate("sparse_lr: evaluating the restored model"));
    PP_LOG(Info) << "sparse_lr restored model: held-out logloss " << logloss << " (optimal " << optimal << ", gap "
                 << 100 * (logloss / optimal - 1) << "%) auc " << auc;
  }
  for (int epoch = first.epoch; epoch <= app.epochs; ++epoch) {
    int64_t until = std::min(mine, per_eval * epoch);
    int64_t epoch_start = NowMs(), epoch_first = done;
    double loss_sum = 0;
    while (done < until) {
      int n = static_cast<int>(std::min<int64_t>(app.batch, until - done));
      for (int i = 0; i < n; ++i) gen.Next(&ex[i]);
      b.Build(ex, n, bias_id);
      PP_RETURN_IF_ERROR(b.GroupByServer(client, table).Annotate("sparse_lr"));
      w.resize(b.keys.size());
      int64_t t0 = NowUs();
      Future pull = client.Pull(table, b.keys, w.data());
      PP_RETURN_IF_ERROR(pull.Wait().Annotate("sparse_lr"));
      PP_RETURN_IF_ERROR(CheckStaleness(pull, app.consistency, "sparse_lr"));
      result->max_staleness = std::max(result->max_staleness, pull.staleness());
      int64_t t1 = NowUs();
      wait_s += (t1 - t0) * 1e-6;
      grad.assign(b.keys.size(), 0.0f);
      const float scale = o.mean_gradient ? 1.0f / n : 1.0f;
      double batch_loss = 0;
      for (int i = 0; i < n; ++i) {
        const uint32_t* s = &b.slots[size_t(i) * per_example];
        double z = 0;
        for (int j = 0; j < per_example; ++j) z += w[s[j]];
        double p = Sigmoid(z);
        batch_loss -= b.labels[i] ? std::log(std::max(p, 1e-15)) : std::log(std::max(1 - p, 1e-15));
        float g = static_cast<float>((p - b.labels[i]) * scale);
        for (int j = 0; j < per_example; ++j) grad[s[j]] += g;
      }
      const int64_t t2 = NowUs();
      compute_s += (t2 - t1) * 1e-6;
      injector.AfterStep((t2 - t1) * 1e-6);
      client.Push(table, b.keys, std::move(grad));
      grad = std::vector<float>();
      PP_RETURN_IF_ERROR(client.Clock());
      done += n;
      loss_sum += batch_loss;
      progress.Update(client.clock(), batch_loss / n, done - skipped);
      double metric = NAN;
      if (rank == 0 && app.eval_every > 0 && client.clock() % app.eval_every == 0) {
        double ll, a;
        PP_RETURN_IF_ERROR(evaluate(&ll, &a, std::min(app.eval_subset, o.heldout)));
        metric = ll / optimal_subset - 1;  // the gap to the optimum on the same examples
      }
      trace.Row(client.clock(), (NowMs() - start) / 1000.0, batch_loss / n, metric, pull.staleness());
    }
    double secs = (NowMs() - epoch_start) / 1000.0;
    double rate = (done - epoch_first) / std::max(secs, 1e-3);
    double train_loss = loss_sum / std::max<int64_t>(1, done - epoch_first);
    if (rank == 0) {
      PP_RETURN_IF_ERROR(evaluate(&logloss, &auc, o.heldout));
      trace.Row(client.clock(), (NowMs() - start) / 1000.0, logloss, auc, 0, /*eval=*/true);
    }
    const bool line = lines.Due(epoch);
    if (line && rank == 0) {
      PP_LOG(Info) << "sparse_lr epoch " << epoch << "/" << app.epochs << ": " << done << " examples, train_loss "
                   << train_loss << " held-out logloss " << logloss << " (optimal " << optimal << ", gap "
                   << 100 * (logloss / optimal - 1) << "%) auc " << auc << " " << int64_t(rate) << " examples/s";
    } else if (line) {
      PP_LOG(Info) << "sparse_lr epoch " << epoch << "/" << app.epochs << ": " << done << " examples, train_loss "
                   << train_loss << " " << int64_t(rate) << " examples/s";
    }
    PP_RETURN_IF_ERROR(metrics.Write({{"epoch", epoch},
                                      {"clock", double(client.clock())},
                                      {"wall_s", (NowMs() - start) / 1000.0},
                                      {"train_loss", train_loss},
                                      {"logloss", rank == 0 ? logloss : NAN},
                                      {"optimal_logloss", rank == 0 ? optimal : NAN},
                                      {"auc", rank == 0 ? auc : NAN},
                                      {"samples_per_s", rate},
                                      {"worker", rank}}));
    PP_RETURN_IF_ERROR(CheckpointIfDue(client, app, epoch, "sparse_lr", run));
  }
  double gap = rank == 0 ? logloss / optimal - 1 : 0;
  const double target_gap = app.target > 0 ? app.target : 0.02;
  result->samples_per_s = (done - skipped) / std::max(1e-3, (NowMs() - start) / 1000.0);
  result->final_metric = logloss;
  result->reached_target = rank != 0 || gap <= target_gap;
  if (!result->reached_target) {
    char text[128];
    std::snprintf(text, sizeof(text), "missed target: gap %.2f%% > %.2f%% (%s)", 100 * gap, 100 * target_gap,
                  app.target > 0 ? "--target" : "the default");
    result->missed_target = text;
  }
  char buf[512];
  if (rank == 0)
    std::snprintf(buf, sizeof(buf),
                  "sparse_lr summary: worker 0 consistency=%s workers=%d examples=%lld logloss=%.5f "
                  "optimal=%.5f gap=%.2f%% target_gap=%.1f%% auc=%.4f reached=%s max_staleness=%d "
                  "network_wait=%.0f%% wall=%.1fs",
                  app.consistency.ToString().c_str(), W, static_cast<long long>(done - skipped), logloss, optimal,
                  100 * gap, 100 * target_gap, auc, result->reached_target ? "yes" : "NO", result->max_staleness,
                  100 * wait_s / std::max(1e-9, wait_s + compute_s), (NowMs() - start) / 1000.0);
  else
    std::snprintf(buf, sizeof(buf),
                  "sparse_lr summary: worker %d consistency=%s examples=%lld (worker 0 evaluates) "
                  "max_staleness=%d network_wait=%.0f%% wall=%.1fs",
                  rank, app.consistency.ToString().c_str(), static_cast<long long>(done - skipped),
                  result->max_staleness, 100 * wait_s / std::max(1e-9, wait_s + compute_s), (NowMs() - start) / 1000.0);
  result->summary = buf;
  return Status::OK();
}

}  // namespace pushpull
