#include "server/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/wire.h"

namespace pushpull {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'P', 'C', 'K', 'P', 'T', '1', '\n'};
constexpr size_t kTrailerBytes = sizeof(uint64_t) + sizeof(uint32_t);  // payload length, CRC-32C
constexpr size_t kIoChunk = 4 << 20;

std::string ErrnoText() { return std::strerror(errno); }

// A file this process may not read or write (its permissions, a read-only filesystem) is a setup
// error, InvalidArgument, whose words say so: a restart meets it again, and a checkpoint that
// cannot be read is not damaged (taken for missing, a restore would go on from an older one,
// throwing training away).
bool IsPermissionError(int err) { return err == EACCES || err == EPERM || err == EROFS; }
Status PermissionError(int err, const std::string& what) {
  return Status::InvalidArgument(what + ": " + std::strerror(err) +
                                 " (fix its permissions, or run as a user that may use it)");
}

// Opens a text file of a checkpoint for reading; `missing` is what a file that is not there is.
Status OpenText(std::ifstream& in, const std::string& path, Status missing) {
  errno = 0;
  in.open(path);
  if (in) return Status::OK();
  const int err = errno;
  if (IsPermissionError(err)) return PermissionError(err, "cannot read " + path);
  return missing;
}

// A file that cannot be written: the disk full is ResourceExhausted, which a restart would meet
// again (a worker exits 2 on it and pushpull-launch does not restart the job); one this process
// may not write, InvalidArgument (the same); else Unavailable.
Status WriteError(int err, const std::string& what) {
  if (err == ENOSPC || err == EDQUOT)
    return Status::ResourceExhausted(what + " (free space, or another --checkpoint_dir)");
  if (IsPermissionError(err)) return PermissionError(err, what);
  return Status::Unavailable(what);
}

// fsync of a directory, so that a rename in it survives a crash. (Some filesystems refuse to
// open or fsync a directory; the rename has happened either way, so that is not an error. An
// I/O error is: the rename may not survive a power loss, and the checkpoint is not complete.)
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

// Writes a file under a temporary name with a running CRC-32C; Commit() appends the trailer
// (server files; the text files go without), fsyncs and renames it into place.
class FileWriter {
 public:
  explicit FileWriter(std::string path, std::function<bool()> abandon = nullptr)
      : path_(std::move(path)), tmp_(path_ + ".tmp"), abandon_(std::move(abandon)) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) Fail("cannot create " + tmp_);
  }
  ~FileWriter() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void Put(const void* p, size_t n) {
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
  template <class T>
  void Pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "plain values only");
    Put(&v, sizeof v);
  }
  Status Commit(uint64_t* total, bool trailer = true) {
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

 private:
  void Fail(const std::string& what) {  // with errno as the failed call left it
    errno_ = errno;
    error_ = what + ": " + ErrnoText();
  }
  bool Abandoned() {
    if (!abandoned_ && error_.empty() && abandon_ && abandon_()) {
      abandoned_ = true;
      error_ = "writing " + tmp_ + " abandoned after " + std::to_string(bytes_) + " bytes";
    }
    return abandoned_;
  }

  std::string path_, tmp_;
  std::function<bool()> abandon_;
  bool abandoned_ = false;
  std::FILE* f_ = nullptr;
  std::string error_;
  int errno_ = 0;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
  bool committed_ = false;
};

// Reads a file written by FileWriter in one pass, the CRC-32C running along; Verify() at the end
// says whether it matched. Reads stay inside the payload the trailer declares, so a damaged
// length can make a read fail but never an allocation beyond the file's size (the caller bounds
// counts by left() first); nothing read is used before Verify().
class FileReader {
 public:
  Status Open(const std::string& path) {
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
  ~FileReader() {
    if (f_) std::fclose(f_);
  }
  // False (and error() set) when fewer than n bytes are left.
  bool Get(void* p, size_t n) {
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
  template <class T>
  bool Pod(T* v) {
    return Get(v, sizeof *v);
  }
  // Reads n bytes through (for the checksum) without keeping them.
  bool Skip(uint64_t n) {
    std::vector<unsigned char> buf(std::min<uint64_t>(n, kIoChunk));
    while (n > 0) {
      const uint64_t k = std::min<uint64_t>(n, buf.size());
      if (!Get(buf.data(), k)) return false;
      n -= k;
    }
    return true;
  }
  // After the last read: the whole payload was read and its CRC matches.
  Status Verify() const {
    if (left_ != 0) return Bad(std::to_string(left_) + " bytes left over after the last table");
    if (crc_ != crc_want_) return Bad("checksum mismatch (corrupted)");
    return Status::OK();
  }
  // An error found part way: a damaged file is reported as such (the rest is read for the CRC),
  // an intact one with `why`.
  Status Fail(const std::string& why) {
    std::vector<unsigned char> buf(std::min<uint64_t>(left_, kIoChunk));
    while (left_ > 0)
      if (!Get(buf.data(), std::min<uint64_t>(left_, buf.size()))) return Bad(error_);  // a read error
    if (crc_ != crc_want_) return Bad("checksum mismatch (corrupted)");
    return Bad(why);
  }
  uint64_t left() const { return left_; }
  Status Bad(const std::string& why) const { return Status::Corruption("checkpoint file " + path_ + ": " + why); }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t left_ = 0;
  uint32_t crc_ = 0;
  uint32_t crc_want_ = 0;
  std::string error_;
};

// A table's description, stored as the CreateTable message that made it (the wire's own,
// bounds-checked encoding).
std::string EncodeInfo(const TableInfo& info) {
  Header h;
  h.type = MsgType::kCreateTable;
  h.info = info;
  h.spec = info.spec;
  return EncodeHeaderCereal(h);
}

}  // namespace

std::string CheckpointDir(const std::string& root, int64_t clock) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%010" PRId64, clock);
  return (fs::path(root) / name).string();
}

std::string ServerCheckpointFile(const std::string& dir, int rank) {
  return (fs::path(dir) / ("server-" + std::to_string(rank) + ".ckpt")).string();
}

Status WriteServerCheckpoint(const std::string& dir, int rank, int num_servers, int64_t clock,
                             const std::vector<const TableShard*>& tables, uint64_t* bytes,
                             const std::function<bool()>& abandon, const std::vector<const TableCheckpoint*>& kept) {
  // Only the checkpoint's own directory is made: the root is the scheduler's, on a filesystem
  // every server shares. Missing here, this host does not see it (a mount gone, or never made),
  // and writing it afresh on a local disk would pass for a checkpoint nobody can restore.
  std::error_code ec;
  const std::string root = fs::path(dir).parent_path().string();
  if (!fs::is_directory(root, ec))
    return Status::InvalidArgument("checkpoint directory " + root + " does not exist on this server's host: " +
                                   "--checkpoint_dir must be a filesystem every server shares, mounted at that path");
  PP_RETURN_IF_ERROR(MakeDirs(dir));
  FileWriter w(ServerCheckpointFile(dir, rank), abandon);
  w.Put(kMagic, sizeof kMagic);
  w.Pod(int32_t(rank));
  w.Pod(int32_t(num_servers));
  w.Pod(int64_t(clock));
  w.Pod(uint32_t(tables.size() + kept.size()));
  for (const TableShard* t : tables) {
    const std::string info = EncodeInfo(t->info());
    w.Pod(uint32_t(info.size()));
    w.Put(info.data(), info.size());
    w.Pod(int64_t(t->table_step));
    const size_t dim = t->spec().dim;
    const int nslots = t->optimizer()->num_slots();
    const int S = t->num_stripes();
    // Stripes in order: a dense shard's rows come out in row order.
    auto stripe = [&](int i) -> const Stripe& { return t->stripe(i); };
    uint64_t rows = 0;
    for (int i = 0; i < S; ++i) rows += stripe(i).num_rows();
    w.Pod(rows);
    w.Pod(uint32_t(dim));
    w.Pod(uint32_t(nslots));
    if (t->spec().sparse)
      for (int i = 0; i < S; ++i) {
        std::vector<Key> keys = stripe(i).KeysByRow();
        w.Put(keys.data(), keys.size() * sizeof(Key));
      }
    for (int i = 0; i < S; ++i)  // (a block's rows are contiguous)
      for (size_t r = 0, n = stripe(i).num_rows(), b = stripe(i).block_rows(); r < n; r += b)
        w.Put(stripe(i).row_params(r), std::min<size_t>(b, n - r) * dim * sizeof(float));
    for (int s = 0; s < nslots; ++s)
      for (int i = 0; i < S; ++i) w.Put(stripe(i).slot(s), stripe(i).num_rows() * dim * sizeof(float));
    for (int i = 0; i < S; ++i) w.Put(stripe(i).steps(), stripe(i).num_rows() * sizeof(uint32_t));
  }
  // The same layout from the rows as read: whole, or dense rows in pieces of a block each.
  for (const TableCheckpoint* t : kept) {
    const std::string info = EncodeInfo(t->info);
    w.Pod(uint32_t(info.size()));
    w.Put(info.data(), info.size());
    w.Pod(int64_t(t->table_step));
    const ShardRows& all = t->rows;
    std::vector<const ShardRows*> pieces;
    if (all.blocks.empty()) pieces.push_back(&all);
    for (const ShardRows& b : all.blocks) pieces.push_back(&b);
    const size_t nslots = pieces.front()->slots.size();
    w.Pod(uint64_t(all.rows()));
    w.Pod(uint32_t(t->info.spec.dim));
    w.Pod(uint32_t(nslots));
    w.Put(all.keys.data(), all.keys.size() * sizeof(Key));
    for (const ShardRows* p : pieces) w.Put(p->params.data(), p->params.size() * sizeof(float));
    for (size_t s = 0; s < nslots; ++s)
      for (const ShardRows* p : pieces) w.Put(p->slots[s].data(), p->slots[s].size() * sizeof(float));
    for (const ShardRows* p : pieces) w.Put(p->steps.data(), p->steps.size() * sizeof(uint32_t));
  }
  return w.Commit(bytes);
}

Result<std::map<std::string, TableCheckpoint>> ReadServerCheckpoint(const std::string& dir, int rank, int num_servers,
                                                                    int64_t clock, bool in_blocks,
                                                                    const std::string* only,
                                                                    std::vector<TableSummary>* summary) {
  FileReader r;
  PP_RETURN_IF_ERROR(r.Open(ServerCheckpointFile(dir, rank)));
  int32_t file_rank = 0, file_servers = 0;
  int64_t file_clock = 0;
  uint32_t num_tables = 0;
  if (!r.Pod(&file_rank) || !r.Pod(&file_servers) || !r.Pod(&file_clock) || !r.Pod(&num_tables))
    return r.Fail(r.error());
  if (file_rank != rank || file_servers != num_servers || file_clock != clock)
    return r.Fail("written by server " + std::to_string(file_rank) + " of " + std::to_string(file_servers) +
                  " at clock " + std::to_string(file_clock) + "; expected server " + std::to_string(rank) + " of " +
                  std::to_string(num_servers) + " at clock " + std::to_string(clock));
  std::map<std::string, TableCheckpoint> out;
  for (uint32_t i = 0; i < num_tables; ++i) {
    uint32_t info_bytes = 0;
    if (!r.Pod(&info_bytes) || info_bytes > kMaxHeaderBytes) return r.Fail("table description unreadable");
    std::string info(info_bytes, '\0');
    if (!r.Get(info.data(), info.size())) return r.Fail(r.error());
    Header h;
    // (Any protocol version with checkpoints may have written it, older ones included.)
    Status st = DecodeHeader(info.data(), info.size(), &h, kOldestCheckpointVersion);
    if (!st.ok() || h.type != MsgType::kCreateTable) return r.Fail("table description: " + st.ToString());
    TableCheckpoint t;
    t.info = h.info;
    if (Status valid = t.info.spec.Validate(); !valid.ok())  // (its checksum is checked at the end)
      return r.Fail("table description: " + valid.message() + " (damaged, or a table this build no longer creates)");
    // The partition must be the one this spec and server count give (re-sharding indexes by it).
    const TableInfo expect = TableInfo::Make(t.info.id, t.info.spec, num_servers);
    if (t.info.row_offsets != expect.row_offsets || t.info.bucket_owner != expect.bucket_owner)
      return r.Fail("table '" + t.info.spec.name + "': its description does not fit " + std::to_string(num_servers) +
                    " servers");
    uint64_t rows = 0;
    uint32_t dim = 0, nslots = 0;
    if (!r.Pod(&t.table_step) || !r.Pod(&rows) || !r.Pod(&dim) || !r.Pod(&nslots)) return r.Fail(r.error());
    const bool sparse = t.info.spec.sparse;
    if (!sparse && rows != expect.row_offsets[rank + 1] - expect.row_offsets[rank])
      return r.Fail("table '" + t.info.spec.name + "': " + std::to_string(rows) + " dense rows, server " +
                    std::to_string(rank) + " holds " +
                    std::to_string(expect.row_offsets[rank + 1] - expect.row_offsets[rank]));
    // Sizes are bounded by what the file holds before anything is allocated.
    const long double need = (long double)rows * ((sparse ? 8 : 0) + 4 + 4.0L * dim * (1 + nslots));
    if (dim != t.info.spec.dim || nslots > 8 || need > (long double)r.left())
      return r.Fail("table '" + t.info.spec.name + "': " + std::to_string(rows) + " rows of dim " +
                    std::to_string(dim) + " do not fit in the file");
    if (summary) summary->push_back({t.info, t.table_step, rows, nslots});
    if (only && t.info.spec.name != *only) {  // (read through for the checksum, not kept)
      if (!r.Skip(static_cast<uint64_t>(need))) return r.Fail(r.error());
      continue;
    }
    ShardRows& s = t.rows;
    if (sparse) {
      s.keys.resize(rows);
      r.Get(s.keys.data(), rows * sizeof(Key));
    }
    // The file holds each field for all rows in turn: read into a piece per block (in_blocks) or
    // one piece, which then becomes the fields themselves.
    const uint64_t block = in_blocks && !sparse && rows > 0 ? expect.BlockRows(rank) : std::max<uint64_t>(rows, 1);
    std::vector<ShardRows>& pieces = s.blocks;
    pieces.resize((rows + block - 1) / block);
    auto piece_rows = [&](size_t i) { return std::min<uint64_t>(block, rows - i * block); };
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].params.resize(piece_rows(i) * dim);
      r.Get(pieces[i].params.data(), pieces[i].params.size() * sizeof(float));
    }
    for (size_t i = 0; i < pieces.size(); ++i) pieces[i].slots.resize(nslots);
    for (uint32_t k = 0; k < nslots; ++k)
      for (size_t i = 0; i < pieces.size(); ++i) {
        pieces[i].slots[k].resize(piece_rows(i) * dim);
        r.Get(pieces[i].slots[k].data(), pieces[i].slots[k].size() * sizeof(float));
      }
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].steps.resize(piece_rows(i));
      r.Get(pieces[i].steps.data(), pieces[i].steps.size() * sizeof(uint32_t));
    }
    if (pieces.size() <= 1) {
      if (!pieces.empty()) {
        s.params = std::move(pieces[0].params);
        s.slots = std::move(pieces[0].slots);
        s.steps = std::move(pieces[0].steps);
      }
      pieces.clear();
      s.slots.resize(nslots);  // (no rows: empty ones)
    }
    if (!r.error().empty()) return r.Fail(r.error());
    const std::string name = t.info.spec.name;
    if (!out.emplace(name, std::move(t)).second) return r.Fail("table '" + name + "' appears twice");
  }
  PP_RETURN_IF_ERROR(r.Verify());
  return out;
}

namespace {

// Writes text to path through a temporary file, fsync and rename.
Status WriteTextFile(const std::string& path, const std::string& text) {
  FileWriter w(path);
  w.Put(text.data(), text.size());
  return w.Commit(nullptr, /*trailer=*/false);
}

}  // namespace

Status EnsureWritableDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument("cannot create checkpoint directory " + dir + ": " + ec.message());
  const fs::path probe = fs::path(dir) / ".pushpull-write-test";
  if (!std::ofstream(probe)) return Status::InvalidArgument("checkpoint directory " + dir + " is not writable");
  fs::remove(probe, ec);
  return Status::OK();
}

Status PrepareCheckpointDir(const std::string& root, const std::string& dir, const std::string& own_before) {
  std::error_code ec;
  const fs::path manifest = fs::path(dir) / "MANIFEST";
  if (!fs::exists(manifest, ec)) return Status::OK();
  auto latest = ReadLatestCheckpoint(root);
  if (latest.ok() && fs::path(latest->dir).filename() == fs::path(dir).filename()) {
    // An earlier run's newest (a fresh job in a used directory reaching the same clock): LATEST
    // first goes back to this job's own newest complete checkpoint, if any, so that it never
    // names one being rewritten; a crash meanwhile leaves that one to restore from. Never to
    // another run's older one: a launcher restarting after a crash here would resume this job
    // from that run's parameters.
    std::string before;
    const std::string name = fs::path(dir).filename().string();
    if (!own_before.empty() && fs::path(own_before).parent_path() == fs::path(root) &&
        fs::path(own_before).filename().string() < name && fs::exists(fs::path(own_before) / "MANIFEST", ec))
      before = fs::path(own_before).filename().string();
    const std::string latest_file = (fs::path(root) / "LATEST").string();
    if (!before.empty()) {
      PP_RETURN_IF_ERROR(WriteTextFile(latest_file, before + "\n"));
    } else if (!fs::remove(latest_file, ec) || ec) {
      return WriteError(ec ? ec.value() : ENOENT, "cannot uncommit the earlier checkpoint in " + dir + " (removing " +
                                                      latest_file + "): " + (ec ? ec.message() : "it went meanwhile"));
    } else {
      PP_RETURN_IF_ERROR(SyncDir(root));
    }
  }
  if (!fs::remove(manifest, ec) || ec)
    return WriteError(ec ? ec.value() : ENOENT, "cannot uncommit the earlier checkpoint in " + dir + ": " +
                                                    (ec ? ec.message() : "its MANIFEST went meanwhile"));
  return SyncDir(dir);
}

Status CommitCheckpoint(const std::string& root, const CheckpointManifest& m, int keep) {
  std::ostringstream text;
  text << "pushpull checkpoint\nclock " << m.clock << "\nservers " << m.servers << "\nworkers " << m.workers << "\n";
  if (!m.run.empty()) {
    std::string run = m.run;
    std::replace(run.begin(), run.end(), '\n', ' ');
    text << "run " << run << "\n";
  }
  // Every server said it wrote its file: each must be there as the scheduler sees the directory
  // (a server writing to a local directory of the same name would pass otherwise, and the
  // pruning below would then delete the checkpoints a restore could use).
  for (int r = 0; r < m.servers; ++r) {
    std::error_code ec;
    const std::string file = ServerCheckpointFile(m.dir, r);
    if (!fs::is_regular_file(file, ec))
      return Status::InvalidArgument("server " + std::to_string(r) + " wrote its checkpoint file, but " + file +
                                     " is not there as the scheduler sees it: --checkpoint_dir must be one "
                                     "filesystem every server shares, mounted at the same path");
  }
  PP_RETURN_IF_ERROR(WriteTextFile((fs::path(m.dir) / "MANIFEST").string(), text.str()));
  PP_RETURN_IF_ERROR(WriteTextFile((fs::path(root) / "LATEST").string(), fs::path(m.dir).filename().string() + "\n"));
  // Complete checkpoints older than this one beyond the `keep` newest go, and incomplete ones
  // (no MANIFEST: a checkpoint that failed or a crash while writing). Names sort by clock.
  std::vector<std::string> complete;
  std::error_code ec;
  const std::string current = fs::path(m.dir).filename().string();
  // (Error codes throughout: a directory that cannot be listed, or an entry gone meanwhile,
  // leaves old ones behind; it must not throw out of the scheduler's loop.)
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    // Newer ones are another run's (a job restored from an older checkpoint, or a fresh job in
    // a used directory): left alone, and not counted against this run's `keep`.
    std::error_code dir_ec;
    if (!e.is_directory(dir_ec) || name.rfind("ckpt-", 0) != 0 || name >= current) continue;
    std::error_code file_ec;
    if (fs::exists(e.path() / "MANIFEST", file_ec))
      complete.push_back(e.path().string());
    else
      fs::remove_all(e.path(), file_ec);
  }
  std::sort(complete.begin(), complete.end());
  const size_t others = static_cast<size_t>(std::max(keep, 1) - 1);  // the current one is kept
  // MANIFEST first, durably: a crash part way through leaves an incomplete directory (pruned
  // next time), never one that passes for complete with files missing.
  for (size_t i = 0; i + others < complete.size(); ++i) {
    if (!fs::remove(fs::path(complete[i]) / "MANIFEST", ec) || ec) continue;
    SyncDir(complete[i]).IgnoreError();  // (pruning: what is left is pruned next time)
    fs::remove_all(complete[i], ec);
  }
  return Status::OK();
}

Result<CheckpointManifest> ReadManifest(const std::string& dir) {
  CheckpointManifest m;
  m.dir = dir;
  const std::string manifest = (fs::path(dir) / "MANIFEST").string();
  std::ifstream mf;
  PP_RETURN_IF_ERROR(OpenText(mf, manifest, Status::NotFound("checkpoint " + dir + " has no MANIFEST (incomplete)")));
  std::string title, key;
  std::getline(mf, title);
  bool have[3] = {false, false, false};
  while (mf >> key) {
    if (key == "clock")
      have[0] = bool(mf >> m.clock);
    else if (key == "servers")
      have[1] = bool(mf >> m.servers);
    else if (key == "workers")
      have[2] = bool(mf >> m.workers);
    else if (key == "run") {
      std::getline(mf, m.run);
      if (!m.run.empty() && m.run[0] == ' ') m.run.erase(0, 1);
      if (m.run.size() > kMaxRunText)
        return Status::Corruption(manifest + ": its run line is over " + std::to_string(kMaxRunText) + " bytes");
    } else
      break;
  }
  if (title != "pushpull checkpoint" || !have[0] || !have[1] || !have[2] || m.clock < 0 || m.servers < 1 ||
      m.workers < 1 || m.servers > 4096 || m.workers > 4096)
    return Status::Corruption(manifest + " is not a pushpull checkpoint manifest");
  for (int s = 0; s < m.servers; ++s) {
    std::error_code ec;
    if (!fs::exists(ServerCheckpointFile(dir, s), ec))
      return Status::NotFound("checkpoint " + dir + " lacks " + ServerCheckpointFile(dir, s));
  }
  return m;
}

Result<CheckpointManifest> ReadLatestCheckpoint(const std::string& root) {
  const std::string latest = (fs::path(root) / "LATEST").string();
  std::ifstream in;
  PP_RETURN_IF_ERROR(
      OpenText(in, latest, Status::NotFound("no checkpoint under " + root + " (" + latest + " is missing)")));
  std::string name;
  std::getline(in, name);
  if (name.rfind("ckpt-", 0) != 0 || name.size() > 64 || name.find('/') != std::string::npos)
    return Status::Corruption(latest + " names '" + name + "', not a checkpoint directory");
  return ReadManifest((fs::path(root) / name).string());
}

std::vector<std::string> CheckpointNames(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    std::error_code dir_ec;
    if (n.rfind("ckpt-", 0) == 0 && it->is_directory(dir_ec)) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status VerifyCheckpointFiles(const CheckpointManifest& m) {
  std::vector<unsigned char> buf;
  for (int s = 0; s < m.servers; ++s) {
    FileReader r;
    PP_RETURN_IF_ERROR(r.Open(ServerCheckpointFile(m.dir, s)));
    buf.resize(std::min<uint64_t>(r.left(), kIoChunk));
    while (r.left() > 0)
      if (!r.Get(buf.data(), std::min<uint64_t>(r.left(), buf.size()))) return r.Bad(r.error());
    PP_RETURN_IF_ERROR(r.Verify());
  }
  return Status::OK();
}

Result<CheckpointManifest> NewestIntactCheckpoint(const std::string& root, std::vector<std::string>* skipped) {
  // A checkpoint this process may not read is no damage to pass over (InvalidArgument: the
  // permissions are wrong, and would be for the older ones too).
  auto latest = ReadLatestCheckpoint(root);
  if (latest.status().code() == Code::kInvalidArgument) return latest;
  std::string newest_name;  // LATEST's directory: the candidates are it and those before it
  if (latest.ok()) {
    newest_name = fs::path(latest->dir).filename().string();
    Status st = VerifyCheckpointFiles(*latest);
    if (st.ok() || st.code() == Code::kInvalidArgument) return st.ok() ? latest : Result<CheckpointManifest>(st);
    latest = st;
  } else if (latest.status().code() == Code::kNotFound && latest.status().message().rfind("no checkpoint", 0) == 0) {
    return latest;  // no LATEST: nothing was ever committed here
  } else {
    // LATEST names a directory that is not (or no longer) a complete checkpoint: its name still
    // bounds which ones this run wrote.
    std::ifstream in((fs::path(root) / "LATEST").string());
    std::getline(in, newest_name);
    if (newest_name.rfind("ckpt-", 0) != 0 || newest_name.find('/') != std::string::npos) return latest;
  }
  skipped->push_back(newest_name + ": " + latest.status().ToString());
  // Only the same run's older checkpoints stand in for it: one that another run left in the
  // directory (a fresh job in a used directory whose own only checkpoint is damaged) is not
  // this run's past. (The run is known when the damaged one's MANIFEST could be read.)
  std::optional<std::string> run;
  if (auto damaged = ReadManifest((fs::path(root) / newest_name).string()); damaged.ok()) run = damaged->run;
  std::vector<std::string> older = CheckpointNames(root);
  older.erase(std::lower_bound(older.begin(), older.end(), newest_name), older.end());
  std::reverse(older.begin(), older.end());  // newest first
  for (const std::string& n : older) {
    auto m = ReadManifest((fs::path(root) / n).string());
    Status st = m.ok() ? VerifyCheckpointFiles(*m) : m.status();
    if (m.ok() && run && m->run != *run)  // (first: another run's is passed over, readable or not)
      st = Status::FailedPrecondition("another run's (\"" + m->run + "\", not \"" + *run + "\")");
    if (st.code() == Code::kInvalidArgument) return st;
    if (st.ok()) return m;
    skipped->push_back(n + ": " + st.ToString());
  }
  return Status(latest.status().code(),
                latest.status().message() + "; no older intact checkpoint under " + root + " either");
}

Result<std::map<std::string, TableCheckpoint>> ReadCheckpointForServer(const std::string& dir, int rank,
                                                                       int num_servers, bool in_blocks,
                                                                       const std::string* only) {
  PP_ASSIGN_OR_RETURN(auto m, ReadManifest(dir));
  if (m.servers == num_servers) return ReadServerCheckpoint(dir, rank, num_servers, m.clock, in_blocks, only);
  // Another number of servers: this one's rows under the new partition, from every old file in
  // turn (old rank order: dense rows come out in row order), one old file in memory at a time.
  std::map<std::string, TableCheckpoint> out;
  std::map<std::string, int> files_with;  // per table: the old files that hold it
  for (int old = 0; old < m.servers; ++old) {
    PP_ASSIGN_OR_RETURN(auto file, ReadServerCheckpoint(dir, old, m.servers, m.clock, false, only));
    // Each table's old rows are let go once this server's are copied out.
    for (auto it = file.begin(); it != file.end(); it = file.erase(it)) {
      const std::string& name = it->first;
      TableCheckpoint& t = it->second;
      ++files_with[name];
      const TableInfo now = TableInfo::Make(t.info.id, t.info.spec, num_servers);
      TableCheckpoint& mine = out[name];
      if (old == 0 && !t.info.spec.sparse) {  // the rows this server will own, known up front
        const size_t rows = now.row_offsets[rank + 1] - now.row_offsets[rank], dim = t.info.spec.dim;
        mine.rows.params.reserve(rows * dim);
        mine.rows.slots.assign(t.rows.slots.size(), {});
        for (auto& sl : mine.rows.slots) sl.reserve(rows * dim);
        mine.rows.steps.reserve(rows);
      }
      mine.info = now;
      // BSP: the clock, the same in every file. SSP/ASP count pushes per server: the most of them.
      mine.table_step = std::max(mine.table_step, t.table_step);
      const size_t dim = t.info.spec.dim;
      ShardRows& in = t.rows;
      ShardRows& to = mine.rows;
      if (to.slots.size() != in.slots.size()) to.slots.resize(in.slots.size());
      for (size_t r = 0; r < in.rows(); ++r) {
        const Key key = t.info.spec.sparse ? in.keys[r] : t.info.row_offsets[old] + r;
        if (now.OwnerOf(key) != rank) continue;
        if (t.info.spec.sparse) to.keys.push_back(key);
        to.params.insert(to.params.end(), in.params.begin() + r * dim, in.params.begin() + (r + 1) * dim);
        for (size_t s = 0; s < in.slots.size(); ++s)
          to.slots[s].insert(to.slots[s].end(), in.slots[s].begin() + r * dim, in.slots[s].begin() + (r + 1) * dim);
        to.steps.push_back(in.steps[r]);
      }
    }
  }
  // A table some servers' files lack was left there by a creation that failed on the others (no
  // worker ever had its id): its rows here would be only those of the files that hold it, a
  // partial table the shard would refuse. It is not restored; created again, it starts afresh,
  // as it would have in the job that wrote the checkpoint.
  for (const auto& [name, files] : files_with) {
    if (files == m.servers) continue;
    PP_LOG(Warning) << "checkpoint " << dir << ": table '" << name << "' is in " << files << " of its " << m.servers
                    << " server files (left by a creation that failed); not restored";
    out.erase(name);
  }
  return out;
}

}  // namespace pushpull
