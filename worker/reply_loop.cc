// The I/O thread and reply handling. Threading: see worker/reply_loop.h.

#include "worker/reply_loop.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/time.h"

namespace pushpull {
namespace internal {
namespace {

// Replies nobody waits for are drained every kDrainMs while requests to servers are open and no
// waiting caller receives, and within kIdleDrainMs otherwise.
constexpr int64_t kDrainMs = 2;
constexpr int64_t kIdleDrainMs = 10;

// A keyed pull's reply of several stripes (kFlagByStripe): each stripe's rows in turn, each in
// the request's key order. Which of the request's keys each reply row is.
Status KeysOfStripeRows(const Message& m, const CallPart& part, std::vector<uint32_t>* key_of_row) {
  const Header& h = m.header;
  const size_t n = part.sent_keys.size() / sizeof(Key);
  auto unfit = [&](const std::string& why) {
    return Status::Corruption("pull reply by stripe of " + std::to_string(h.row_begin) +
                              " stripes does not fit its request: " + why);
  };
  if (!part.sparse || (h.flags & kFlagRange) || n != part.rows || h.row_begin < 2 || h.row_begin > kMaxValueFrames)
    return unfit("not a keyed pull of a sparse table, or no such stripe count");
  const int stripes = static_cast<int>(h.row_begin);
  const char* keys = static_cast<const char*>(part.sent_keys.data());  // (a small frame may sit unaligned)
  std::vector<uint8_t> stripe_of(n);
  std::vector<uint32_t> first(stripes + 1, 0);
  for (size_t j = 0; j < n; ++j) {
    Key k;
    std::memcpy(&k, keys + j * sizeof(Key), sizeof(Key));
    ++first[(stripe_of[j] = static_cast<uint8_t>(TableInfo::SparseStripeOf(k, stripes))) + 1];
  }
  // A frame a stripe with rows, in stripe order, each of its rows.
  size_t frame = 0;
  for (int s = 0; s < stripes; ++s) {
    if (first[s + 1] == 0) continue;
    if (frame >= m.num_value_frames() || m.value_frame(frame).size() != first[s + 1] * size_t(part.dim) * sizeof(float))
      return unfit("its frames are not the stripes' rows");
    ++frame;
  }
  if (frame != m.num_value_frames()) return unfit("more frames than stripes with rows");
  for (int s = 0; s < stripes; ++s) first[s + 1] += first[s];
  key_of_row->resize(n);
  for (size_t j = 0; j < n; ++j) (*key_of_row)[first[stripe_of[j]]++] = static_cast<uint32_t>(j);
  return Status::OK();
}

std::string NodeName(int target) {
  return target == kScheduler ? std::string("the scheduler") : "server " + std::to_string(target);
}

}  // namespace

ReplyLoop::ReplyLoop(Transport& transport, ControlChannel& control, ClientState& state, RequestTable& requests,
                     ServerLinks& links, ControlCalls& control_calls, CommandQueue& queue)
    : transport_(transport),
      control_(control),
      state_(state),
      requests_(requests),
      links_(links),
      control_calls_(control_calls),
      queue_(queue) {}

void ReplyLoop::Start() {
  io_ = std::thread([this] { IoLoop(); });
}

void ReplyLoop::Stop() {
  stop_ = true;
  if (io_.joinable()) io_.join();
}

void ReplyLoop::FailUnsent(const Status& st) {
  while (std::unique_ptr<Command> c = queue_.Take()) c->part.fs->Complete(c->part.target, st);
}

void ReplyLoop::IoLoop() {
  SetThreadName("pp-client-io");
  std::vector<PollItem> items;
  while (!stop_) {
    // The control socket, commands, then the connection watches (ServerLinks replaces a request
    // socket's with the socket).
    items.assign({PollItem(&control_.socket()), PollItem(queue_.socket_to_poll())});
    links_.AddWatches(&items);
    // Replies nobody waits for (a push never waited on) are drained every kDrainMs while requests
    // to servers are open and no waiting caller receives, and within kIdleDrainMs otherwise. (Not
    // for the scheduler's, which come on its socket, polled here: a Barrier() or Checkpoint()
    // waiting minutes for the others must not wake this thread every 2 ms.)
    int64_t timeout = std::min<int64_t>(control_.MsUntilTick(), kIdleDrainMs);
    if (!links_.receiver()->waiter_receiving.load(std::memory_order_relaxed) && requests_.to_servers() > 0)
      timeout = std::min<int64_t>(timeout, kDrainMs);
    transport_.Poll(items.data(), items.size(), timeout);
    links_.OnConnectionEvents(&items[2], stop_);
    links_.ReplaceDueTx(stop_);
    links_.FlushHeld();
    if (items[1].ready) {
      for (int i = 0; i < 1024; ++i) {
        std::unique_ptr<Command> c = queue_.Take();
        if (!c) break;
        control_calls_.SendToScheduler(std::move(c));  // (the queue carries the scheduler's requests only)
        if (control_.MsUntilTick() == 0) control_.Tick().IgnoreError();
      }
    }
    if (links_.rx_mu().TryLock()) {  // else a waiting caller is receiving
      DrainRx();
      links_.rx_mu().Unlock();
    }
    if (items[0].ready) {
      for (int i = 0; i < 64; ++i) {
        Message m;
        bool changed = false;
        bool got = control_.Receive(&m, &changed);
        if (changed) control_calls_.OnMembership();
        if (got) HandleReply(m, kScheduler);
        PollItem it(&control_.socket());
        transport_.Poll(&it, 1, 0);
        if (!it.ready) break;
      }
    }
    Status st = control_.Tick();
    if (!st.ok()) FailAll(state_, requests_, st);
    if (control_calls_.has_requests()) control_calls_.ResendRequests();
  }
}

void ReplyLoop::ReceiveFor(const FutureState& fs, int64_t ms) {
  // WaitState holds the reply socket's lock, through the handle the Future shares.
  links_.rx_mu().AssertHeld();
  const Deadline deadline = Deadline::In(ms);
  // One blocking receive per reply: ZeroMQ sleeps on the socket's signal and reads the reply (a
  // poll followed by a receive costs twice the system calls). No spinning: on a busy machine a
  // spinning waiter takes the CPU from the threads that would answer it (measured with the
  // transport bench's latency cases).
  while (fs.remaining_hint.load(std::memory_order_acquire) > 0) {
    if (!ReceiveOne(deadline.RemainingMs())) return;  // slice over
    if (deadline.Expired()) return;
  }
}

bool ReplyLoop::ReceiveOne(int64_t wait_ms) {
  if (!links_.ReceiveFrames(wait_ms)) return false;
  Message m;
  bool header_ok = false;
  Status st = links_.DecodeReceived(&m, &header_ok);
  const int from = header_ok && m.header.sender_role == Role::kServer ? m.header.sender_rank : -1;
  if (from < 0 || from >= links_.num_servers()) {
    PP_LOG(Warning) << "reply dropped: " << (st.ok() ? "it names no server of this job" : st.ToString());
    return true;
  }
  if (!st.ok()) {
    PP_LOG(Warning) << "malformed reply from server " << from << ": " << st.ToString();
    // If it can be matched to a request, fail that request now rather than at its deadline.
    CallPart part;
    int target = 0;
    if (requests_.TakeAnswered(m.header.request_id, from, &part, &target) == RequestTable::Match::kTaken)
      part.fs->Complete(from, st.Annotate("reply from server " + std::to_string(from)));
    return true;
  }
  HandleReply(m, from);
  return true;
}

void ReplyLoop::DrainRx() {
  for (int i = 0; i < 256 && ReceiveOne(0); ++i) {
  }
}

void ReplyLoop::HandleReply(Message& m, int from) {
  CallPart part;
  int target = 0;
  switch (requests_.TakeAnswered(m.header.request_id, from, &part, &target)) {
    case RequestTable::Match::kTaken: break;
    case RequestTable::Match::kUnknown:
      PP_LOG(Debug) << "reply " << m.header.request_id << " matches no request";
      return;
    case RequestTable::Match::kOtherTarget:
      // Not the answer of the node it was sent to: leave the request to its own reply.
      PP_LOG(Warning) << NodeName(from) << " answered request " << m.header.request_id << ", which went to "
                      << NodeName(target) << "; reply dropped";
      return;
  }
  const Header& h = m.header;
  if (h.type != part.reply_type) {
    part.fs->Complete(part.target, Status::Corruption(std::string("expected ") + MsgTypeName(part.reply_type) +
                                                      ", got " + MsgTypeName(h.type)));
    return;
  }
  if (h.status != Code::kOk) {
    Status st = h.status_obj().Annotate(from == kScheduler ? "scheduler" : "server " + std::to_string(from));
    if (from != kScheduler) {
      MutexLock l(&state_.mu);
      if (!state_.sticky.ok()) {
        // A server refuses what follows a refusal (the Clock() of a step whose push it refused,
        // then the pulls tagged with a clock it never counted): the first refusal says why, and
        // the caller hears that, not "pull tagged clock 3 but worker 0 is at clock 2".
        st = state_.sticky;
      } else if (h.type == MsgType::kPushReply || h.type == MsgType::kClockReply) {
        // A refused push leaves its step undone (the app may never look at its Future): every
        // later call fails with its reason, rather than the job failing later with another.
        state_.sticky = st;
      }
    }
    part.fs->Complete(part.target, st);
    return;
  }
  if (h.type == MsgType::kPullReply) {
    if (h.row_count() != part.rows || h.dim != part.dim) {
      part.fs->Complete(part.target,
                        Status::Corruption("pull reply has " + std::to_string(h.row_count()) + " rows of dim " +
                                           std::to_string(h.dim) + ", expected " + std::to_string(part.rows) +
                                           " of dim " + std::to_string(part.dim)));
      return;
    }
    const size_t nbytes = m.value_bytes();
    // A keyed reply of several stripes: which of the request's keys each reply row is.
    std::vector<uint32_t> key_of_row;
    if (h.flags & kFlagByStripe) {
      Status st = KeysOfStripeRows(m, part, &key_of_row);
      if (!st.ok()) {
        part.fs->Complete(part.target, st);
        return;
      }
    }
    {
      MutexLock l(&part.fs->mu);
      if (!part.fs->abandoned) {
        if (part.view) {
          // Kept, not copied.
          std::vector<Frame>& keep = part.view->frames[part.view_index];
          keep.clear();
          for (size_t fi = 0; fi < m.num_value_frames(); ++fi) keep.push_back(std::move(m.value_frame(fi)));
          if (part.view->keyed) part.view->key_of_row[part.view_index] = std::move(key_of_row);
          part.view->landed.fetch_add(1, std::memory_order_acq_rel);
        } else {
          // Row i of the reply (counted over its frames, each whole rows) is key k = i, or
          // key_of_row[i], of the request: it goes to out + positions[k] * dim, or out + k * dim.
          const size_t row_floats = part.dim;
          size_t i = 0;
          for (size_t fi = 0; fi < m.num_value_frames(); ++fi) {
            const Frame& f = m.value_frame(fi);
            const float* src = static_cast<const float*>(f.data());
            const size_t rows = row_floats ? f.size() / sizeof(float) / row_floats : 0;
            if (part.positions.empty() && key_of_row.empty()) {
              std::memcpy(part.out + i * row_floats, src, f.size());
            } else {
              for (size_t j = 0; j < rows; ++j) {
                const size_t k = key_of_row.empty() ? i + j : key_of_row[i + j];
                const size_t to = part.positions.empty() ? k : part.positions[k];
                std::memcpy(part.out + to * row_floats, src + j * row_floats, row_floats * sizeof(float));
              }
            }
            i += rows;
          }
        }
      }
    }
    {
      MutexLock l(&state_.mu);
      state_.stats.bytes_received += nbytes;
      if (h.staleness > state_.stats.max_staleness) state_.stats.max_staleness = h.staleness;
    }
    part.fs->Complete(part.target, Status::OK(), h.staleness);
    return;
  }
  if (from == kScheduler) {
    MutexLock l(&part.fs->mu);
    part.fs->reply = h;
  }
  part.fs->Complete(part.target, Status::OK());
}

}  // namespace internal
}  // namespace pushpull
