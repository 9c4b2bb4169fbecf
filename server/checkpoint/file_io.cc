#include "server/checkpoint/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/crc32c.h"

namespace pushpull::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr size_t kTrailerBytes = sizeof(uint64_t) + sizeof(uint32_t);  // payload length, CRC-32C

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

bool IsPermissionError(int err) { return err == EACCES || err == EPERM || err == EROFS; }

Status PermissionError(int err, const std::string& what) {
  return Status::InvalidArgument(what + ": " + std::strerror(err) +
                                 " (fix its permissions, or run as a user that may use it)");
}

Status OpenText(std::ifstream& in, const std::string& path, Status missing) {
  errno = 0;
  in.open(path);
  if (in) return Status::OK();
  const int err = errno;
  if (IsPermissionError(err)) return PermissionError(err, "cannot read " + path);
  return missing;
}

Status WriteError(int err, const std::string& what) {
  if (err == ENOSPC || err == EDQUOT)
    return Status::ResourceExhausted(what + " (free space, or another --checkpoint_dir)");
  if (IsPermissionError(err)) return PermissionError(err, what);
  return Status::Unavailable(what);
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::OK();
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc == 0 || err == EINVAL || err == EBADF || err == ENOTSUP || err == EROFS) return Status::OK();
  return Status::Unavailable("syncing directory " + dir + ": " + std::strerror(err));
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // (A disk full or a permission: a setup error, which a restart would meet again.)
  if (ec) return WriteError(ec.value(), "cannot create checkpoint directory " + dir + ": " + ec.message());
  return Status::OK();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  FileWriter w(path);
  w.Put(text.data(), text.size());
  return w.Commit(nullptr, /*trailer=*/false);
}

FileWriter::FileWriter(std::string path, std::function<bool()> abandon)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), abandon_(std::move(abandon)) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) Fail("cannot create " + tmp_);
}

FileWriter::~FileWriter() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void FileWriter::Put(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  while (error_.empty() && n > 0) {
    if (Abandoned()) return;
    const size_t k = std::min(n, kIoChunk);
    crc_ = Crc32c(crc_, b, k);
    if (std::fwrite(b, 1, k, f_) != k) Fail("writing " + tmp_);
    bytes_ += k;
    b += k;
    n -= k;
  }
}

Status FileWriter::Commit(uint64_t* total, bool trailer) {
  if (trailer) {
    const uint64_t payload = bytes_;
    const uint32_t crc = crc_;
    Pod(payload);
    Pod(crc);
  }
  if (!f_) return WriteError(errno_, error_);      // the file could not be created
  if (abandoned_) return Status::Aborted(error_);  // (asked last for the trailer); the destructor removes it
  if (error_.empty() && (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0)) Fail("syncing " + tmp_);
  if (std::fclose(f_) != 0 && error_.empty()) Fail("closing " + tmp_);
  f_ = nullptr;
  if (error_.empty() && std::rename(tmp_.c_str(), path_.c_str()) != 0) Fail("renaming " + tmp_ + " to " + path_);
  if (!error_.empty()) return WriteError(errno_, error_);
  committed_ = true;
  PP_RETURN_IF_ERROR(SyncDir(fs::path(path_).parent_path().string()));
  if (total) *total = bytes_;
  return Status::OK();
}

void FileWriter::Fail(const std::string& what) {
  errno_ = errno;
  error_ = what + ": " + ErrnoText();
}

bool FileWriter::Abandoned() {
  if (!abandoned_ && error_.empty() && abandon_ && abandon_()) {
    abandoned_ = true;
    error_ = "writing " + tmp_ + " abandoned after " + std::to_string(bytes_) + " bytes";
  }
  return abandoned_;
}

Status FileReader::Open(const std::string& path) {
  path_ = path;
  f_ = std::fopen(path.c_str(), "rb");
  const int err = errno;
  if (!f_ && IsPermissionError(err)) return PermissionError(err, "cannot read checkpoint file " + path);
  if (!f_) return Status::NotFound("cannot open checkpoint file " + path + ": " + std::strerror(err));
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec || size < sizeof(kMagic) + kTrailerBytes) return Bad("shorter than its header and trailer");
  uint64_t payload = 0;
  if (std::fseek(f_, static_cast<long>(size - kTrailerBytes), SEEK_SET) != 0 ||
      std::fread(&payload, sizeof payload, 1, f_) != 1 || std::fread(&crc_want_, sizeof crc_want_, 1, f_) != 1)
    return Bad("trailer unreadable");
  if (payload != size - kTrailerBytes) return Bad("truncated or extended (length in trailer differs)");
  std::rewind(f_);
  left_ = payload;
  char magic[sizeof(kMagic)];
  if (!Get(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    return Bad("not a pushpull checkpoint file");
  return Status::OK();
}

FileReader::~FileReader() {
  if (f_) std::fclose(f_);
}

bool FileReader::Get(void* p, size_t n) {
  if (n > left_) {
    if (error_.empty()) error_ = "ends early";
    return false;
  }
  if (n && std::fread(p, 1, n, f_) != n) {
    error_ = "read error";
    return false;
  }
  crc_ = Crc32c(crc_, p, n);
  left_ -= n;
  return true;
}

bool FileReader::Skip(uint64_t n) {
  std::vector<unsigned char> buf(std::min<uint64_t>(n, kIoChunk));
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, buf.size());
    if (!Get(buf.data(), k)) return false;
    n -= k;
  }
  return true;
}

Status FileReader::Verify() const {
  if (left_ != 0) return Bad(std::to_string(left_) + " bytes left over after the last table");
  if (crc_ != crc_want_) return Bad("checksum mismatch (corrupted)");
  return Status::OK();
}

Status FileReader::Fail(const std::string& why) {
  std::vector<unsigned char> buf(std::min<uint64_t>(left_, kIoChunk));
  while (left_ > 0)
    if (!Get(buf.data(), std::min<uint64_t>(left_, buf.size()))) return Bad(error_);  // a read error
  if (crc_ != crc_want_) return Bad("checksum mismatch (corrupted)");
  return Bad(why);
}

Status FileReader::Bad(const std::string& why) const {
  return Status::Corruption("checkpoint file " + path_ + ": " + why);
}

}  // namespace pushpull::checkpoint
