#include "server/request_validation.h"

#include <limits>
#include <string>

namespace pushpull::server {

Status RequestValidator::Validate(const Message& m, table::TableShard** shard, bool again) const {
  const Header& h = m.header;
  const consistency::ClockVector& clocks = min_clock_->clocks();
  if (h.sender_role != Role::kWorker || h.sender_rank < 0 || h.sender_rank >= clocks.size())
    return Status::InvalidArgument("sender rank " + std::to_string(h.sender_rank) + " is not a worker of this job");
  const WorkerState& worker = (*workers_)[h.sender_rank];
  if (!clocks.alive(h.sender_rank))
    return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) + " was declared dead");
  if (worker.replacing)
    return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) +
                                      " was declared dead; the job waits for a new worker in its place");
  if (worker.dying) return Status::FailedPrecondition("worker " + std::to_string(h.sender_rank) + " was declared dead");
  if (FromEarlierClient(*workers_, h))
    return Status::FailedPrecondition("from an earlier client of worker " + std::to_string(h.sender_rank) +
                                      ", which another has replaced");
  // (Below the clock the job started at, a request would pass for a replacement's redo of one
  // applied already: answered, never applied.)
  if (h.clock < clocks.start())
    return Status::InvalidArgument(std::string(MsgTypeName(h.type)) + " tagged clock " + std::to_string(h.clock) +
                                   ", before the job's first clock " + std::to_string(clocks.start()));
  if (h.type == MsgType::kClock) return Status::OK();
  table::TableShard* t = tables_->Find(h.table);
  if (!t) return Status::NotFound("unknown table id " + std::to_string(h.table));
  const TableSpec& spec = t->spec();
  if (h.dim != spec.dim)
    return Status::InvalidArgument("table '" + spec.name + "' has dim " + std::to_string(spec.dim) + ", message says " +
                                   std::to_string(h.dim));
  if (h.flags & kFlagRange) {
    if (spec.sparse) return Status::InvalidArgument("row ranges are for dense tables only");
    if (h.row_begin < t->row_begin() || h.num_rows > t->row_end() - h.row_begin || h.row_begin > t->row_end())
      return Status::InvalidArgument("rows [" + std::to_string(h.row_begin) + ", +" + std::to_string(h.num_rows) +
                                     ") are outside this server's [" + std::to_string(t->row_begin()) + ", " +
                                     std::to_string(t->row_end()) + ") of '" + spec.name + "'");
  } else if (!t->OwnsEveryKey()) {
    const Key* keys = m.key_data();
    for (uint64_t i = 0; i < h.num_keys; ++i) {
      if (!t->Owns(keys[i])) {
        if (!spec.sparse && keys[i] >= spec.rows)
          return Status::InvalidArgument("row " + std::to_string(keys[i]) + " out of range [0, " +
                                         std::to_string(spec.rows) + ") of '" + spec.name + "'");
        return Status::InvalidArgument("row " + std::to_string(keys[i]) + " of '" + spec.name + "' belongs to server " +
                                       std::to_string(t->info().OwnerOf(keys[i])) + ", not " +
                                       std::to_string(ctx_->rank.load()));
      }
    }
  }
  int64_t own = clocks.clock(h.sender_rank);
  if (again && h.clock < own && h.type == MsgType::kPull && spec.consistency.model == Consistency::kBsp)
    return Status::FailedPrecondition("pull at clock " + std::to_string(h.clock) + " of BSP table '" + spec.name +
                                      "' asked again after worker " + std::to_string(h.sender_rank) +
                                      " moved on to clock " + std::to_string(own) +
                                      ": what it would have seen then is gone");
  const bool before_hello = h.clock < own && h.clock < worker.hello_clock;  // done by the client before
  if (h.clock != own && !(again && h.clock < own) && !before_hello)
    return Status::FailedPrecondition(std::string(MsgTypeName(h.type)) + " tagged clock " + std::to_string(h.clock) +
                                      " but worker " + std::to_string(h.sender_rank) + " is at clock " +
                                      std::to_string(own));
  const int64_t max_message_bytes = ctx_->options.max_message_bytes;
  if (h.type == MsgType::kPull) {
    // The reply is row_count x dim floats, whatever the request's size (keys may repeat).
    const uint64_t max_rows = max_message_bytes > 0 ? uint64_t(max_message_bytes) / (uint64_t(spec.dim) * sizeof(float))
                                                    : std::numeric_limits<uint64_t>::max();  // no message limit set
    if (h.row_count() > max_rows)
      return Status::InvalidArgument("pull of " + std::to_string(h.row_count()) + " rows of dim " +
                                     std::to_string(spec.dim) + " from '" + spec.name + "' would be over the " +
                                     std::to_string(max_message_bytes >> 20) + " MB message limit");
    if (h.slot < -1 || h.slot >= t->optimizer()->num_slots())
      return Status::InvalidArgument("slot " + std::to_string(h.slot) + " does not exist for optimizer " +
                                     opt::KindName(spec.optimizer.kind));
  }
  if (h.type == MsgType::kPush) {
    if (!opt::AllUsable(m.value_data(), h.row_count() * h.dim))
      return Status(Code::kDiverged, "the job diverged: worker " + std::to_string(h.sender_rank) +
                                         "'s push to table '" + spec.name + "' at clock " + std::to_string(h.clock) +
                                         " holds NaN, Inf or a value of 2^60 or more (its square would overflow the "
                                         "optimizer's state), refused; lower the learning rate or clip gradients");
  }
  *shard = t;
  return Status::OK();
}

}  // namespace pushpull::server
