// What became of one worker's requests to this server, by request id, so that a request the worker
// sends again is answered once and never run twice. A worker sends its unanswered requests to a
// server again when a connection to it dropped (the request, or its answer, may have been lost
// with it: worker/server_links.cc); a repeat of one the server has
// - answered: gets that answer again, if a push or a clock; a pull is served again (it changes
//   nothing), however far its worker's clock has moved since;
// - in progress: is dropped (the answer is on its way);
// - never seen: is run, as any new request;
// - forgotten (older than the last kKept requests answered): the server decides by its type
//   (RequestLoop::LookUpRepeat, server/request_loop.h: a pull is served again, a clock answered
//   by the worker's clock, a push refused).
//
// Threading: used by the server's I/O thread only (one per worker, in WorkerState).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "common/wire.h"
#include "pushpull/status.h"

namespace pushpull::server {

class RequestRecord {
 public:
  static constexpr size_t kKept = kMaxUnansweredRequests;  // (a client never has more unanswered here)

  struct Answer {
    MsgType type = MsgType::kPushReply;  // kPullReply: served again when asked again
    uint32_t table = 0;
    int64_t clock = 0;
    Code code = Code::kOk;
    std::string error;
  };
  enum class Seen { kNew, kInProgress, kAnswered, kForgotten };

  // *answer: set for kAnswered.
  Seen Look(uint64_t id, const Answer** answer) const {
    auto it = entries_.find(id);
    if (it == entries_.end()) return id < forgotten_below_ ? Seen::kForgotten : Seen::kNew;
    if (!it->second.done) return Seen::kInProgress;
    *answer = &it->second.answer;
    return Seen::kAnswered;
  }
  // A new request, or an answered pull served again: in progress.
  void Begin(uint64_t id) { entries_[id].done = false; }
  // The answer sent for a request in progress (others are left alone).
  void End(uint64_t id, Answer a) {
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.done) return;
    it->second.done = true;
    it->second.answer = std::move(a);
    // Oldest answers first; one still in progress stops the trim (the record grows past the
    // limit only while it waits), up to twice the limit (one that never got its answer).
    while (entries_.size() > kKept && (entries_.begin()->second.done || entries_.size() > 2 * kKept)) {
      forgotten_below_ = std::max(forgotten_below_, entries_.begin()->first + 1);  // (a pull served again may be older)
      entries_.erase(entries_.begin());
    }
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    bool done = false;
    Answer answer;
  };
  std::map<uint64_t, Entry> entries_;
  uint64_t forgotten_below_ = 0;
};

}  // namespace pushpull::server
