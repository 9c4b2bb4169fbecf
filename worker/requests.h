// Request bookkeeping: what one request of a call is (Command: its header and frames, and the
// CallPart tracked until it is answered), the table of requests sent and not yet answered
// (RequestTable: by request id, with the payload they keep alive, which is what backpressure
// counts and what is sent again after a dropped connection), and the queue that hands requests
// from calling threads to the I/O thread (CommandQueue).
//
// Threading: RequestTable and CommandQueue may be used from any thread. Each has its own lock,
// held only inside its methods; both are leaves of the client's lock order (nothing else is taken
// while they are held): a request's FutureState is completed only once it is out of the table
// and the lock released (by the caller, or by FailTarget and FailAll after the lock).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/transport.h"
#include "common/wire.h"
#include "pushpull/status.h"
#include "worker/futures.h"

namespace pushpull {
namespace internal {

// The target of a request to the scheduler (server requests name the server's rank).
constexpr int kScheduler = -1;

// One server's (or the scheduler's) piece of a call, as it is tracked until answered.
struct CallPart {
  std::shared_ptr<FutureState> fs;
  int target = 0;  // server rank, or kScheduler
  MsgType reply_type = MsgType::kPushReply;
  bool bsp = false;                   // a push to a BSP table (its Clock() is settled)
  std::shared_ptr<PulledParts> view;  // a pull into a view (PullOptions::view): keep the frames here, at view_index
  size_t view_index = 0;
  float* out = nullptr;             // pulls: where row i of the reply goes ...
  std::vector<uint32_t> positions;  // ... out + positions[i]*dim, or out + i*dim when empty
  uint64_t rows = 0;
  uint32_t dim = 0;
  bool sparse = false;  // a keyed pull of a sparse table (may be answered by stripe)
  // Server requests: the frames as sent (sharing their buffers), to send again when a connection
  // to the server drops before the answer came (the server answers a repeat once).
  Frame sent_header, sent_keys, sent_values;
  bool unsent = false;  // held back (ZeroMQ could not take it, or one before it): sent once it can
  size_t bytes = 0;     // payload held for it (keys and values): counted against max_unanswered_mb
  uint64_t seq = 0;     // server requests: how many went to its server before it, and it
};

// A request as a calling thread makes it: sent by the calling thread (ServerLinks::Send) or
// handed to the I/O thread (CommandQueue).
struct Command {
  Header header;
  Frame keys, values;
  CallPart part;
  bool despite_sticky = false;  // a request to the scheduler sent after a sticky error (Leave)
};

// Whether a call's requests fit under the backpressure limits now (RequestTable::CheckRoom), and
// if not, what is short and the oldest request whose answer would make room.
struct Room {
  bool fits = false;
  int full = -1;  // a server with as many requests unanswered as its record of them keeps
  size_t held = 0;
  std::shared_ptr<FutureState> oldest;
};

// Requests sent (or held back) and not yet answered, by request id, oldest first, and the payload
// bytes they keep alive until answered (ClientOptions::max_unanswered_mb). Whoever takes a
// request out of the table completes it, once.
class RequestTable {
 public:
  using Map = std::map<uint64_t, CallPart>;

  void Add(uint64_t id, CallPart part) EXCLUDES(mu_);
  // Takes out a request whose send failed: true when it was still there (the caller completes
  // it), false when another thread took it first (and completes it).
  bool Remove(uint64_t id) EXCLUDES(mu_);
  void MarkUnsent(uint64_t id) EXCLUDES(mu_);
  // The state of an unanswered request; null when it is answered or failed.
  std::shared_ptr<FutureState> StateOf(uint64_t id) const EXCLUDES(mu_);

  // A reply from `from` (a server, or kScheduler) to request `id`: kTaken moves the request out
  // into *part; kUnknown: no such request unanswered; kOtherTarget: it went to *target, not to
  // `from` (left to its own reply).
  enum class Match { kTaken, kUnknown, kOtherTarget };
  Match TakeAnswered(uint64_t id, int from, CallPart* part, int* target) EXCLUDES(mu_);

  // Fails every request unanswered by `target`, or every one (FailAll), with `st`.
  void FailTarget(int target, const Status& st) EXCLUDES(mu_);
  void FailAll(const Status& st) EXCLUDES(mu_);
  // Takes out the scheduler's unanswered Done requests (their answer is no longer needed).
  std::vector<std::shared_ptr<FutureState>> TakeDoneRequests() EXCLUDES(mu_);
  // Takes out every request (the client closing); the caller fails them.
  Map TakeAll() EXCLUDES(mu_);

  // The states of the requests to servers unanswered (Finish waits for them).
  std::vector<std::shared_ptr<FutureState>> OpenToServers() const EXCLUDES(mu_);
  // The states of the pushes and of the clocks to servers unanswered (a settled Clock()).
  void OpenPushesAndClocks(std::vector<std::shared_ptr<FutureState>>* pushes,
                           std::vector<std::shared_ptr<FutureState>>* clocks) const EXCLUDES(mu_);

  size_t bytes() const EXCLUDES(mu_);       // payload unanswered
  size_t to_servers() const EXCLUDES(mu_);  // requests to any server (not the scheduler's)

  // While server s's answers may have been lost (ServerLinks::OnConnectionEvents: from a drop of
  // their connection until they have all been asked for again), its record of them must still
  // hold the oldest one unanswered: requests sent to s since it count against the record then.
  void Protect(int s, bool on) EXCLUDES(mu_);

  // Backpressure: whether `cmds` (one call's, server by server) fit now: their payload under
  // `limit` bytes with what is unanswered (0: no limit; a call fits alone whatever its size), and
  // no server they go to past kMaxUnansweredRequests unanswered, or sent past its oldest one
  // unanswered while it is protected.
  Room CheckRoom(const std::vector<std::unique_ptr<Command>>& cmds, size_t limit) const EXCLUDES(mu_);

  // Sending again: copies (sharing their buffers) of the frames of the requests to server s below
  // id `below`, oldest first; all of them, or only those held back (`unsent_only`). The sender
  // records each one's outcome.
  struct Resend {
    uint64_t id;
    std::array<Frame, 3> frames;
    std::shared_ptr<FutureState> fs;
    enum Outcome { kHeld, kWent, kGaveUp } outcome = kHeld;  // kHeld: ZeroMQ took no more
  };
  std::vector<Resend> CopyToResend(int s, bool unsent_only, uint64_t below) EXCLUDES(mu_);
  // After a pass over CopyToResend's list: marks what went and what is held back, and takes out
  // those whose callers gave up (their states into *failed, for the caller to fail). Returns
  // whether any request to s is still held back.
  bool AfterResend(int s, const std::vector<Resend>& again, std::vector<std::shared_ptr<FutureState>>* failed)
      EXCLUDES(mu_);

 private:
  // The table itself, with counts kept as requests come and go.
  class Pending {
   public:
    Map::iterator begin() { return m_.begin(); }
    Map::iterator end() { return m_.end(); }
    Map::const_iterator begin() const { return m_.begin(); }
    Map::const_iterator end() const { return m_.end(); }
    Map::iterator find(uint64_t id) { return m_.find(id); }
    Map::const_iterator find(uint64_t id) const { return m_.find(id); }
    size_t bytes() const { return bytes_; }
    size_t to_servers() const { return to_servers_; }
    size_t to_server(int s) const { return s >= 0 && size_t(s) < per_server_.size() ? per_server_[s] : 0; }
    void Protect(int s, bool on);
    // Requests sent to s after its oldest unanswered one, while s is protected; else 0.
    size_t SentPastOldest(int s) const;
    void emplace(uint64_t id, CallPart p);
    Map::iterator erase(Map::iterator it);
    Map TakeAll();

   private:
    void Grow(int s);
    Map m_;
    size_t bytes_ = 0;
    size_t to_servers_ = 0;
    std::vector<size_t> per_server_;
    std::vector<uint64_t> sent_;   // requests ever sent to each server (CallPart::seq)
    std::vector<bool> protected_;  // Protect()
  };

  mutable Mutex mu_;  // a leaf: nothing else is taken while it is held
  Pending pending_ GUARDED_BY(mu_);
};

// Requests a calling thread hands to the I/O thread (the scheduler's, whose socket that thread
// owns), in posting order: an in-process pipe that carries each Command's pointer. Post from any thread; Take on the
// I/O thread (or once it has stopped).
class CommandQueue {
 public:
  explicit CommandQueue(Transport& transport) : transport_(transport) {}
  Status Open();  // before any Post; binds the I/O thread's end
  void Post(std::unique_ptr<Command> c) EXCLUDES(mu_);
  std::unique_ptr<Command> Take() EXCLUDES(mu_);  // null when none is waiting
  Socket* socket_to_poll() { return in_.get(); }  // the I/O thread's end

 private:
  Mutex mu_;  // the sending end is used by any calling thread; a leaf
  Transport& transport_;
  std::unique_ptr<Socket> in_;    // the I/O thread's (or, once it has stopped, the closing client's)
  std::vector<Frame> in_frames_;  // Take's receive buffer, with in_
  std::unique_ptr<Socket> out_ GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace pushpull
