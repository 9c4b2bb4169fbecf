// Synthetic click-through data with a known optimum, for the sparse logistic-regression app.
//
// An example has one active feature in each of `active` fields. In field f the feature's rank
// r in [1, V] (V = id_space / active) follows a Zipf law with exponent zipf_s, so a few ids are
// very common and most are rare, as in real CTR logs. (f, r) maps to a hashed id in
// [0, id_space) through a seeded bijection, so distinct (field, rank) pairs never collide and
// the true model is an exact logistic model over ids:
//   p = sigmoid(bias + sum of w(id) over the active ids),  label ~ Bernoulli(p).
// w(id) is non-zero only for ids of rank <= informative_ranks in their field, and then only for
// a fraction informative_fraction of them, with a weight uniform in +-weight_scale * sqrt(3)
// (standard deviation weight_scale) drawn from a hash of the id and seed. Ranks past the cutoff
// are too rare to learn from a few million examples; giving them zero weight keeps the
// Bayes-optimal log loss reachable. Each example carries its true p, so the optimal log loss of
// any held-out set is known exactly.
//
// Threading: a CtrGenerator is used by one thread at a time; generators are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pushpull/status.h"

namespace pushpull {

struct CtrConfig {
  uint64_t seed = 1;                  // fixes the true weights and, with the stream, the examples
  uint64_t id_space = 1ull << 24;     // ids are in [0, id_space)
  int active = 40;                    // fields, one active feature each
  double zipf_s = 1.1;                // Zipf exponent of the ranks within a field, > 0
  int64_t informative_ranks = 1000;   // ranks <= this may carry a non-zero true weight
  double informative_fraction = 0.5;  // fraction of those that do, in [0, 1]
  double weight_scale = 0.4;          // standard deviation of a non-zero true weight
  double bias = -1.0;                 // true intercept
};

// InvalidArgument naming the field, e.g. "ctr.active = 0 must be > 0".
Status ValidateCtrConfig(const CtrConfig& c);

struct CtrExample {
  std::vector<uint64_t> ids;  // `active` distinct ids, field order
  uint8_t label = 0;          // 0 or 1
  double p = 0.0;             // the true click probability the label was drawn from
};

// Stream ids: worker rank r uses stream r; evaluation uses kCtrHeldOutStream, which no worker
// rank reaches, so the held-out set is independent of every training stream.
constexpr uint64_t kCtrHeldOutStream = 0xFFFFFFFFull;

class CtrGenerator {
 public:
  // Fails with InvalidArgument when the config is invalid.
  static Result<CtrGenerator> Create(const CtrConfig& config, uint64_t stream);

  // Writes the next example of this stream into *ex (reusing its id vector).
  void Next(CtrExample* ex);

  // The true weight of the feature with this rank (1-based) in field f; 0 past the cutoff.
  double TrueWeight(int field, int64_t rank) const;
  // The hashed id of (field, rank).
  uint64_t IdOf(int field, int64_t rank) const;
  int64_t ranks_per_field() const { return ranks_; }
  const CtrConfig& config() const { return config_; }

 private:
  CtrGenerator(const CtrConfig& config, uint64_t stream);
  uint64_t NextU64();
  double NextUniform();  // in [0, 1)
  int64_t SampleRank();
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;

  // Set at construction.
  CtrConfig config_;
  int64_t ranks_ = 0;           // V: ranks per field
  uint64_t perm_mask_ = 0;      // 2^k - 1 >= id_space - 1, the bijection's domain
  uint64_t perm_keys_[4] = {};  // round keys of the bijection
  // Rejection-inversion Zipf sampler constants (Hoermann and Derflinger 1996).
  double h_x1_ = 0.0, h_n_ = 0.0, s_ = 0.0;
  // Mutable PRNG state (xoshiro256**).
  uint64_t rng_[4] = {};
};

// Mean log loss -[y log p + (1-y) log(1-p)], p clipped to [1e-15, 1 - 1e-15].
// InvalidArgument on empty or mismatched inputs, a label other than 0/1, or p outside [0, 1].
Result<double> LogLoss(const std::vector<double>& probs, const std::vector<uint8_t>& labels);
// Binary entropy -[p log p + (1-p) log(1-p)] in nats: the expected log loss of the true p.
double BinaryEntropy(double p);
// Exact ROC AUC: the probability that a random positive scores above a random negative, ties
// counting one half (Mann-Whitney with mid-ranks). InvalidArgument on empty or mismatched
// inputs or when only one class is present.
Result<double> Auc(const std::vector<double>& scores, const std::vector<uint8_t>& labels);

}  // namespace pushpull
