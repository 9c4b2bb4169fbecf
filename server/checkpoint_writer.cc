#include "server/checkpoint_writer.h"

#include <algorithm>
#include <limits>

#include "common/log.h"
#include "common/time.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"

namespace pushpull::server {

CheckpointWriter::CheckpointWriter(ServerContext* ctx, ControlChannel* control, Tables* tables, MinClock* min_clock,
                                   const std::vector<WorkerState>* workers, const UpdateThreads* updates)
    : ctx_(ctx), control_(control), tables_(tables), min_clock_(min_clock), workers_(workers), updates_(updates) {}

void CheckpointWriter::OnRequest(const Header& h) {
  // Asked again: still in progress (answered when written), or answered already.
  if (asked_ && h.request_id == request_id_) return;
  auto answered =
      std::find_if(answers_.begin(), answers_.end(), [&](const Header& a) { return a.request_id == h.request_id; });
  if (answered != answers_.end()) {
    control_->Send(*answered).IgnoreError();
    return;
  }
  if (writer_.joinable()) {
    Header reply;
    reply.type = MsgType::kCheckpointReply;
    reply.request_id = h.request_id;
    reply.SetStatus(Status::FailedPrecondition("server " + std::to_string(ctx_->rank.load()) +
                                               " is still writing the checkpoint at clock " + std::to_string(clock_)));
    Answer(reply);
    return;
  }
  // A request not yet written is replaced: the scheduler gave up on it (its deadline) and
  // ignores an answer to it.
  asked_ = true;
  clock_ = h.clock;
  dir_ = h.address;
  request_id_ = h.request_id;
  started_ms_ = NowMs();
}

// A checkpoint at clock c is written once every live worker has reached c (each worker's pushes
// tagged below c came before its clock, over the same connection) and every update handed to the
// update threads is applied: the shards then hold exactly the updates tagged below c.
void CheckpointWriter::StartWhenReady() {
  const int64_t min_live = min_clock_->min_live();
  if (min_live < clock_ || updates_->awaiting_done() > 0) return;
  std::vector<const table::TableShard*> tables;
  Status st;
  for (auto& t : tables_->all()) {
    if (!t) continue;
    if (!t->bsp_contributors.empty())
      st = Status::FailedPrecondition("table '" + t->spec().name + "' has BSP pushes of clock " +
                                      std::to_string(t->bsp_contributors.begin()->first) +
                                      " pending: a worker pushed past the checkpoint's clock");
    tables.push_back(t.get());
  }
  // A table this server could not restore (its rows gone with the failed attempt) would be left
  // out of its file only, the other servers' holding theirs: a checkpoint would restore it half
  // reset. None is taken until the job restarts.
  const std::map<std::string, Status>& restore_failed = tables_->restore_failed();
  if (st.ok() && !restore_failed.empty())
    st = Status(restore_failed.begin()->second.code(),
                "table '" + restore_failed.begin()->first + "' could not be restored on server " +
                    std::to_string(ctx_->rank.load()) + " (" + restore_failed.begin()->second.message() +
                    "): no checkpoint without it until the job is restarted");
  // Every live worker exactly at the clock: one past it (it gave up waiting and went on) may have
  // pushed updates that must not be in this checkpoint.
  const consistency::ClockVector& clocks = min_clock_->clocks();
  const int64_t fastest = clocks.MaxLive();
  if (st.ok() && fastest != std::numeric_limits<int64_t>::min() && (min_live != clock_ || fastest != clock_))
    st = Status::FailedPrecondition("live workers are at clocks " + std::to_string(min_live) + " to " +
                                    std::to_string(fastest) + ", not all at the checkpoint's clock " +
                                    std::to_string(clock_));
  // Nor pushes of the clock itself (SSP/ASP tables apply them as they come; BSP's are pending sums,
  // refused above): a worker that went on after its Checkpoint() failed, or another of its
  // threads pushing meanwhile. Resumed from the checkpoint, that clock is trained again whole, so
  // they would count twice. A replacement's pushes to redo are its predecessor's of this clock,
  // the same.
  for (size_t w = 0; st.ok() && w < workers_->size(); ++w) {
    if (!clocks.alive(static_cast<int>(w))) continue;
    int64_t n = 0;
    for (const auto* of : {&(*workers_)[w].pushed_in_clock, &(*workers_)[w].redo})
      for (const auto& [table, k] : *of) n += k;
    if (n > 0)
      st = Status::FailedPrecondition("worker " + std::to_string(w) + " pushed " + std::to_string(n) +
                                      " time(s) at the checkpoint's clock " + std::to_string(clock_) +
                                      " before it was written: a checkpoint is taken between clocks");
  }
  written_ = false;
  if (!st.ok()) {
    status_ = st;
    Finish();
    return;
  }
  // Safe to read the stripes from another thread: the update threads are idle (their last writes
  // are visible through the acquire below) and this thread reads no request until it is done.
  updates_->AcquireIdle();
  const int servers = static_cast<int>(control_->cluster().servers.size());
  std::vector<const checkpoint::TableCheckpoint*> kept;  // (Tables::Create takes none of them while this writes)
  for (const auto& [name, saved] : tables_->restoring()) kept.push_back(&saved);
  if (!kept.empty())
    PP_LOG(Info) << "checkpoint at clock " << clock_ << " also holds " << Count(kept.size(), "table")
                 << " restored but not created again yet, as restored";
  const int rank = ctx_->rank.load();
  writer_ = std::thread([this, tables, servers, kept, rank] {
    SetThreadName("pp-checkpoint");
    try {
      status_ = checkpoint::WriteServerCheckpoint(
          dir_, rank, servers, clock_, tables, &bytes_, [this] { return abandon_.load(std::memory_order_relaxed); },
          kept);
    } catch (const std::bad_alloc&) {  // (a sparse stripe's key list copied for the file)
      status_ = Status::ResourceExhausted("out of memory writing the checkpoint");
    } catch (const std::exception& e) {
      status_ = Status::Internal(std::string("writing the checkpoint: ") + e.what());
    }
    written_ = true;
  });
}

void CheckpointWriter::Answer(const Header& reply) {
  control_->Send(reply).IgnoreError();
  answers_.push_back(reply);
  if (answers_.size() > 4) answers_.pop_front();
}

void CheckpointWriter::Finish() {
  if (writer_.joinable()) writer_.join();
  const int rank = ctx_->rank.load();
  if (status_.ok()) {
    last_clock_ = clock_;
    last_at_ms_ = NowMs();
    ++ctx_->stats.checkpoints;
    PP_LOG(Info) << "checkpoint at clock " << clock_ << " written: " << checkpoint::ServerCheckpointFile(dir_, rank)
                 << ", " << (bytes_ >= 1000000 ? bytes_ / 1e6 : bytes_ / 1e3) << (bytes_ >= 1000000 ? " MB" : " KB")
                 << " in " << NowMs() - started_ms_ << " ms";
  } else {
    PP_LOG(Error) << "checkpoint at clock " << clock_ << " failed: " << status_.ToString();
  }
  Header reply;
  reply.type = MsgType::kCheckpointReply;
  reply.request_id = request_id_;
  reply.clock = clock_;
  reply.SetStatus(status_);
  Answer(reply);
  asked_ = false;
  status_ = Status::OK();
  min_clock_->Advance();  // what membership changes during the write held back
}

void CheckpointWriter::FinishBeforeRestoring(const std::string& name) {
  if (!writer_.joinable()) return;
  PP_LOG(Info) << "table '" << name << "' waits for the checkpoint being written before it is restored";
  WhileHeartbeating(control_, [&] {
    writer_.join();
    return 0;
  });
  Finish();
}

void CheckpointWriter::Abandon() {
  if (!writer_.joinable()) return;
  abandon_ = true;
  writer_.join();
  PP_LOG(Warning) << "checkpoint at clock " << clock_ << " abandoned, the server stopping ("
                  << (status_.ok() ? "it was written, but not answered" : status_.ToString())
                  << "); the last committed checkpoint stays";
}

}  // namespace pushpull::server
