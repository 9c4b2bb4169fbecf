// Fashion-MNIST IDX loading (real files and damaged ones), sharding, the synthetic CTR stream
// and the evaluation metrics.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "apps/ctr_data.h"
#include "apps/fmnist_data.h"

namespace pushpull {
namespace {

const char kFmnistDir[] = "/usr/share/datasets/fashion-mnist";

bool HaveFmnist() {
  return std::filesystem::exists(std::string(kFmnistDir) + "/t10k-labels-idx1-ubyte.gz");
}

// A fresh temporary folder, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pp_datasets_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> Be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

std::vector<uint8_t> IdxImages(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                               size_t payload) {
  std::vector<uint8_t> b;
  for (uint32_t v : {magic, n, rows, cols}) {
    auto w = Be32(v);
    b.insert(b.end(), w.begin(), w.end());
  }
  for (size_t i = 0; i < payload; ++i) b.push_back(uint8_t(i * 7));
  return b;
}

std::vector<uint8_t> IdxLabels(uint32_t n, size_t payload) {
  std::vector<uint8_t> b = Be32(0x00000801);
  auto w = Be32(n);
  b.insert(b.end(), w.begin(), w.end());
  for (size_t i = 0; i < payload; ++i) b.push_back(uint8_t(i % 10));
  return b;
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WriteRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Fmnist, LoadsTheRealFiles) {
  if (!HaveFmnist()) GTEST_SKIP() << "Fashion-MNIST not installed in " << kFmnistDir;
  for (bool train : {true, false}) {
    auto d = LoadFashionMnist(kFmnistDir, train);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const int want = train ? 60000 : 10000;
    EXPECT_EQ(d->n, want);
    EXPECT_EQ(d->rows, 28);
    EXPECT_EQ(d->cols, 28);
    ASSERT_EQ(d->images.size(), size_t(want) * 784);
    ASSERT_EQ(d->labels.size(), size_t(want));
    std::vector<int> per_class(10, 0);
    for (uint8_t y : d->labels) {
      ASSERT_LT(y, 10);
      ++per_class[y];
    }
    for (int c : per_class) EXPECT_EQ(c, want / 10);  // Fashion-MNIST is exactly balanced
    const auto [lo, hi] = std::minmax_element(d->images.begin(), d->images.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
    double mean = 0.0;
    for (float v : d->images) mean += v;
    mean /= double(d->images.size());
    EXPECT_GT(mean, 0.2);  // about 0.286 for both sets
    EXPECT_LT(mean, 0.4);
  }
}

TEST(Fmnist, MissingFileIsNotFoundWithHint) {
  TempDir dir;
  auto d = LoadFashionMnist(dir.path(), true);
  EXPECT_EQ(d.status().code(), Code::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), dir.path() + "/train-images-idx3-ubyte.gz"))
      << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), "--data_dir")) << d.status().ToString();
  auto l = LoadIdxLabels(dir.path() + "/nope.gz");
  EXPECT_EQ(l.status().code(), Code::kNotFound);
}

TEST(Fmnist, ReadsSmallWellFormedFilesGzippedOrNot) {
  TempDir dir;
  const std::string img = dir.path() + "/img.gz", raw = dir.path() + "/img.raw";
  WriteGz(img, IdxImages(0x803, 3, 2, 5, 30));
  WriteRaw(raw, IdxImages(0x803, 3, 2, 5, 30));
  for (const std::string& p : {img, raw}) {
    auto r = LoadIdxImages(p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->n, 3);
    EXPECT_EQ(r->rows, 2);
    EXPECT_EQ(r->cols, 5);
    ASSERT_EQ(r->pixels.size(), 30u);
    EXPECT_EQ(r->pixels[4], 28);
  }
}

TEST(Fmnist, BadMagicIsCorruption) {
  TempDir dir;
  const std::string p = dir.path() + "/bad.gz";
  WriteGz(p, IdxImages(0x801, 1, 28, 28, 784));  // a labels magic on an images file
  auto r = LoadIdxImages(p);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(r.status().message(), p)) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "bad magic 0x00000801, expected 0x00000803"))
      << r.status().ToString();

  WriteGz(p, IdxImages(0x803, 1, 28, 28, 784));
  auto l = LoadIdxLabels(p);
  EXPECT_EQ(l.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(l.status().message(), "expected 0x00000801")) << l.status().ToString();
}

TEST(Fmnist, TruncatedFileIsCorruptionSayingWhatWasExpected) {
  TempDir dir;
  const std::string p = dir.path() + "/short.gz";
  WriteGz(p, IdxImages(0x803, 10, 28, 28, 9 * 784 + 100));
  auto r = LoadIdxImages(p);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(r.status().message(), p)) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "10 images x 28x28 = 7840 bytes"))
      << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "holds 7156")) << r.status().ToString();

  WriteGz(p, IdxLabels(100, 99));
  auto l = LoadIdxLabels(p);
  EXPECT_EQ(l.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(l.status().message(), "100 labels")) << l.status().ToString();

  WriteGz(p, {0x00, 0x00, 0x08});  // not even a header
  EXPECT_EQ(LoadIdxLabels(p).status().code(), Code::kCorruption);

  // A gzip stream cut in the middle: zlib's own error must surface as Corruption.
  const std::string whole = dir.path() + "/whole.gz";
  WriteGz(whole, IdxImages(0x803, 50, 28, 28, 50 * 784));
  std::vector<uint8_t> bytes(std::filesystem::file_size(whole));
  FILE* f = std::fopen(whole.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  bytes.resize(bytes.size() / 2);
  WriteRaw(p, bytes);
  EXPECT_EQ(LoadIdxImages(p).status().code(), Code::kCorruption);
}

TEST(Fmnist, TrailingBytesAndHugeHeadersAreCorruption) {
  TempDir dir;
  const std::string p = dir.path() + "/f.gz";
  WriteGz(p, IdxLabels(5, 6));
  auto l = LoadIdxLabels(p);
  EXPECT_EQ(l.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(l.status().message(), "more data")) << l.status().ToString();

  // A header claiming ~4e9 images must fail cleanly, not try to allocate terabytes.
  WriteGz(p, IdxImages(0x803, 0xFFFFFFF0u, 28, 28, 10));
  EXPECT_EQ(LoadIdxImages(p).status().code(), Code::kCorruption);
  WriteGz(p, IdxImages(0x803, 1000000, 1000, 1000, 10));
  EXPECT_EQ(LoadIdxImages(p).status().code(), Code::kCorruption);
}

TEST(Fmnist, MismatchedCountsAndWrongSizeAreCorruption) {
  TempDir dir;
  WriteGz(dir.path() + "/t10k-images-idx3-ubyte.gz", IdxImages(0x803, 4, 28, 28, 4 * 784));
  WriteGz(dir.path() + "/t10k-labels-idx1-ubyte.gz", IdxLabels(5, 5));
  auto d = LoadFashionMnist(dir.path(), false);
  EXPECT_EQ(d.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "4 images but")) << d.status().ToString();

  WriteGz(dir.path() + "/t10k-images-idx3-ubyte.gz", IdxImages(0x803, 5, 32, 32, 5 * 1024));
  d = LoadFashionMnist(dir.path(), false);
  EXPECT_EQ(d.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "images are 32x32, not 28x28")) << d.status().ToString();
  // Refused from the header, before the payload it claims is read (a file of other images could
  // hold gigabytes of them): here it claims a million and holds none.
  WriteGz(dir.path() + "/t10k-images-idx3-ubyte.gz", IdxImages(0x803, 1000000, 4096, 4096, 0));
  d = LoadFashionMnist(dir.path(), false);
  EXPECT_EQ(d.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "images are 4096x4096, not 28x28")) << d.status().ToString();

  WriteGz(dir.path() + "/t10k-images-idx3-ubyte.gz", IdxImages(0x803, 5, 28, 28, 5 * 784));
  d = LoadFashionMnist(dir.path(), false);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 5);
  EXPECT_FLOAT_EQ(d->images[1], 7.0f / 255.0f);
  EXPECT_EQ(d->labels[4], 4);
}

// Files gunzipped by hand are found under their names without .gz (found in review: only the
// .gz names were tried, though the loader reads either); the .gz one when both are there.
TEST(Fmnist, FilesWithoutGzAreFoundToo) {
  TempDir dir;
  WriteRaw(dir.path() + "/t10k-images-idx3-ubyte", IdxImages(0x803, 5, 28, 28, 5 * 784));
  WriteRaw(dir.path() + "/t10k-labels-idx1-ubyte", IdxLabels(5, 5));
  EXPECT_TRUE(CheckFashionMnistFiles(dir.path(), true).code() == Code::kNotFound);  // (no training set)
  auto d = LoadFashionMnist(dir.path(), false);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 5);
  WriteGz(dir.path() + "/t10k-labels-idx1-ubyte.gz", IdxLabels(4, 4));
  d = LoadFashionMnist(dir.path(), false);
  EXPECT_EQ(d.status().code(), Code::kCorruption);  // (the .gz one's 4 labels, against 5 images)
  EXPECT_TRUE(Contains(d.status().message(), "t10k-labels-idx1-ubyte.gz holds 4 labels")) << d.status().ToString();
}

Dataset Numbered(int n) {
  Dataset d;
  d.n = n;
  d.rows = 1;
  d.cols = 2;
  for (int i = 0; i < n; ++i) {
    d.images.push_back(float(i));
    d.images.push_back(float(-i));
    d.labels.push_back(uint8_t(i % 10));
  }
  return d;
}

TEST(Shard, ContiguousDisjointAndCovering) {
  const Dataset all = Numbered(103);
  for (int k : {1, 2, 3, 7, 103}) {
    int next = 0;
    for (int i = 0; i < k; ++i) {
      auto s = Shard(all, i, k);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_GE(s->n, 103 / k);
      EXPECT_LE(s->n, 103 / k + 1);
      ASSERT_EQ(s->images.size(), size_t(s->n) * 2);
      for (int r = 0; r < s->n; ++r) {
        EXPECT_EQ(s->images[2 * r], float(next)) << "shard " << i << " of " << k;
        EXPECT_EQ(s->images[2 * r + 1], float(-next));
        EXPECT_EQ(s->labels[r], next % 10);
        ++next;
      }
    }
    EXPECT_EQ(next, 103) << k << " shards";
  }
  EXPECT_EQ(Shard(all, 2, 2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Shard(all, -1, 2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Shard(all, 0, 0).status().code(), Code::kInvalidArgument);
}

CtrGenerator Gen(const CtrConfig& c, uint64_t stream) {
  auto g = CtrGenerator::Create(c, stream);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

TEST(Ctr, SameSeedAndStreamGiveTheSameExamples) {
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

TEST(Ctr, StreamsAndSeedsDiffer) {
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

TEST(Ctr, IdsAreInRangeDistinctAndZipfDistributed) {
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

TEST(Ctr, SmallIdSpaceIsABijection) {
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

TEST(Ctr, LabelsFollowTheTrueProbability) {
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

TEST(Ctr, ProbabilityIsTheSigmoidOfTheTrueWeights) {
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

TEST(Ctr, InvalidConfigsAreRejected) {
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

TEST(Metrics, LogLossByHand) {
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

TEST(Metrics, AucByHand) {
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
