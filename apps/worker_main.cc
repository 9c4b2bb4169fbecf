// pushpull-worker: runs one training app (linreg, fmnist_mlp, sparse_lr) as one worker of a job,
// through the client library (worker/). The sample apps live here, beside it, so that the library
// depends on none of them.
#include <gflags/gflags.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include <atomic>

#include "apps/app.h"
#include "apps/fmnist_data.h"
#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/mlp/backend.h"
#include "apps/sparse_lr.h"
#include "apps/worker_main_experiment_flags.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/flags.h"
#include "common/daemon/metrics.h"
#include "common/log.h"
#include "common/memory.h"
#include "common/signals.h"
#include "optimizers/optimizer.h"
#include "pushpull/client.h"

// (The flags pushpull-launch also takes and passes on to this daemon are common/daemon/daemon_flags.cc's.)
DEFINE_string(scheduler, "tcp://127.0.0.1:7000",
              "address of pushpull-scheduler (not given: $PUSHPULL_SCHEDULER when set, as pushpull-launch sets it)");
DEFINE_string(app, "", "training app to run: linreg | fmnist_mlp | sparse_lr");
DEFINE_int32(request_timeout_ms, 120000, "deadline of every push, pull, barrier and table creation");
DEFINE_int32(max_unanswered_mb, 1024,
             "backpressure: a push or keyed pull waits (up to --request_timeout_ms, then "
             "the worker fails) while this worker's unanswered requests hold this many MiB of payload (0: no limit)");
DEFINE_int32(scheduler_timeout_ms, 15000, "give up when the scheduler is silent this long, once registered");
DEFINE_int32(connect_timeout_ms, 10000,
             "fail at once (exit 1), naming the reason, when the scheduler's host name does not resolve or its port "
             "refuses connections this long (not given: $PUSHPULL_CONNECT_TIMEOUT_MS when set); a scheduler that "
             "answers is waited for up to --register_timeout_ms");
DEFINE_int32(rank, -1, "ask the scheduler for this rank (-1: $PUSHPULL_RANK when set, else any free one)");
DEFINE_int32(metrics_port, -1,
             "serve this worker's counters (pushes, pulls, bytes, staleness, its clock) and its app's progress (step, "
             "loss, examples, the last epoch's figures) at http://0.0.0.0:PORT/metrics in the Prometheus text format "
             "(-1: not served; 0: any free port, logged)");
DEFINE_bool(verbose, false, "debug logging");
// Common app flags.
DEFINE_int32(epochs, 10,
             "passes over this worker's shard of the data (sparse_lr: one streamed pass of "
             "--examples_total, evaluated this many times along the way)");
DEFINE_int32(batch, 0, "minibatch per worker (0: the app's default: linreg 100, fmnist_mlp 64, sparse_lr 1000)");
DEFINE_double(lr, -1,
              "learning rate (<= 0: the app's default: linreg 0.05, fmnist_mlp 0.002, sparse_lr FTRL's "
              "--ftrl_alpha)");
DEFINE_string(optimizer, "",
              "server-side optimizer: sgd | adam | adamw | adagrad | ftrl (empty: the app's default: "
              "linreg sgd, fmnist_mlp adam, sparse_lr ftrl)");
DEFINE_uint64(seed, 42, "seed of data and initialisation");
DEFINE_string(metrics_out, "", "append one JSON object per epoch to this file");
DEFINE_double(
    target, -1,
    "what the app must reach, <= 0: its default. linreg: a loss (1.5 x the noise floor 0.5 noise^2, at least 1e-6); "
    "fmnist_mlp: a test accuracy (0.88); sparse_lr: a held-out loss within this fraction of the optimum's "
    "(0.02: within 2%)");
DEFINE_int32(progress_s, 5,
             "within an epoch, seconds between step progress lines (0: none; --progress_every_s paces the "
             "epoch lines)");
DEFINE_int32(progress_every_s, 10,
             "epoch lines: the first 5 epochs' and the last's, and between them one at most every this many seconds "
             "(0: every epoch's)");
DEFINE_bool(
    staleness_aware, false,
    "divide each push's step by its staleness (Zhang et al. 2016; not with FTRL, whose step is per coordinate)");
DEFINE_int32(eval_every, 0,
             "fmnist_mlp, sparse_lr: worker 0 evaluates on a test subset every this many clocks "
             "(0: per epoch only; linreg evaluates per epoch only)");
DEFINE_int32(eval_subset, 1000, "fmnist_mlp, sparse_lr: examples in that subset evaluation");
DEFINE_int32(checkpoint_every_epochs, 0,
             "checkpoint after every this many epochs and after the last (0: never; the scheduler "
             "needs --checkpoint_dir); a job started with the scheduler's --restore_from resumes there");
DEFINE_string(trace_out, "",
              "write a CSV row per clock here, clock,wall_s,loss,metric,staleness,kind, and worker 0's "
              "per-epoch evaluations as kind eval (a %d in "
              "the path becomes the worker's rank: workers sharing flags then write files of their own)");
// (Stragglers, for the experiments: apps/worker_main_experiment_flags.cc.)
// linreg
DEFINE_int32(dim, 100, "linreg: features");
DEFINE_int32(examples, 10000, "linreg: examples per worker");
DEFINE_double(noise, 0.1, "linreg: label noise stddev");

// fmnist_mlp
DEFINE_string(layers, "784,256,128,10", "fmnist_mlp: layer sizes");
DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist", "fmnist_mlp: directory of the gzip'd IDX files");
DEFINE_string(device, "auto", "fmnist_mlp: compute backend: auto (GPU when present) | cpu | gpu");
DEFINE_int32(gpu, -1,
             "fmnist_mlp: which CUDA device (-1: this worker's rank modulo the devices it sees, so that "
             "workers on one machine spread over its GPUs)");
DEFINE_int32(train_limit, 0, "fmnist_mlp: use only this many training images (0: all)");
DEFINE_int32(test_limit, 0, "fmnist_mlp: evaluate on only this many test images (0: all)");
// sparse_lr
DEFINE_int64(examples_total, 10000000, "sparse_lr: training examples over all workers");
DEFINE_int32(heldout, 100000, "sparse_lr: held-out examples (worker 0 evaluates)");
DEFINE_int32(active, 40, "sparse_lr: active features per example");
DEFINE_double(zipf, 1.1, "sparse_lr: Zipf exponent of feature ids");
DEFINE_double(ftrl_alpha, 0.2, "sparse_lr: FTRL alpha (--lr overrides)");
DEFINE_double(ftrl_beta, 1.0, "sparse_lr: FTRL beta");
DEFINE_double(ftrl_l1, 4.0, "sparse_lr: FTRL L1");
DEFINE_double(ftrl_l2, 1.0, "sparse_lr: FTRL L2");

namespace {

// The flags every app takes, checked before joining the job: a typo fails at once (exit 2), not
// after the whole job has registered (or after --register_timeout_ms when it never does).
pushpull::Status ParseAppOptions(pushpull::AppOptions* out) {
  if (FLAGS_app != "linreg" && FLAGS_app != "fmnist_mlp" && FLAGS_app != "sparse_lr")
    return pushpull::Status::InvalidArgument("unknown --app '" + FLAGS_app + "' (linreg, fmnist_mlp, sparse_lr)");
  using pushpull::Status;
  // Numbers: "<= 0: the default" is no licence for NaN (no comparison holds for it, so --lr=nan
  // would train at the default rate), nor are negatives other than a documented -1.
  auto at_least = [](const char* flag, int64_t v, int64_t min) {
    return v >= min ? Status::OK()
                    : Status::InvalidArgument(std::string("--") + flag + " must be >= " + std::to_string(min) +
                                              ", not " + std::to_string(v));
  };
  auto finite = [](const char* flag, double v) {
    return std::isfinite(v) ? Status::OK()
                            : Status::InvalidArgument(std::string("--") + flag + " must be a finite number, not " +
                                                      std::to_string(v));
  };
  PP_RETURN_IF_ERROR(at_least("epochs", FLAGS_epochs, 1));
  PP_RETURN_IF_ERROR(at_least("rank", FLAGS_rank, -1));
  PP_RETURN_IF_ERROR(at_least("checkpoint_every_epochs", FLAGS_checkpoint_every_epochs, 0));
  PP_RETURN_IF_ERROR(at_least("progress_s", FLAGS_progress_s, 0));
  PP_RETURN_IF_ERROR(at_least("progress_every_s", FLAGS_progress_every_s, 0));
  PP_RETURN_IF_ERROR(at_least("connect_timeout_ms", FLAGS_connect_timeout_ms, 1));
  PP_RETURN_IF_ERROR(at_least("eval_every", FLAGS_eval_every, 0));
  for (auto [flag, v] : {std::pair<const char*, double>{"lr", FLAGS_lr},
                         {"target", FLAGS_target},
                         {"noise", FLAGS_noise},
                         {"zipf", FLAGS_zipf},
                         {"ftrl_alpha", FLAGS_ftrl_alpha},
                         {"ftrl_beta", FLAGS_ftrl_beta},
                         {"ftrl_l1", FLAGS_ftrl_l1},
                         {"ftrl_l2", FLAGS_ftrl_l2}})
    PP_RETURN_IF_ERROR(finite(flag, v));
  // Files the app writes: their directories must be there.
  for (auto [flag, path] :
       {std::pair<const char*, std::string>{"metrics_out", FLAGS_metrics_out}, {"trace_out", FLAGS_trace_out}}) {
    if (path.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      return Status::InvalidArgument(std::string("--") + flag + "=" + path + ": no directory " + dir.string());
  }
  if (FLAGS_app == "linreg") {
    PP_RETURN_IF_ERROR(at_least("dim", FLAGS_dim, 1));
    PP_RETURN_IF_ERROR(at_least("examples", FLAGS_examples, 1));
    if (FLAGS_noise < 0) return Status::InvalidArgument("--noise must be >= 0, not " + std::to_string(FLAGS_noise));
  }
  if (FLAGS_app == "sparse_lr") {
    PP_RETURN_IF_ERROR(at_least("examples_total", FLAGS_examples_total, 1));
    PP_RETURN_IF_ERROR(at_least("active", FLAGS_active, 1));
    PP_RETURN_IF_ERROR(at_least("heldout", FLAGS_heldout, 1));
  }
  if (!FLAGS_optimizer.empty()) {
    PP_RETURN_IF_ERROR(pushpull::opt::ParseKind(FLAGS_optimizer).status());
  }
  if (FLAGS_app == "fmnist_mlp") {
    PP_RETURN_IF_ERROR(pushpull::ParseLayers(FLAGS_layers).status());
    PP_RETURN_IF_ERROR(pushpull::mlp::ParseDevice(FLAGS_device).status());
    PP_RETURN_IF_ERROR(at_least("gpu", FLAGS_gpu, -1));
    PP_RETURN_IF_ERROR(at_least("train_limit", FLAGS_train_limit, 0));
    PP_RETURN_IF_ERROR(at_least("test_limit", FLAGS_test_limit, 0));
    // The data, before the whole job registers (a missing dataset is news at once, not later);
    // the test set only where it is read (worker 0 evaluates; a worker without --rank may be it).
    PP_RETURN_IF_ERROR(pushpull::CheckFashionMnistFiles(FLAGS_data_dir, /*test_set=*/FLAGS_rank <= 0));
  }
  PP_RETURN_IF_ERROR(at_least("eval_subset", FLAGS_eval_subset, 1));
  pushpull::AppOptions& app = *out;
  PP_ASSIGN_OR_RETURN(app.consistency, pushpull::ParseConsistency(FLAGS_consistency));
  app.epochs = FLAGS_epochs;
  app.lr = static_cast<float>(FLAGS_lr);
  app.optimizer = FLAGS_optimizer;
  app.seed = FLAGS_seed;
  app.metrics_out = FLAGS_metrics_out;
  app.target = FLAGS_target;
  app.progress_interval_s = FLAGS_progress_s;
  app.progress_every_s = FLAGS_progress_every_s;
  app.trace_out = FLAGS_trace_out;
  app.eval_every = FLAGS_eval_every;
  app.staleness_aware = FLAGS_staleness_aware;
  app.eval_subset = FLAGS_eval_subset;
  app.checkpoint_every_epochs = FLAGS_checkpoint_every_epochs;
  return pushpull::ParseExperimentFlags(&app.inject);
}

pushpull::Status RunApp(pushpull::Client& client, pushpull::AppOptions app, pushpull::AppResult* result) {
  if (FLAGS_app == "linreg") {
    app.batch = FLAGS_batch > 0 ? FLAGS_batch : 100;
    pushpull::LinregOptions o;
    o.dim = FLAGS_dim;
    o.examples_per_worker = FLAGS_examples;
    o.noise = static_cast<float>(FLAGS_noise);
    return pushpull::RunLinreg(client, app, o, result);
  }
  if (FLAGS_app == "fmnist_mlp") {
    app.batch = FLAGS_batch > 0 ? FLAGS_batch : 64;
    pushpull::FmnistOptions o;
    PP_ASSIGN_OR_RETURN(o.layers, pushpull::ParseLayers(FLAGS_layers));
    o.data_dir = FLAGS_data_dir;
    PP_ASSIGN_OR_RETURN(o.device, pushpull::mlp::ParseDevice(FLAGS_device));
    o.gpu = FLAGS_gpu;
    o.train_limit = FLAGS_train_limit;
    o.test_limit = FLAGS_test_limit;
    return pushpull::RunFmnistMlp(client, app, o, result);
  }
  if (FLAGS_app == "sparse_lr") {
    app.batch = FLAGS_batch > 0 ? FLAGS_batch : 1000;
    pushpull::SparseLrOptions o;
    o.examples_total = FLAGS_examples_total;
    o.heldout = FLAGS_heldout;
    o.data.seed = FLAGS_seed;
    o.data.active = FLAGS_active;
    o.data.zipf_s = FLAGS_zipf;
    o.ftrl_alpha = static_cast<float>(FLAGS_ftrl_alpha);
    o.ftrl_beta = static_cast<float>(FLAGS_ftrl_beta);
    o.ftrl_l1 = static_cast<float>(FLAGS_ftrl_l1);
    o.ftrl_l2 = static_cast<float>(FLAGS_ftrl_l2);
    return pushpull::RunSparseLr(client, app, o, result);
  }
  return pushpull::Status::InvalidArgument("unknown --app '" + FLAGS_app + "' (linreg, fmnist_mlp, sparse_lr)");
}

}  // namespace

int main(int argc, char** argv) {
  pushpull::ParseFlagsOrHelp(
      &argc, &argv,

      "a pushpull worker: runs one training app.\n"
      "usage: pushpull-worker --scheduler=tcp://HOST:PORT --app=linreg|fmnist_mlp|sparse_lr [app flags]\n"
      "The flags from apps/worker_main_experiment_flags.cc, listed last, inject stragglers for the consistency "
      "experiments (make experiments).",
      pushpull::DaemonFlagSelection("worker_main", pushpull::kWorkerFlag));
  pushpull::RefuseArguments(argc, argv);
  pushpull::TuneMallocForLargeMessages();
  pushpull::SetLogTag("worker");
  if (FLAGS_verbose) pushpull::SetLogLevel(pushpull::LogLevel::kDebug);
  if (FLAGS_app.empty()) {
    PP_LOG(Error) << "--app is required (linreg, fmnist_mlp, sparse_lr); see --help";
    return 2;
  }
  if (FLAGS_batch < 0) {
    PP_LOG(Error) << "--batch must be >= 0 (0: the app's default), not " << FLAGS_batch;
    return 2;
  }
  // A GPU asked for where there is none fails the same way on every restart: say so before
  // joining the job, as bad flags (exit 2).
  if (FLAGS_app == "fmnist_mlp" && FLAGS_device == "gpu" && !pushpull::mlp::GpuAvailable()) {
#ifdef PUSHPULL_CUDA
    PP_LOG(Error) << "--device=gpu: no usable CUDA device on this machine (--device=auto uses the CPU then)";
#else
    PP_LOG(Error) << "--device=gpu: this build has no CUDA support (built with CUDA=0; --device=auto uses the CPU)";
#endif
    return 2;
  }
  pushpull::AppOptions app;
  if (pushpull::Status st = ParseAppOptions(&app); !st.ok()) {
    PP_LOG(Error) << st.ToString() << "; see --help";
    return 2;
  }
  // Served from before the job starts (a port in use is a setup error, found now), the client's
  // counters once it has joined.
  std::atomic<const pushpull::Client*> joined{nullptr};
  std::unique_ptr<pushpull::MetricsEndpoint> metrics;
  if (FLAGS_metrics_port != -1) {
    auto m = pushpull::MetricsEndpoint::Start(
        "0.0.0.0", FLAGS_metrics_port, [&joined] { return pushpull::WorkerMetricsText(joined.load(), FLAGS_app); });
    if (!m.ok()) {
      PP_LOG(Error) << "--metrics_port: " << m.status().ToString();
      return 2;
    }
    metrics = std::move(m.value());
    PP_LOG(Info) << "metrics at http://0.0.0.0:" << metrics->port() << "/metrics";
  }
  // A signal while it waits to register ends the wait (exit 1), rather than killing the process
  // outright; the job hears of it once it has joined (below).
  pushpull::InstallStopSignals();
  // Where the job is: the flags given, else what a launcher put in the environment (the client
  // reads it for the fields left unset), else the flags' defaults.
  auto given = [](const char* flag) { return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default; };
  pushpull::ClientOptions o;
  if (given("scheduler") || std::getenv("PUSHPULL_SCHEDULER") == nullptr) o.scheduler = FLAGS_scheduler;
  if (given("rank")) o.requested_rank = FLAGS_rank;
  if (given("consistency")) o.consistency = FLAGS_consistency;
  if (given("heartbeat_interval_ms")) o.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  if (given("scheduler_timeout_ms")) o.scheduler_timeout_ms = FLAGS_scheduler_timeout_ms;
  if (given("register_timeout_ms")) o.register_timeout_ms = FLAGS_register_timeout_ms;
  if (given("connect_timeout_ms")) o.connect_timeout_ms = FLAGS_connect_timeout_ms;
  o.request_timeout_ms = FLAGS_request_timeout_ms;
  o.max_unanswered_mb = FLAGS_max_unanswered_mb;
  auto client = pushpull::Client::Connect(o);
  if (!client.ok()) {
    PP_LOG(Error) << "cannot join the job: " << client.status().ToString();
    return pushpull::ExitCodeOf(client.status().code());
  }
  // Destroyed before the client, whatever the return: the endpoint's thread renders from it, and a
  // scrape during the client's teardown would read it freed.
  struct StopMetricsFirst {
    std::unique_ptr<pushpull::MetricsEndpoint>* m;
    ~StopMetricsFirst() { m->reset(); }
  } stop_metrics_first{&metrics};
  pushpull::SetLogTag("worker " + std::to_string((*client)->rank()));
  joined = client->get();
  app.consistency = (*client)->consistency();  // --consistency, else the launcher's
  // SIGINT/SIGTERM: the job hears that this worker stops, and why, now rather than from its
  // silence a heartbeat timeout later (the scheduler's --on_worker_death decides what follows);
  // exit 1, as a worker whose calls fail (a second signal exits at once).
  auto on_stop = pushpull::CallOnStopSignal([c = client->get()] {
    PP_LOG(Warning) << "stopping on a signal; telling the scheduler";
    c->Leave(pushpull::Status::Aborted("stopped by a signal (SIGINT or SIGTERM)")).IgnoreError();
    std::_Exit(1);
  });
  pushpull::AppResult result;
  pushpull::Status st;
  try {
    st = RunApp(**client, app, &result);
  } catch (const std::exception& e) {
    // Its data or model, as the flags size them, past this machine's memory (or any array's
    // largest size): the same on every restart, so a setup error (exit 2), said to the job like
    // any app error rather than an uncaught std::bad_alloc that aborts the worker (e.g. linreg
    // --dim=20000000).
    const bool too_big = dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const std::length_error*>(&e);
    st = too_big ? pushpull::Status::ResourceExhausted(FLAGS_app +
                                                       ": out of memory on this worker for the data and "
                                                       "model its flags ask for (e.g. linreg holds --examples x --dim "
                                                       "floats)")
                 : pushpull::Status::Internal(FLAGS_app + ": " + e.what());
  }
  // The job hears why this worker stops now, rather than from its silence a heartbeat timeout
  // later; the exit status says the cause as every binary does (include/pushpull/status.h): bad
  // flags or a bad setup, 2 (arguments refused, the data missing, a table past its servers'
  // --max_table_mb: the same again on a restart, which pushpull-launch does not make), a diverged
  // model 4 (a push held NaN or Inf), else 1.
  auto leave = [&](const pushpull::Status& why) {
    std::string who = "worker " + std::to_string((*client)->rank());
    if (why.message().rfind(FLAGS_app, 0) != 0) who += ": " + FLAGS_app;  // (most app errors name it)
    pushpull::Status left = (*client)->Leave(why.Annotate(who));
    if (!left.ok()) PP_LOG(Warning) << "could not tell the scheduler: " << left.ToString();
    return pushpull::ExitCodeOf(why.code());
  };
  if (!st.ok()) {
    PP_LOG(Error) << FLAGS_app << " failed: " << st.ToString();
    return leave(st);
  }
  PP_LOG(Info) << result.summary;
  if (!result.missed_target.empty()) {
    // The job ends on it (exit 3): told as it is, not as a death nor as a finish.
    const pushpull::Status missed(pushpull::Code::kTargetMissed, result.missed_target);
    PP_LOG(Error) << FLAGS_app << ": " << missed.message();
    pushpull::Status left = (*client)->Leave(missed);
    if (!left.ok()) PP_LOG(Warning) << "could not tell the scheduler: " << left.ToString();
    return pushpull::ExitCodeOf(missed.code());
  }
  st = (*client)->Finish();
  if (!st.ok()) {
    // (Its last pushes refused, say: the job must not count this worker finished.)
    PP_LOG(Error) << FLAGS_app << ": finish: " << st.ToString();
    return leave(st);
  }
  return 0;
}
