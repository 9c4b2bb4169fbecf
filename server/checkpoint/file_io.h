// Crash-safe file I/O for checkpoints: every file is written to a temporary name, fsync'd,
// renamed into place and its directory fsync'd, so a crash leaves the previous file intact.
// Binary files (a server's shards, server/checkpoint/shard_file.h) end with their payload's
// length and a CRC-32C of it, checked before a byte of them is trusted; text files (MANIFEST,
// LATEST; server/checkpoint/store.h) go without.
//
// Errors say what a restart would meet: a full disk is ResourceExhausted, a permission
// InvalidArgument (both setup errors), anything else Unavailable; a damaged file Corruption.
//
// Threading: FileWriter and FileReader are plain objects, one thread each.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <type_traits>

#include "pushpull/status.h"

namespace pushpull::checkpoint {

// The first bytes of every binary checkpoint file.
inline constexpr char kMagic[8] = {'P', 'P', 'C', 'K', 'P', 'T', '1', '\n'};
// Writes and reads go in pieces of at most this many bytes (FileWriter's `abandon` is asked
// before each).
inline constexpr size_t kIoChunk = 4 << 20;

// A file this process may not read or write (its permissions, a read-only filesystem) is a setup
// error, InvalidArgument, whose words say so: a restart meets it again, and a checkpoint that
// cannot be read is not damaged (taken for missing, a restore would go on from an older one,
// throwing training away).
bool IsPermissionError(int err);
Status PermissionError(int err, const std::string& what);
// A file that cannot be written: the disk full is ResourceExhausted, which a restart would meet
// again (a worker exits 2 on it and pushpull-launch does not restart the job); one this process
// may not write, InvalidArgument (the same); else Unavailable.
Status WriteError(int err, const std::string& what);
// Opens a text file of a checkpoint for reading; `missing` is what a file that is not there is.
Status OpenText(std::ifstream& in, const std::string& path, Status missing);
// fsync of a directory, so that a rename in it survives a crash. (Some filesystems refuse to
// open or fsync a directory; the rename has happened either way, so that is not an error. An
// I/O error is: the rename may not survive a power loss, and the checkpoint is not complete.)
Status SyncDir(const std::string& dir);
// Creates dir and its parents; a failure is WriteError's.
Status MakeDirs(const std::string& dir);
// Writes text to path through a temporary file, fsync and rename.
Status WriteTextFile(const std::string& path, const std::string& text);

// Writes a file under a temporary name with a running CRC-32C; Commit() appends the trailer
// (binary files; text files go without), fsyncs and renames it into place. Destroyed before
// Commit(), it removes the temporary file. `abandon`, when given, is asked before each piece
// written: once it says yes, nothing more is written and Commit() returns Aborted.
class FileWriter {
 public:
  explicit FileWriter(std::string path, std::function<bool()> abandon = nullptr);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void Put(const void* p, size_t n);
  template <class T>
  void Pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "plain values only");
    Put(&v, sizeof v);
  }
  // *total: the bytes written, the trailer included.
  Status Commit(uint64_t* total, bool trailer = true);

 private:
  void Fail(const std::string& what);  // with errno as the failed call left it
  bool Abandoned();

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
  FileReader() = default;
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Opens path and checks its length against the trailer and its magic: NotFound when missing,
  // Corruption when damaged.
  Status Open(const std::string& path);
  // False (and error() set) when fewer than n bytes are left.
  bool Get(void* p, size_t n);
  template <class T>
  bool Pod(T* v) {
    return Get(v, sizeof *v);
  }
  // Reads n bytes through (for the checksum) without keeping them.
  bool Skip(uint64_t n);
  // After the last read: the whole payload was read and its CRC matches.
  Status Verify() const;
  // An error found part way: a damaged file is reported as such (the rest is read for the CRC),
  // an intact one with `why`.
  Status Fail(const std::string& why);
  uint64_t left() const { return left_; }
  Status Bad(const std::string& why) const;
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t left_ = 0;
  uint32_t crc_ = 0;
  uint32_t crc_want_ = 0;
  std::string error_;
};

}  // namespace pushpull::checkpoint
