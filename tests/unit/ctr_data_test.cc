// The synthetic CTR stream (apps/ctr_data.h) and the evaluation metrics sparse_lr reports with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "apps/ctr_data.h"

namespace pushpull {
namespace {

CtrGenerator Gen(const CtrConfig& c, uint64_t stream) {
  auto g = CtrGenerator::Create(c, stream);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

TEST(CtrData, SameSeedAndStreamGiveTheSameExamples) {
  CtrConfig c;
  c.seed = 7;
  CtrGenerator a = Gen(c, 3), b = Gen(c, 3);
  CtrExample ea, eb;
  for (int i = 0; i < 1000; ++i) {
    a.Next(&ea);
    b.Next(&eb);
    ASSERT_EQ(ea.ids, eb.ids) << i;
    ASSERT_EQ(ea.label, eb.label);
    ASSERT_EQ(ea.p, eb.p);
  }
}

TEST(CtrData, StreamsAndSeedsDiffer) {
  CtrConfig c;
  CtrGenerator s0 = Gen(c, 0), s1 = Gen(c, 1);
  CtrConfig c2 = c;
  c2.seed = c.seed + 1;
  CtrGenerator t0 = Gen(c2, 0);
  CtrExample a, b, t;
  int same_stream = 0, same_seed = 0;
  for (int i = 0; i < 200; ++i) {
    s0.Next(&a);
    s1.Next(&b);
    t0.Next(&t);
    same_stream += a.ids == b.ids;
    same_seed += a.ids == t.ids;
  }
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
  // Another seed means other true weights too.
  CtrGenerator w1 = Gen(c, 0), w2 = Gen(c2, 0);
  int weights_equal = 0, nonzero = 0;
  for (int64_t r = 1; r <= 200; ++r) {
    weights_equal += w1.TrueWeight(0, r) == w2.TrueWeight(0, r) && w1.TrueWeight(0, r) != 0.0;
    nonzero += w1.TrueWeight(0, r) != 0.0;
  }
  EXPECT_EQ(weights_equal, 0);
  EXPECT_GT(nonzero, 50);
}

TEST(CtrData, IdsAreInRangeDistinctAndZipfDistributed) {
  CtrConfig c;
  CtrGenerator g = Gen(c, 0);
  CtrExample ex;
  const int n = 20000;
  int64_t top_rank_hits = 0;
  const uint64_t top_id_field0 = g.IdOf(0, 1);
  std::set<uint64_t> field0_ids;
  for (int i = 0; i < n; ++i) {
    g.Next(&ex);
    ASSERT_EQ(ex.ids.size(), size_t(c.active));
    std::set<uint64_t> distinct(ex.ids.begin(), ex.ids.end());
    ASSERT_EQ(distinct.size(), ex.ids.size()) << "example " << i;
    for (uint64_t id : ex.ids) ASSERT_LT(id, c.id_space);
    top_rank_hits += ex.ids[0] == top_id_field0;
    field0_ids.insert(ex.ids[0]);
  }
  // Zipf(1.1) over V = 2^24/40 ranks: P(rank 1) = 1/H(V, 1.1) ~= 0.113.
  double h = 0.0;
  for (int64_t r = 1; r <= g.ranks_per_field(); ++r) h += std::pow(double(r), -1.1);
  const double p1 = 1.0 / h;
  EXPECT_NEAR(double(top_rank_hits) / n, p1, 4 * std::sqrt(p1 * (1 - p1) / n));
  // Heavy tail: many distinct ids, far fewer than draws.
  EXPECT_GT(field0_ids.size(), 2000u);
  EXPECT_LT(field0_ids.size(), 15000u);
}

TEST(CtrData, SmallIdSpaceIsABijection) {
  CtrConfig c;
  c.id_space = 1000;  // not a power of two: cycle walking
  c.active = 4;
  CtrGenerator g = Gen(c, 0);
  std::set<uint64_t> ids;
  for (int f = 0; f < c.active; ++f) {
    for (int64_t r = 1; r <= g.ranks_per_field(); ++r) {
      const uint64_t id = g.IdOf(f, r);
      ASSERT_LT(id, c.id_space);
      ids.insert(id);
    }
  }
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(CtrData, LabelsFollowTheTrueProbability) {
  CtrConfig c;
  CtrGenerator g = Gen(c, kCtrHeldOutStream);
  CtrExample ex;
  const int n = 100000;
  double sum_p = 0.0, sum_var = 0.0, expected_loss = 0.0;
  int64_t clicks = 0;
  std::vector<double> p;
  std::vector<uint8_t> y;
  for (int i = 0; i < n; ++i) {
    g.Next(&ex);
    ASSERT_GT(ex.p, 0.0);
    ASSERT_LT(ex.p, 1.0);
    sum_p += ex.p;
    sum_var += ex.p * (1 - ex.p);
    clicks += ex.label;
    expected_loss += BinaryEntropy(ex.p);
    p.push_back(ex.p);
    y.push_back(ex.label);
  }
  EXPECT_NEAR(double(clicks), sum_p, 4 * std::sqrt(sum_var));
  // The realised log loss of the true p is close to its expectation, the mean entropy.
  const double realised = LogLoss(p, y).value();
  EXPECT_NEAR(realised, expected_loss / n, 0.01);
  EXPECT_GT(expected_loss / n, 0.35);  // the default config is noisy, not trivially separable
  EXPECT_LT(expected_loss / n, 0.6);
}

TEST(CtrData, ProbabilityIsTheSigmoidOfTheTrueWeights) {
  CtrConfig c;
  c.id_space = 4000;
  c.active = 4;
  c.informative_ranks = 1000;  // every rank may be informative
  CtrGenerator g = Gen(c, 0), lookup = Gen(c, 0);
  // Map every id back to its (field, rank) to recompute the logit independently.
  std::vector<std::pair<int, int64_t>> owner(c.id_space);
  for (int f = 0; f < c.active; ++f) {
    for (int64_t r = 1; r <= lookup.ranks_per_field(); ++r) owner[lookup.IdOf(f, r)] = {f, r};
  }
  CtrExample ex;
  for (int i = 0; i < 100; ++i) {
    g.Next(&ex);
    double logit = c.bias;
    for (int f = 0; f < c.active; ++f) {
      ASSERT_EQ(owner[ex.ids[f]].first, f);
      logit += lookup.TrueWeight(f, owner[ex.ids[f]].second);
    }
    EXPECT_NEAR(ex.p, 1.0 / (1.0 + std::exp(-logit)), 1e-12);
  }
  CtrGenerator d = Gen(CtrConfig{}, 0);
  EXPECT_EQ(d.TrueWeight(0, CtrConfig{}.informative_ranks + 1), 0.0);
}

TEST(CtrData, InvalidConfigsAreRejected) {
  CtrConfig c;
  c.active = 0;
  EXPECT_EQ(CtrGenerator::Create(c, 0).status().code(), Code::kInvalidArgument);
  c = CtrConfig{};
  c.zipf_s = 0.0;
  EXPECT_EQ(CtrGenerator::Create(c, 0).status().code(), Code::kInvalidArgument);
  c = CtrConfig{};
  c.informative_fraction = 1.5;
  EXPECT_EQ(CtrGenerator::Create(c, 0).status().code(), Code::kInvalidArgument);
  c = CtrConfig{};
  c.id_space = 10;
  EXPECT_EQ(CtrGenerator::Create(c, 0).status().code(), Code::kInvalidArgument);
}

TEST(CtrData, LogLossByHand) {
  // -(log 0.8 + log(1 - 0.4) + log 0.5) / 3
  const double want = -(std::log(0.8) + std::log(0.6) + std::log(0.5)) / 3;
  EXPECT_NEAR(LogLoss({0.8, 0.4, 0.5}, {1, 0, 1}).value(), want, 1e-12);
  // p = 0 on a positive is clipped, not infinite.
  const double clipped = LogLoss({0.0}, {1}).value();
  EXPECT_NEAR(clipped, -std::log(1e-15), 1e-6);
  EXPECT_EQ(LogLoss({0.5}, {1, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LogLoss({}, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LogLoss({1.5}, {1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LogLoss({0.5}, {2}).status().code(), Code::kInvalidArgument);
  EXPECT_NEAR(BinaryEntropy(0.5), std::log(2.0), 1e-12);
  EXPECT_EQ(BinaryEntropy(0.0), 0.0);
}

TEST(CtrData, AucByHand) {
  // Positives 0.9, 0.4; negatives 0.8, 0.3, 0.1. Pairs won: 0.9 beats all 3; 0.4 beats 0.3 and
  // 0.1: 5 of 6.
  EXPECT_NEAR(Auc({0.9, 0.8, 0.4, 0.3, 0.1}, {1, 0, 1, 0, 0}).value(), 5.0 / 6.0, 1e-12);
  // Ties count one half: positive 0.5 ties negative 0.5 and beats 0.2: (0.5 + 1) / 2.
  EXPECT_NEAR(Auc({0.5, 0.5, 0.2}, {1, 0, 0}).value(), 0.75, 1e-12);
  // All scores equal: 0.5 whatever the labels.
  EXPECT_NEAR(Auc({1, 1, 1, 1}, {1, 0, 0, 1}).value(), 0.5, 1e-12);
  EXPECT_NEAR(Auc({0.1, 0.2, 0.3}, {1, 0, 0}).value(), 0.0, 1e-12);
  EXPECT_NEAR(Auc({0.1, 0.2, 0.3}, {0, 0, 1}).value(), 1.0, 1e-12);
  EXPECT_EQ(Auc({0.1, 0.2}, {1, 1}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Auc({0.1}, {1, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Auc({std::nan(""), 0.2}, {1, 0}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace pushpull
