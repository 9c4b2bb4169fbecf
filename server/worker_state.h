// What a server keeps about each worker rank of the job, one WorkerState per rank (the clocks
// themselves are in MinClock's ClockVector, server/min_clock.h).
//
// Threading: the I/O thread's only. The vector is sized once, at registration, and read by rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/wire.h"
#include "pushpull/status.h"
#include "server/request_record.h"

namespace pushpull::server {

struct WorkerState {
  // Requests asked again run once (server/request_record.h).
  RequestRecord requests;
  // Its pulls parked in MinClock (at most MinClock::kMaxParked).
  uint32_t parked = 0;
  // Its client's receive socket, from its Hello: a request naming another is from an earlier
  // client of the rank, which another has replaced (FromEarlierClient).
  std::string session;
  // Declared dead a moment ago (Membership::kWorkerDying): its requests are refused, its clock
  // and sums kept until the scheduler says which clock the servers agree it reached.
  bool dying = false;
  // Declared dead and waiting for a replacement (Membership::kWorkerReplacing): its requests are
  // refused until a new client says hello for the rank.
  bool replacing = false;
  // Whether the Clock that brought its current clock was settled (kFlagSettled).
  bool settled = false;
  // The clock this server had for it when its current client said hello: what that client sends
  // tagged below it, the client before already finished here (a push is answered and not
  // applied, a clock tick is answered).
  int64_t hello_clock = 0;
  // The membership version its current client said hello with.
  uint64_t hello_version = 0;
  // Per table, the pushes applied in its open clock (tables not under BSP, whose pushes are
  // applied as they come); and, after a replacement, how many of the new client's pushes at that
  // clock are its predecessor's again (the same step redone): answered, not applied, so each
  // push of a clock is applied once whoever sent it.
  std::map<uint32_t, int64_t> pushed_in_clock, redo;
  // The clock of a push this server refused, and why (clock -1: none). That clock's Clock is
  // refused in turn: a step with a push left out is not done (under BSP its mean would lack the
  // push, silently).
  struct RefusedPush {
    int64_t clock = -1;
    Status why;
  } refused_push;
};

// Is `h` from a client of a worker rank that another client has replaced since (its receive
// socket, named in every request, is not the one the rank's last Hello came from)? Its request
// ids are not the new client's: it is refused without a look at, or a mark in, the rank's record.
inline bool FromEarlierClient(const std::vector<WorkerState>& workers, const Header& h) {
  if (h.sender_rank < 0 || h.sender_rank >= static_cast<int>(workers.size())) return false;
  const std::string& session = workers[h.sender_rank].session;
  return !h.reply_to.empty() && !session.empty() && h.reply_to != session;
}

// Notes a push of `h`'s worker refused here (WorkerState::refused_push); other requests, and
// those of an earlier client, are left alone.
inline void NotePushRefused(std::vector<WorkerState>* workers, const Header& h, const Status& why) {
  if (h.type != MsgType::kPush || h.sender_role != Role::kWorker || h.sender_rank < 0 ||
      h.sender_rank >= static_cast<int>(workers->size()) || FromEarlierClient(*workers, h))
    return;
  (*workers)[h.sender_rank].refused_push = {h.clock, why};
}

}  // namespace pushpull::server
