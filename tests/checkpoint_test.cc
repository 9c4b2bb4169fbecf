// Checkpoints (server/checkpoint.h): the file format round-trips a shard's whole state across
// stripings and refuses damaged files; a job restored from a checkpoint continues exactly where
// the checkpointed one was (BSP: bit for bit); the collective's misuses get clear errors.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "apps/fmnist_mlp.h"
#include "apps/linreg.h"
#include "apps/sparse_lr.h"
#include "common/crc32c.h"
#include "tests/support/local_cluster.h"
#include "server/checkpoint.h"
#include "server/table_shard.h"

namespace pushpull {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary one, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "pushpull-ckpt-XXXXXX").string();
    path_ = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TableSpec Spec(const std::string& name, bool sparse, opt::Kind kind) {
  TableSpec s;
  s.name = name;
  s.sparse = sparse;
  s.rows = sparse ? 0 : 10;
  s.dim = 4;
  s.init = InitKind::kUniform;
  s.seed = 7;
  s.optimizer.kind = kind;
  s.optimizer.lr = 0.05f;
  s.consistency = *ParseConsistency("bsp");
  return s;
}

// A checkpoint's manifest under `root` as of `clock`, written by `servers` for `workers`.
CheckpointManifest Manifest(const std::string& root, int64_t clock, int servers, int workers) {
  CheckpointManifest m;
  m.clock = clock;
  m.servers = servers;
  m.workers = workers;
  m.dir = CheckpointDir(root, clock);
  return m;
}

// Every row's parameters, optimizer slots and (through Adam's bias correction) steps, read back.
std::vector<float> Dump(TableShard& t, const std::vector<Key>& keys) {
  std::vector<RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  std::vector<float> out;
  for (int slot = -1; slot < t.optimizer()->num_slots(); ++slot) {
    std::vector<float> v(keys.size() * t.spec().dim, NAN);
    for (int k = 0; k < t.num_stripes(); ++k) t.stripe(k).Read(sel[k], keys.data(), slot, v.data());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void PushSome(TableShard& t, const std::vector<Key>& keys, float scale) {
  std::vector<float> g(keys.size() * t.spec().dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = scale * std::sin(0.7f * i + 1);
  std::vector<RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  opt::StepContext ctx;
  ctx.lr = 0.1f;
  for (int k = 0; k < t.num_stripes(); ++k)
    if (sel[k].size()) t.stripe(k).ApplyPush(sel[k], keys.data(), g.data(), ctx);
}

// A .npy file's shape (from its header) and float32 or uint64 payload.
struct Npy {
  std::string header;
  std::string data;
};
Npy ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  Npy n;
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) return n;
  const size_t len = static_cast<uint8_t>(all[8]) | (static_cast<uint8_t>(all[9]) << 8);
  n.header = all.substr(10, len);
  n.data = all.substr(10 + len);
  return n;
}

TEST(Checkpoint, Crc32cIsTheCastagnoliChecksumInAnyPieces) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(Crc32cPortable(0, "123456789", 9), 0xE3069283u);
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = Crc32cPortable(0, data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(333), size_t(999)})
    EXPECT_EQ(Crc32c(Crc32c(0, data.data(), cut), data.data() + cut, data.size() - cut), whole) << cut;
}

// Written from 3 stripes, restored into 2: the same parameters, slots and step counts (the next
// update lands alike on both, which it would not with another step count).
TEST(Checkpoint, FileRoundTripsAShardAcrossStripings) {
  TempDir dir;
  TableInfo dense = TableInfo::Make(0, Spec("dense", false, opt::Kind::kAdam), 2);
  TableInfo sparse = TableInfo::Make(1, Spec("sparse", true, opt::Kind::kAdam), 2);
  TableShard d3(dense, 1, 3), s3(sparse, 1, 3);
  std::vector<Key> drows{5, 6, 7, 8, 9}, skeys;  // server 1's rows
  for (Key k = 3; skeys.size() < 5; k = k * 31 + 7)
    if (sparse.OwnerOf(k) == 1) skeys.push_back(k);
  PushSome(d3, drows, 1.0f);
  PushSome(d3, {6, 8}, -2.0f);
  PushSome(s3, skeys, 0.5f);
  PushSome(s3, {skeys[1], skeys[3]}, 3.0f);
  d3.table_step = 11;
  uint64_t bytes = 0;
  ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 1, 2, 17, {&d3, &s3}, &bytes).ok());
  EXPECT_EQ(bytes, fs::file_size(ServerCheckpointFile(dir.path(), 1)));

  auto read = ReadServerCheckpoint(dir.path(), 1, 2, 17);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 2u);
  TableShard d2(dense, 1, 2), s2(sparse, 1, 2);
  EXPECT_EQ((*read)["dense"].table_step, 11);
  ASSERT_TRUE(d2.Restore(std::move((*read)["dense"].rows)).ok());
  ASSERT_TRUE(s2.Restore(std::move((*read)["sparse"].rows)).ok());
  EXPECT_EQ(Dump(d3, drows), Dump(d2, drows));
  EXPECT_EQ(Dump(s3, skeys), Dump(s2, skeys));
  PushSome(d3, drows, 1.5f);
  PushSome(d2, drows, 1.5f);
  PushSome(s3, skeys, 1.5f);
  PushSome(s2, skeys, 1.5f);
  EXPECT_EQ(Dump(d3, drows), Dump(d2, drows));
  EXPECT_EQ(Dump(s3, skeys), Dump(s2, skeys));

  // A table of several 1 MB blocks (a stripe each; TableInfo::BlockRows), rows of 4000 bytes so
  // that the blocks do not start on page boundaries: restored into a stripe per block, and into 4
  // equal stripes (fewer blocks than update threads). Read whole, its rows are copied from the
  // last stripe to the first while the checkpoint's pages go; read in blocks (as a server
  // restores), each stripe takes its block as read, and 4 stripes get the blocks joined.
  {
    TableSpec wide = Spec("blocks", false, opt::Kind::kAdam);
    wide.rows = 700;
    wide.dim = 1000;
    const TableInfo info = TableInfo::Make(2, wide, 1);
    TableShard written(info, 0, 1);
    ASSERT_EQ(written.num_stripes(), 3);
    std::vector<Key> all(wide.rows);
    for (Key k = 0; k < wide.rows; ++k) all[k] = k;
    PushSome(written, all, 1.0f);
    PushSome(written, {0, 261, 262, 523, 524, 699}, -2.0f);
    ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 0, 1, 5, {&written}, nullptr).ok());
    for (bool in_blocks : {false, true}) {
      for (int threads : {1, 2, 4}) {
        auto back = ReadServerCheckpoint(dir.path(), 0, 1, 5, in_blocks);
        ASSERT_TRUE(back.ok()) << back.status().ToString();
        EXPECT_EQ((*back)["blocks"].rows.blocks.size(), in_blocks ? 3u : 0u);
        EXPECT_EQ((*back)["blocks"].rows.rows(), wide.rows);
        TableShard restored(info, 0, threads, /*fill=*/false);
        EXPECT_EQ(restored.num_stripes(), threads == 4 ? 4 : 3);
        ASSERT_TRUE(restored.Restore(std::move((*back)["blocks"].rows)).ok());
        EXPECT_EQ(Dump(written, all), Dump(restored, all)) << threads << " update threads, in blocks " << in_blocks;
      }
    }
    // A checkpoint of one server read for a server comes in blocks; for anyone else (the
    // checkpoint tool) whole.
    TempDir root;
    CheckpointManifest m = Manifest(root.path(), 5, 1, 1);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, 5, {&written}, nullptr).ok());
    ASSERT_TRUE(CommitCheckpoint(root.path(), m, 1).ok());
    for (bool in_blocks : {false, true}) {
      auto back = ReadCheckpointForServer(m.dir, 0, 1, in_blocks);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      const ShardRows& rows = (*back)["blocks"].rows;
      EXPECT_EQ(rows.blocks.size(), in_blocks ? 3u : 0u);
      EXPECT_EQ(rows.params.size(), in_blocks ? 0u : size_t(wide.rows) * wide.dim);
      EXPECT_EQ(rows.slots.size(), in_blocks ? 0u : 2u);
    }
    // The checkpoint tool exports such a table whole (found in review: it read the blocks' form
    // and wrote from an empty array).
    const std::string npy = root.path() + "/blocks.npy";
    std::string out;
    ASSERT_EQ(RunCommand(BinDir() + "/pushpull-checkpoint --dir=" + root.path() + " --export_table=blocks --out=" + npy,
                         30, &out), 0) << out;
    Npy n = ReadNpy(npy);
    EXPECT_NE(n.header.find("'shape': (700, 1000)"), std::string::npos) << n.header;
    const std::vector<float> want = Dump(written, all);  // parameters first
    ASSERT_EQ(n.data.size(), size_t(wide.rows) * wide.dim * sizeof(float));
    EXPECT_EQ(std::memcmp(n.data.data(), want.data(), n.data.size()), 0);
  }

  // A sparse stripe of several blocks (TableInfo::KeyedBlockRows: 4 rows of 256 KB each) is
  // written a block at a time, in row order, and restored into 1 stripe (cut into blocks again)
  // or 3 (rows to the stripes their keys hash to).
  {
    TableSpec wide = Spec("sparse_blocks", true, opt::Kind::kAdam);
    wide.dim = 1 << 16;
    ASSERT_EQ(TableInfo::KeyedBlockRows(wide.dim), 4u);
    const TableInfo info = TableInfo::Make(3, wide, 1);
    TableShard written(info, 0, 1);
    std::vector<Key> keys;
    for (Key k = 0; k < 11; ++k) keys.push_back(k * 977 + 5);  // rows 0 to 10: blocks of 4, 4, 3
    PushSome(written, keys, 1.0f);
    PushSome(written, {keys[0], keys[4], keys[10]}, -2.0f);
    ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 0, 1, 6, {&written}, nullptr).ok());
    for (int threads : {1, 3}) {
      auto back = ReadServerCheckpoint(dir.path(), 0, 1, 6, /*in_blocks=*/true);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      TableShard restored(info, 0, threads);
      ASSERT_TRUE(restored.Restore(std::move((*back)["sparse_blocks"].rows)).ok());
      EXPECT_EQ(Dump(written, keys), Dump(restored, keys)) << threads << " update threads";
      if (threads == 1) {
        EXPECT_EQ(restored.stripe(0).row_params(5), restored.stripe(0).row_params(4) + wide.dim);
      }
    }
  }

  // Rows that do not fit the shard are refused, naming the table.
  auto again = ReadServerCheckpoint(dir.path(), 1, 2, 17);
  ASSERT_TRUE(again.ok());
  TableShard other(TableInfo::Make(0, Spec("dense", false, opt::Kind::kAdam), 1), 0, 1);  // owns 10 rows
  Status st = other.Restore(std::move((*again)["dense"].rows));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'dense'"), std::string::npos) << st.ToString();
  // A sparse row twice.
  ShardRows twice = std::move((*again)["sparse"].rows);
  twice.keys[1] = twice.keys[0];
  TableShard s1(sparse, 1, 1);
  st = s1.Restore(std::move(twice));
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.ToString();
}

// Runs `check` as a user other than root, for whom file permissions bite: in a child process
// that becomes nobody when this one is root. Its exit code (0: every expectation held), 100 when
// it could not become nobody, or -1 when it did not end within 30 s.
int AsUnprivileged(const std::function<int()>& check) {
  if (geteuid() != 0) return check();
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    _exit(check());
  }
  if (pid < 0) return -1;
  int status = 0;
  for (int i = 0; i < 3000; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// A checkpoint this process may not read is a setup error that says so (InvalidArgument, exit 2),
// not a missing or damaged one: a restore does not pass over it to an older one. A checkpoint
// directory it may not write in fails a checkpoint the same way.
// --checkpoint_dir must be one filesystem every server shares: a server that does not see its
// root (a mount gone) refuses to write rather than make it afresh on a local disk, and the
// scheduler commits no checkpoint one of whose files it cannot see (so it never prunes the
// older ones a restore could use for it). Both are setup errors. Found in review.
TEST(Checkpoint, AFileTheSchedulerCannotSeeIsNoCompleteCheckpoint) {
  TableSpec spec = Spec("t", false, opt::Kind::kSgd);
  const TableInfo info = TableInfo::Make(0, spec, 1);
  TableShard shard(info, 0, 1);
  TempDir root;
  Status st = WriteServerCheckpoint(root.path() + "/not-mounted/ckpt-00000005", 0, 1, 5, {&shard}, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("does not exist on this server's host"), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/not-mounted"));
  // An older complete checkpoint, then one of two servers' files written.
  CheckpointManifest old = Manifest(root.path(), 3, 1, 1);
  ASSERT_TRUE(WriteServerCheckpoint(old.dir, 0, 1, 3, {&shard}, nullptr).ok());
  ASSERT_TRUE(CommitCheckpoint(root.path(), old, 1).ok());
  CheckpointManifest m = Manifest(root.path(), 5, 2, 1);
  ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 2, 5, {&shard}, nullptr).ok());
  st = CommitCheckpoint(root.path(), m, 1);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("server 1 wrote its checkpoint file, but"), std::string::npos) << st.ToString();
  auto latest = ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 3);  // the older one stays, and stays the newest complete
  EXPECT_TRUE(std::filesystem::exists(old.dir + "/MANIFEST"));
}

// A table a creation that failed on one server left on the other is in one of the checkpoint's
// two files: restored onto another number of servers it is left out (its rows would be half a
// table), and every other table is restored whole.
TEST(Checkpoint, ATableInOnlySomeServersFilesIsNotRestoredOntoAnotherCount) {
  TableSpec spec = Spec("t", false, opt::Kind::kSgd);
  const TableInfo info = TableInfo::Make(0, spec, 2);
  TableShard t0(info, 0, 1), t1(info, 1, 1);
  TableSpec half_spec = Spec("failed", false, opt::Kind::kSgd);
  const TableInfo half_info = TableInfo::Make(1, half_spec, 2);
  TableShard half(half_info, 0, 1);
  TempDir root;
  CheckpointManifest m = Manifest(root.path(), 4, 2, 1);
  ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 2, 4, {&t0, &half}, nullptr).ok());
  ASSERT_TRUE(WriteServerCheckpoint(m.dir, 1, 2, 4, {&t1}, nullptr).ok());
  ASSERT_TRUE(CommitCheckpoint(root.path(), m, 1).ok());
  for (int servers : {1, 3}) {
    size_t rows = 0;
    for (int rank = 0; rank < servers; ++rank) {
      auto got = ReadCheckpointForServer(m.dir, rank, servers);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->count("failed"), 0u) << servers << " servers, rank " << rank;
      ASSERT_EQ(got->count("t"), 1u);
      const TableCheckpoint& t = got->at("t");
      EXPECT_EQ(t.rows.rows(), t.info.row_offsets[rank + 1] - t.info.row_offsets[rank]);
      rows += t.rows.rows();
    }
    EXPECT_EQ(rows, spec.rows) << servers << " servers";
  }
  // Onto as many servers, each restores its own file (the one that holds it, its rows: whole
  // there; the other server fills the table afresh when it is created again).
  auto own = ReadCheckpointForServer(m.dir, 0, 2);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->count("failed"), 1u);
}

TEST(Checkpoint, FilesThisProcessMayNotReadOrWriteAreASetupErrorNotDamage) {
  // Under /tmp (any user may enter it: TMPDIR may be a directory nobody else can), made
  // readable and searchable by all; given back its owner's rights before it is removed.
  std::string made = "/tmp/pushpull-perms-XXXXXX";
  ASSERT_NE(mkdtemp(made.data()), nullptr);
  const std::string root = made;
  using fs::perms;
  const perms dir_rx = perms::owner_read | perms::owner_exec | perms::group_read | perms::group_exec |
                       perms::others_read | perms::others_exec;
  const perms file_r = perms::owner_read | perms::group_read | perms::others_read;
  struct Cleanup {
    std::string root;
    ~Cleanup() {
      std::error_code ec;
      for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
        fs::permissions(it->path(), perms::owner_all, fs::perm_options::add, ec);
      fs::permissions(root, perms::owner_all, fs::perm_options::add, ec);
      fs::remove_all(root, ec);
    }
  } cleanup{root};
  TableInfo info = TableInfo::Make(0, Spec("w", false, opt::Kind::kSgd), 1);
  TableShard t(info, 0, 1);
  for (int64_t c : {2, 4}) {
    CheckpointManifest m = Manifest(root, c, 1, 1);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    ASSERT_TRUE(CommitCheckpoint(root, m, 2).ok());
  }
  for (int64_t c : {2, 4}) {  // nobody may read every file (and write none)
    fs::permissions(CheckpointDir(root, c), dir_rx);
    fs::permissions(ServerCheckpointFile(CheckpointDir(root, c), 0), file_r);
    fs::permissions(fs::path(CheckpointDir(root, c)) / "MANIFEST", file_r);
  }
  fs::permissions(root, dir_rx);
  const std::string latest = (fs::path(root) / "LATEST").string();
  fs::permissions(latest, file_r);
  auto unreadable = [](const Status& st) {
    return st.code() == Code::kInvalidArgument && st.message().find("Permission denied") != std::string::npos;
  };
  auto newest_is_refused = [&] {
    std::vector<std::string> skipped;
    auto m = NewestIntactCheckpoint(root, &skipped);
    return unreadable(m.status()) && skipped.empty();
  };
  const int readable = AsUnprivileged([&] { return newest_is_refused() ? 1 : 0; });
  if (readable == 100) GTEST_SKIP() << "could not run as user nobody";
  EXPECT_EQ(readable, 0) << "every file readable";
  fs::permissions(latest, perms::none);
  EXPECT_EQ(AsUnprivileged([&] {
              if (!unreadable(ReadLatestCheckpoint(root).status())) return 1;
              return newest_is_refused() ? 0 : 2;
            }),
            0)
      << "LATEST unreadable";
  fs::permissions(latest, file_r);
  fs::permissions(ServerCheckpointFile(CheckpointDir(root, 4), 0), perms::none);
  EXPECT_EQ(AsUnprivileged([&] { return newest_is_refused() ? 0 : 1; }), 0) << "the newest's file unreadable";
  EXPECT_EQ(AsUnprivileged([&] {
              return unreadable(WriteServerCheckpoint(CheckpointDir(root, 6), 0, 1, 6, {&t}, nullptr)) ? 0 : 1;
            }),
            0)
      << "a checkpoint directory it may not write in";
}

TEST(Checkpoint, DamagedOrForeignFilesAreRefused) {
  TempDir dir;
  TableInfo info = TableInfo::Make(0, Spec("w", false, opt::Kind::kSgd), 1);
  TableShard t(info, 0, 1);
  ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr).ok());
  const std::string file = ServerCheckpointFile(dir.path(), 0);
  std::string good;
  {
    std::ifstream in(file, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& bytes) { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; };

  // Who wrote it, and when, must match.
  EXPECT_EQ(ReadServerCheckpoint(dir.path(), 0, 2, 3).status().code(), Code::kCorruption);
  EXPECT_EQ(ReadServerCheckpoint(dir.path(), 0, 1, 4).status().code(), Code::kCorruption);
  EXPECT_EQ(ReadServerCheckpoint(dir.path(), 1, 1, 3).status().code(), Code::kNotFound);
  // Any flipped byte, a truncation, an extension.
  for (size_t at : {size_t(3), good.size() / 2, good.size() - 20, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    write(bad);
    Status st = ReadServerCheckpoint(dir.path(), 0, 1, 3).status();
    EXPECT_EQ(st.code(), Code::kCorruption) << "byte " << at;
    EXPECT_NE(st.message().find(file), std::string::npos) << st.ToString();
  }
  // A damaged field is reported as damage, not as what the damaged bytes claim (byte 8: the rank).
  {
    std::string bad = good;
    bad[8] ^= 0x01;
    write(bad);
    Status st = ReadServerCheckpoint(dir.path(), 0, 1, 3).status();
    EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.ToString();
  }
  write(good.substr(0, good.size() - 5));
  EXPECT_EQ(ReadServerCheckpoint(dir.path(), 0, 1, 3).status().code(), Code::kCorruption);
  write(good + "x");
  EXPECT_EQ(ReadServerCheckpoint(dir.path(), 0, 1, 3).status().code(), Code::kCorruption);
  write(good);
  EXPECT_TRUE(ReadServerCheckpoint(dir.path(), 0, 1, 3).ok());
}

// A server that stops while it writes a checkpoint stops writing it (its answer could not be
// sent, so the checkpoint could never be committed): the writer asks before each write of at most
// 4 MB (the last just before syncing), and an abandoned file leaves nothing behind.
TEST(Checkpoint, AnAbandonedWriteStopsPartWayAndLeavesNoFile) {
  TempDir dir;
  const std::string file = ServerCheckpointFile(dir.path(), 0);
  TableSpec spec = Spec("big", false, opt::Kind::kAdam);
  TableShard small(TableInfo::Make(0, spec, 1), 0, 1);
  spec.rows = 3 << 18;  // 12 MB each of parameters and of both moments, 3 MB of steps
  TableShard t(TableInfo::Make(0, spec, 1), 0, 1);
  // The same fields, one ask per write of 4 MB or less: a stripe's array is written at once
  // (the big table's stripes are 1 MB blocks: TableInfo::BlockRows), or in 4 MB pieces.
  int asked_small = 0, asked = 0;
  ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 0, 1, 3, {&small}, nullptr, [&] { return ++asked_small < 0; }).ok());
  ASSERT_TRUE(WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr, [&] { return ++asked < 0; }).ok());
  ASSERT_TRUE(ReadServerCheckpoint(dir.path(), 0, 1, 3).ok());
  auto writes = [](const TableShard& shard) {
    const size_t piece = 4 << 20;
    int n = 0;
    for (int i = 0; i < shard.num_stripes(); ++i) {
      const size_t floats = shard.stripe(i).num_rows() * shard.spec().dim * sizeof(float);
      n += 3 * static_cast<int>((floats + piece - 1) / piece);  // parameters, both moments
      n += static_cast<int>((shard.stripe(i).num_rows() * sizeof(uint32_t) + piece - 1) / piece);  // steps
    }
    return n;
  };
  EXPECT_EQ(t.num_stripes(), 12);
  EXPECT_EQ(asked - asked_small, writes(t) - writes(small));
  fs::remove(file);
  auto files_left = [&] {
    std::vector<std::string> v;
    for (auto& e : fs::directory_iterator(dir.path())) v.push_back(e.path().filename().string());
    return v;
  };
  for (int stop_at : {asked / 2, asked}) {  // part way through the moments; at the last field, before the sync
    int n = 0;
    Status st = WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr, [&] { return ++n >= stop_at; });
    EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
    EXPECT_NE(st.message().find("abandoned"), std::string::npos) << st.ToString();
    EXPECT_EQ(n, stop_at) << "asked again after it said to stop";
    EXPECT_TRUE(files_left().empty()) << files_left().front();
  }
}

TEST(Checkpoint, LatestNamesTheNewestCompleteOneAndOldOnesArePruned) {
  TempDir root;
  EXPECT_EQ(ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
  TableInfo info = TableInfo::Make(0, Spec("w", false, opt::Kind::kSgd), 1);
  TableShard t(info, 0, 1);
  for (int64_t c : {2, 4, 6}) {
    CheckpointManifest m = Manifest(root.path(), c, 1, 3);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    ASSERT_TRUE(CommitCheckpoint(root.path(), m, 2).ok());
    auto latest = ReadLatestCheckpoint(root.path());
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(latest->clock, c);
    EXPECT_EQ(latest->workers, 3);
    EXPECT_EQ(latest->dir, m.dir);
  }
  EXPECT_FALSE(fs::exists(CheckpointDir(root.path(), 2)));  // keep 2
  EXPECT_TRUE(fs::exists(CheckpointDir(root.path(), 4)));
  // An incomplete checkpoint (no MANIFEST) does not count as one of those kept, and goes once a
  // later one is complete.
  fs::create_directories(CheckpointDir(root.path(), 7));
  {
    CheckpointManifest m = Manifest(root.path(), 8, 1, 3);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, 8, {&t}, nullptr).ok());
    ASSERT_TRUE(CommitCheckpoint(root.path(), m, 2).ok());
  }
  EXPECT_FALSE(fs::exists(CheckpointDir(root.path(), 7)));
  EXPECT_TRUE(fs::exists(CheckpointDir(root.path(), 6)));
  EXPECT_FALSE(fs::exists(CheckpointDir(root.path(), 4)));
  fs::create_directories(CheckpointDir(root.path(), 9));  // a newer failed one: left, not LATEST
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 8);
  // A checkpoint directory whose servers did not all write is no checkpoint.
  fs::remove(ServerCheckpointFile(CheckpointDir(root.path(), 8), 0));
  EXPECT_EQ(ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
}

// A run that reuses a directory: its checkpoint at a clock an earlier run also checkpointed is
// uncommitted before it is written (when that is the one LATEST names, LATEST first goes back
// to the complete one before it, or away), and the earlier run's newer checkpoints neither count
// against this run's `keep` nor go.
TEST(Checkpoint, AnEarlierRunsCheckpointsInTheDirectory) {
  TempDir root;
  TableInfo info = TableInfo::Make(0, Spec("w", false, opt::Kind::kSgd), 1);
  TableShard t(info, 0, 1);
  auto commit = [&](int64_t c) {
    CheckpointManifest m = Manifest(root.path(), c, 1, 1);
    EXPECT_TRUE(PrepareCheckpointDir(root.path(), m.dir).ok());
    EXPECT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    EXPECT_TRUE(CommitCheckpoint(root.path(), m, 2).ok());
  };
  for (int64_t c : {4, 8, 12}) commit(c);  // the earlier run
  // A fresh run reaching the earlier run's newest clock: LATEST goes while it is rewritten, not
  // back to the earlier run's clock 8 (a restart after a crash here would resume the fresh run
  // from that run's parameters; found in review).
  ASSERT_TRUE(PrepareCheckpointDir(root.path(), CheckpointDir(root.path(), 12)).ok());
  EXPECT_EQ(ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
  EXPECT_FALSE(fs::exists(fs::path(CheckpointDir(root.path(), 12)) / "MANIFEST"));
  commit(12);
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 12);
  // A run whose own newest is clock 8 (it restored from it, say): LATEST names that meanwhile.
  ASSERT_TRUE(PrepareCheckpointDir(root.path(), CheckpointDir(root.path(), 12), CheckpointDir(root.path(), 8)).ok());
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 8);
  commit(12);
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 12);
  ASSERT_TRUE(PrepareCheckpointDir(root.path(), CheckpointDir(root.path(), 8)).ok());
  EXPECT_FALSE(fs::exists(fs::path(CheckpointDir(root.path(), 8)) / "MANIFEST"));  // uncommitted
  commit(8);  // the new run, at a clock the earlier one used
  commit(10);
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 10);
  EXPECT_TRUE(fs::exists(CheckpointDir(root.path(), 8)));   // this run's two newest
  EXPECT_TRUE(fs::exists(CheckpointDir(root.path(), 12)));  // the earlier run's newer one stays
  EXPECT_FALSE(fs::exists(CheckpointDir(root.path(), 4)));
  // The only checkpoint, rewritten: no LATEST until it is committed again.
  TempDir one;
  CheckpointManifest m = Manifest(one.path(), 4, 1, 1);
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(PrepareCheckpointDir(one.path(), m.dir).ok());
    EXPECT_EQ(ReadLatestCheckpoint(one.path()).status().code(), Code::kNotFound);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, 0, 1, 4, {&t}, nullptr).ok());
    ASSERT_TRUE(CommitCheckpoint(one.path(), m, 2).ok());
    EXPECT_EQ(ReadLatestCheckpoint(one.path())->clock, 4);
  }
}

// pushpull-checkpoint lists a checkpoint's tables and writes one out as .npy, gathered from
// every server's file in row order (sparse: keys beside), parameters or an optimizer slot.
TEST(Checkpoint, ToolListsTablesAndExportsThemAsNpy) {
  TempDir root;
  TableInfo dense = TableInfo::Make(0, Spec("dense", false, opt::Kind::kAdam), 2);
  TableInfo sparse = TableInfo::Make(1, Spec("sparse", true, opt::Kind::kAdam), 2);
  std::vector<std::unique_ptr<TableShard>> d, sp;
  std::vector<Key> skeys{3, 99, 123456789, 42, 7};
  CheckpointManifest m = Manifest(root.path(), 6, 2, 1);
  for (int s = 0; s < 2; ++s) {
    d.push_back(std::make_unique<TableShard>(dense, s, 1));
    sp.push_back(std::make_unique<TableShard>(sparse, s, 2));
    std::vector<Key> rows, mine;
    for (Key k = dense.row_offsets[s]; k < dense.row_offsets[s + 1]; ++k) rows.push_back(k);
    for (Key k : skeys)
      if (sparse.OwnerOf(k) == s) mine.push_back(k);
    PushSome(*d[s], rows, 1.0f + s);
    if (!mine.empty()) PushSome(*sp[s], mine, 0.5f);
    ASSERT_TRUE(WriteServerCheckpoint(m.dir, s, 2, 6, {d[s].get(), sp[s].get()}, nullptr).ok());
  }
  ASSERT_TRUE(CommitCheckpoint(root.path(), m, 2).ok());
  const std::string tool = BinDir() + "/pushpull-checkpoint --dir=" + root.path();
  std::string out;
  ASSERT_EQ(RunCommand(tool, 30, &out), 0) << out;
  EXPECT_NE(out.find("clock 6, written by 2 servers"), std::string::npos) << out;
  EXPECT_NE(out.find("dense, 10 rows x 4, adam (2 slots)"), std::string::npos) << out;
  EXPECT_NE(out.find("sparse, 5 rows x 4"), std::string::npos) << out;

  // Dense parameters: both servers' rows, in row order.
  const std::string npy = root.path() + "/dense.npy";
  ASSERT_EQ(RunCommand(tool + " --export_table=dense --out=" + npy, 30, &out), 0) << out;
  Npy n = ReadNpy(npy);
  EXPECT_NE(n.header.find("'descr': '<f4'"), std::string::npos) << n.header;
  EXPECT_NE(n.header.find("'shape': (10, 4)"), std::string::npos) << n.header;
  std::vector<float> want;
  for (int s = 0; s < 2; ++s) {
    std::vector<Key> rows;
    for (Key k = dense.row_offsets[s]; k < dense.row_offsets[s + 1]; ++k) rows.push_back(k);
    std::vector<float> v = Dump(*d[s], rows);
    want.insert(want.end(), v.begin(), v.begin() + rows.size() * 4);  // parameters come first
  }
  ASSERT_EQ(n.data.size(), want.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(n.data.data(), want.data(), n.data.size()), 0);

  // Sparse slot 0 (Adam's m): rows in some order, keys beside them in the same order.
  const std::string snpy = root.path() + "/sparse_m.npy";
  ASSERT_EQ(RunCommand(tool + " --export_table=sparse --slot=0 --out=" + snpy, 30, &out), 0) << out;
  Npy v = ReadNpy(snpy), k = ReadNpy(snpy + ".keys.npy");
  EXPECT_NE(k.header.find("'descr': '<u8'"), std::string::npos) << k.header;
  EXPECT_NE(k.header.find("'shape': (5,)"), std::string::npos) << k.header;
  ASSERT_EQ(k.data.size(), 5 * sizeof(Key));
  ASSERT_EQ(v.data.size(), 5 * 4 * sizeof(float));
  for (size_t i = 0; i < 5; ++i) {
    Key key;
    std::memcpy(&key, &k.data[i * sizeof(Key)], sizeof key);
    const int s = sparse.OwnerOf(key);
    std::vector<float> slot = Dump(*sp[s], {key});  // params, then m, then v
    EXPECT_EQ(std::memcmp(&v.data[i * 16], &slot[4], 16), 0) << "key " << key;
  }

  // Setup errors exit 2 (docs/ERRORS.md): a table it does not hold (naming those it does), an
  // --out without a table.
  EXPECT_EQ(RunCommand(tool + " --export_table=nope --out=" + npy, 30, &out), 2) << out;
  EXPECT_NE(out.find("no table 'nope'"), std::string::npos) << out;
  EXPECT_NE(out.find("its tables: dense, sparse"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(tool + " --out=" + npy, 30, &out), 2) << out;

  // A server's file gone: the tool says which (not only that the root holds no MANIFEST).
  std::filesystem::remove(ServerCheckpointFile(m.dir, 1));
  EXPECT_NE(RunCommand(tool, 30, &out), 0);
  EXPECT_NE(out.find("server-1.ckpt"), std::string::npos) << out;
}

// One worker's part of a small BSP job from its current clock to `until`: a dense Adam table over
// both servers and a sparse AdaGrad one; gradients depend on the pulled parameters, so any
// difference in restored state would show in the end. Checkpoints at clock `ckpt_at`.
void Train(Client& c, int64_t until, int64_t ckpt_at, std::vector<float>* final_state) {
  // Learning-rate schedules that move every clock, and sparse pushes that skip some servers at
  // some clocks: BSP's schedule step is the clock on every server, so rows restored onto another
  // server keep their rate.
  TableSpec ds = Spec("dense", false, opt::Kind::kAdam), ss = Spec("sparse", true, opt::Kind::kAdaGrad);
  ds.optimizer.schedule.kind = opt::ScheduleKind::kCosine;
  ds.optimizer.schedule.total_steps = 10;
  ss.optimizer.schedule.kind = opt::ScheduleKind::kStep;
  ss.optimizer.schedule.step_size = 2;
  ss.optimizer.schedule.gamma = 0.5f;
  auto dense = c.CreateTable(ds);
  auto sparse = c.CreateTable(ss);
  ASSERT_TRUE(dense.ok() && sparse.ok()) << dense.status().ToString() << sparse.status().ToString();
  std::vector<Key> keys{1, 77, 5000000000ull, 31, 2};
  std::vector<float> w(10 * 4), e(keys.size() * 4);
  while (c.clock() < until) {
    ASSERT_TRUE(c.PullDense(*dense, w.data()).Wait().ok());
    ASSERT_TRUE(c.Pull(*sparse, keys, e.data()).Wait().ok());
    const float t = float(c.clock()) + 0.25f * c.rank();
    std::vector<float> gw(w.size()), ge(e.size());
    for (size_t i = 0; i < w.size(); ++i) gw[i] = 0.3f * w[i] + std::cos(t + i);
    for (size_t i = 0; i < e.size(); ++i) ge[i] = e[i] - std::sin(t * i);
    c.PushDense(*dense, gw);
    if (c.clock() % 2 == 0) {
      c.Push(*sparse, keys, ge);
    } else {  // one key: the other server(s) get no sparse push this clock
      c.Push(*sparse, {keys[0]}, std::vector<float>(ge.begin(), ge.begin() + 4));
    }
    ASSERT_TRUE(c.Clock().ok());
    if (c.clock() == ckpt_at) {
      ASSERT_TRUE(c.Checkpoint().ok());
    }
  }
  ASSERT_TRUE(c.PullDense(*dense, w.data()).Wait().ok());
  ASSERT_TRUE(c.Pull(*sparse, keys, e.data()).Wait().ok());
  std::vector<float> m(w.size());
  ASSERT_TRUE(c.PullSlot(*dense, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, m.data()).Wait().ok());
  *final_state = w;
  final_state->insert(final_state->end(), e.begin(), e.end());
  final_state->insert(final_state->end(), m.begin(), m.end());
}

// A job checkpointed at clock 4 and run on to 8, and new jobs restored from that checkpoint and
// run to 8 (another number of update threads; 3 servers and 1, re-sharding the checkpoint), end
// bit for bit alike: BSP's per-row arithmetic does not depend on where a row lives.
TEST(Checkpoint, RestoredBspJobContinuesExactlyOnAnyNumberOfServers) {
  TempDir root;
  std::vector<std::vector<float>> full(2);
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.update_threads = 3;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, 4, &full[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  ASSERT_FALSE(full[0].empty());
  EXPECT_EQ(full[0], full[1]);  // BSP: both workers see the same parameters
  auto latest = ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 4);
  for (int servers : {2, 3, 1}) {
    std::vector<std::vector<float>> resumed(2);
    LocalClusterConfig cfg;
    cfg.servers = servers;
    cfg.workers = 2;
    cfg.update_threads = servers == 2 ? 1 : 2;
    cfg.restore_from = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    EXPECT_EQ(cluster.client(0).clock(), 4);
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, -1, &resumed[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
    EXPECT_EQ(full[0], resumed[0]) << servers << " servers";
    EXPECT_EQ(full[1], resumed[1]) << servers << " servers";
  }
}

// A restored table that no worker created again before the next checkpoint is in that checkpoint
// as it was restored (found in review: it was left out, and gone once its checkpoint was pruned),
// also across a change in the number of servers.
TEST(Checkpoint, ATableNotCreatedAgainIsKeptInTheNextCheckpoint) {
  TempDir first, second;
  std::vector<std::vector<float>> full(2);
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.checkpoint_dir = first.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, 4, &full[w]); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Resumed on 3 servers, checkpointed again at once, creating neither table.
    LocalClusterConfig cfg;
    cfg.servers = 3;
    cfg.workers = 2;
    cfg.restore_from = first.path();
    cfg.checkpoint_dir = second.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int) { EXPECT_TRUE(c.Checkpoint().ok()); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  auto latest = ReadLatestCheckpoint(second.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 4);
  std::vector<std::vector<float>> resumed(2);
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  cfg.restore_from = second.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.RunWorkers([&](Client& c, int w) { Train(c, 8, -1, &resumed[w]); });
  ASSERT_TRUE(cluster.FinishAndJoin().ok());
  EXPECT_EQ(full[0], resumed[0]);
  EXPECT_EQ(full[1], resumed[1]);
}

// A restore that failed once its rows were handed over (here: past the server's table memory
// limit) fails every later creation of the table the same way; it was retried into an empty
// sparse table, logged as restored (found in review).
TEST(Checkpoint, ARestoreThatFailedPartWayIsNotRetriedIntoAnEmptyTable) {
  TempDir root;
  TableSpec s = Spec("sparse", true, opt::Kind::kAdaGrad);
  {
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    auto t = cluster.client(0).CreateTable(s);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    std::vector<Key> keys(1000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = 3 * i + 1;
    ASSERT_TRUE(cluster.client(0).Push(*t, keys, std::vector<float>(keys.size() * s.dim, 0.5f)).Wait().ok());
    ASSERT_TRUE(cluster.client(0).Clock().ok());
    ASSERT_TRUE(cluster.client(0).Checkpoint().ok());
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  TempDir later;
  LocalClusterConfig cfg;
  cfg.restore_from = root.path();
  cfg.checkpoint_dir = later.path();
  cfg.server_options = [](int, ServerOptions* o) { o->max_table_bytes = 16 << 10; };  // < the 1000 rows
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto t = cluster.client(0).CreateTable(s);
    ASSERT_FALSE(t.ok()) << "attempt " << attempt;
    EXPECT_EQ(t.status().code(), Code::kResourceExhausted) << t.status().ToString();
    EXPECT_NE(t.status().message().find("rows from the checkpoint"), std::string::npos) << t.status().ToString();
    if (attempt == 1) {
      EXPECT_NE(t.status().message().find("cannot be restored by this server any more"), std::string::npos)
          << t.status().ToString();
    }
  }
  // Nor is a checkpoint taken without it (this server's file would lack the table the others' hold).
  ASSERT_TRUE(cluster.client(0).Clock().ok());
  Status st = cluster.client(0).Checkpoint();
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("table 'sparse' could not be restored on server 0"), std::string::npos) << st.ToString();
  EXPECT_FALSE(ReadLatestCheckpoint(later.path()).ok());
  cluster.FinishAndJoin().IgnoreError();
}

// Under SSP and ASP too a checkpoint is an exact cut: what every worker reads right after it (the
// others held at a barrier) is exactly what a job restored from it reads first, tables and
// optimizer state alike, even with workers running at different speeds before it.
class CheckpointCutTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointCutTest, RestoredStateIsWhatWorkersSawAtTheCheckpoint) {
  TempDir root;
  const Consistency model = *ParseConsistency(GetParam());
  auto tables = [&](Client& c, Table* d, Table* sp) {
    TableSpec ds = Spec("dense", false, opt::Kind::kAdam), ss = Spec("sparse", true, opt::Kind::kAdaGrad);
    ds.consistency = ss.consistency = model;
    auto a = c.CreateTable(ds);
    auto b = c.CreateTable(ss);
    ASSERT_TRUE(a.ok() && b.ok());
    *d = *a;
    *sp = *b;
  };
  const std::vector<Key> keys{1, 77, 5000000000ull, 31, 2};
  auto read = [&](Client& c, const Table& d, const Table& sp) {
    std::vector<float> w(10 * 4), e(keys.size() * 4), m(10 * 4);
    EXPECT_TRUE(c.PullDense(d, w.data()).Wait().ok());
    EXPECT_TRUE(c.Pull(sp, keys, e.data()).Wait().ok());
    EXPECT_TRUE(c.PullSlot(d, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, m.data()).Wait().ok());
    w.insert(w.end(), e.begin(), e.end());
    w.insert(w.end(), m.begin(), m.end());
    return w;
  };
  std::vector<std::vector<float>> seen(3), restored(3);
  // A 16 MB table worker 0 pushes to just before the checkpoint: the servers are still busy with
  // it, and the others' last pushes and clocks wait behind it, when the scheduler's request comes.
  TableSpec big;
  big.name = "big";
  big.rows = 1 << 16;
  big.dim = 64;
  big.optimizer.lr = 1e-3f;
  big.consistency = model;
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 3;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) {
      Table d, sp;
      tables(c, &d, &sp);
      std::vector<float> buf(40);
      auto b = c.CreateTable(big);
      ASSERT_TRUE(b.ok());
      for (int it = 0; it < 6; ++it) {
        // Worker 2 lags; workers race ahead as far as the model lets them.
        if (w == 2) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        if (w == 0 && it == 5) c.PushDense(*b, std::vector<float>(big.rows * big.dim, 1e-3f));
        ASSERT_TRUE(c.PullDense(d, buf.data()).Wait().ok());
        std::vector<float> g(40), ge(keys.size() * 4);
        for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * buf[i] + std::sin(float(it * 7 + w + i));
        for (size_t i = 0; i < ge.size(); ++i) ge[i] = std::cos(float(it + w * 3 + i));
        c.PushDense(d, g);
        c.Push(sp, keys, ge);
        ASSERT_TRUE(c.Clock().ok());
      }
      ASSERT_TRUE(c.Checkpoint().ok());
      seen[w] = read(c, d, sp);
      ASSERT_TRUE(c.Barrier().ok());  // nobody pushes before everyone has read
      c.PushDense(d, std::vector<float>(40, 1.0f));
      ASSERT_TRUE(c.Clock().ok());
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {
    LocalClusterConfig cfg;
    cfg.servers = 2;
    cfg.workers = 3;
    cfg.restore_from = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) {
      Table d, sp;
      tables(c, &d, &sp);
      EXPECT_EQ(c.clock(), 6);
      restored[w] = read(c, d, sp);
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  for (int w = 0; w < 3; ++w) {
    ASSERT_FALSE(seen[w].empty());
    EXPECT_EQ(seen[w], seen[0]) << "worker " << w;
    EXPECT_EQ(restored[w], seen[0]) << "worker " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(, CheckpointCutTest, ::testing::Values("ssp:2", "asp"));

// An app checkpoints every N epochs and after its last, so the trained model is in the newest
// checkpoint; a job restored from that one (restarted after training, before it ended) has
// nothing left to train: it evaluates the restored model, the trained one, and ends.
TEST(Checkpoint, AppsCheckpointEveryNEpochsAndAfterTheLast) {
  TempDir root;
  AppOptions app;
  app.consistency = *ParseConsistency("bsp");
  app.epochs = 4;
  app.progress_interval_s = 0;
  app.checkpoint_every_epochs = 3;
  LinregOptions o;
  o.examples_per_worker = 1000;  // 10 clocks an epoch
  std::vector<AppResult> trained(2), restored(2);
  {
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = root.path();
    cfg.checkpoint_keep = 5;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    cluster.RunWorkers([&](Client& c, int w) { EXPECT_TRUE(RunLinreg(c, app, o, &trained[w]).ok()); });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  EXPECT_TRUE(fs::exists(CheckpointDir(root.path(), 30) + "/MANIFEST"));  // after epoch 3
  EXPECT_FALSE(fs::exists(CheckpointDir(root.path(), 20)));
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->clock, 40);  // after the last, epoch 4
  LocalClusterConfig cfg;
  cfg.workers = 2;
  cfg.checkpoint_dir = root.path();  // a restart keeps checkpointing where it restores from
  cfg.restore_from = root.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.RunWorkers([&](Client& c, int w) {
    Status st = RunLinreg(c, app, o, &restored[w]);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(c.clock(), 40);  // no step taken
  });
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(restored[w].final_metric, trained[w].final_metric) << "worker " << w;  // the same model, bit for bit
    EXPECT_EQ(restored[w].reached_target, trained[w].reached_target) << restored[w].summary;
    const auto crc = [](const std::string& s) { return s.substr(s.find("params_crc=")); };
    EXPECT_EQ(crc(restored[w].summary).substr(0, 19), crc(trained[w].summary).substr(0, 19));
  }
  // The checkpoint keeps how the run counted its clocks: restored with half the batch, clock 40
  // would end epoch 2 of a run of 20 clocks an epoch, and the job would go on there as if
  // nothing changed (found in review). Refused, naming both.
  EXPECT_EQ(ReadLatestCheckpoint(root.path())->run,
            "linreg: epochs end at clocks 10, 20, 30, ... (batch 100, 2 workers, 1000 examples a worker, seed 42)");
  LocalCluster other(cfg);
  ASSERT_TRUE(other.Start().ok());
  EXPECT_EQ(other.client(0).restored_run(), ReadLatestCheckpoint(root.path())->run);
  AppOptions half = app;
  half.batch = 50;
  other.RunWorkers([&](Client& c, int w) {
    AppResult r;
    Status st = RunLinreg(c, half, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("taken by a run where \"linreg: epochs end at clocks 10, 20"), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("this one: \"linreg: epochs end at clocks 20, 40, 60, ... (batch 50"),
              std::string::npos) << st.ToString();
    // Nor with another seed, which draws another problem (found in review: linreg resumed on it).
    AppOptions reseeded = app;
    reseeded.seed = 7;
    st = RunLinreg(c, reseeded, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("1000 examples a worker, seed 7)\""), std::string::npos) << st.ToString();
  });
  other.FinishAndJoin().IgnoreError();
  {
    // A checkpoint of the build before, whose run line said neither workers nor seed, still
    // resumes with the default seed (found in review: every such checkpoint was refused).
    const std::string manifest = ReadLatestCheckpoint(root.path())->dir + "/MANIFEST";
    std::string text;
    {
      std::ifstream in(manifest);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t run = text.find("\nrun ");
    ASSERT_NE(run, std::string::npos) << text;
    std::ofstream(manifest, std::ios::trunc)
        << text.substr(0, run) << "\nrun linreg: epochs end at clocks 10, 20, 30, ... (batch 100, 1000 examples a worker)\n";
    LocalCluster earlier(cfg);
    ASSERT_TRUE(earlier.Start().ok());
    earlier.RunWorkers([&](Client& c, int w) {
      AppResult r;
      Status st = RunLinreg(c, app, o, &r);
      EXPECT_TRUE(st.ok()) << st.ToString();
    });
    EXPECT_TRUE(earlier.FinishAndJoin().ok());
    std::ofstream(manifest, std::ios::trunc) << text;
  }
  // Restored with fewer --epochs than it had trained: a setup error naming the epoch (exit 2; it
  // was FailedPrecondition, exit 1, and a launcher restarted into it).
  LocalCluster fewer(cfg);
  ASSERT_TRUE(fewer.Start().ok());
  AppOptions three = app;
  three.epochs = 3;
  fewer.RunWorkers([&](Client& c, int w) {
    AppResult r;
    Status st = RunLinreg(c, three, o, &r);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("the checkpoint (clock 40) is after epoch 4, beyond this run's last (--epochs=3): "
                                "resume with --epochs=4 or more"),
              std::string::npos)
        << st.ToString();
  });
  fewer.FinishAndJoin().IgnoreError();

  // The newest checkpoint damaged (one byte of a server's file):
  {
    const std::string file = ServerCheckpointFile(CheckpointDir(root.path(), 40), 0);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  {
    // The tool lists every checkpoint, which is damaged and which would do, and fails for the
    // newest's tables: exit 2, as for any damaged checkpoint (a second try would meet it again).
    std::string out;
    EXPECT_EQ(RunCommand(BinDir() + "/pushpull-checkpoint --dir=" + root.path(), 60, &out), 2) << out;
    EXPECT_NE(out.find("ckpt-0000000030  intact, clock 30"), std::string::npos) << out;
    EXPECT_NE(out.find("ckpt-0000000040 (LATEST)  Corruption: "), std::string::npos) << out;
  }
  LocalClusterConfig damaged = cfg;
  damaged.checkpoint_dir.clear();
  {
    // - without the scheduler's reading first, the server cannot restore and says how to resume
    //   from an older one (pushpull-server exits 2 on it: a restart would meet it again);
    damaged.verify_restore = false;
    LocalCluster c(damaged);
    EXPECT_FALSE(c.Start().ok());
    c.FinishAndJoin().IgnoreError();
    const Status st = c.server_status(0);
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find("--restore_from=" + root.path() + "/ckpt-"), std::string::npos) << st.ToString();
    // The scheduler hears why at once and ends the job as a setup error (it exits 2: no restart).
    EXPECT_EQ(c.scheduler_status().code(), Code::kInvalidArgument) << c.scheduler_status().ToString();
    EXPECT_NE(c.scheduler_status().message().find("checksum mismatch"), std::string::npos)
        << c.scheduler_status().ToString();
    damaged.verify_restore = true;
  }
  {
    // - named itself, it is refused before the job starts, naming the file;
    LocalClusterConfig named = damaged;
    named.restore_from = CheckpointDir(root.path(), 40);
    LocalCluster c(named);
    const Status st = c.Start();
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find(ServerCheckpointFile(CheckpointDir(root.path(), 40), 0)), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.ToString();
  }
  {
    // The one before it from another run (a fresh job in a used directory) does not stand in.
    const std::string manifest = CheckpointDir(root.path(), 30) + "/MANIFEST";
    std::string text;
    {
      std::ifstream in(manifest);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t run = text.find("\nrun ");
    ASSERT_NE(run, std::string::npos) << text;
    std::ofstream(manifest, std::ios::trunc) << text.substr(0, run) << "\nrun another app's run\n";
    std::vector<std::string> skipped;
    auto none = NewestIntactCheckpoint(root.path(), &skipped);
    EXPECT_FALSE(none.ok());
    ASSERT_EQ(skipped.size(), 2u);
    EXPECT_NE(skipped[1].find("another run's"), std::string::npos) << skipped[1];
    std::ofstream(manifest, std::ios::trunc) << text;
  }
  std::vector<std::string> skipped;
  auto intact = NewestIntactCheckpoint(root.path(), &skipped);
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  EXPECT_EQ(intact->clock, 30);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind("ckpt-0000000040: ", 0), 0u) << skipped[0];
  // - and the job resuming from the directory takes the newest intact one before it, as it does
  //   named itself (a checkpoint directory is a --restore_from too).
  for (const std::string& from : {root.path(), CheckpointDir(root.path(), 30)}) {
    damaged.restore_from = from;
    LocalCluster older(damaged);
    ASSERT_TRUE(older.Start().ok()) << from;
    EXPECT_EQ(older.client(0).clock(), 30);
    // Resumed to train longer than the checkpointed run: it counts its clocks alike, so it goes on.
    AppOptions longer = app;
    longer.epochs = 6;
    longer.checkpoint_every_epochs = 0;
    older.RunWorkers([&](Client& c, int w) {
      AppResult r;
      Status st = RunLinreg(c, longer, o, &r);
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(c.clock(), 60);
    });
    EXPECT_TRUE(older.FinishAndJoin().ok());
  }
  // A root whose own name starts like a checkpoint's is still a root (found in review: it was
  // read as one incomplete checkpoint, so a job in --checkpoint_dir=.../ckpt-fmnist could not
  // resume).
  TempDir links;
  const std::string named_like_one = links.path() + "/ckpt-fmnist";
  std::filesystem::create_directory_symlink(root.path(), named_like_one);
  damaged.restore_from = named_like_one;
  LocalCluster renamed(damaged);
  ASSERT_TRUE(renamed.Start().ok());
  EXPECT_EQ(renamed.client(0).clock(), 30);
  EXPECT_TRUE(renamed.FinishAndJoin().ok());
}

// The other apps too: restored from the checkpoint after their last epoch, they evaluate the
// trained model (worker 0 reports the same metric as the run that trained it) and end.
TEST(Checkpoint, AppsRestoredAfterTheLastEpochEvaluateTheTrainedModel) {
  using AppFn = std::function<Status(Client&, const AppOptions&, AppResult*)>;
  FmnistOptions fo;
  fo.device = Device::kCpu;
  fo.train_limit = 2000;
  fo.test_limit = 1000;
  SparseLrOptions so;
  so.examples_total = 100000;
  so.heldout = 5000;
  const std::vector<std::pair<std::string, AppFn>> apps = {
      {"fmnist_mlp", [&](Client& c, const AppOptions& a, AppResult* r) { return RunFmnistMlp(c, a, fo, r); }},
      {"sparse_lr", [&](Client& c, const AppOptions& a, AppResult* r) { return RunSparseLr(c, a, so, r); }}};
  for (const auto& entry : apps) {
    const std::string& name = entry.first;
    const AppFn& run = entry.second;  // a named reference: lambdas cannot capture bindings in C++17
    SCOPED_TRACE(name);
    TempDir root;
    AppOptions app;
    app.consistency = *ParseConsistency("bsp");
    app.epochs = 1;
    app.batch = name == "sparse_lr" ? 1000 : 64;
    app.progress_interval_s = 0;
    app.checkpoint_every_epochs = 1;
    app.target = 0.01;  // not what this test is about
    std::vector<AppResult> trained(2), restored(2);
    for (int pass = 0; pass < 2; ++pass) {
      LocalClusterConfig cfg;
      cfg.workers = 2;
      cfg.checkpoint_dir = root.path();  // a restart keeps checkpointing where it restores from
      if (pass == 1) cfg.restore_from = root.path();
      LocalCluster cluster(cfg);
      ASSERT_TRUE(cluster.Start().ok());
      cluster.RunWorkers([&](Client& c, int w) {
        const int64_t clock0 = c.clock();
        Status st = run(c, app, pass == 0 ? &trained[w] : &restored[w]);
        EXPECT_TRUE(st.ok()) << st.ToString();
        if (pass == 1) {
          EXPECT_EQ(c.clock(), clock0);  // no step taken
        }
      });
      ASSERT_TRUE(cluster.FinishAndJoin().ok());
    }
    EXPECT_EQ(restored[0].final_metric, trained[0].final_metric) << restored[0].summary;
    EXPECT_TRUE(std::isfinite(restored[0].final_metric)) << restored[0].summary;
  }
}

// An app asked to checkpoint in a job without checkpoints (no scheduler --checkpoint_dir) fails
// before it trains, saying so; a checkpoint directory that cannot be created fails the
// scheduler at its start. Both are setup errors: the binaries exit 2, not restarted.
TEST(Checkpoint, CheckpointsAskedForWithoutADirectoryFailAtTheStart) {
  LocalClusterConfig cfg;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  EXPECT_FALSE(cluster.client(0).checkpoints_enabled());
  AppOptions app;
  app.progress_interval_s = 0;
  app.checkpoint_every_epochs = 1;
  LinregOptions o;
  AppResult r;
  Status st = RunLinreg(cluster.client(0), app, o, &r);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("--checkpoint_dir"), std::string::npos) << st.ToString();
  EXPECT_EQ(cluster.client(0).clock(), 0);
  cluster.FinishAndJoin().IgnoreError();

  TempDir root;
  const std::string file = root.path() + "/a-file";
  std::ofstream(file) << "x";
  SchedulerOptions so;
  so.bind_host = "127.0.0.1";
  so.port = 0;
  so.checkpoint_dir = file + "/ckpt";  // under a regular file: cannot be created
  auto s = Scheduler::Create(so);
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().message().find("cannot create checkpoint directory"), std::string::npos) << s.status().ToString();
  so.checkpoint_dir = root.path() + "/new/ckpt";  // created when missing
  EXPECT_TRUE(Scheduler::Create(so).ok());
  EXPECT_TRUE(fs::is_directory(so.checkpoint_dir));
}

// A worker that dies while the others wait in Checkpoint() (the job going on without it) no longer
// counts: the checkpoint completes with the live ones.
TEST(Checkpoint, ADeadWorkerDoesNotHoldACheckpointUp) {
  TempDir root;
  LocalClusterConfig cfg;
  cfg.workers = 3;
  cfg.continue_on_worker_death = true;
  cfg.checkpoint_dir = root.path();
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(cluster.client(w).Clock().ok());
  std::vector<Status> st(2);
  std::vector<std::thread> t;
  for (int w = 0; w < 2; ++w) t.emplace_back([&, w] { st[w] = cluster.client(w).Checkpoint(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cluster.KillClient(2);  // never asks; declared dead after the heartbeat timeout
  for (auto& th : t) th.join();
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(st[w].ok()) << st[w].ToString();
  auto latest = ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 1);
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

TEST(Checkpoint, MisuseGetsClearErrors) {
  {  // No --checkpoint_dir.
    LocalCluster cluster(LocalClusterConfig{});
    ASSERT_TRUE(cluster.Start().ok());
    Status st = cluster.client(0).Checkpoint();
    EXPECT_EQ(st.code(), Code::kFailedPrecondition);
    EXPECT_NE(st.message().find("--checkpoint_dir"), std::string::npos) << st.ToString();
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  TempDir root;
  {  // Workers at different clocks: both told, and the job goes on.
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = root.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    std::vector<Status> st(2);
    cluster.RunWorkers([&](Client& c, int w) {
      for (int i = 0; i <= w; ++i) ASSERT_TRUE(c.Clock().ok());
      st[w] = c.Checkpoint();
    });
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(st[w].code(), Code::kInvalidArgument) << st[w].ToString();
      EXPECT_NE(st[w].message().find("different clocks"), std::string::npos) << st[w].ToString();
    }
    cluster.RunWorkers([&](Client& c, int w) {
      if (w == 0) {
        ASSERT_TRUE(c.Clock().ok());
      }
      EXPECT_TRUE(c.Checkpoint().ok());
    });
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // A worker that does not ask in time: the one waiting is told who is missing, and the next
     // checkpoint, asked for by both, succeeds.
    TempDir r3;
    LocalClusterConfig cfg;
    cfg.workers = 2;
    cfg.checkpoint_dir = r3.path();
    cfg.checkpoint_timeout_ms = 300;
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Status st = cluster.client(0).Checkpoint();
    EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
    EXPECT_NE(st.message().find("worker 1"), std::string::npos) << st.ToString();
    cluster.RunWorkers([&](Client& c, int) { EXPECT_TRUE(c.Checkpoint().ok()); });
    EXPECT_TRUE(ReadLatestCheckpoint(r3.path()).ok());
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Pushes at the checkpoint's clock itself (a worker that went on after a failed
     // Checkpoint(), or another thread of it): they would be in the checkpoint and trained again
     // on resuming, so it is refused, and taken once the clock is closed (found in review).
    TempDir r4;
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = r4.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    Client& c = cluster.client(0);
    for (const char* model : {"ssp:2", "asp"}) {
      TableSpec s = Spec(std::string("pushed_") + model, false, opt::Kind::kSgd);
      s.consistency = *ParseConsistency(model);
      auto t = c.CreateTable(s);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE(c.Clock().ok());  // (a clock with no checkpoint yet: one taken is not taken again)
      ASSERT_TRUE(c.PushDense(*t, std::vector<float>(s.rows * s.dim, 1.0f)).Wait().ok());
      Status st = c.Checkpoint();
      EXPECT_EQ(st.code(), Code::kFailedPrecondition) << model << ": " << st.ToString();
      EXPECT_NE(st.message().find("pushed 1 time(s) at the checkpoint's clock"), std::string::npos) << st.ToString();
      ASSERT_TRUE(c.Clock().ok());
      EXPECT_TRUE(c.Checkpoint().ok()) << model;
    }
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
  {  // Nothing to restore from.
    TempDir empty;
    LocalClusterConfig cfg;
    cfg.restore_from = empty.path();
    LocalCluster cluster(cfg);
    Status st = cluster.Start();
    EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find("LATEST"), std::string::npos) << st.ToString();
  }
  {  // A table the checkpoint holds under another spec.
    TempDir r2;
    LocalClusterConfig cfg;
    cfg.checkpoint_dir = r2.path();
    {
      LocalCluster cluster(cfg);
      ASSERT_TRUE(cluster.Start().ok());
      ASSERT_TRUE(cluster.client(0).CreateTable(Spec("dense", false, opt::Kind::kAdam)).ok());
      ASSERT_TRUE(cluster.client(0).Checkpoint().ok());
      ASSERT_TRUE(cluster.FinishAndJoin().ok());
    }
    cfg.checkpoint_dir.clear();
    cfg.restore_from = r2.path();
    LocalCluster cluster(cfg);
    ASSERT_TRUE(cluster.Start().ok());
    auto t = cluster.client(0).CreateTable(Spec("dense", false, opt::Kind::kSgd));
    // A setup error (the job's flags against the checkpoint): a worker exits 2 on it, not restarted.
    // It says what differs (found in review: it printed both specs, which left out most settings
    // and so read the same).
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find("cannot take the checkpoint's rows: optimizer adam -> sgd"), std::string::npos)
        << t.status().ToString();
    // Its learning rate, schedule and initialisation may change (training longer, fine-tuning):
    // the rows are the checkpoint's.
    TableSpec longer = Spec("dense", false, opt::Kind::kAdam);
    longer.optimizer.lr = 0.01f;
    longer.optimizer.schedule.kind = opt::ScheduleKind::kCosine;
    longer.optimizer.schedule.total_steps = 100;
    longer.seed = 8;
    EXPECT_EQ(longer.DifferencesFrom(Spec("dense", false, opt::Kind::kAdam)),
              "seed 7 -> 8, lr 0.05 -> 0.01, schedule constant -> cosine, schedule.total_steps 0 -> 100");
    auto resumed = cluster.client(0).CreateTable(longer);
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    std::vector<float> now(10 * 4), fresh(10 * 4);
    ASSERT_TRUE(cluster.client(0).PullDense(*resumed, now.data()).Wait().ok());
    for (size_t i = 0; i < now.size(); ++i) fresh[i] = InitialValue(longer, i / 4, i % 4);
    EXPECT_NE(now, fresh);  // (the checkpoint's rows, not seed 8's)
    TableSpec was = Spec("dense", false, opt::Kind::kAdam);
    for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i], InitialValue(was, i / 4, i % 4)) << i;
    // Nor may the optimizer's state or the consistency model.
    TableSpec other = was;
    other.optimizer.amsgrad = true;  // (a third slot)
    EXPECT_FALSE(other.CanRestoreFrom(was));
    other = was;
    other.consistency = *ParseConsistency("asp");
    EXPECT_FALSE(other.CanRestoreFrom(was));
    EXPECT_TRUE(longer.CanRestoreFrom(was));
    ASSERT_TRUE(cluster.FinishAndJoin().ok());
  }
}

}  // namespace
}  // namespace pushpull
