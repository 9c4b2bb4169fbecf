// What the parts of the worker client share: the sticky error later calls return, a refused
// push the next Clock() must report, the counters (ClientStats), request ids, the tables this
// client created, this worker's clock and what a settled Clock() waits for.
//
// Threading: `mu` guards the members marked GUARDED_BY(mu). It is a leaf of the client's lock
// order: nothing else is taken while it is held. The atomics are read and written from any
// thread without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "common/mutex.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/futures.h"
#include "worker/requests.h"

namespace pushpull {
namespace internal {

struct ClientState {
  mutable Mutex mu;                    // a leaf: nothing else is taken while it is held
  Status sticky GUARDED_BY(mu);        // a failure that stays (a dead server, a refused clock)
  Status refused_push GUARDED_BY(mu);  // the first push refused before it was sent, for the next Clock()
  ClientStats stats GUARDED_BY(mu);    // (unanswered_bytes: RequestTable; pulls_dropped: dropped_pulls)
  // Pulls given up because their last Future went first (see FutureState::dropped).
  const std::shared_ptr<DroppedPulls> dropped_pulls = std::make_shared<DroppedPulls>();
  // The next request's id: ids are assigned in sending order (under ServerLinks' send_mu too).
  uint64_t next_request_id GUARDED_BY(mu) = 1;
  // Never overwritten once added: CheckTable hands out pointers into it.
  std::map<uint32_t, TableInfo> tables GUARDED_BY(mu);
  // Settled clocks (ControlCalls::Clock): the pushes posted since the last Clock() (their calls'
  // states, each once), pushes and clocks posted in all, and those counts when the pushes a
  // Clock() waited for were listed: a push or Clock() posted after that, by another thread,
  // unsettles the Clock.
  std::vector<std::shared_ptr<FutureState>> clock_pushes GUARDED_BY(mu);
  uint64_t pushes_posted GUARDED_BY(mu) = 0;
  uint64_t clocks_posted GUARDED_BY(mu) = 0;
  uint64_t settled_at_pushes GUARDED_BY(mu) = 0;
  uint64_t settled_at_clocks GUARDED_BY(mu) = 0;

  std::atomic<int64_t> clock{0};             // this worker's clock (Client::clock)
  std::atomic<bool> pushed_in_clock{false};  // a push posted since the last Clock() (Finish)
  std::atomic<bool> has_bsp_table{false};    // CreateTable gave a BSP table (Clock() settles)
  std::atomic<bool> finished{false};         // Finish() or Leave() done: no calls after it

  // The error later calls return: the sticky one, or this worker having finished.
  Status Sticky() const EXCLUDES(mu) {
    MutexLock l(&mu);
    return StickyLocked();
  }
  Status StickyLocked() const REQUIRES(mu) {
    if (sticky.ok() && finished)
      return Status::FailedPrecondition("this worker has finished (Finish() or Leave()): no calls after it");
    return sticky;
  }
  // Makes `st` the sticky error unless there is one already.
  void SetSticky(const Status& st) EXCLUDES(mu) {
    MutexLock l(&mu);
    if (sticky.ok()) sticky = st;
  }
  // A push refused here, before any server saw it: the Clock() closing its step fails too,
  // stickily, as a server refuses the clock of a push it refused.
  void NoteRefusedPush(const Status& st) EXCLUDES(mu) {
    MutexLock l(&mu);
    if (refused_push.ok()) refused_push = st;
  }
  // The table a handle names, as this client created it; the sticky error first.
  Status CheckTable(const Table& t, const TableInfo** info) const EXCLUDES(mu) {
    MutexLock l(&mu);
    PP_RETURN_IF_ERROR(StickyLocked());
    auto it = tables.find(t.id);
    if (it == tables.end() || it->second.spec.name != t.name)
      return Status::NotFound("table '" + t.name + "' was not created through this client");
    // Destinations are sized by this client's record: a handle that says otherwise (another
    // client's, or edited) is refused rather than trusted.
    const TableSpec& spec = it->second.spec;
    if (t.sparse != spec.sparse || t.dim != spec.dim || (!spec.sparse && t.rows != spec.rows))
      return Status::InvalidArgument("table '" + t.name + "': this handle says " + (t.sparse ? "sparse" : "dense") +
                                     ", dim " + std::to_string(t.dim) + ", rows " + std::to_string(t.rows) +
                                     "; the table is " + (spec.sparse ? "sparse" : "dense") + ", dim " +
                                     std::to_string(spec.dim) + ", rows " + std::to_string(spec.rows) +
                                     " (a handle from another client?)");
    *info = &it->second;
    return Status::OK();
  }
};

// Fails every call waiting on an answer from `target` (FailAll: from anyone) with `st`, made the
// sticky error first: a request registered after its caller looked at the sticky error is then
// failed by that caller, who looks again (ServerLinks::Send).
inline void FailTarget(ClientState& state, RequestTable& requests, int target, const Status& st) {
  state.SetSticky(st);
  requests.FailTarget(target, st);
}
inline void FailAll(ClientState& state, RequestTable& requests, const Status& st) {
  state.SetSticky(st);
  requests.FailAll(st);
}

}  // namespace internal
}  // namespace pushpull
