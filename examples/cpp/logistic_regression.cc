// Logistic regression trained on pushpull: a complete program of a user's own, built against the
// installed library (see Makefile here) and run as every worker of a job:
//
//   pushpull-launch --servers=2 --workers=2 -- ./logistic_regression --epochs=5
//
// Each worker draws its own examples from one known model, P(y = 1 | x) = sigmoid(w*.x + b*),
// pulls the weights, computes the gradient of the log loss on a minibatch, pushes it and ends
// the step with Clock(). The weights live on the servers, which apply Adam. At the end every
// worker measures accuracy on held-out examples, next to the accuracy of the true model (the
// best any classifier can do on average), and exits 3 when it is more than 0.02 below it.
#include <pushpull/pushpull.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kFeatures = 32;
constexpr int kRows = kFeatures + 1;  // the weights, then the bias

struct Examples {
  std::vector<float> x;  // n * kFeatures
  std::vector<float> y;  // n labels, 0 or 1
  size_t size() const { return y.size(); }
};

// The model the data comes from: w* then b*.
std::vector<float> TrueModel() {
  std::mt19937_64 gen(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kRows);
  for (float& v : w) v = normal(gen);
  return w;
}

float Score(const float* w, const float* x) {
  float z = w[kFeatures];
  for (int j = 0; j < kFeatures; ++j) z += w[j] * x[j];
  return z;
}

Examples Draw(size_t n, uint64_t seed, const std::vector<float>& model) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Examples e;
  e.x.resize(n * kFeatures);
  e.y.resize(n);
  for (size_t i = 0; i < n; ++i) {
    for (int j = 0; j < kFeatures; ++j) e.x[i * kFeatures + j] = normal(gen);
    const float p = 1.0f / (1.0f + std::exp(-Score(model.data(), &e.x[i * kFeatures])));
    e.y[i] = uniform(gen) < p ? 1.0f : 0.0f;
  }
  return e;
}

double Accuracy(const std::vector<float>& w, const Examples& e) {
  size_t right = 0;
  for (size_t i = 0; i < e.size(); ++i) right += (Score(w.data(), &e.x[i * kFeatures]) > 0) == (e.y[i] > 0.5f);
  return static_cast<double>(right) / e.size();
}

int Fail(const std::string& what, const pushpull::Status& s) {
  std::fprintf(stderr, "logistic_regression: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--epochs=", 9) == 0 && std::atoi(argv[i] + 9) > 0) {
      epochs = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--epochs=N]  (run it under pushpull-launch)\n", argv[0]);
      return 2;
    }
  }
  // Where the job is comes from the environment pushpull-launch sets.
  auto connected = pushpull::Client::Connect(pushpull::ClientOptions{});
  if (!connected.ok()) return Fail("cannot join the job", connected.status());
  pushpull::Client& client = **connected;
  const int rank = client.rank();

  pushpull::TableSpec spec;
  spec.name = "logistic_regression.weights";
  spec.rows = kRows;
  spec.dim = 1;
  spec.optimizer.kind = pushpull::opt::Kind::kAdam;
  spec.optimizer.lr = 0.05f;
  spec.consistency = client.consistency();  // the job's: pushpull-launch --consistency
  auto table = client.CreateTable(spec);
  if (!table.ok()) return Fail("create table", table.status());

  const std::vector<float> model = TrueModel();
  const Examples train = Draw(8000, 100 + rank, model);  // this worker's share
  const Examples test = Draw(5000, 7, model);
  constexpr size_t kBatch = 100;
  std::vector<float> w(kRows);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double loss = 0;
    for (size_t begin = 0; begin < train.size(); begin += kBatch) {
      if (auto s = client.PullDense(*table, w.data()).Wait(); !s.ok()) return Fail("pull", s);
      std::vector<float> grad(kRows, 0.0f);
      const size_t end = std::min(begin + kBatch, train.size());
      for (size_t i = begin; i < end; ++i) {
        const float* x = &train.x[i * kFeatures];
        const float p = 1.0f / (1.0f + std::exp(-Score(w.data(), x)));
        const float err = (p - train.y[i]) / (end - begin);
        for (int j = 0; j < kFeatures; ++j) grad[j] += err * x[j];
        grad[kFeatures] += err;
        loss -= std::log(train.y[i] > 0.5f ? std::max(p, 1e-7f) : std::max(1.0f - p, 1e-7f));
      }
      client.PushDense(*table, std::move(grad));  // a refused push fails the Clock() below
      if (auto s = client.Clock(); !s.ok()) return Fail("clock", s);
    }
    std::printf("worker %d epoch %d: train loss %.4f\n", rank, epoch + 1, loss / train.size());
    std::fflush(stdout);
  }
  if (auto s = client.PullDense(*table, w.data()).Wait(); !s.ok()) return Fail("final pull", s);
  const double accuracy = Accuracy(w, test), best = Accuracy(model, test);
  if (auto s = client.Finish(); !s.ok()) return Fail("finish", s);
  std::printf("worker %d: test accuracy %.4f (the true model's %.4f)\n", rank, accuracy, best);
  return accuracy >= best - 0.02 ? 0 : 3;
}
