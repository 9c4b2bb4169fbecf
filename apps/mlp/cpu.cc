// CPU MLP backend: Eigen matrix products over row-major maps of the parameter layout.
// Eigen 3.4's AVX code trips -Wunused-variable; it is included with -I, not -isystem.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "apps/mlp/backend.h"

namespace pushpull::mlp {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstRowMap = Eigen::Map<const RowMat>;
using RowMap = Eigen::Map<RowMat>;

// Threading: one thread at a time (the MlpBackend contract); the scratch matrices are reused
// across calls, so concurrent calls on one object would race.
class CpuMlpBackend final : public MlpBackend {
 public:
  CpuMlpBackend(std::vector<int> layers, int max_batch) : MlpBackend(std::move(layers)), max_batch_(max_batch) {
    const size_t num_layers = layers_.size() - 1;
    acts_.resize(num_layers);
    deltas_.resize(num_layers);
    for (size_t l = 0; l < num_layers; ++l) {
      acts_[l].resize(max_batch_, layers_[l + 1]);
      deltas_[l].resize(max_batch_, layers_[l + 1]);
    }
    exp_row_.resize(layers_.back());
  }

  std::string name() const override { return "cpu (Eigen)"; }

  Status ForwardBackward(const std::vector<const float*>& params, const float* x, const uint8_t* labels, int batch,
                         const std::vector<float*>& grads, float* loss) override {
    const size_t num_layers = layers_.size() - 1;
    PP_RETURN_IF_ERROR(internal::CheckParams(params, num_layers));
    PP_RETURN_IF_ERROR(internal::CheckGrads(grads, num_layers));
    if (batch <= 0 || batch > max_batch_) {
      return Status::InvalidArgument("batch = " + std::to_string(batch) + " is not in [1, " +
                                     std::to_string(max_batch_) + "]");
    }
    if (x == nullptr || labels == nullptr || loss == nullptr) {
      return Status::InvalidArgument("ForwardBackward: x, labels and loss must be non-null");
    }
    PP_RETURN_IF_ERROR(internal::CheckLabels(labels, batch, layers_.back()));

    Forward(params, x, batch);
    *loss = float(SoftmaxXent(batch, labels, /*want_grad=*/true));

    for (int l = int(num_layers) - 1; l >= 0; --l) {
      const int in = layers_[l], out = layers_[l + 1];
      auto delta = deltas_[l].topRows(batch);  // d(loss)/d(pre-activation of layer l)
      RowMap g(grads[l], out, in + 1);
      if (l == 0) {
        ConstRowMap a(x, batch, in);
        g.leftCols(in).noalias() = delta.transpose() * a;
      } else {
        g.leftCols(in).noalias() = delta.transpose() * acts_[l - 1].topRows(batch);
      }
      g.col(in) = delta.colwise().sum().transpose();
      if (l > 0) {
        ConstRowMap p(params[l], out, in + 1);
        auto prev = deltas_[l - 1].topRows(batch);
        prev.noalias() = delta * p.leftCols(in);
        // ReLU backward: the activation is positive exactly where the pre-activation was.
        prev = (acts_[l - 1].topRows(batch).array() > 0.0f).select(prev, 0.0f);
      }
    }
    return Status::OK();
  }

  Status Predict(const std::vector<const float*>& params, const float* x, int n, int* predictions,
                 const uint8_t* labels, float* loss) override {
    const size_t num_layers = layers_.size() - 1;
    PP_RETURN_IF_ERROR(internal::CheckParams(params, num_layers));
    if (n < 0) return Status::InvalidArgument("Predict: n = " + std::to_string(n) + " < 0");
    if (n > 0 && (x == nullptr || predictions == nullptr)) {
      return Status::InvalidArgument("Predict: x and predictions must be non-null");
    }
    const bool want_loss = labels != nullptr && loss != nullptr;
    if (labels != nullptr) PP_RETURN_IF_ERROR(internal::CheckLabels(labels, n, layers_.back()));

    double loss_sum = 0.0;
    const int in = layers_[0];
    for (int start = 0; start < n; start += max_batch_) {
      const int b = std::min(max_batch_, n - start);
      Forward(params, x + size_t(start) * in, b);
      auto logits = acts_.back().topRows(b);
      for (int i = 0; i < b; ++i) {
        Eigen::Index arg;
        logits.row(i).maxCoeff(&arg);
        predictions[start + i] = int(arg);
      }
      if (want_loss) loss_sum += SoftmaxXent(b, labels + start, /*want_grad=*/false) * b;
    }
    if (want_loss) *loss = n > 0 ? float(loss_sum / n) : 0.0f;
    return Status::OK();
  }

 private:
  // acts_[l] = layer l's output for the first `batch` rows: ReLU for hidden layers, logits last.
  void Forward(const std::vector<const float*>& params, const float* x, int batch) {
    const size_t num_layers = layers_.size() - 1;
    for (size_t l = 0; l < num_layers; ++l) {
      const int in = layers_[l], out = layers_[l + 1];
      ConstRowMap p(params[l], out, in + 1);
      auto z = acts_[l].topRows(batch);
      if (l == 0) {
        z.noalias() = ConstRowMap(x, batch, in) * p.leftCols(in).transpose();
      } else {
        z.noalias() = acts_[l - 1].topRows(batch) * p.leftCols(in).transpose();
      }
      z.rowwise() += p.col(in).transpose();
      if (l + 1 < num_layers) z = z.cwiseMax(0.0f);  // (NaN stays NaN: std::max order; tested)
    }
  }

  // Mean softmax cross-entropy of the logits in acts_.back(). With want_grad, writes
  // d(mean loss)/d(logits) into deltas_.back(). Subtracting the row max keeps exp() finite.
  double SoftmaxXent(int batch, const uint8_t* labels, bool want_grad) {
    auto logits = acts_.back().topRows(batch);
    double total = 0.0;
    for (int i = 0; i < batch; ++i) {
      const float m = logits.row(i).maxCoeff();
      exp_row_ = (logits.row(i).array() - m).exp();
      const float sum = exp_row_.sum();
      total += double(std::log(sum)) + m - logits(i, labels[i]);
      if (want_grad) {
        auto d = deltas_.back().row(i);
        d = (exp_row_ / (sum * batch)).matrix();
        d(labels[i]) -= 1.0f / batch;
      }
    }
    return total / batch;
  }

  const int max_batch_;
  std::vector<RowMat> acts_;                        // max_batch x layers[l+1], per layer
  std::vector<RowMat> deltas_;                      // same shapes: gradients w.r.t. pre-activations
  Eigen::Array<float, 1, Eigen::Dynamic> exp_row_;  // one row of exp(logit - max)
};

}  // namespace

namespace internal {
Result<std::unique_ptr<MlpBackend>> NewCpuMlpBackend(std::vector<int> layers, int max_batch) {
  PP_RETURN_IF_ERROR(CheckLayers(layers, max_batch));
  return std::unique_ptr<MlpBackend>(new CpuMlpBackend(std::move(layers), max_batch));
}
}  // namespace internal

}  // namespace pushpull::mlp
