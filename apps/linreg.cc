#include "apps/linreg.h"

#include <Eigen/Dense>

#include <algorithm>
#include <random>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/time.h"
#include "pushpull/pushpull.h"

namespace pushpull {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void MakeLinregData(const LinregOptions& o, uint64_t seed, int shard, std::vector<float>* x, std::vector<float>* y,
                    std::vector<float>* true_w) {
  std::mt19937_64 wrng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  true_w->resize(o.dim);
  for (auto& w : *true_w) w = normal(wrng);
  std::mt19937_64 rng(SplitMix64(seed ^ (0x1000003ULL * (shard + 1))));
  x->resize(size_t(o.examples_per_worker) * o.dim);
  y->resize(o.examples_per_worker);
  for (int i = 0; i < o.examples_per_worker; ++i) {
    double dot = 0;
    for (int j = 0; j < o.dim; ++j) {
      float v = normal(rng);
      (*x)[size_t(i) * o.dim + j] = v;
      dot += double(v) * (*true_w)[j];
    }
    (*y)[i] = static_cast<float>(dot + o.noise * normal(rng));
  }
}

Status RunLinreg(Client& client, const AppOptions& app, const LinregOptions& o, AppResult* result) {
  if (o.dim < 1 || o.examples_per_worker < 1 || app.batch < 1 || app.epochs < 1)
    return Status::InvalidArgument("linreg: dim, examples, batch and epochs must be positive");
  const int rank = client.rank();
  std::vector<float> xs, ys, true_w;
  MakeLinregData(o, app.seed, rank, &xs, &ys, &true_w);
  Eigen::Map<const RowMat> X(xs.data(), o.examples_per_worker, o.dim);
  Eigen::Map<const Eigen::VectorXf> Y(ys.data(), o.examples_per_worker);

  TableSpec spec;
  spec.name = "linreg.w";
  spec.rows = o.dim;
  spec.dim = 1;
  spec.consistency = app.consistency;
  spec.optimizer.staleness_aware = app.staleness_aware;
  PP_ASSIGN_OR_RETURN(spec.optimizer.kind, opt::ParseKind(app.optimizer.empty() ? "sgd" : app.optimizer));
  spec.optimizer.lr = app.lr > 0 ? app.lr : 0.05f;
  PP_ASSIGN_OR_RETURN(auto table, client.CreateTable(spec));

  const double floor = 0.5 * o.noise * o.noise;
  // (--noise=0: the floor is 0, which float arithmetic never quite reaches; 1e-6 is converged.)
  const double target = app.target > 0 ? app.target : std::max(floor * 1.5, 1e-6);
  MetricsWriter metrics(app.metrics_out);
  Progress progress("linreg", app.progress_interval_s);
  EpochLines lines(app.progress_every_s, app.epochs);
  Injector injector(app.inject, rank, app.seed);
  TraceWriter trace(app.trace_out, rank);
  PP_RETURN_IF_ERROR(metrics.status());
  PP_RETURN_IF_ERROR(trace.status());
  std::vector<float> w(o.dim);
  const int batches = (o.examples_per_worker + app.batch - 1) / app.batch;
  const auto clock_after = [&](int e) { return int64_t(e) * batches; };
  const std::string run = RunDescription(
      "linreg", clock_after,
      "batch " + std::to_string(app.batch) + ", " + Count(client.num_workers(), "worker") + ", " +
          std::to_string(o.examples_per_worker) + " examples a worker, seed " + std::to_string(app.seed));
  // (Older checkpoints name neither the workers nor the seed: one matches a run with the default
  // seed only.)
  const std::string earlier = app.seed != 42
                                  ? ""
                                  : RunDescription("linreg", clock_after,
                                                   "batch " + std::to_string(app.batch) + ", " +
                                                       std::to_string(o.examples_per_worker) + " examples a worker");
  PP_ASSIGN_OR_RETURN(auto first, FirstEpoch(client, app, clock_after, "linreg", run, earlier));
  int64_t start = NowMs(), samples = 0;
  double loss = 0;
  // Loss of the current model over this worker's whole shard.
  auto evaluate = [&]() -> Status {
    PP_RETURN_IF_ERROR(client.PullDense(table, w.data()).Wait());
    Eigen::Map<const Eigen::VectorXf> W(w.data(), o.dim);
    loss = 0.5 * (X * W - Y).squaredNorm() / o.examples_per_worker;
    return Status::OK();
  };
  if (first.epoch > app.epochs) {  // restored after the last epoch
    PP_RETURN_IF_ERROR(evaluate().Annotate("linreg: evaluating the restored model"));
    PP_LOG(Info) << "linreg restored model: loss " << loss << " (noise floor " << floor << ") clock " << client.clock();
  }
  for (int epoch = first.epoch; epoch <= app.epochs; ++epoch) {
    double epoch_loss = 0;
    const int64_t epoch_start = NowMs(), epoch_first = samples;
    for (int b = epoch == first.epoch ? int(first.skip) : 0; b < batches; ++b) {
      Future pull = client.PullDense(table, w.data());
      PP_RETURN_IF_ERROR(pull.Wait().Annotate("linreg epoch " + std::to_string(epoch)));
      PP_RETURN_IF_ERROR(CheckStaleness(pull, app.consistency, "linreg"));
      result->max_staleness = std::max(result->max_staleness, pull.staleness());
      int64_t t0 = NowUs();
      int begin = b * app.batch, n = std::min(app.batch, o.examples_per_worker - begin);
      Eigen::Map<const Eigen::VectorXf> W(w.data(), o.dim);
      Eigen::VectorXf r = X.middleRows(begin, n) * W - Y.segment(begin, n);
      epoch_loss += 0.5 * r.squaredNorm();
      std::vector<float> grad(o.dim);
      Eigen::Map<Eigen::VectorXf>(grad.data(), o.dim) = X.middleRows(begin, n).transpose() * r / float(n);
      injector.AfterStep((NowUs() - t0) * 1e-6);
      client.PushDense(table, std::move(grad));
      PP_RETURN_IF_ERROR(client.Clock());
      samples += n;
      double batch_loss = 0.5 * r.squaredNorm() / n;
      progress.Update(client.clock(), batch_loss, samples);
      trace.Row(client.clock(), (NowMs() - start) / 1000.0, batch_loss, NAN, pull.staleness());
    }
    // The epoch's training rate, as every app reports it (the evaluation after it not counted).
    const double rate = double(samples - epoch_first) / std::max((NowMs() - epoch_start) / 1000.0, 1e-3);
    PP_RETURN_IF_ERROR(evaluate());
    Eigen::Map<const Eigen::VectorXf> W(w.data(), o.dim);
    double err = (W - Eigen::Map<const Eigen::VectorXf>(true_w.data(), o.dim)).norm();
    double wall = (NowMs() - start) / 1000.0;
    if (lines.Due(epoch))
      PP_LOG(Info) << "linreg epoch " << epoch << "/" << app.epochs << " loss " << loss << " (noise floor " << floor
                   << ") |w - w*| " << err << " clock " << client.clock() << " " << wall << "s";
    PP_RETURN_IF_ERROR(metrics.Write({{"epoch", epoch},
                                      {"clock", double(client.clock())},
                                      {"wall_s", wall},
                                      {"train_loss", loss},
                                      {"samples_per_s", rate},
                                      {"worker", rank}}));
    PP_RETURN_IF_ERROR(CheckpointIfDue(client, app, epoch, "linreg", run));
  }
  result->samples_per_s = samples / std::max(1e-3, (NowMs() - start) / 1000.0);
  result->final_metric = loss;
  result->reached_target = loss <= target;
  if (!result->reached_target) {
    std::string how = "--target";
    if (app.target <= 0)
      how = floor * 1.5 >= 1e-6 ? "1.5 x noise floor " + Figure(floor)
                                : "the default for a noise floor of " + Figure(floor);
    result->missed_target = MissedTarget("loss", loss, ">", target, how);
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "linreg summary: worker %d consistency=%s workers=%d epochs=%d final_loss=%.5f "
                "noise_floor=%.5f target=%.5f reached=%s max_staleness=%d params_crc=%08x wall=%.1fs",
                rank, app.consistency.ToString().c_str(), client.num_workers(), app.epochs, loss, floor, target,
                result->reached_target ? "yes" : "NO", result->max_staleness,
                // The final parameters' fingerprint: BSP runs (and a BSP run resumed from a
                // checkpoint) can be compared bit for bit.
                Crc32c(0, w.data(), w.size() * sizeof(float)), (NowMs() - start) / 1000.0);
  result->summary = buf;
  return Status::OK();
}

}  // namespace pushpull
