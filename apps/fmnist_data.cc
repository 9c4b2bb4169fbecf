#include "apps/fmnist_data.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace pushpull {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
// Far above any real IDX data set; rejects garbage headers before they size anything.
constexpr uint32_t kMaxCount = 100'000'000;
constexpr uint32_t kMaxSide = 4096;
constexpr char kDataDirHint[] =
    " (point --data_dir at the folder with the Fashion-MNIST *-ubyte.gz files; the Debian "
    "package dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist)";

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

Result<GzFile> Open(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string why = err != 0 ? std::strerror(err) : "gzopen failed";
    if (err == ENOENT) return Status::NotFound("cannot open " + path + ": " + why + kDataDirHint);
    if (err == EACCES || err == EPERM) return Status::InvalidArgument("cannot read " + path + ": " + why);
    // Not a missing file (out of descriptors, an I/O error, ...): may not fail again.
    return Status::Unavailable("cannot open " + path + ": " + why);
  }
  return GzFile(f);
}

// Reads up to `len` bytes; *got says how many arrived. Corruption when zlib reports an error
// (bad gzip data, a stream cut mid-block).
Status Read(gzFile f, const std::string& path, uint8_t* dst, size_t len, size_t* got) {
  *got = 0;
  while (*got < len) {
    const unsigned chunk = unsigned(std::min<size_t>(len - *got, 1u << 20));
    const int r = gzread(f, dst + *got, chunk);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return Status::Corruption(path + ": cannot decompress after " + std::to_string(*got) +
                                " bytes: " + (msg ? msg : "zlib error"));
    }
    if (r == 0) break;
    *got += size_t(r);
  }
  return Status::OK();
}

uint32_t BigEndian32(const uint8_t* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Reads a header of `words` big-endian u32s and checks its magic.
Status ReadHeader(gzFile f, const std::string& path, uint32_t magic, int words, uint32_t* out) {
  uint8_t buf[16];
  const size_t want = size_t(words) * 4;
  size_t got = 0;
  PP_RETURN_IF_ERROR(Read(f, path, buf, want, &got));
  if (got < want) {
    return Status::Corruption(path + ": truncated header: " + std::to_string(got) + " of " + std::to_string(want) +
                              " bytes");
  }
  for (int i = 0; i < words; ++i) out[i] = BigEndian32(buf + 4 * i);
  if (out[0] != magic) {
    return Status::Corruption(path + ": bad magic " + Hex(out[0]) + ", expected " + Hex(magic) +
                              (magic == kImagesMagic ? " (IDX3 images)" : " (IDX1 labels)"));
  }
  return Status::OK();
}

// Reads exactly `want` payload bytes into *data, then checks that nothing follows. Grows the
// buffer as data arrives, so a header claiming absurd sizes fails on the short read instead
// of allocating for it up front.
Status ReadPayload(gzFile f, const std::string& path, size_t want, const std::string& what,
                   std::vector<uint8_t>* data) {
  data->clear();
  size_t have = 0;
  while (have < want) {
    const size_t step = std::min<size_t>(want - have, size_t(16) << 20);
    data->resize(have + step);
    size_t got = 0;
    PP_RETURN_IF_ERROR(Read(f, path, data->data() + have, step, &got));
    have += got;
    if (got < step) {
      return Status::Corruption(path + ": truncated: the header promises " + what + " = " + std::to_string(want) +
                                " bytes of data, the file holds " + std::to_string(have));
    }
  }
  uint8_t extra;
  size_t got = 0;
  PP_RETURN_IF_ERROR(Read(f, path, &extra, 1, &got));
  if (got != 0) {
    return Status::Corruption(path + ": more data than the header's " + what + " = " + std::to_string(want) + " bytes");
  }
  return Status::OK();
}

}  // namespace

Result<IdxImages> LoadIdxImages(const std::string& path, int rows, int cols) {
  PP_ASSIGN_OR_RETURN(auto file, Open(path));
  uint32_t h[4];
  PP_RETURN_IF_ERROR(ReadHeader(file.get(), path, kImagesMagic, 4, h));
  if (h[1] > kMaxCount || h[2] == 0 || h[2] > kMaxSide || h[3] == 0 || h[3] > kMaxSide) {
    return Status::Corruption(path + ": implausible header: " + std::to_string(h[1]) + " images of " +
                              std::to_string(h[2]) + "x" + std::to_string(h[3]));
  }
  // The shape asked for, from the header: before its payload is read (a file that claims other
  // images could hold gigabytes of them).
  if ((rows > 0 && int(h[2]) != rows) || (cols > 0 && int(h[3]) != cols))
    return Status::Corruption(path + ": images are " + std::to_string(h[2]) + "x" + std::to_string(h[3]) + ", not " +
                              std::to_string(rows) + "x" + std::to_string(cols));
  IdxImages img;
  img.n = int(h[1]);
  img.rows = int(h[2]);
  img.cols = int(h[3]);
  const size_t want = size_t(img.n) * img.rows * img.cols;
  PP_RETURN_IF_ERROR(ReadPayload(
      file.get(), path, want,
      std::to_string(img.n) + " images x " + std::to_string(img.rows) + "x" + std::to_string(img.cols), &img.pixels));
  return img;
}

Result<std::vector<uint8_t>> LoadIdxLabels(const std::string& path) {
  PP_ASSIGN_OR_RETURN(auto file, Open(path));
  uint32_t h[2];
  PP_RETURN_IF_ERROR(ReadHeader(file.get(), path, kLabelsMagic, 2, h));
  if (h[1] > kMaxCount) {
    return Status::Corruption(path + ": implausible header: " + std::to_string(h[1]) + " labels");
  }
  std::vector<uint8_t> labels;
  PP_RETURN_IF_ERROR(ReadPayload(file.get(), path, h[1], std::to_string(h[1]) + " labels", &labels));
  return labels;
}

namespace {
// The gzipped file as Debian ships it, or the same name without .gz where only that one is
// there (gunzipped by hand; gzopen reads either).
std::string SetPath(const std::string& dir, bool train, bool images) {
  const std::string gz = (dir.empty() ? std::string(".") : dir) + "/" + (train ? "train" : "t10k") +
                         (images ? "-images-idx3-ubyte.gz" : "-labels-idx1-ubyte.gz");
  const std::string plain = gz.substr(0, gz.size() - 3);
  return access(gz.c_str(), F_OK) != 0 && access(plain.c_str(), F_OK) == 0 ? plain : gz;
}
}  // namespace

Status CheckFashionMnistFiles(const std::string& dir, bool test_set) {
  for (bool train : {true, false})
    for (bool images : {true, false}) {
      if (!train && !test_set) continue;
      PP_RETURN_IF_ERROR(Open(SetPath(dir, train, images)).status());
    }
  return Status::OK();
}

Result<Dataset> LoadFashionMnist(const std::string& dir, bool train) {
  const std::string images_path = SetPath(dir, train, true);
  const std::string labels_path = SetPath(dir, train, false);
  PP_ASSIGN_OR_RETURN(auto images, LoadIdxImages(images_path, 28, 28));
  PP_ASSIGN_OR_RETURN(auto labels, LoadIdxLabels(labels_path));
  if (size_t(images.n) != labels.size()) {
    return Status::Corruption(images_path + " holds " + std::to_string(images.n) + " images but " + labels_path +
                              " holds " + std::to_string(labels.size()) + " labels");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= 10) {
      return Status::Corruption(labels_path + ": label " + std::to_string(labels[i]) + " of example " +
                                std::to_string(i) + " is not in [0, 10)");
    }
  }
  Dataset d;
  d.n = images.n;
  d.rows = images.rows;
  d.cols = images.cols;
  d.images.resize(images.pixels.size());
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = images.pixels[i] * (1.0f / 255.0f);
  d.labels = std::move(labels);
  return d;
}

Result<Dataset> Shard(const Dataset& all, int index, int count) {
  if (count <= 0 || index < 0 || index >= count) {
    return Status::InvalidArgument("shard " + std::to_string(index) + " of " + std::to_string(count) +
                                   ": need 0 <= index < count");
  }
  const size_t begin = size_t(all.n) * index / count;
  const size_t end = size_t(all.n) * (index + 1) / count;
  Dataset s;
  s.n = int(end - begin);
  s.rows = all.rows;
  s.cols = all.cols;
  s.images.assign(all.images.begin() + begin * all.dim(), all.images.begin() + end * all.dim());
  s.labels.assign(all.labels.begin() + begin, all.labels.begin() + end);
  return s;
}

}  // namespace pushpull
