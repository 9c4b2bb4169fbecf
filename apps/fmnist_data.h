// Fashion-MNIST: readers for the gzip'd IDX files and a worker's shard of a data set.
// Files as distributed (and installed by the dataset-fashion-mnist Debian package in
// /usr/share/datasets/fashion-mnist): {train,t10k}-images-idx3-ubyte.gz (magic 0x00000803,
// then n, rows, cols as big-endian u32, then n*rows*cols pixel bytes) and
// {train,t10k}-labels-idx1-ubyte.gz (magic 0x00000801, then n, then n label bytes).
// Uncompressed files are read as well (zlib reads them transparently).
//
// Errors: NotFound for a missing file (with a --data_dir hint), Corruption naming the file for
// a bad magic, an implausible header, fewer or more bytes than the header claims, or image and
// label counts that disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pushpull/status.h"

namespace pushpull {

struct IdxImages {
  int n = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // n * rows * cols, row-major per image
};

struct Dataset {
  int n = 0, rows = 0, cols = 0;
  std::vector<float> images;    // n * rows * cols, pixels scaled to [0, 1]
  std::vector<uint8_t> labels;  // n class ids
  size_t dim() const { return size_t(rows) * cols; }
};

// rows, cols > 0: the images must be of that shape (checked from the header, before the payload).
Result<IdxImages> LoadIdxImages(const std::string& path, int rows = 0, int cols = 0);
Result<std::vector<uint8_t>> LoadIdxLabels(const std::string& path);

// Loads the training set (60000 images) or the test set (10000) from dir; checks 28x28 images,
// labels in [0, 10) and matching counts.
Result<Dataset> LoadFashionMnist(const std::string& dir, bool train);
// Whether the training set's files (and with test_set, the test set's) are there and readable
// (what LoadFashionMnist would say if not), without reading them: a worker checks before it
// joins a job.
Status CheckFashionMnistFiles(const std::string& dir, bool test_set);

// Worker `index` of `count`: the contiguous rows [n*index/count, n*(index+1)/count), so the
// shards are disjoint, cover the set, and differ in size by at most one.
// InvalidArgument unless 0 <= index < count.
Result<Dataset> Shard(const Dataset& all, int index, int count);

}  // namespace pushpull
