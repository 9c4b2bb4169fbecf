// Checkpoint files and directories (server/checkpoint/store.h): a shard's whole state round-trips across
// stripings; damaged, foreign, unreadable and unseen files are refused as such; LATEST names the
// newest complete checkpoint, old ones are pruned, and pushpull-checkpoint exports tables.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "optimizers/optimizer.h"
#include "server/checkpoint/file_io.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"
#include "server/table/shard.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

namespace fs = std::filesystem;

// A checkpoint's manifest under `root` as of `clock`, written by `servers` for `workers`.
checkpoint::CheckpointManifest Manifest(const std::string& root, int64_t clock, int servers, int workers) {
  checkpoint::CheckpointManifest m;
  m.clock = clock;
  m.servers = servers;
  m.workers = workers;
  m.dir = checkpoint::CheckpointDir(root, clock);
  return m;
}

// Every row's parameters, optimizer slots and (through Adam's bias correction) steps, read back.
std::vector<float> Dump(table::TableShard& t, const std::vector<Key>& keys) {
  std::vector<table::RowSelection> sel;
  t.Split(keys.data(), keys.size(), &sel);
  std::vector<float> out;
  for (int slot = -1; slot < t.optimizer()->num_slots(); ++slot) {
    std::vector<float> v(keys.size() * t.spec().dim, NAN);
    for (int k = 0; k < t.num_stripes(); ++k) t.stripe(k).Read(sel[k], keys.data(), slot, v.data());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void PushSome(table::TableShard& t, const std::vector<Key>& keys, float scale) {
  std::vector<float> g(keys.size() * t.spec().dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = scale * std::sin(0.7f * i + 1);
  std::vector<table::RowSelection> sel;
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

TEST(CheckpointFiles, Crc32cIsTheCastagnoliChecksumInAnyPieces) {
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
TEST(CheckpointFiles, FileRoundTripsAShardAcrossStripings) {
  TempDir dir;
  TableInfo dense = TableInfo::Make(0, CheckpointSpec("dense", false, opt::Kind::kAdam), 2);
  TableInfo sparse = TableInfo::Make(1, CheckpointSpec("sparse", true, opt::Kind::kAdam), 2);
  table::TableShard d3(dense, 1, 3), s3(sparse, 1, 3);
  std::vector<Key> drows{5, 6, 7, 8, 9}, skeys;  // server 1's rows
  for (Key k = 3; skeys.size() < 5; k = k * 31 + 7)
    if (sparse.OwnerOf(k) == 1) skeys.push_back(k);
  PushSome(d3, drows, 1.0f);
  PushSome(d3, {6, 8}, -2.0f);
  PushSome(s3, skeys, 0.5f);
  PushSome(s3, {skeys[1], skeys[3]}, 3.0f);
  d3.table_step = 11;
  uint64_t bytes = 0;
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 1, 2, 17, {&d3, &s3}, &bytes).ok());
  EXPECT_EQ(bytes, fs::file_size(checkpoint::ServerCheckpointFile(dir.path(), 1)));

  auto read = checkpoint::ReadServerCheckpoint(dir.path(), 1, 2, 17);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 2u);
  table::TableShard d2(dense, 1, 2), s2(sparse, 1, 2);
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
    TableSpec wide = CheckpointSpec("blocks", false, opt::Kind::kAdam);
    wide.rows = 700;
    wide.dim = 1000;
    const TableInfo info = TableInfo::Make(2, wide, 1);
    table::TableShard written(info, 0, 1);
    ASSERT_EQ(written.num_stripes(), 3);
    std::vector<Key> all(wide.rows);
    for (Key k = 0; k < wide.rows; ++k) all[k] = k;
    PushSome(written, all, 1.0f);
    PushSome(written, {0, 261, 262, 523, 524, 699}, -2.0f);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 5, {&written}, nullptr).ok());
    for (bool in_blocks : {false, true}) {
      for (int threads : {1, 2, 4}) {
        auto back = checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 5, in_blocks);
        ASSERT_TRUE(back.ok()) << back.status().ToString();
        EXPECT_EQ((*back)["blocks"].rows.blocks.size(), in_blocks ? 3u : 0u);
        EXPECT_EQ((*back)["blocks"].rows.rows(), wide.rows);
        table::TableShard restored(info, 0, threads, /*fill=*/false);
        EXPECT_EQ(restored.num_stripes(), threads == 4 ? 4 : 3);
        ASSERT_TRUE(restored.Restore(std::move((*back)["blocks"].rows)).ok());
        EXPECT_EQ(Dump(written, all), Dump(restored, all)) << threads << " update threads, in blocks " << in_blocks;
      }
    }
    // A checkpoint of one server read for a server comes in blocks; for anyone else (the
    // checkpoint tool) whole.
    TempDir root;
    checkpoint::CheckpointManifest m = Manifest(root.path(), 5, 1, 1);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, 5, {&written}, nullptr).ok());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 1).ok());
    for (bool in_blocks : {false, true}) {
      auto back = checkpoint::ReadCheckpointForServer(m.dir, 0, 1, in_blocks);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      const table::ShardRows& rows = (*back)["blocks"].rows;
      EXPECT_EQ(rows.blocks.size(), in_blocks ? 3u : 0u);
      EXPECT_EQ(rows.params.size(), in_blocks ? 0u : size_t(wide.rows) * wide.dim);
      EXPECT_EQ(rows.slots.size(), in_blocks ? 0u : 2u);
    }
    // The checkpoint tool exports such a table whole, from its blocks.
    const std::string npy = root.path() + "/blocks.npy";
    std::string out;
    ASSERT_EQ(RunCommand(BinDir() + "/pushpull-checkpoint --dir=" + root.path() + " --export_table=blocks --out=" + npy,
                         30, &out),
              0)
        << out;
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
    TableSpec wide = CheckpointSpec("sparse_blocks", true, opt::Kind::kAdam);
    wide.dim = 1 << 16;
    ASSERT_EQ(TableInfo::KeyedBlockRows(wide.dim), 4u);
    const TableInfo info = TableInfo::Make(3, wide, 1);
    table::TableShard written(info, 0, 1);
    std::vector<Key> keys;
    for (Key k = 0; k < 11; ++k) keys.push_back(k * 977 + 5);  // rows 0 to 10: blocks of 4, 4, 3
    PushSome(written, keys, 1.0f);
    PushSome(written, {keys[0], keys[4], keys[10]}, -2.0f);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 6, {&written}, nullptr).ok());
    for (int threads : {1, 3}) {
      auto back = checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 6, /*in_blocks=*/true);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      table::TableShard restored(info, 0, threads);
      ASSERT_TRUE(restored.Restore(std::move((*back)["sparse_blocks"].rows)).ok());
      EXPECT_EQ(Dump(written, keys), Dump(restored, keys)) << threads << " update threads";
      if (threads == 1) {
        EXPECT_EQ(restored.stripe(0).row_params(5), restored.stripe(0).row_params(4) + wide.dim);
      }
    }
  }

  // Rows that do not fit the shard are refused, naming the table.
  auto again = checkpoint::ReadServerCheckpoint(dir.path(), 1, 2, 17);
  ASSERT_TRUE(again.ok());
  table::TableShard other(TableInfo::Make(0, CheckpointSpec("dense", false, opt::Kind::kAdam), 1), 0,
                          1);  // owns 10 rows
  Status st = other.Restore(std::move((*again)["dense"].rows));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'dense'"), std::string::npos) << st.ToString();
  // A sparse row twice.
  table::ShardRows twice = std::move((*again)["sparse"].rows);
  twice.keys[1] = twice.keys[0];
  table::TableShard s1(sparse, 1, 1);
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

// --checkpoint_dir must be one filesystem every server shares: a server that does not see its
// root (a mount gone) refuses to write rather than make it afresh on a local disk, and the
// scheduler commits no checkpoint one of whose files it cannot see (so it never prunes the
// older ones a restore could use for it). Both are setup errors.
TEST(CheckpointFiles, AFileTheSchedulerCannotSeeIsNoCompleteCheckpoint) {
  TableSpec spec = CheckpointSpec("t", false, opt::Kind::kSgd);
  const TableInfo info = TableInfo::Make(0, spec, 1);
  table::TableShard shard(info, 0, 1);
  TempDir root;
  Status st = checkpoint::WriteServerCheckpoint(root.path() + "/not-mounted/ckpt-00000005", 0, 1, 5, {&shard}, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("does not exist on this server's host"), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/not-mounted"));
  // An older complete checkpoint, then one of two servers' files written.
  checkpoint::CheckpointManifest old = Manifest(root.path(), 3, 1, 1);
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(old.dir, 0, 1, 3, {&shard}, nullptr).ok());
  ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), old, 1).ok());
  checkpoint::CheckpointManifest m = Manifest(root.path(), 5, 2, 1);
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 2, 5, {&shard}, nullptr).ok());
  st = checkpoint::CommitCheckpoint(root.path(), m, 1);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("server 1 wrote its checkpoint file, but"), std::string::npos) << st.ToString();
  auto latest = checkpoint::ReadLatestCheckpoint(root.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->clock, 3);  // the older one stays, and stays the newest complete
  EXPECT_TRUE(std::filesystem::exists(old.dir + "/MANIFEST"));
}

// A table a creation that failed on one server left on the other is in one of the checkpoint's
// two files: restored onto another number of servers it is left out (its rows would be half a
// table), and every other table is restored whole.
TEST(CheckpointFiles, ATableInOnlySomeServersFilesIsNotRestoredOntoAnotherCount) {
  TableSpec spec = CheckpointSpec("t", false, opt::Kind::kSgd);
  const TableInfo info = TableInfo::Make(0, spec, 2);
  table::TableShard t0(info, 0, 1), t1(info, 1, 1);
  TableSpec half_spec = CheckpointSpec("failed", false, opt::Kind::kSgd);
  const TableInfo half_info = TableInfo::Make(1, half_spec, 2);
  table::TableShard half(half_info, 0, 1);
  TempDir root;
  checkpoint::CheckpointManifest m = Manifest(root.path(), 4, 2, 1);
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 2, 4, {&t0, &half}, nullptr).ok());
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 1, 2, 4, {&t1}, nullptr).ok());
  ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 1).ok());
  for (int servers : {1, 3}) {
    size_t rows = 0;
    for (int rank = 0; rank < servers; ++rank) {
      auto got = checkpoint::ReadCheckpointForServer(m.dir, rank, servers);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->count("failed"), 0u) << servers << " servers, rank " << rank;
      ASSERT_EQ(got->count("t"), 1u);
      const checkpoint::TableCheckpoint& t = got->at("t");
      EXPECT_EQ(t.rows.rows(), t.info.row_offsets[rank + 1] - t.info.row_offsets[rank]);
      rows += t.rows.rows();
    }
    EXPECT_EQ(rows, spec.rows) << servers << " servers";
  }
  // Onto as many servers, each restores its own file (the one that holds it, its rows: whole
  // there; the other server fills the table afresh when it is created again).
  auto own = checkpoint::ReadCheckpointForServer(m.dir, 0, 2);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->count("failed"), 1u);
}

// A checkpoint this process may not read is a setup error that says so (InvalidArgument, exit 2),
// not a missing or damaged one: a restore does not pass over it to an older one. A checkpoint
// directory it may not write in fails a checkpoint the same way.
TEST(CheckpointFiles, FilesThisProcessMayNotReadOrWriteAreASetupErrorNotDamage) {
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
  TableInfo info = TableInfo::Make(0, CheckpointSpec("w", false, opt::Kind::kSgd), 1);
  table::TableShard t(info, 0, 1);
  for (int64_t c : {2, 4}) {
    checkpoint::CheckpointManifest m = Manifest(root, c, 1, 1);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(root, m, 2).ok());
  }
  for (int64_t c : {2, 4}) {  // nobody may read every file (and write none)
    fs::permissions(checkpoint::CheckpointDir(root, c), dir_rx);
    fs::permissions(checkpoint::ServerCheckpointFile(checkpoint::CheckpointDir(root, c), 0), file_r);
    fs::permissions(fs::path(checkpoint::CheckpointDir(root, c)) / "MANIFEST", file_r);
  }
  fs::permissions(root, dir_rx);
  const std::string latest = (fs::path(root) / "LATEST").string();
  fs::permissions(latest, file_r);
  auto unreadable = [](const Status& st) {
    return st.code() == Code::kInvalidArgument && st.message().find("Permission denied") != std::string::npos;
  };
  auto newest_is_refused = [&] {
    std::vector<std::string> skipped;
    auto m = checkpoint::NewestIntactCheckpoint(root, &skipped);
    return unreadable(m.status()) && skipped.empty();
  };
  const int readable = AsUnprivileged([&] { return newest_is_refused() ? 1 : 0; });
  if (readable == 100) GTEST_SKIP() << "could not run as user nobody";
  EXPECT_EQ(readable, 0) << "every file readable";
  fs::permissions(latest, perms::none);
  EXPECT_EQ(AsUnprivileged([&] {
              if (!unreadable(checkpoint::ReadLatestCheckpoint(root).status())) return 1;
              return newest_is_refused() ? 0 : 2;
            }),
            0)
      << "LATEST unreadable";
  fs::permissions(latest, file_r);
  fs::permissions(checkpoint::ServerCheckpointFile(checkpoint::CheckpointDir(root, 4), 0), perms::none);
  EXPECT_EQ(AsUnprivileged([&] { return newest_is_refused() ? 0 : 1; }), 0) << "the newest's file unreadable";
  EXPECT_EQ(
      AsUnprivileged([&] {
        return unreadable(checkpoint::WriteServerCheckpoint(checkpoint::CheckpointDir(root, 6), 0, 1, 6, {&t}, nullptr))
                   ? 0
                   : 1;
      }),
      0)
      << "a checkpoint directory it may not write in";
}

TEST(CheckpointFiles, DamagedOrForeignFilesAreRefused) {
  TempDir dir;
  TableInfo info = TableInfo::Make(0, CheckpointSpec("w", false, opt::Kind::kSgd), 1);
  table::TableShard t(info, 0, 1);
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr).ok());
  const std::string file = checkpoint::ServerCheckpointFile(dir.path(), 0);
  std::string good;
  {
    std::ifstream in(file, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& bytes) { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; };

  // Who wrote it, and when, must match.
  EXPECT_EQ(checkpoint::ReadServerCheckpoint(dir.path(), 0, 2, 3).status().code(), Code::kCorruption);
  EXPECT_EQ(checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 4).status().code(), Code::kCorruption);
  EXPECT_EQ(checkpoint::ReadServerCheckpoint(dir.path(), 1, 1, 3).status().code(), Code::kNotFound);
  // Any flipped byte, a truncation, an extension.
  for (size_t at : {size_t(3), good.size() / 2, good.size() - 20, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    write(bad);
    Status st = checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).status();
    EXPECT_EQ(st.code(), Code::kCorruption) << "byte " << at;
    EXPECT_NE(st.message().find(file), std::string::npos) << st.ToString();
  }
  // A damaged field is reported as damage, not as what the damaged bytes claim (byte 8: the rank).
  {
    std::string bad = good;
    bad[8] ^= 0x01;
    write(bad);
    Status st = checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).status();
    EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.ToString();
  }
  write(good.substr(0, good.size() - 5));
  EXPECT_EQ(checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).status().code(), Code::kCorruption);
  write(good + "x");
  EXPECT_EQ(checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).status().code(), Code::kCorruption);
  write(good);
  EXPECT_TRUE(checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).ok());
}

// A server that stops while it writes a checkpoint stops writing it (its answer could not be
// sent, so the checkpoint could never be committed): the writer asks before each write of at most
// 4 MB (the last just before syncing), and an abandoned file leaves nothing behind.
TEST(CheckpointFiles, AnAbandonedWriteStopsPartWayAndLeavesNoFile) {
  TempDir dir;
  const std::string file = checkpoint::ServerCheckpointFile(dir.path(), 0);
  TableSpec spec = CheckpointSpec("big", false, opt::Kind::kAdam);
  table::TableShard small(TableInfo::Make(0, spec, 1), 0, 1);
  spec.rows = 3 << 18;  // 12 MB each of parameters and of both moments, 3 MB of steps
  table::TableShard t(TableInfo::Make(0, spec, 1), 0, 1);
  // The same fields, one ask per write of 4 MB or less: a stripe's array is written at once
  // (the big table's stripes are 1 MB blocks: TableInfo::BlockRows), or in 4 MB pieces.
  int asked_small = 0, asked = 0;
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 3, {&small}, nullptr, [&] {
                return ++asked_small < 0;
              }).ok());
  ASSERT_TRUE(checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr, [&] { return ++asked < 0; }).ok());
  ASSERT_TRUE(checkpoint::ReadServerCheckpoint(dir.path(), 0, 1, 3).ok());
  auto writes = [](const table::TableShard& shard) {
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
    Status st = checkpoint::WriteServerCheckpoint(dir.path(), 0, 1, 3, {&t}, nullptr, [&] { return ++n >= stop_at; });
    EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
    EXPECT_NE(st.message().find("abandoned"), std::string::npos) << st.ToString();
    EXPECT_EQ(n, stop_at) << "asked again after it said to stop";
    EXPECT_TRUE(files_left().empty()) << files_left().front();
  }
}

TEST(CheckpointFiles, LatestNamesTheNewestCompleteOneAndOldOnesArePruned) {
  TempDir root;
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
  TableInfo info = TableInfo::Make(0, CheckpointSpec("w", false, opt::Kind::kSgd), 1);
  table::TableShard t(info, 0, 1);
  for (int64_t c : {2, 4, 6}) {
    checkpoint::CheckpointManifest m = Manifest(root.path(), c, 1, 3);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 2).ok());
    auto latest = checkpoint::ReadLatestCheckpoint(root.path());
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(latest->clock, c);
    EXPECT_EQ(latest->workers, 3);
    EXPECT_EQ(latest->dir, m.dir);
  }
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root.path(), 2)));  // keep 2
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointDir(root.path(), 4)));
  // An incomplete checkpoint (no MANIFEST) does not count as one of those kept, and goes once a
  // later one is complete.
  fs::create_directories(checkpoint::CheckpointDir(root.path(), 7));
  {
    checkpoint::CheckpointManifest m = Manifest(root.path(), 8, 1, 3);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, 8, {&t}, nullptr).ok());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 2).ok());
  }
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root.path(), 7)));
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointDir(root.path(), 6)));
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root.path(), 4)));
  fs::create_directories(checkpoint::CheckpointDir(root.path(), 9));  // a newer failed one: left, not LATEST
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 8);
  // A checkpoint directory whose servers did not all write is no checkpoint.
  fs::remove(checkpoint::ServerCheckpointFile(checkpoint::CheckpointDir(root.path(), 8), 0));
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
}

// A run that reuses a directory: its checkpoint at a clock an earlier run also checkpointed is
// uncommitted before it is written (when that is the one LATEST names, LATEST first goes back
// to the complete one before it, or away), and the earlier run's newer checkpoints neither count
// against this run's `keep` nor go.
TEST(CheckpointFiles, AnEarlierRunsCheckpointsInTheDirectory) {
  TempDir root;
  TableInfo info = TableInfo::Make(0, CheckpointSpec("w", false, opt::Kind::kSgd), 1);
  table::TableShard t(info, 0, 1);
  auto commit = [&](int64_t c) {
    checkpoint::CheckpointManifest m = Manifest(root.path(), c, 1, 1);
    EXPECT_TRUE(checkpoint::PrepareCheckpointDir(root.path(), m.dir).ok());
    EXPECT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, c, {&t}, nullptr).ok());
    EXPECT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 2).ok());
  };
  for (int64_t c : {4, 8, 12}) commit(c);  // the earlier run
  // A fresh run reaching the earlier run's newest clock: LATEST goes while it is rewritten, not
  // back to the earlier run's clock 8 (a restart after a crash here would resume the fresh run
  // from that run's parameters).
  ASSERT_TRUE(checkpoint::PrepareCheckpointDir(root.path(), checkpoint::CheckpointDir(root.path(), 12)).ok());
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path()).status().code(), Code::kNotFound);
  EXPECT_FALSE(fs::exists(fs::path(checkpoint::CheckpointDir(root.path(), 12)) / "MANIFEST"));
  commit(12);
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 12);
  // A run whose own newest is clock 8 (it restored from it, say): LATEST names that meanwhile.
  ASSERT_TRUE(checkpoint::PrepareCheckpointDir(root.path(), checkpoint::CheckpointDir(root.path(), 12),
                                               checkpoint::CheckpointDir(root.path(), 8))
                  .ok());
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 8);
  commit(12);
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 12);
  ASSERT_TRUE(checkpoint::PrepareCheckpointDir(root.path(), checkpoint::CheckpointDir(root.path(), 8)).ok());
  EXPECT_FALSE(fs::exists(fs::path(checkpoint::CheckpointDir(root.path(), 8)) / "MANIFEST"));  // uncommitted
  commit(8);  // the new run, at a clock the earlier one used
  commit(10);
  EXPECT_EQ(checkpoint::ReadLatestCheckpoint(root.path())->clock, 10);
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointDir(root.path(), 8)));   // this run's two newest
  EXPECT_TRUE(fs::exists(checkpoint::CheckpointDir(root.path(), 12)));  // the earlier run's newer one stays
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root.path(), 4)));
  // The only checkpoint, rewritten: no LATEST until it is committed again.
  TempDir one;
  checkpoint::CheckpointManifest m = Manifest(one.path(), 4, 1, 1);
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(checkpoint::PrepareCheckpointDir(one.path(), m.dir).ok());
    EXPECT_EQ(checkpoint::ReadLatestCheckpoint(one.path()).status().code(), Code::kNotFound);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, 0, 1, 4, {&t}, nullptr).ok());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(one.path(), m, 2).ok());
    EXPECT_EQ(checkpoint::ReadLatestCheckpoint(one.path())->clock, 4);
  }
}

// pushpull-checkpoint lists a checkpoint's tables and writes one out as .npy, gathered from
// every server's file in row order (sparse: keys beside), parameters or an optimizer slot.
TEST(CheckpointFiles, ToolListsTablesAndExportsThemAsNpy) {
  TempDir root;
  TableInfo dense = TableInfo::Make(0, CheckpointSpec("dense", false, opt::Kind::kAdam), 2);
  TableInfo sparse = TableInfo::Make(1, CheckpointSpec("sparse", true, opt::Kind::kAdam), 2);
  std::vector<std::unique_ptr<table::TableShard>> d, sp;
  std::vector<Key> skeys{3, 99, 123456789, 42, 7};
  checkpoint::CheckpointManifest m = Manifest(root.path(), 6, 2, 1);
  for (int s = 0; s < 2; ++s) {
    d.push_back(std::make_unique<table::TableShard>(dense, s, 1));
    sp.push_back(std::make_unique<table::TableShard>(sparse, s, 2));
    std::vector<Key> rows, mine;
    for (Key k = dense.row_offsets[s]; k < dense.row_offsets[s + 1]; ++k) rows.push_back(k);
    for (Key k : skeys)
      if (sparse.OwnerOf(k) == s) mine.push_back(k);
    PushSome(*d[s], rows, 1.0f + s);
    if (!mine.empty()) PushSome(*sp[s], mine, 0.5f);
    ASSERT_TRUE(checkpoint::WriteServerCheckpoint(m.dir, s, 2, 6, {d[s].get(), sp[s].get()}, nullptr).ok());
  }
  ASSERT_TRUE(checkpoint::CommitCheckpoint(root.path(), m, 2).ok());
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
  std::filesystem::remove(checkpoint::ServerCheckpointFile(m.dir, 1));
  EXPECT_NE(RunCommand(tool, 30, &out), 0);
  EXPECT_NE(out.find("server-1.ckpt"), std::string::npos) << out;
}

}  // namespace
}  // namespace pushpull
