// Fashion-MNIST IDX loading (apps/fmnist_data.h), of the real files and of damaged ones, and the
// sharding of a dataset over workers.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/fmnist_data.h"
#include "tests/support/temp_dir.h"

namespace pushpull {
namespace {

const char kFmnistDir[] = "/usr/share/datasets/fashion-mnist";

bool HaveFmnist() { return std::filesystem::exists(std::string(kFmnistDir) + "/t10k-labels-idx1-ubyte.gz"); }

std::vector<uint8_t> Be32(uint32_t v) { return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}; }

std::vector<uint8_t> IdxImages(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t payload) {
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

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FmnistData, LoadsTheRealFiles) {
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

TEST(FmnistData, MissingFileIsNotFoundWithHint) {
  TempDir dir;
  auto d = LoadFashionMnist(dir.path(), true);
  EXPECT_EQ(d.status().code(), Code::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), dir.path() + "/train-images-idx3-ubyte.gz")) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), "--data_dir")) << d.status().ToString();
  auto l = LoadIdxLabels(dir.path() + "/nope.gz");
  EXPECT_EQ(l.status().code(), Code::kNotFound);
}

TEST(FmnistData, ReadsSmallWellFormedFilesGzippedOrNot) {
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

TEST(FmnistData, BadMagicIsCorruption) {
  TempDir dir;
  const std::string p = dir.path() + "/bad.gz";
  WriteGz(p, IdxImages(0x801, 1, 28, 28, 784));  // a labels magic on an images file
  auto r = LoadIdxImages(p);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(r.status().message(), p)) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "bad magic 0x00000801, expected 0x00000803")) << r.status().ToString();

  WriteGz(p, IdxImages(0x803, 1, 28, 28, 784));
  auto l = LoadIdxLabels(p);
  EXPECT_EQ(l.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(l.status().message(), "expected 0x00000801")) << l.status().ToString();
}

TEST(FmnistData, TruncatedFileIsCorruptionSayingWhatWasExpected) {
  TempDir dir;
  const std::string p = dir.path() + "/short.gz";
  WriteGz(p, IdxImages(0x803, 10, 28, 28, 9 * 784 + 100));
  auto r = LoadIdxImages(p);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_TRUE(Contains(r.status().message(), p)) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "10 images x 28x28 = 7840 bytes")) << r.status().ToString();
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

TEST(FmnistData, TrailingBytesAndHugeHeadersAreCorruption) {
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

TEST(FmnistData, MismatchedCountsAndWrongSizeAreCorruption) {
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

// Files gunzipped by hand are found under their names without .gz (the loader reads either);
// the .gz one when both are there.
TEST(FmnistData, FilesWithoutGzAreFoundToo) {
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

TEST(FmnistData, ContiguousDisjointAndCovering) {
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

}  // namespace
}  // namespace pushpull
