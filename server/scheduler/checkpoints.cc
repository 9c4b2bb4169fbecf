#include "server/scheduler/checkpoints.h"

#include <filesystem>
#include <vector>

#include "common/log.h"

namespace pushpull::scheduler {

Status Checkpoints::PrepareRestore() {
  if (!restore_prepared_) {
    restore_prepared_ = true;
    restore_status_ = ResolveRestore();
  }
  return restore_status_;
}

Status Checkpoints::ResolveRestore() {
  if (options_.restore_from.empty()) return Status::OK();
  // The newest complete checkpoint under the directory, or the one it is (a ckpt-NNN
  // directory: an older one when the newest is damaged).
  std::error_code ec;
  std::filesystem::path named = std::filesystem::path(options_.restore_from).lexically_normal();
  if (!named.has_filename()) named = named.parent_path();
  // A ckpt-... directory without a MANIFEST is one checkpoint left incomplete (said so below),
  // unless it is a root itself (a LATEST, or checkpoints under it): an operator's root may be
  // named ckpt-something too.
  const bool one =
      std::filesystem::exists(named / "MANIFEST", ec) ||
      (named.filename().string().rfind("ckpt-", 0) == 0 && !std::filesystem::exists(named / "LATEST", ec) &&
       checkpoint::CheckpointNames(named.string()).empty());
  // Every file is read once here, so that a damaged newest checkpoint is passed over for the
  // one before it instead of failing every server's restore (and every restart's).
  if (options_.verify_restore)
    PP_LOG(Info) << "--restore_from: reading the checkpoint's files to check them before the job starts (the "
                 << "nodes' --register_timeout_ms runs meanwhile; --verify_restore=false skips this)";
  const int64_t began = NowMs();
  std::vector<std::string> skipped;
  auto m = one                       ? checkpoint::ReadManifest(options_.restore_from)
           : options_.verify_restore ? checkpoint::NewestIntactCheckpoint(options_.restore_from, &skipped)
                                     : checkpoint::ReadLatestCheckpoint(options_.restore_from);
  if (m.ok() && one && options_.verify_restore) {
    Status intact = checkpoint::VerifyCheckpointFiles(*m);
    if (!intact.ok()) m = intact;
  }
  for (const std::string& s : skipped) PP_LOG(Warning) << "--restore_from: passing over checkpoint " << s;
  if (!m.ok()) return m.status().Annotate("--restore_from");
  if (!skipped.empty())
    PP_LOG(Warning) << "--restore_from: resuming from the older checkpoint " << m->dir << " (clock " << m->clock
                    << "); the training since then is done again";
  restore_ = *m;
  if (options_.verify_restore) {
    const int64_t took = NowMs() - began;
    PP_LOG(Info) << "--restore_from: " << m->dir << " checked in " << took / 1000.0 << " s";
    if (took > options_.register_timeout_ms / 2)
      PP_LOG(Warning) << "checking the checkpoint took over half of --register_timeout_ms ("
                      << options_.register_timeout_ms / 1000 << " s), which the nodes' registration waits "
                      << "count too: raise it on every node, or pass --verify_restore=false";
  }
  if (m->servers != options_.num_servers)
    PP_LOG(Info) << "checkpoint " << m->dir << " was written by " << Count(m->servers, "server") << "; this job has "
                 << options_.num_servers << ": each server gathers the rows it now owns from every file";
  if (m->workers != options_.num_workers)
    PP_LOG(Warning) << "checkpoint " << m->dir << " was written by a job of " << m->workers << " workers; this one has "
                    << options_.num_workers << ": data shards and BSP means differ from the checkpointed run";
  PP_LOG(Info) << "restoring from " << restore_.dir << ": clock " << restore_.clock << ", written by "
               << Count(restore_.servers, "server") << " and " << Count(restore_.workers, "worker");
  // The newest checkpoint this job has, when it is in --checkpoint_dir: a checkpoint asked for
  // at its clock is taken already, and LATEST goes back to it while a newer one is rewritten.
  // One from elsewhere is another run's: --checkpoint_dir holds no checkpoint at the restored
  // clock, and LATEST there must not be pointed at whatever it holds under that clock's name.
  std::filesystem::path from = std::filesystem::absolute(restore_.dir, ec).lexically_normal();
  if (!from.has_filename()) from = from.parent_path();
  if (!options_.checkpoint_dir.empty() && std::filesystem::equivalent(from.parent_path(), options_.checkpoint_dir, ec))
    committed_clock_ = restore_.clock;
  return Status::OK();
}

void Checkpoints::WarnOfAnotherRun() const {
  if (options_.checkpoint_dir.empty() || !options_.restore_from.empty()) return;
  auto earlier = checkpoint::ReadLatestCheckpoint(options_.checkpoint_dir);
  if (earlier.ok())
    PP_LOG(Warning) << "--checkpoint_dir " << options_.checkpoint_dir << " already holds another run's checkpoints "
                    << "(newest: " << earlier->dir << "); this fresh run's checkpoints replace those at the "
                    << "same clocks (--restore_from continues that run instead)";
}

void Checkpoints::HandleAsk(const Node& worker, const Header& h) {
  Waiter w{worker.identity, h.request_id};
  if (options_.checkpoint_dir.empty()) {
    state_.ReplyTo(w, MsgType::kCheckpointReply,
                   Status::FailedPrecondition("the scheduler has no --checkpoint_dir: checkpoints are off"));
    return;
  }
  if (h.clock <= committed_clock_) {
    PP_LOG(Info) << "worker " << worker.rank << " asked for a checkpoint at clock " << h.clock
                 << ": already taken (the newest is at clock " << committed_clock_ << ")";
    state_.ReplyTo(w, MsgType::kCheckpointReply, Status::OK());
    return;
  }
  if (h.address.size() > kMaxRunText || h.address.find('\n') != std::string::npos) {
    state_.ReplyTo(w, MsgType::kCheckpointReply,
                   Status::InvalidArgument("a run's description must be one line of at most " +
                                           std::to_string(kMaxRunText) + " bytes"));
    return;
  }
  if (checkpoint_.writing && !checkpoint_.workers.count(worker.rank) && h.clock == checkpoint_.clock &&
      h.address == checkpoint_.run) {
    // A worker that asks for the checkpoint being written, having not asked before: the
    // replacement of one that asked and died meanwhile (it catches up on the checkpoint due at
    // the clock it starts at). It is answered with the others, at the commit.
    PP_LOG(Info) << "worker " << worker.rank << " joins the checkpoint at clock " << checkpoint_.clock
                 << " being written";
    checkpoint_.workers[worker.rank] = {w, h.clock, h.address};
    return;
  }
  if (checkpoint_.writing || checkpoint_.workers.count(worker.rank)) {
    state_.ReplyTo(w, MsgType::kCheckpointReply,
                   Status::FailedPrecondition("worker " + std::to_string(worker.rank) +
                                              " asked for a checkpoint while one is in progress"));
    return;
  }
  if (checkpoint_.workers.empty()) checkpoint_.deadline = Deadline::In(options_.checkpoint_timeout_ms);
  checkpoint_.workers[worker.rank] = {w, h.clock, h.address};
  Check();
}

void Checkpoints::Check() {
  if (checkpoint_.workers.empty() || checkpoint_.writing) return;
  for (Node* w : state_.workers)
    if ((w->alive || liveness_.Replacing(w->rank)) && !w->done && !checkpoint_.workers.count(w->rank)) return;
  for (auto it = checkpoint_.workers.begin(); it != checkpoint_.workers.end();) {
    if (!state_.workers[it->first]->alive)
      it = checkpoint_.workers.erase(it);  // died while waiting
    else
      ++it;
  }
  if (checkpoint_.workers.empty()) return;
  std::string clocks;
  std::set<int64_t> distinct;
  std::set<std::string> runs;
  for (auto& [rank, wc] : checkpoint_.workers) {
    runs.insert(wc.run);
    distinct.insert(wc.clock);
    clocks += (clocks.empty() ? "" : ", ") + std::string("worker ") + std::to_string(rank) + " at " +
              std::to_string(wc.clock);
  }
  if (distinct.size() != 1) {
    Fail(Status::InvalidArgument("workers asked for a checkpoint at different clocks (" + clocks +
                                 "): every worker must call Checkpoint() at the same clock"));
    return;
  }
  if (runs.size() != 1) {
    std::string all;
    for (const auto& r : runs) all += (all.empty() ? "'" : ", '") + r + "'";
    Fail(Status::InvalidArgument("workers describe their runs differently (" + all +
                                 "): every worker must run the same app with the same data and flags"));
    return;
  }
  checkpoint_.run = *runs.begin();
  const std::string dir = checkpoint::CheckpointDir(options_.checkpoint_dir, *distinct.begin());
  Status prepared = checkpoint::PrepareCheckpointDir(
      options_.checkpoint_dir, dir,
      committed_clock_ >= 0 ? checkpoint::CheckpointDir(options_.checkpoint_dir, committed_clock_) : std::string());
  if (!prepared.ok()) {
    Fail(prepared);
    return;
  }
  checkpoint_.clock = *distinct.begin();
  checkpoint_.dir = dir;
  checkpoint_.writing = true;
  checkpoint_.written.clear();
  checkpoint_.request_id = state_.NextRequestId();
  checkpoint_.deadline = Deadline::In(options_.checkpoint_timeout_ms);
  checkpoint_.started_ms = NowMs();
  PP_LOG(Info) << "checkpoint at clock " << checkpoint_.clock << ": servers writing into " << checkpoint_.dir;
  checkpoint_.resend_ms = 0;
  if (state_.ResendDue(&checkpoint_.resend_ms)) state_.SendToServers(Request(), checkpoint_.written);
}

Header Checkpoints::Request() const {
  Header h;
  h.type = MsgType::kCheckpoint;
  h.request_id = checkpoint_.request_id;
  h.clock = checkpoint_.clock;
  h.address = checkpoint_.dir;
  return h;
}

void Checkpoints::Tick() {
  if (checkpoint_.writing && !checkpoint_.deadline.Expired())
    if (state_.ResendDue(&checkpoint_.resend_ms)) state_.SendToServers(Request(), checkpoint_.written);
  if (checkpoint_.workers.empty() || !checkpoint_.deadline.Expired()) return;
  // Asking: a worker that never calls; writing: a server that never answers.
  std::string missing;
  if (checkpoint_.writing) {
    for (Node* s : state_.servers)
      if (!checkpoint_.written.count(s->rank)) missing += (missing.empty() ? "" : ", ") + NodeName(*s);
  } else {
    for (Node* w : state_.workers)
      if (w->alive && !w->done && !checkpoint_.workers.count(w->rank))
        missing += (missing.empty() ? "" : ", ") + NodeName(*w);
  }
  Fail(Status::DeadlineExceeded(
      std::string(checkpoint_.writing
                      ? "checkpoint at clock " + std::to_string(checkpoint_.clock) + ": not written within "
                      : "checkpoint: not asked for by every live worker within ") +
      std::to_string(options_.checkpoint_timeout_ms) + " ms; missing " + missing));
}

void Checkpoints::HandleServerReply(const Node& server, const Header& h) {
  if (!checkpoint_.writing || h.request_id != checkpoint_.request_id) return;
  if (h.status != Code::kOk) {
    Fail(h.status_obj().Annotate("checkpoint at clock " + std::to_string(checkpoint_.clock) + ": " + NodeName(server)));
    return;
  }
  checkpoint_.written.insert(server.rank);
  if (static_cast<int>(checkpoint_.written.size()) < options_.num_servers) return;
  checkpoint::CheckpointManifest man;
  man.clock = checkpoint_.clock;
  man.servers = options_.num_servers;
  man.workers = options_.num_workers;
  man.dir = checkpoint_.dir;
  man.run = checkpoint_.run;
  Status st = checkpoint::CommitCheckpoint(options_.checkpoint_dir, man, options_.checkpoint_keep);
  if (!st.ok()) {
    Fail(st.Annotate("checkpoint at clock " + std::to_string(checkpoint_.clock)));
    return;
  }
  PP_LOG(Info) << "checkpoint at clock " << checkpoint_.clock << " complete: " << checkpoint_.dir << " ("
               << NowMs() - checkpoint_.started_ms << " ms)";
  for (auto& [rank, wc] : checkpoint_.workers) state_.ReplyTo(wc.waiter, MsgType::kCheckpointReply, Status::OK());
  committed_clock_ = checkpoint_.clock;
  ++checkpoints_committed_;
  checkpoint_ = Pending();
}

void Checkpoints::Fail(const Status& st) {
  if (checkpoint_.workers.empty() && !checkpoint_.writing) return;
  PP_LOG(Error) << "checkpoint failed: " << st.ToString();
  for (auto& [rank, wc] : checkpoint_.workers) state_.ReplyTo(wc.waiter, MsgType::kCheckpointReply, st);
  checkpoint_ = Pending();
}

}  // namespace pushpull::scheduler
