#include "server/checkpoint/store.h"

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

#include "common/log.h"
#include "common/wire.h"
#include "server/checkpoint/file_io.h"

namespace pushpull::checkpoint {

namespace fs = std::filesystem;

std::string CheckpointDir(const std::string& root, int64_t clock) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%010" PRId64, clock);
  return (fs::path(root) / name).string();
}

std::string ServerCheckpointFile(const std::string& dir, int rank) {
  return (fs::path(dir) / ("server-" + std::to_string(rank) + ".ckpt")).string();
}

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

}  // namespace pushpull::checkpoint
