#include "apps/ctr_data.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace pushpull {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD6E8FEB86659FD93ull);
  return SplitMix64(&s);
}

double ToUnit(uint64_t x) { return double(x >> 11) * 0x1.0p-53; }  // [0, 1)

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Helpers of the rejection-inversion sampler: log1p(x)/x and expm1(x)/x, accurate near 0.
double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

}  // namespace

Status ValidateCtrConfig(const CtrConfig& c) {
  if (c.active <= 0) {
    return Status::InvalidArgument("ctr.active = " + std::to_string(c.active) + " must be > 0");
  }
  if (c.id_space < uint64_t(c.active) || c.id_space > (1ull << 62)) {
    return Status::InvalidArgument("ctr.id_space = " + std::to_string(c.id_space) + " must be in [active, 2^62]");
  }
  if (!(c.zipf_s > 0.0) || !std::isfinite(c.zipf_s)) {
    return Status::InvalidArgument("ctr.zipf_s = " + std::to_string(c.zipf_s) + " must be > 0");
  }
  if (c.informative_ranks < 0) {
    return Status::InvalidArgument("ctr.informative_ranks = " + std::to_string(c.informative_ranks) + " must be >= 0");
  }
  if (!(c.informative_fraction >= 0.0 && c.informative_fraction <= 1.0)) {
    return Status::InvalidArgument("ctr.informative_fraction = " + std::to_string(c.informative_fraction) +
                                   " must be in [0, 1]");
  }
  if (!std::isfinite(c.weight_scale) || c.weight_scale < 0.0 || !std::isfinite(c.bias)) {
    return Status::InvalidArgument("ctr.weight_scale must be finite and >= 0, ctr.bias finite");
  }
  return Status::OK();
}

Result<CtrGenerator> CtrGenerator::Create(const CtrConfig& config, uint64_t stream) {
  PP_RETURN_IF_ERROR(ValidateCtrConfig(config));
  return CtrGenerator(config, stream);
}

CtrGenerator::CtrGenerator(const CtrConfig& config, uint64_t stream) : config_(config) {
  ranks_ = int64_t(config_.id_space / uint64_t(config_.active));
  perm_mask_ = 1;
  while (perm_mask_ < config_.id_space - 1) perm_mask_ = (perm_mask_ << 1) | 1;
  uint64_t key_state = Mix(config_.seed, 0x5045524Dull);  // the bijection depends on seed only
  for (uint64_t& k : perm_keys_) k = SplitMix64(&key_state);
  uint64_t rng_state = Mix(config_.seed, Mix(stream, 0x53545245414Dull));
  for (uint64_t& s : rng_) s = SplitMix64(&rng_state);

  // Rejection-inversion over ranks 1..V: h(x) = x^-s, H its integral (up to a constant).
  h_x1_ = HIntegral(1.5) - 1.0;
  h_n_ = HIntegral(double(ranks_) + 0.5);
  s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - std::exp(-config_.zipf_s * std::log(2.0)));
}

double CtrGenerator::HIntegral(double x) const {
  const double log_x = std::log(x);
  return Helper2((1.0 - config_.zipf_s) * log_x) * log_x;
}

double CtrGenerator::HIntegralInverse(double x) const {
  double t = x * (1.0 - config_.zipf_s);
  if (t < -1.0) t = -1.0;  // rounding guard: the exact value is >= -1
  return std::exp(Helper1(t) * x);
}

uint64_t CtrGenerator::NextU64() {
  const uint64_t result = Rotl(rng_[1] * 5, 7) * 9;
  const uint64_t t = rng_[1] << 17;
  rng_[2] ^= rng_[0];
  rng_[3] ^= rng_[1];
  rng_[1] ^= rng_[2];
  rng_[0] ^= rng_[3];
  rng_[2] ^= t;
  rng_[3] = Rotl(rng_[3], 45);
  return result;
}

double CtrGenerator::NextUniform() { return ToUnit(NextU64()); }

int64_t CtrGenerator::SampleRank() {
  // Expected iterations are close to 1 for every s and V.
  for (;;) {
    const double u = h_n_ + NextUniform() * (h_x1_ - h_n_);
    const double x = HIntegralInverse(u);
    int64_t k = int64_t(x + 0.5);
    k = std::clamp<int64_t>(k, 1, ranks_);
    if (double(k) - x <= s_ || u >= HIntegral(double(k) + 0.5) - std::exp(-config_.zipf_s * std::log(double(k)))) {
      return k;
    }
  }
}

uint64_t CtrGenerator::IdOf(int field, int64_t rank) const {
  // A bijection on [0, 2^k) (odd multiplies, xor-shifts and xors are each invertible there),
  // restricted to [0, id_space) by cycle walking: re-apply until the value lands inside.
  const int bits = 64 - __builtin_clzll(perm_mask_);
  const int shift = bits / 2 + 1;
  uint64_t v = uint64_t(field) * uint64_t(ranks_) + uint64_t(rank - 1);
  do {
    for (uint64_t key : perm_keys_) {
      v = (v * (key | 1)) & perm_mask_;
      v ^= v >> shift;
      v ^= (key >> 17) & perm_mask_;
    }
  } while (v >= config_.id_space);
  return v;
}

double CtrGenerator::TrueWeight(int field, int64_t rank) const {
  if (rank > config_.informative_ranks) return 0.0;
  const uint64_t h = Mix(config_.seed ^ 0x57454947ull, IdOf(field, rank));
  if (ToUnit(h) >= config_.informative_fraction) return 0.0;
  const uint64_t h2 = Mix(h, 0x5343414Cull);
  return config_.weight_scale * std::sqrt(3.0) * (2.0 * ToUnit(h2) - 1.0);
}

void CtrGenerator::Next(CtrExample* ex) {
  ex->ids.resize(size_t(config_.active));
  double logit = config_.bias;
  for (int f = 0; f < config_.active; ++f) {
    const int64_t rank = SampleRank();
    ex->ids[f] = IdOf(f, rank);
    if (rank <= config_.informative_ranks) logit += TrueWeight(f, rank);
  }
  ex->p = 1.0 / (1.0 + std::exp(-logit));
  ex->label = NextUniform() < ex->p ? 1 : 0;
}

double BinaryEntropy(double p) {
  if (p <= 0.0 || p >= 1.0) return 0.0;
  return -(p * std::log(p) + (1.0 - p) * std::log1p(-p));
}

Result<double> LogLoss(const std::vector<double>& probs, const std::vector<uint8_t>& labels) {
  if (probs.empty() || probs.size() != labels.size()) {
    return Status::InvalidArgument("LogLoss: " + std::to_string(probs.size()) + " probabilities for " +
                                   std::to_string(labels.size()) + " labels (need the same, non-zero count)");
  }
  constexpr double kEps = 1e-15;
  double sum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] >= 0.0 && probs[i] <= 1.0) || labels[i] > 1) {
      return Status::InvalidArgument("LogLoss: example " + std::to_string(i) + " has p = " + std::to_string(probs[i]) +
                                     ", label " + std::to_string(labels[i]) + " (need p in [0,1], label 0/1)");
    }
    const double p = std::clamp(probs[i], kEps, 1.0 - kEps);
    sum -= labels[i] ? std::log(p) : std::log1p(-p);
  }
  return sum / double(probs.size());
}

Result<double> Auc(const std::vector<double>& scores, const std::vector<uint8_t>& labels) {
  if (scores.empty() || scores.size() != labels.size()) {
    return Status::InvalidArgument("Auc: " + std::to_string(scores.size()) + " scores for " +
                                   std::to_string(labels.size()) + " labels (need the same, non-zero count)");
  }
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) {
      return Status::InvalidArgument("Auc: score " + std::to_string(i) + " is NaN");
    }
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the (1-based, tie-averaged) ranks of the positives.
  double positive_rank_sum = 0.0;
  uint64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mid_rank = 0.5 * double(i + 1 + j);  // mean of ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 1) {
        return Status::InvalidArgument("Auc: label " + std::to_string(labels[order[k]]) + " is not 0/1");
      }
      if (labels[order[k]]) {
        positive_rank_sum += mid_rank;
        ++positives;
      }
    }
    i = j;
  }
  const uint64_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) {
    return Status::InvalidArgument("Auc: needs both classes, got " + std::to_string(positives) + " positives and " +
                                   std::to_string(negatives) + " negatives");
  }
  const double p = double(positives), n = double(negatives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * n);
}

}  // namespace pushpull
