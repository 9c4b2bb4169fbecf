// MLP backends (apps/mlp/backend.h): gradients against finite differences of a double-precision
// reference, losses worked out by hand, Predict against a reference argmax, and CPU vs GPU on the
// same batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "apps/mlp/backend.h"

namespace pushpull {
namespace {

// Parameters and a batch for an MLP, with pointer views in the shape the backend wants.
struct Net {
  std::vector<int> layers;
  std::vector<std::vector<float>> params, grads;

  Net(std::vector<int> l, float scale, uint32_t seed) : layers(std::move(l)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    for (size_t i = 0; i + 1 < layers.size(); ++i) {
      std::vector<float> p(size_t(layers[i + 1]) * (layers[i] + 1));
      for (float& v : p) v = u(rng);
      params.push_back(p);
      grads.emplace_back(p.size(), 0.0f);
    }
  }
  std::vector<const float*> p() const {
    std::vector<const float*> v;
    for (const auto& a : params) v.push_back(a.data());
    return v;
  }
  std::vector<float*> g() {
    std::vector<float*> v;
    for (auto& a : grads) v.push_back(a.data());
    return v;
  }
};

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> labels;
};

Batch RandomBatch(int n, int in, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch b;
  b.x.resize(size_t(n) * in);
  for (float& v : b.x) v = u(rng);
  for (int i = 0; i < n; ++i) b.labels.push_back(uint8_t(rng() % classes));
  return b;
}

// Double-precision forward pass with plain loops: logits of row i, independent of Eigen.
std::vector<double> RefLogits(const std::vector<int>& layers, const std::vector<std::vector<double>>& params,
                              const float* x) {
  std::vector<double> a(x, x + layers[0]);
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    const int in = layers[l], out = layers[l + 1];
    std::vector<double> z(out);
    for (int o = 0; o < out; ++o) {
      double s = params[l][size_t(o) * (in + 1) + in];
      for (int i = 0; i < in; ++i) s += params[l][size_t(o) * (in + 1) + i] * a[i];
      z[o] = (l + 2 < layers.size()) ? std::max(s, 0.0) : s;
    }
    a = z;
  }
  return a;
}

double RefMeanLoss(const std::vector<int>& layers, const std::vector<std::vector<double>>& params, const Batch& b,
                   int n) {
  double total = 0.0;
  for (int r = 0; r < n; ++r) {
    std::vector<double> z = RefLogits(layers, params, b.x.data() + size_t(r) * layers[0]);
    const double m = *std::max_element(z.begin(), z.end());
    double s = 0.0;
    for (double v : z) s += std::exp(v - m);
    total += std::log(s) + m - z[b.labels[r]];
  }
  return total / n;
}

std::vector<std::vector<double>> ToDouble(const std::vector<std::vector<float>>& p) {
  std::vector<std::vector<double>> d;
  for (const auto& a : p) d.emplace_back(a.begin(), a.end());
  return d;
}

std::unique_ptr<mlp::MlpBackend> MakeCpu(std::vector<int> layers, int max_batch) {
  auto r = mlp::MlpBackend::Create(mlp::Device::kCpu, std::move(layers), max_batch);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(MlpBackend, GradientsMatchCentralDifferences) {
  const std::vector<int> layers = {8, 12, 10, 5};  // 108 + 130 + 55 = 293 coordinates
  const int batch = 7;
  Net net(layers, 0.6f, 1);
  Batch b = RandomBatch(batch, layers[0], layers.back(), 2);
  auto be = MakeCpu(layers, 16);
  ASSERT_NE(be, nullptr);
  float loss = 0.0f;
  ASSERT_TRUE(be->ForwardBackward(net.p(), b.x.data(), b.labels.data(), batch, net.g(), &loss).ok());

  auto ref = ToDouble(net.params);
  EXPECT_NEAR(loss, RefMeanLoss(layers, ref, b, batch), 1e-5 * std::abs(loss));

  // Finite differences in double on the reference loss: error O(h^2) ~ 1e-12, far below the
  // float rounding of the backend's gradients, so the tolerance is set by float alone.
  const double h = 1e-5;
  int checked = 0;
  for (size_t l = 0; l < ref.size(); ++l) {
    for (size_t k = 0; k < ref[l].size(); ++k) {
      const double saved = ref[l][k];
      ref[l][k] = saved + h;
      const double up = RefMeanLoss(layers, ref, b, batch);
      ref[l][k] = saved - h;
      const double down = RefMeanLoss(layers, ref, b, batch);
      ref[l][k] = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(net.grads[l][k], fd, 1e-6 + 1e-4 * std::abs(fd)) << "layer " << l << " coordinate " << k;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 293);
}

TEST(MlpBackend, LossAndGradientsOfATinyCaseByHand) {
  // No hidden layer. Unit 0: w = (1, 2), b = 0.5; unit 1: w = (-1, 0), b = 0.
  // Example 1: x = (1, 1), label 0: z = (3.5, -1), loss = log(1 + e^-4.5).
  // Example 2: x = (0, 0), label 1: z = (0.5, 0), loss = log(1 + e^0.5).
  auto be = MakeCpu({2, 2}, 2);
  ASSERT_NE(be, nullptr);
  std::vector<float> p = {1, 2, 0.5f, -1, 0, 0}, g(6, -7.0f);
  std::vector<float> x = {1, 1, 0, 0};
  std::vector<uint8_t> y = {0, 1};
  float loss = 0.0f;
  ASSERT_TRUE(be->ForwardBackward({p.data()}, x.data(), y.data(), 2, {g.data()}, &loss).ok());
  EXPECT_NEAR(loss, 0.49256236451435026, 1e-6);
  // d(mean loss)/dz: example 1 (p0 - 1, p1) / 2 with p0 = 1/(1+e^-4.5); example 2
  // (q0, q1 - 1) / 2 with q0 = e^0.5/(1+e^0.5).
  const double d1 = -0.005493471315296594, d2 = 0.3112296656009273;
  EXPECT_NEAR(g[0], d1, 1e-6);       // unit 0, w0: x = 1 in example 1 only
  EXPECT_NEAR(g[1], d1, 1e-6);       // unit 0, w1
  EXPECT_NEAR(g[2], d1 + d2, 1e-6);  // unit 0, bias
  EXPECT_NEAR(g[3], -d1, 1e-6);
  EXPECT_NEAR(g[4], -d1, 1e-6);
  EXPECT_NEAR(g[5], -d1 - d2, 1e-6);
}

TEST(MlpBackend, HiddenReluCaseByHand) {
  // 1 -> 2 -> 2. Hidden: h = relu(x, -x) at x = 2: (2, 0). Output unit 0: w = (1, 1), b = 0;
  // unit 1: all zero. z = (2, 0), label 1: loss = log(e^2 + 1). d loss/dz = (s, -s) with
  // s = e^2/(e^2+1); dh = (s, s) masked by the ReLU to (s, 0).
  auto be = MakeCpu({1, 2, 2}, 1);
  ASSERT_NE(be, nullptr);
  std::vector<float> p0 = {1, 0, -1, 0}, p1 = {1, 1, 0, 0, 0, 0};
  std::vector<float> g0(4), g1(6);
  const float x = 2.0f;
  const uint8_t y = 1;
  float loss = 0.0f;
  ASSERT_TRUE(be->ForwardBackward({p0.data(), p1.data()}, &x, &y, 1, {g0.data(), g1.data()}, &loss).ok());
  EXPECT_NEAR(loss, 2.1269280110429727, 1e-6);
  const double s = std::exp(2.0) / (std::exp(2.0) + 1);
  const std::vector<double> want1 = {2 * s, 0, s, -2 * s, 0, -s};
  const std::vector<double> want0 = {2 * s, s, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(g1[i], want1[i], 1e-6) << i;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g0[i], want0[i], 1e-6) << i;
}

TEST(MlpBackend, LargeLogitsStayFinite) {
  auto be = MakeCpu({1, 2}, 1);
  ASSERT_NE(be, nullptr);
  std::vector<float> p = {0, 1000, 0, -1000}, g(4);  // z = (1000, -1000)
  const float x = 0.0f;
  const uint8_t y = 1;
  float loss = 0.0f;
  ASSERT_TRUE(be->ForwardBackward({p.data()}, &x, &y, 1, {g.data()}, &loss).ok());
  EXPECT_NEAR(loss, 2000.0f, 1e-2);
  EXPECT_NEAR(g[1], 1.0f, 1e-6);
  EXPECT_NEAR(g[3], -1.0f, 1e-6);
}

TEST(MlpBackend, PredictMatchesReferenceArgmaxAcrossChunks) {
  const std::vector<int> layers = {8, 12, 10, 5};
  Net net(layers, 0.8f, 3);
  const int n = 37;  // max_batch 10: four chunks, the last partial
  Batch b = RandomBatch(n, layers[0], layers.back(), 4);
  auto be = MakeCpu(layers, 10);
  ASSERT_NE(be, nullptr);
  std::vector<int> pred(n, -1);
  float loss = -1.0f;
  ASSERT_TRUE(be->Predict(net.p(), b.x.data(), n, pred.data(), b.labels.data(), &loss).ok());
  auto ref = ToDouble(net.params);
  std::vector<int> classes_seen(layers.back(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<double> z = RefLogits(layers, ref, b.x.data() + size_t(i) * layers[0]);
    const int want = int(std::max_element(z.begin(), z.end()) - z.begin());
    EXPECT_EQ(pred[i], want) << "row " << i;
    ++classes_seen[want];
  }
  // The test is only meaningful if the network does not predict one class everywhere.
  EXPECT_GE(std::count_if(classes_seen.begin(), classes_seen.end(), [](int c) { return c > 0; }), 2);
  EXPECT_NEAR(loss, RefMeanLoss(layers, ref, b, n), 1e-5);

  // Without labels: predictions only, *loss untouched.
  std::vector<int> pred2(n, -1);
  float untouched = 123.0f;
  ASSERT_TRUE(be->Predict(net.p(), b.x.data(), n, pred2.data(), nullptr, &untouched).ok());
  EXPECT_EQ(pred2, pred);
  EXPECT_EQ(untouched, 123.0f);
}

TEST(MlpBackend, RejectsBadArguments) {
  auto be = MakeCpu({4, 3, 2}, 4);
  ASSERT_NE(be, nullptr);
  Net net({4, 3, 2}, 0.5f, 5);
  Batch b = RandomBatch(5, 4, 2, 6);
  float loss = 0.0f;
  Status s = be->ForwardBackward(net.p(), b.x.data(), b.labels.data(), 5, net.g(), &loss);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("batch = 5"), std::string::npos) << s.ToString();

  b.labels[1] = 2;  // classes are {0, 1}
  s = be->ForwardBackward(net.p(), b.x.data(), b.labels.data(), 4, net.g(), &loss);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("label 2"), std::string::npos) << s.ToString();

  s = be->ForwardBackward({net.params[0].data()}, b.x.data(), b.labels.data(), 1, net.g(), &loss);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);

  std::vector<int> pred(5);
  EXPECT_EQ(be->Predict(net.p(), b.x.data(), -1, pred.data()).code(), Code::kInvalidArgument);
}

TEST(MlpBackend, ParseDevice) {
  EXPECT_EQ(mlp::ParseDevice("auto").value(), mlp::Device::kAuto);
  EXPECT_EQ(mlp::ParseDevice("cpu").value(), mlp::Device::kCpu);
  EXPECT_EQ(mlp::ParseDevice("gpu").value(), mlp::Device::kGpu);
  for (const char* bad : {"", "GPU", "cuda", "tpu"}) {
    auto r = mlp::ParseDevice(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("auto|cpu|gpu"), std::string::npos);
  }
}

TEST(MlpBackend, CreateValidatesShapes) {
  EXPECT_EQ(mlp::MlpBackend::Create(mlp::Device::kCpu, {784}, 8).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(mlp::MlpBackend::Create(mlp::Device::kCpu, {784, 0, 10}, 8).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(mlp::MlpBackend::Create(mlp::Device::kCpu, {784, 10}, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(mlp::MlpBackend::Create(mlp::Device::kCpu, {784, 300}, 8).status().code(),
            Code::kInvalidArgument);  // more classes than a uint8_t label can name
  auto ok = mlp::MlpBackend::Create(mlp::Device::kCpu, {784, 256, 128, 10}, 8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->name(), "cpu (Eigen)");
  EXPECT_EQ((*ok)->layer_size(0), size_t(256 * 785));
}

TEST(MlpBackend, GpuWithoutDeviceIsUnavailable) {
  if (mlp::GpuAvailable()) GTEST_SKIP() << "a CUDA device is present; the no-GPU path is not testable";
  auto r = mlp::MlpBackend::Create(mlp::Device::kGpu, {4, 3, 2}, 8);
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  auto a = mlp::MlpBackend::Create(mlp::Device::kAuto, {4, 3, 2}, 8);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->name(), "cpu (Eigen)");
}

void ExpectClose(const std::vector<float>& cpu, const std::vector<float>& gpu, const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size());
  float scale = 0.0f;
  for (float v : cpu) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0.0f) << what << ": all-zero gradient, nothing compared";
  int bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    // Different summation orders in float: relative to the layer's largest entry.
    if (std::abs(cpu[i] - gpu[i]) > 1e-4f * scale + 1e-3f * std::abs(cpu[i])) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: cpu " << cpu[i] << " gpu " << gpu[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Both backends on the same batches: loss, every gradient entry, and Predict over more rows than
// max_batch (chunked on both).
void ExpectBackendsAgree(const std::vector<int>& layers, int max_batch, int batch) {
  SCOPED_TRACE("layers " + std::to_string(layers.size()) + ", first " + std::to_string(layers[0]) + ", classes " +
               std::to_string(layers.back()) + ", batch " + std::to_string(batch));
  auto cpu = mlp::MlpBackend::Create(mlp::Device::kCpu, layers, max_batch);
  auto gpu = mlp::MlpBackend::Create(mlp::Device::kGpu, layers, max_batch);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->name().rfind("gpu (cuBLAS, ", 0), 0u) << (*gpu)->name();

  Net a(layers, 0.08f, 7), g(layers, 0.08f, 7);
  const int rows = std::max(200, 2 * batch);
  Batch b = RandomBatch(rows, layers[0], layers.back(), 8);
  for (int step = 0; step < 2; ++step) {  // twice: buffers reused across calls
    float lc = 0.0f, lg = 0.0f;
    const float* x = b.x.data() + size_t(step) * batch * layers[0];
    const uint8_t* y = b.labels.data() + step * batch;
    ASSERT_TRUE((*cpu)->ForwardBackward(a.p(), x, y, batch, a.g(), &lc).ok());
    Status s = (*gpu)->ForwardBackward(g.p(), x, y, batch, g.g(), &lg);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_NEAR(lc, lg, 1e-5f * std::abs(lc)) << "step " << step;
    for (size_t l = 0; l < a.grads.size(); ++l) {
      ExpectClose(a.grads[l], g.grads[l], ("layer " + std::to_string(l)).c_str());
    }
  }

  std::vector<int> pc(rows), pg(rows);
  float lc = 0.0f, lg = 0.0f;
  ASSERT_TRUE((*cpu)->Predict(a.p(), b.x.data(), rows, pc.data(), b.labels.data(), &lc).ok());
  Status s = (*gpu)->Predict(g.p(), b.x.data(), rows, pg.data(), b.labels.data(), &lg);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NEAR(lc, lg, 1e-5f * std::abs(lc));
  int differ = 0;
  for (int i = 0; i < rows; ++i) differ += pc[i] != pg[i];
  EXPECT_LE(differ, 1) << "only a near-tie may round differently";
}

// A NaN weight reaches the loss on every backend, through the hidden ReLU too (the GPU's made it
// 0, training on where the CPU showed a diverged model). GPU part: skipped without a device.
TEST(MlpBackend, ANaNWeightMakesTheLossNaNOnEveryDevice) {
  const std::vector<int> layers = {6, 5, 3};
  for (mlp::Device d : {mlp::Device::kCpu, mlp::Device::kGpu}) {
    if (d == mlp::Device::kGpu && !mlp::GpuAvailable()) continue;
    auto m = mlp::MlpBackend::Create(d, layers, 8);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Net n(layers, 0.3f, 3);
    n.params[0][0] = std::nanf("");  // hidden unit 0's weight of input 0 (inputs are > 0)
    Batch b = RandomBatch(8, layers[0], layers.back(), 4);
    float loss = 0.0f;
    ASSERT_TRUE((*m)->ForwardBackward(n.p(), b.x.data(), b.labels.data(), 8, n.g(), &loss).ok());
    EXPECT_TRUE(std::isnan(loss)) << (*m)->name() << ": loss " << loss;
  }
  if (!mlp::GpuAvailable()) GTEST_SKIP() << "CPU checked; no usable CUDA device for the GPU part";
}

TEST(MlpBackend, CpuAndGpuAgree) {
  if (!mlp::GpuAvailable()) {
    GTEST_SKIP() << "no usable CUDA device (GpuAvailable() is false, or built with CUDA=0): "
                    "CPU-vs-GPU agreement not checked";
  }
  ExpectBackendsAgree({784, 256, 128, 10}, 64, 50);  // the app's model, a partial batch
  // Sizes off every multiple of 32: more classes than a warp has lanes (the softmax's strided
  // loop), bias-gradient blocks with idle units, a batch of one and a full one.
  ExpectBackendsAgree({37, 70, 45}, 16, 1);
  ExpectBackendsAgree({37, 70, 45}, 16, 16);
  ExpectBackendsAgree({5, 200}, 33, 33);  // no hidden layer
}

}  // namespace
}  // namespace pushpull
