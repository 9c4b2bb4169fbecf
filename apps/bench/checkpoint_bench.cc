// bench "checkpoint": how long a server's checkpoint stalls the job, and how long a restore takes. One dense
// Adam table of N floats (parameters, m, v, per-row steps), one server with 1 and with 3 update threads (case
// names say "stripes"; since a dense table is kept in a stripe per 1 MB block, the 16M-float table has 64
// stripes with either). Write: WriteServerCheckpoint (CRC-32C, fsync, rename); baseline: the same bytes from
// one buffer with fwrite and fsync. Read: ReadServerCheckpoint plus TableShard::Restore; baseline: fread of
// the same bytes into one buffer. Both sides alternate, best of 4 (the page cache is warm for both reads: a
// restore right after a crash finds the file there, or on the shared filesystem's own cache; both read into
// fresh memory, as a starting server must).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench/bench.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"
#include "server/table/shard.h"

namespace pushpull::bench {
namespace {

namespace fs = std::filesystem;

double RawWrite(const std::string& path, const std::vector<char>& buf) {
  const double t0 = Now();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(buf.data(), 1, buf.size(), f);
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
  return Now() - t0;
}

// Into fresh memory, as any restore must: a server starts with none of its state.
double RawRead(const std::string& path, size_t bytes) {
  const double t0 = Now();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return 0;
  std::unique_ptr<char[]> buf(new char[bytes]);
  size_t n = std::fread(buf.get(), 1, bytes, f);
  std::fclose(f);
  return n == bytes ? Now() - t0 : 0;
}

void RunCheckpointBench(Reporter& rep, const Options& o) {
  const uint32_t dim = 256;
  const uint64_t rows = o.quick ? 1024 : 65536;  // 16M floats (64 MB of parameters, 192 MB state)
  TableSpec spec;
  spec.name = "w";
  spec.rows = rows;
  spec.dim = dim;
  spec.init = InitKind::kUniform;
  spec.optimizer.kind = opt::Kind::kAdam;
  const TableInfo info = TableInfo::Make(0, spec, 1);
  const std::string root = (fs::temp_directory_path() / ("pushpull-ckpt-bench-" + std::to_string(getpid()))).string();
  const uint64_t floats = rows * dim;
  const std::string size =
      floats >= (1 << 20) ? std::to_string(floats >> 20) + "M" : std::to_string(floats >> 10) + "K";
  for (int threads : {1, 3}) {
    table::TableShard shard(info, 0, threads);
    // One update, so that m, v and the steps hold something.
    std::vector<float> g(rows * dim, 1e-3f);
    std::vector<table::RowSelection> sel;
    shard.SplitRange(0, rows, &sel);
    opt::StepContext ctx;
    ctx.lr = 1e-3f;
    for (int k = 0; k < shard.num_stripes(); ++k) shard.stripe(k).ApplyPush(sel[k], nullptr, g.data(), ctx);
    g = std::vector<float>();
    const std::string dir = root + "/t" + std::to_string(threads);
    uint64_t bytes = 0;
    double best_w = 1e30, best_rw = 1e30, best_r = 1e30, best_rr = 1e30;
    std::vector<char> buf;
    for (int rep_i = 0; rep_i < 4; ++rep_i) {
      // Alternating which side writes first (the kernel's page cache favours whoever comes second).
      if (rep_i % 2 == 1 && buf.size() == bytes) best_rw = std::min(best_rw, RawWrite(dir + "/raw", buf));
      double t0 = Now();
      Status st = checkpoint::WriteServerCheckpoint(dir, 0, 1, 10, {&shard}, &bytes);
      if (!st.ok()) {
        std::fprintf(stderr, "checkpoint bench: %s\n", st.ToString().c_str());
        return;
      }
      best_w = std::min(best_w, Now() - t0);
      if (buf.size() != bytes) buf.assign(bytes, 1);
      if (rep_i % 2 == 0) best_rw = std::min(best_rw, RawWrite(dir + "/raw", buf));
      t0 = Now();
      auto r = checkpoint::ReadServerCheckpoint(dir, 0, 1, 10, /*in_blocks=*/true);  // as a restoring server reads it
      table::TableShard restored(info, 0, threads, /*fill=*/false);                  // as a restoring server makes it
      if (!r.ok() || !restored.Restore(std::move((*r)["w"].rows)).ok()) {
        std::fprintf(stderr, "checkpoint bench: restore failed\n");
        return;
      }
      best_r = std::min(best_r, Now() - t0);
      best_rr = std::min(best_rr, RawRead(dir + "/raw", bytes));
    }
    const double gb = bytes / 1e9;
    const std::string shape = "adam/" + size + "/" + std::to_string(threads) + "stripes";
    rep.Add({"checkpoint", "write/" + shape, "GB/s", gb / best_w, gb / best_rw,
             "server file of " + std::to_string(bytes >> 20) + " MiB incl. fsync, vs fwrite+fsync of as many bytes"});
    rep.Add({"checkpoint", "restore/" + shape, "GB/s", gb / best_r, gb / best_rr,
             "read, CRC check and Restore into the stripes, vs fread into one fresh buffer"});
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
}  // namespace pushpull::bench

PP_BENCH(checkpoint, pushpull::bench::RunCheckpointBench);
