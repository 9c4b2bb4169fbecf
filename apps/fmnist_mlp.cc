#include "apps/fmnist_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "apps/fmnist_data.h"
#include "common/log.h"
#include "common/time.h"
#include "pushpull/pushpull.h"

namespace pushpull {

Result<std::vector<int>> ParseLayers(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t comma = s.find(',', i);
    std::string item = s.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 100000)
      return Status::InvalidArgument("--layers '" + s + "': '" + item + "' is not a layer size");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  if (out.size() < 2) return Status::InvalidArgument("--layers needs at least an input and an output size");
  return out;
}

Status RunFmnistMlp(Client& client, const AppOptions& app, const FmnistOptions& o, AppResult* result) {
  const int rank = client.rank(), W = client.num_workers();
  if (o.layers.front() != 784 || o.layers.back() != 10)
    return Status::InvalidArgument("fmnist_mlp: the first layer must be 784 (28x28) and the last 10 (classes)");
  PP_ASSIGN_OR_RETURN(auto train_all, LoadFashionMnist(o.data_dir, true));
  if (o.train_limit > 0 && o.train_limit < train_all.n) {
    train_all.n = o.train_limit;
    train_all.images.resize(size_t(o.train_limit) * train_all.dim());
    train_all.labels.resize(o.train_limit);
  }
  // Every worker needs a batch's worth of steps at least: too few images (a small --train_limit,
  // or a data set that holds none) is said as such, not as the schedule's length of 0.
  const int total_n = train_all.n;
  if (total_n / W < 1)
    return Status::InvalidArgument("fmnist_mlp: " + std::to_string(total_n) + " training images for " +
                                   Count(W, "worker") + ": each needs one at least (--train_limit, or the data in " +
                                   o.data_dir + ")");
  PP_ASSIGN_OR_RETURN(const Dataset train, Shard(train_all, rank, W));
  train_all = Dataset();  // (this worker's shard is all it reads from here: the rest goes)
  Dataset test;
  if (rank == 0) {
    PP_ASSIGN_OR_RETURN(test, LoadFashionMnist(o.data_dir, false));
    if (o.test_limit > 0 && o.test_limit < test.n) {
      test.n = o.test_limit;
      test.images.resize(size_t(o.test_limit) * test.dim());
      test.labels.resize(o.test_limit);
    }
    if (test.n < 1) return Status::InvalidArgument("fmnist_mlp: the test set in " + o.data_dir + " holds no images");
  }
  const int batch = app.batch;
  const int gpu =
      o.gpu >= 0 || o.device == mlp::Device::kCpu ? std::max(o.gpu, 0) : rank % std::max(1, mlp::GpuCount());
  PP_ASSIGN_OR_RETURN(auto backend, mlp::MlpBackend::Create(o.device, o.layers, std::max(batch, 1024), gpu));
  mlp::MlpBackend& net = *backend;
  PP_LOG(Info) << "fmnist_mlp: worker " << rank << "/" << W << " on " << train.n << " training images, backend "
               << net.name() << ", batch " << batch;

  const int L = static_cast<int>(o.layers.size()) - 1;
  std::vector<Table> tables;
  for (int l = 0; l < L; ++l) {
    TableSpec spec;
    spec.name = "fmnist.layer" + std::to_string(l);
    spec.rows = o.layers[l + 1];
    spec.dim = o.layers[l] + 1;
    spec.init = InitKind::kGlorot;
    spec.glorot_bias_columns = 1;
    spec.seed = app.seed + l;
    spec.consistency = app.consistency;
    spec.optimizer.staleness_aware = app.staleness_aware;
    PP_ASSIGN_OR_RETURN(spec.optimizer.kind, opt::ParseKind(app.optimizer.empty() ? "adam" : app.optimizer));
    spec.optimizer.lr = app.lr > 0 ? app.lr : 2e-3f;
    // Cosine decay to zero over the run, counted in applied updates: one per clock under BSP
    // (the workers' mean), one per push otherwise.
    spec.optimizer.schedule.kind = opt::ScheduleKind::kCosine;
    spec.optimizer.schedule.total_steps = int64_t(app.epochs) * ((total_n / W + batch - 1) / batch) *
                                          (app.consistency.model == Consistency::kBsp ? 1 : W);
    PP_ASSIGN_OR_RETURN(auto t, client.CreateTable(spec));
    tables.push_back(t);
  }
  std::vector<std::vector<float>> params(L), grads(L);
  std::vector<const float*> pptr(L);
  std::vector<float*> gptr(L);
  for (int l = 0; l < L; ++l) {
    params[l].resize(net.layer_size(l));
    pptr[l] = params[l].data();
  }
  auto pull_all = [&](int32_t* staleness) -> Status {
    std::vector<Future> f;
    for (int l = 0; l < L; ++l) f.push_back(client.PullDense(tables[l], params[l].data()));
    for (auto& x : f) {
      PP_RETURN_IF_ERROR(x.Wait());
      PP_RETURN_IF_ERROR(CheckStaleness(x, app.consistency, "fmnist_mlp"));
      *staleness = std::max(*staleness, x.staleness());
    }
    return Status::OK();
  };

  const double target = app.target > 0 ? app.target : 0.88;
  MetricsWriter metrics(app.metrics_out);
  TraceWriter trace(app.trace_out, rank);
  PP_RETURN_IF_ERROR(metrics.status());
  PP_RETURN_IF_ERROR(trace.status());
  Progress progress("fmnist_mlp", app.progress_interval_s);
  EpochLines lines(app.progress_every_s, app.epochs);
  Injector injector(app.inject, rank, app.seed);
  std::mt19937_64 rng(SplitMix64(app.seed * 977 + rank));
  std::vector<int> order(train.n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> xb(size_t(batch) * 784);
  std::vector<uint8_t> yb(batch);
  // The same number of steps on every worker (shards differ by at most one image), so that
  // epochs end at the same clock everywhere (checkpoints are taken there) and the schedule's
  // count above holds: a larger shard's one extra image is seen only when it fits the last batch.
  const int steps = (total_n / W + batch - 1) / batch;
  const auto clock_after = [&](int e) { return int64_t(e) * steps; };
  const std::string run =
      RunDescription("fmnist_mlp", clock_after,
                     "batch " + std::to_string(batch) + ", " + Count(W, "worker") + ", " + std::to_string(total_n) +
                         " training images, seed " + std::to_string(app.seed));
  // (Older checkpoints do not name the seed: one matches a run with the default seed only.)
  const std::string earlier = app.seed != 42
                                  ? ""
                                  : RunDescription("fmnist_mlp", clock_after,
                                                   "batch " + std::to_string(batch) + ", " + Count(W, "worker") + ", " +
                                                       std::to_string(total_n) + " training images");
  PP_ASSIGN_OR_RETURN(auto first, FirstEpoch(client, app, clock_after, "fmnist_mlp", run, earlier));
  // Resuming: the skipped epochs' shuffles, so that the next epoch sees the order it would have.
  for (int e = 1; e < first.epoch; ++e) std::shuffle(order.begin(), order.end(), rng);
  int64_t start = NowMs(), samples = 0;
  double accuracy = 0;
  double wait_s = 0, compute_s = 0;
  // Worker 0: the test set's accuracy with the parameters as the servers hold them now.
  auto evaluate = [&](float* test_loss, int32_t* stale) -> Status {
    PP_RETURN_IF_ERROR(pull_all(stale));
    std::vector<int> pred(test.n);
    PP_RETURN_IF_ERROR(net.Predict(pptr, test.images.data(), test.n, pred.data(), test.labels.data(), test_loss));
    int correct = 0;
    for (int i = 0; i < test.n; ++i) correct += pred[i] == test.labels[i];
    accuracy = double(correct) / test.n;
    return Status::OK();
  };
  if (first.epoch > app.epochs && rank == 0) {  // restored after the last epoch
    int32_t stale = 0;
    float test_loss = 0;
    PP_RETURN_IF_ERROR(evaluate(&test_loss, &stale).Annotate("fmnist_mlp: evaluating the restored model"));
    PP_LOG(Info) << "fmnist_mlp restored model: test_accuracy " << accuracy << " test_loss " << test_loss;
  }
  for (int epoch = first.epoch; epoch <= app.epochs; ++epoch) {
    int64_t epoch_start = NowMs();
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    int64_t epoch_samples = 0;  // (fewer than the shard when resumed mid-epoch)
    for (int s = epoch == first.epoch ? int(first.skip) : 0; s < steps; ++s) {
      int n = std::min(batch, train.n - s * batch);
      for (int i = 0; i < n; ++i) {
        int idx = order[s * batch + i];
        std::copy_n(&train.images[size_t(idx) * 784], 784, &xb[size_t(i) * 784]);
        yb[i] = train.labels[idx];
      }
      int64_t t0 = NowUs();
      int32_t stale = 0;
      PP_RETURN_IF_ERROR(pull_all(&stale).Annotate("fmnist_mlp epoch " + std::to_string(epoch)));
      result->max_staleness = std::max(result->max_staleness, stale);
      int64_t t1 = NowUs();
      for (int l = 0; l < L; ++l) {
        grads[l].resize(net.layer_size(l));
        gptr[l] = grads[l].data();
      }
      float loss = 0;
      PP_RETURN_IF_ERROR(net.ForwardBackward(pptr, xb.data(), yb.data(), n, gptr, &loss));
      int64_t t2 = NowUs();
      injector.AfterStep((t2 - t1) * 1e-6);
      for (int l = 0; l < L; ++l) client.PushDense(tables[l], std::move(grads[l]));
      PP_RETURN_IF_ERROR(client.Clock());
      wait_s += (t1 - t0) * 1e-6;
      compute_s += (t2 - t1) * 1e-6;
      loss_sum += double(loss) * n;
      samples += n;
      epoch_samples += n;
      progress.Update(client.clock(), loss, samples);
      double metric = NAN;
      if (rank == 0 && app.eval_every > 0 && client.clock() % app.eval_every == 0) {
        // A quick look on a test subset with the parameters this step pulled (cheap: forward only).
        int m = std::min(app.eval_subset, test.n);
        std::vector<int> pred(m);
        PP_RETURN_IF_ERROR(net.Predict(pptr, test.images.data(), m, pred.data()));
        int correct = 0;
        for (int i = 0; i < m; ++i) correct += pred[i] == test.labels[i];
        metric = double(correct) / m;
      }
      trace.Row(client.clock(), (NowMs() - start) / 1000.0, loss, metric, stale);
    }
    double train_loss = loss_sum / std::max<int64_t>(1, epoch_samples);
    // The epoch's training rate, as every app reports it: its examples over its steps' time
    // (worker 0's evaluation after them not counted).
    const double secs = (NowMs() - epoch_start) / 1000.0;
    const double rate = double(epoch_samples) / std::max(secs, 1e-3);
    double test_acc = NAN;
    if (rank == 0) {
      int32_t stale = 0;
      float test_loss = 0;
      PP_RETURN_IF_ERROR(evaluate(&test_loss, &stale));
      test_acc = accuracy;
      trace.Row(client.clock(), (NowMs() - start) / 1000.0, test_loss, test_acc, stale, /*eval=*/true);
    }
    const double wall = (NowMs() - start) / 1000.0;
    const bool line = lines.Due(epoch);
    if (line && rank == 0) {
      PP_LOG(Info) << "fmnist_mlp epoch " << epoch << "/" << app.epochs << " train_loss " << train_loss
                   << " test_accuracy " << test_acc << " " << secs << "s (" << int64_t(rate) << " samples/s)";
    } else if (line) {
      PP_LOG(Info) << "fmnist_mlp epoch " << epoch << "/" << app.epochs << " train_loss " << train_loss << " " << secs
                   << "s (" << int64_t(rate) << " samples/s)";
    }
    PP_RETURN_IF_ERROR(metrics.Write({{"epoch", epoch},
                                      {"clock", double(client.clock())},
                                      {"wall_s", wall},
                                      {"train_loss", train_loss},
                                      {"test_accuracy", test_acc},
                                      {"samples_per_s", rate},
                                      {"worker", rank},
                                      {"wait_fraction", wait_s / std::max(1e-9, wait_s + compute_s)}}));
    PP_RETURN_IF_ERROR(CheckpointIfDue(client, app, epoch, "fmnist_mlp", run));
  }
  result->samples_per_s = samples / std::max(1e-3, (NowMs() - start) / 1000.0);
  result->wait_fraction = wait_s / std::max(1e-9, wait_s + compute_s);
  result->final_metric = accuracy;
  result->reached_target = rank != 0 || accuracy >= target;
  if (!result->reached_target)
    result->missed_target =
        MissedTarget("accuracy", accuracy, "<", target, app.target > 0 ? "--target" : "the default");
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "fmnist_mlp summary: worker %d consistency=%s workers=%d epochs=%d test_accuracy=%s "
                "target=%.3f reached=%s max_staleness=%d network_wait=%.0f%% backend=%s wall=%.1fs",
                rank, app.consistency.ToString().c_str(), W, app.epochs,
                rank == 0 ? std::to_string(accuracy).c_str() : "n/a(worker 0 evaluates)", target,
                rank != 0 ? "n/a" : (result->reached_target ? "yes" : "NO"), result->max_staleness,
                100.0 * wait_s / std::max(1e-9, wait_s + compute_s), net.name().c_str(), (NowMs() - start) / 1000.0);
  result->summary = buf;
  return Status::OK();
}

}  // namespace pushpull
