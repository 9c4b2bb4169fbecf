// Futures and pulled rows: the state of one call (FutureState), shared by the thread that made
// it, the threads that complete it and every Future copy that refers to it; the received frames
// a pull into a view (PullOptions::view) is read from in place (PulledParts); and how a waiting thread
// receives replies itself (Receiver, ReceiverHandle, WaitState). The public classes over them,
// Future and PulledRows (include/pushpull/client.h), are implemented in futures.cc.
//
// Threading:
//  - FutureState::mu guards a call's outcome. It is a leaf: nothing else is taken while it is
//    held. Complete() may run on any thread: a calling thread whose send failed, the thread that
//    receives the call's reply, the I/O thread failing calls.
//  - The fields of FutureState without GUARDED_BY are set before the state is shared (before its
//    first Future or request exists) and only read afterwards, without the lock.
//  - ReceiverHandle::mu is the lock of the client's reply socket: whoever holds it receives
//    replies (a waiting caller, through WaitState, or the I/O thread). It is taken before any
//    FutureState::mu and never while one is held.
//  - PulledParts: a part's frames are written by the thread that handles its reply, under the
//    pull's FutureState::mu, before `landed` counts them; the caller reads them only once every
//    part has landed (the pull's Future succeeded), then without a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>  // std::once_flag
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/transport.h"
#include "common/wire.h"
#include "pushpull/client.h"
#include "pushpull/status.h"

namespace pushpull {
namespace internal {

// The client side of "the waiter receives": a thread waiting on a Future takes the handle's `mu`
// (the reply socket's lock) and, while the client is open (`client` set), receives replies itself.
struct FutureState;
class Receiver {
 public:
  // Receives and handles replies for up to `ms` or until `fs` is done. Called with the handle's
  // mu held (the implementation asserts it: the analysis cannot follow the virtual call).
  virtual void ReceiveFor(const FutureState& fs, int64_t ms) = 0;

 protected:
  ~Receiver() = default;
};
struct ReceiverHandle {
  // The reply socket's lock. Lock order: after ControlCalls::finish_mu_; never held with
  // ServerLinks' send_mu; before the leaves (ClientState::mu, RequestTable's, FutureState::mu).
  Mutex mu;
  Receiver* client GUARDED_BY(mu) = nullptr;  // null once the client is closing
  std::atomic<bool> waiter_receiving{false};  // a waiting caller holds mu and receives
};
// How long a receiving waiter blocks in one receive before it looks again at its deadline (its
// call may also fail from the I/O thread, e.g. a server declared dead). Long enough that a large
// transfer does not wake it for nothing: each wake-up costs system calls and a context switch.
constexpr int64_t kReceiveSliceMs = 50;

// Waits for a call's answers; on expiry, with `abandon`, the waiter gives up on it (a pull's late
// reply is then not written to its destination); without, a later wait may still succeed.
// DeadlineExceeded names the call and whom it waits for. Any thread; takes the call's receiver
// lock (TryLock) and its mu, one at a time.
Status WaitState(const std::shared_ptr<FutureState>& s, int64_t timeout_ms, bool abandon);

// A client's count of the pulls given up because their last Future went before they completed
// (Future's destructor), shared with the state of every pull into the caller's memory, which may
// outlive the client: ClientStats::pulls_dropped, and whether the warning was logged.
struct DroppedPulls {
  std::atomic<uint64_t> count{0};
  std::atomic<bool> warned{false};
};

struct FutureState {
  // `parts`: the requests to answer; `targets`: the job's servers (waiting_on has one more entry,
  // the scheduler's). `receiver`: set for calls to servers (the waiter may receive their replies).
  FutureState(std::string what_, int parts, int64_t default_timeout, size_t targets,
              std::shared_ptr<ReceiverHandle> receiver_, Status status_ = Status::OK())
      : remaining(parts),
        remaining_hint(parts),
        status(std::move(status_)),
        what(std::move(what_)),
        waiting_on(targets + 1, 0),
        default_timeout_ms(default_timeout),
        receiver(std::move(receiver_)) {}

  Mutex mu;    // a leaf: nothing else is taken while it is held
  CondVar cv;  // signalled when remaining reaches 0
  int remaining GUARDED_BY(mu) = 0;
  std::atomic<int> remaining_hint{1};  // lock-free view of remaining, for the receiving waiter
  Status status GUARDED_BY(mu);
  // The first error an answer (or a refusal to send) gave, never the caller's giving up (a
  // settled Clock() looks at this).
  Status answered_status GUARDED_BY(mu);
  bool abandoned GUARDED_BY(mu) = false;  // the waiter gave up: never touch `out` again
  std::atomic<int> handles{0};            // Future copies that refer to it
  // A pull into the caller's memory: given up with its last Future, and counted here then.
  std::shared_ptr<DroppedPulls> dropped;
  int32_t staleness GUARDED_BY(mu) = 0;
  // What the call was, for errors: `what`, or else what_kind, what_table and what_rows, spelled
  // out only when needed (What()), so that no call pays an allocation for it.
  std::string what GUARDED_BY(mu);  // "clock 5", "create table 'w'" (a Clock's is set as it is sent)
  const char* what_kind = "";       // "pull from table"
  std::string what_table;
  int64_t what_rows = -1;
  std::vector<uint32_t> waiting_on GUARDED_BY(mu);  // parts unanswered per server (last entry: the scheduler)
  const int64_t default_timeout_ms = 0;
  Header reply GUARDED_BY(mu);  // control replies (CreateTable)
  const std::shared_ptr<ReceiverHandle> receiver;

  std::string What() const REQUIRES(mu) {
    if (!what.empty()) return what;
    std::string s = std::string(what_kind) + " '" + what_table + "'";
    if (what_rows >= 0) s += " (" + std::to_string(what_rows) + " rows)";
    return s;
  }

  // One part answered (target: the server, or kScheduler), with `st`.
  void Complete(int target, const Status& st, int32_t stale = 0) EXCLUDES(mu);
};

// The received value frames of a pull into a view (PullOptions::view), keyed or dense: per request ("server part": a
// server's part of the pull; of a dense one a block, of a sparse one up to a block's keys), in
// row order, the frames of its reply (one per stripe of its rows: of a dense pull in row order,
// of a keyed one over several stripes each stripe's rows in turn, see key_of_row).
struct PulledParts {
  std::vector<std::vector<Frame>> frames;  // [server part][frame]
  std::vector<uint64_t> first_row;         // [server part] its first row (see positions)
  // Keyed: [server part] the key index of each row it holds; empty: consecutive key indices from
  // first_row[part] (keys in server order, GroupByServer).
  std::vector<std::vector<uint32_t>> positions;
  // Keyed: [server part] which of its keys each reply row is, for a reply of several stripes
  // (kFlagByStripe); empty: in key order.
  std::vector<std::vector<uint32_t>> key_of_row;
  bool keyed = false;
  size_t rows = 0;
  uint32_t dim = 0;
  std::atomic<size_t> landed{0};  // server parts whose reply is in `frames`
  std::string refused;            // the pull failed before it was sent: why

  // Read only once every part landed (the pull succeeded): the lists below are made once.
  void CheckComplete() const;

  // Every frame in row order with the first row it holds, listed on first use (the pull is done
  // by then: PulledRows is read only after its Future).
  struct Part {
    const Frame* frame;
    uint64_t first_row;
  };
  const std::vector<Part>& Parts() const;
  // Where row i is; nullptr when no frame holds it. Keyed pulls list every row on first use (one
  // pointer per key).
  const float* Row(size_t i) const;

 private:
  mutable std::once_flag listed_, indexed_;
  mutable std::vector<Part> parts_;
  mutable std::vector<const float*> rows_;
};

}  // namespace internal

// Lets the client fill a PulledRows without making its internals public.
class ClientAccess {
 public:
  static std::shared_ptr<internal::PulledParts>& parts(PulledRows* r) { return r->p_; }
};

}  // namespace pushpull
