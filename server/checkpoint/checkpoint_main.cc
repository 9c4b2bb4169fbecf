// pushpull-checkpoint: what a checkpoint holds, and its tables out as NumPy .npy files (the
// trained parameters for whatever comes next: inference, analysis, another framework).
#include <gflags/gflags.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/daemon/flags.h"
#include "common/log.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"

DEFINE_string(dir, "", "a checkpoint root (its LATEST is read) or one checkpoint's directory (ckpt-N)");
DEFINE_string(export_table, "", "table to write out (default: list the checkpoint's tables)");
DEFINE_int32(slot, -1, "with --export_table: -1 the parameters, N >= 0 optimizer slot N (e.g. Adam's m is 0)");
DEFINE_string(out, "",
              "with --export_table: the .npy file (float32, rows x dim, in row order; a sparse "
              "table's keys go to OUT.keys.npy, uint64, in the same order)");

namespace {

using pushpull::Status;

// NumPy's format 1.0: magic, version, a little-endian header length, a Python dict literal
// padded with spaces to a multiple of 64 bytes, then the raw little-endian data.
Status WriteNpy(const std::string& path, const char* descr, uint64_t rows, uint64_t cols, const void* data,
                size_t bytes) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(rows) + (cols ? ", " + std::to_string(cols) : std::string(",")) + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    const int err = errno;
    return Status::InvalidArgument("cannot create --out " + path + ": " + std::strerror(err));
  }
  const uint16_t len = static_cast<uint16_t>(dict.size());
  bool ok = std::fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && std::fwrite(&len, 2, 1, f) == 1 &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  return ok ? Status::OK() : Status::Unavailable("writing " + path + " failed: " + std::strerror(err));
}

// docs/ERRORS.md: 2 for what a second try would meet again (a bad flag, a missing, unreadable
// or damaged checkpoint, a table it does not hold), else 1.
int Fail(const Status& st) {
  std::fprintf(stderr, "pushpull-checkpoint: %s\n", st.ToString().c_str());
  return pushpull::IsSetupError(st.code()) || st.code() == pushpull::Code::kCorruption ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  pushpull::ParseFlagsOrHelp(
      &argc, &argv,
      "what a pushpull checkpoint holds; a table out as .npy.\n"
      "usage: pushpull-checkpoint --dir=DIR                      every checkpoint under DIR (intact or not),\n"
      "                                                          then the tables of the newest (or of DIR itself)\n"
      "       pushpull-checkpoint --dir=DIR --export_table=NAME --out=FILE.npy [--slot=N]",
      "checkpoint_main");
  pushpull::RefuseArguments(argc, argv);
  if (FLAGS_dir.empty()) {
    std::fprintf(stderr, "pushpull-checkpoint: --dir is required (see --help)\n");
    return 2;
  }
  if (!FLAGS_export_table.empty() && FLAGS_out.empty()) {
    std::fprintf(stderr, "pushpull-checkpoint: --export_table needs --out\n");
    return 2;
  }
  if (FLAGS_export_table.empty() && (!FLAGS_out.empty() || FLAGS_slot != -1)) {
    std::fprintf(stderr, "pushpull-checkpoint: --out and --slot go with --export_table=NAME (see --help)\n");
    return 2;
  }
  // A root: every checkpoint under it first, each read whole for its checksums (which one to
  // resume from when the newest is damaged: the scheduler's --restore_from=DIR/ckpt-...).
  if (FLAGS_export_table.empty()) {
    namespace fs = std::filesystem;
    std::string latest;
    std::getline(std::ifstream((fs::path(FLAGS_dir) / "LATEST").string()), latest);
    const std::vector<std::string> names = pushpull::checkpoint::CheckpointNames(FLAGS_dir);
    if (!names.empty()) std::printf("checkpoints under %s:\n", FLAGS_dir.c_str());
    for (const std::string& n : names) {
      auto one = pushpull::checkpoint::ReadManifest((fs::path(FLAGS_dir) / n).string());
      const Status st = one.ok() ? pushpull::checkpoint::VerifyCheckpointFiles(*one) : one.status();
      std::printf("  %s%s  %s", n.c_str(), n == latest ? " (LATEST)" : "", st.ok() ? "intact" : st.ToString().c_str());
      if (one.ok())
        std::printf(", clock %lld, %d servers, %d workers%s%s", static_cast<long long>(one->clock), one->servers,
                    one->workers, one->run.empty() ? "" : "; run: ", one->run.c_str());
      std::printf("\n");
    }
  }
  // --dir is a checkpoint directory's root (its newest complete checkpoint), or one checkpoint.
  auto m = pushpull::checkpoint::ReadLatestCheckpoint(FLAGS_dir);
  if (m.status().code() == pushpull::Code::kNotFound) {
    auto one = pushpull::checkpoint::ReadManifest(FLAGS_dir);
    if (one.ok() || one.status().code() != pushpull::Code::kNotFound)
      m = one;
    else
      m = pushpull::Status::NotFound(FLAGS_dir + " is neither a root of checkpoints (" + m.status().message() +
                                     ") nor one checkpoint (" + one.status().message() + ")");
  }
  if (!m.ok()) return Fail(m.status());
  // Every server's rows of every table, gathered as one server would own them all.
  std::fflush(stdout);  // (the list above stays whatever happens below)
  // Every table's description from every server's file, the rows read through (constant memory).
  std::map<std::string, pushpull::checkpoint::TableSummary> summary;
  for (int s = 0; s < m->servers; ++s) {
    std::vector<pushpull::checkpoint::TableSummary> of_file;
    const std::string none;  // (no table is named so: every table's rows are skipped)
    auto read = pushpull::checkpoint::ReadServerCheckpoint(m->dir, s, m->servers, m->clock, false, &none, &of_file);
    if (!read.ok()) return Fail(read.status());
    for (const pushpull::checkpoint::TableSummary& t : of_file) {
      auto [it, fresh] = summary.try_emplace(t.info.spec.name, t);
      if (fresh) continue;
      it->second.rows += t.rows;  // (BSP's step is the clock in every file; SSP/ASP's the most of any)
      it->second.table_step = std::max(it->second.table_step, t.table_step);
    }
  }
  if (FLAGS_export_table.empty()) {
    std::printf("%s: clock %lld, written by %d servers and %d workers; checksums verified\n", m->dir.c_str(),
                static_cast<long long>(m->clock), m->servers, m->workers);
    for (const auto& [name, t] : summary)
      std::printf("  %-24s %s, %llu rows x %u, %s (%u slots), step %lld\n", name.c_str(),
                  t.info.spec.sparse ? "sparse" : "dense", static_cast<unsigned long long>(t.rows), t.info.spec.dim,
                  pushpull::opt::KindName(t.info.spec.optimizer.kind), t.slots, static_cast<long long>(t.table_step));
    return 0;
  }
  if (!summary.count(FLAGS_export_table)) {
    std::string names;
    for (const auto& [name, t] : summary) names += (names.empty() ? "" : ", ") + name;
    return Fail(Status::NotFound("no table '" + FLAGS_export_table + "' in " + m->dir +
                                 " (its tables: " + (names.empty() ? "none" : names) + ")"));
  }
  // That table only, gathered as one server would own it.
  auto tables = [&]() -> pushpull::Result<std::map<std::string, pushpull::checkpoint::TableCheckpoint>> {
    try {
      return pushpull::checkpoint::ReadCheckpointForServer(m->dir, 0, 1, false, &FLAGS_export_table);
    } catch (const std::bad_alloc&) {
      return Status::ResourceExhausted("out of memory reading table '" + FLAGS_export_table + "' of " + m->dir +
                                       ": this tool holds the table (parameters and optimizer slots) in memory, "
                                       "once more while a server's part of it is read");
    }
  }();
  if (!tables.ok()) return Fail(tables.status());
  auto it = tables->find(FLAGS_export_table);
  if (it == tables->end())
    return Fail(Status::Internal("table '" + FLAGS_export_table + "' listed but not read from " + m->dir));
  const pushpull::checkpoint::TableCheckpoint& t = it->second;
  if (FLAGS_slot < -1 || FLAGS_slot >= static_cast<int>(t.rows.slots.size())) {
    std::fprintf(stderr, "pushpull-checkpoint: table '%s' has %zu optimizer slots; --slot=%d\n",
                 FLAGS_export_table.c_str(), t.rows.slots.size(), FLAGS_slot);
    return 2;
  }
  const float* values = FLAGS_slot < 0 ? t.rows.params.data() : t.rows.slots[FLAGS_slot].data();
  const uint64_t rows = t.rows.rows(), dim = t.info.spec.dim;
  Status st = WriteNpy(FLAGS_out, "<f4", rows, dim, values, rows * dim * sizeof(float));
  if (st.ok() && t.info.spec.sparse)
    st = WriteNpy(FLAGS_out + ".keys.npy", "<u8", rows, 0, t.rows.keys.data(), rows * sizeof(uint64_t));
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s: %llu x %llu float32 (%s of '%s' at clock %lld)%s\n", FLAGS_out.c_str(),
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(dim),
              FLAGS_slot < 0 ? "parameters" : ("slot " + std::to_string(FLAGS_slot)).c_str(),
              FLAGS_export_table.c_str(), static_cast<long long>(m->clock),
              t.info.spec.sparse ? (", keys in " + FLAGS_out + ".keys.npy").c_str() : "");
  return 0;
}
