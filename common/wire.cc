#include "common/wire.h"

#include <cereal/archives/binary.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <istream>
#include <limits>
#include <random>
#include <sstream>
#include <streambuf>
#include <type_traits>

#include "common/serialize.h"

namespace pushpull {
namespace {

struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads a Cereal archive straight out of a frame, no copy.
class FrameBuf : public std::streambuf {
 public:
  FrameBuf(const void* p, size_t n) {
    char* c = const_cast<char*>(static_cast<const char*>(p));
    setg(c, c, c + n);
  }
  size_t remaining() const { return static_cast<size_t>(egptr() - gptr()); }
};

template <class Ar>
void SaveString(Ar& ar, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  ar(n);
  ar(cereal::binary_data(s.data(), n));
}
// Checks a claimed length against a bound and the bytes left before allocating anything.
template <class Buf>
void CheckLength(uint64_t n, uint64_t elem, uint64_t max, const Buf& buf, const char* what) {
  if (n > max)
    throw WireError(std::string(what) + " claims " + std::to_string(n) + " elements, more than the limit " +
                    std::to_string(max));
  if (n * elem > buf.remaining())
    throw WireError(std::string(what) + " claims " + std::to_string(n * elem) + " bytes but only " +
                    std::to_string(buf.remaining()) + " remain");
}
template <class Ar, class Buf>
void LoadString(Ar& ar, const Buf& buf, std::string& s, uint32_t max, const char* what) {
  uint32_t n = 0;
  ar(n);
  CheckLength(n, 1, max, buf, what);
  s.resize(n);
  if (n) ar(cereal::binary_data(&s[0], n));
}
template <class Ar, class T>
void SavePodVector(Ar& ar, const std::vector<T>& v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  ar(n);
  if (n) ar(cereal::binary_data(v.data(), n * sizeof(T)));
}
template <class T>
void LoadPodVector(cereal::BinaryInputArchive& ar, const FrameBuf& buf, std::vector<T>& v, uint32_t max,
                   const char* what) {
  uint32_t n = 0;
  ar(n);
  CheckLength(n, sizeof(T), max, buf, what);
  v.resize(n);
  if (n) ar(cereal::binary_data(v.data(), n * sizeof(T)));
}

template <class Ar>
void SaveSpec(Ar& ar, const TableSpec& s) {
  SaveString(ar, s.name);
  ar(s.sparse, s.rows, s.dim, s.init, s.init_scale, s.seed, s.glorot_bias_columns);
  ar(s.optimizer, s.consistency);
}
void LoadSpec(cereal::BinaryInputArchive& ar, const FrameBuf& buf, TableSpec& s) {
  LoadString(ar, buf, s.name, 128, "table name");
  uint8_t sparse = 0;  // a bool's byte: 0 or 1, checked before it becomes one
  ar(sparse, s.rows, s.dim, s.init, s.init_scale, s.seed, s.glorot_bias_columns);
  if (sparse > 1) throw std::runtime_error("table spec: the sparse byte holds " + std::to_string(sparse));
  s.sparse = sparse;
  ar(s.optimizer, s.consistency);
}

// The fixed fields every header starts with after magic and version, in wire order.
template <class H, class F>
void FixedFields(H& h, F&& f) {
  f(h.type, h.flags, h.request_id, h.sender_role, h.sender_rank, h.table, h.clock, h.num_keys, h.dim, h.row_begin,
    h.num_rows, h.slot, h.staleness, h.status);
}

// Checkpoint files keep each table's description as the CreateTable message that made it: those
// written since version 3 (the first with checkpoints) are read whatever the version now, while
// live peers must match it exactly. Version 5 added push_norm after the fixed fields; the rest
// of a CreateTable has not changed since 3.
constexpr uint16_t kPushNormSince = 5;

// What every message's header carries; data messages (push, pull and their replies) carry
// nothing else.
template <class Ar>
void SaveCommon(Ar& ar, const Header& h) {
  ar(h.magic, h.version);
  FixedFields(h, ar);
  ar(h.push_norm);
  SaveString(ar, h.error);
  if (IsDataType(h.type) && !IsReply(h.type)) SaveString(ar, h.reply_to);
}

// Data-message headers are the hot path: they are packed by hand into exactly the bytes Cereal's
// binary archive writes (each field's bytes in order, a string as a u32 length and its bytes),
// without the stream machinery Cereal needs (a std::ostringstream per message: locale set-up,
// dynamic_casts, an allocation), which cost more than the rest of a small request's handling.
// Control messages, with their nested structures, go through Cereal. One wire format.
class PodWriter {
 public:
  explicit PodWriter(char* out) : p_(out) {}  // nullptr: count only
  template <class... T>
  void operator()(const T&... v) {
    (Put(v), ...);
  }
  size_t size() const { return n_; }

 private:
  template <class T>
  void Put(const T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "plain fields only");
    Bytes(&v, sizeof v);
  }
  template <class T>
  void Put(const cereal::BinaryData<T>& b) {
    Bytes(b.data, b.size);
  }
  void Bytes(const void* src, size_t n) {
    if (p_) std::memcpy(p_ + n_, src, n);
    n_ += n;
  }
  char* p_;
  size_t n_ = 0;
};

class PodReader {
 public:
  PodReader(const void* p, size_t n) : p_(static_cast<const char*>(p)), left_(n) {}
  template <class... T>
  void operator()(T&&... v) {
    (Get(v), ...);
  }
  size_t remaining() const { return left_; }

 private:
  template <class T>
  void Get(T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "plain fields only");
    Bytes(&v, sizeof v);
  }
  template <class T>
  void Get(cereal::BinaryData<T>& b) {
    Bytes(b.data, b.size);
  }
  void Bytes(void* dst, size_t n) {
    if (n > left_)
      throw WireError("header ends early: " + std::to_string(n) + " bytes wanted, " + std::to_string(left_) + " left");
    std::memcpy(dst, p_, n);
    p_ += n;
    left_ -= n;
  }
  const char* p_;
  size_t left_;
};

template <class Ar>
void SaveBody(Ar& ar, const Header& h) {
  SaveCommon(ar, h);
  switch (h.type) {
    case MsgType::kRegister:
    case MsgType::kCheckpoint: SaveString(ar, h.address); break;
    case MsgType::kRegisterReply:
    case MsgType::kMembership:
      if (h.type == MsgType::kRegisterReply) {
        ar(h.cluster.num_workers);
        uint32_t n = static_cast<uint32_t>(h.cluster.servers.size());
        ar(n);
        for (const auto& s : h.cluster.servers) {
          ar(s.rank);
          SaveString(ar, s.address);
        }
        ar(h.cluster.start_clock);
        SaveString(ar, h.cluster.restore_from);
        ar(static_cast<uint8_t>(h.cluster.checkpoints));
        SaveString(ar, h.cluster.restore_run);
        ar(static_cast<uint8_t>(h.cluster.survives_worker_death));
        ar(h.cluster.checkpoint_timeout_ms);
      }
      ar(h.membership.version, h.membership.job_state);
      SavePodVector(ar, h.membership.worker_alive);
      SavePodVector(ar, h.membership.server_alive);
      SavePodVector(ar, h.membership.worker_done);
      SavePodVector(ar, h.membership.worker_last_clock);
      SaveString(ar, h.membership.reason);
      break;
    case MsgType::kCreateTable:
    case MsgType::kCreateTableReply:
      SaveSpec(ar, h.spec);
      ar(h.info.id);
      SaveSpec(ar, h.info.spec);
      SavePodVector(ar, h.info.row_offsets);
      SavePodVector(ar, h.info.bucket_owner);
      break;
    case MsgType::kWorkerClocks:
      SavePodVector(ar, h.worker_clocks);
      SavePodVector(ar, h.worker_settled);
      break;
    default: break;
  }
}

template <class Ar, class Buf>
void LoadCommon(Ar& ar, const Buf& buf, Header& h, uint16_t oldest) {
  ar(h.magic, h.version);
  if (h.magic != kWireMagic) throw WireError("bad magic (not a pushpull message)");
  if (h.version > kWireVersion || h.version < oldest)
    throw WireError("protocol version " + std::to_string(h.version) + ", expected " +
                    (oldest == kWireVersion ? "" : std::to_string(oldest) + " to ") + std::to_string(kWireVersion));
  FixedFields(h, ar);
  if (h.version >= kPushNormSince) ar(h.push_norm);
  if (uint8_t(h.status) > uint8_t(Code::kLastCode)) throw WireError("unknown status code");
  if (uint8_t(h.sender_role) > uint8_t(Role::kWorker)) throw WireError("unknown sender role");
  LoadString(ar, buf, h.error, kMaxErrorText, "error text");
  if (IsDataType(h.type) && !IsReply(h.type)) LoadString(ar, buf, h.reply_to, 255, "reply_to");
}

void LoadBody(cereal::BinaryInputArchive& ar, const FrameBuf& buf, Header& h, uint16_t oldest) {
  LoadCommon(ar, buf, h, oldest);
  switch (h.type) {
    case MsgType::kRegister: LoadString(ar, buf, h.address, 256, "address"); break;
    case MsgType::kCheckpoint: LoadString(ar, buf, h.address, 4096, "checkpoint directory"); break;
    case MsgType::kRegisterReply:
    case MsgType::kMembership:
      if (h.type == MsgType::kRegisterReply) {
        ar(h.cluster.num_workers);
        // (Every node sizes its per-worker state by it: a count no job can have is refused here.)
        if (h.cluster.num_workers < 0 || h.cluster.num_workers > int32_t(kMaxNodes))
          throw WireError("worker count " + std::to_string(h.cluster.num_workers) + " is not in [0, " +
                          std::to_string(kMaxNodes) + "]");
        uint32_t n = 0;
        ar(n);
        CheckLength(n, 8, kMaxNodes, buf, "server list");
        h.cluster.servers.resize(n);
        for (auto& s : h.cluster.servers) {
          ar(s.rank);
          LoadString(ar, buf, s.address, 256, "server address");
        }
        ar(h.cluster.start_clock);
        LoadString(ar, buf, h.cluster.restore_from, 4096, "checkpoint directory");
        uint8_t checkpoints = 0;
        ar(checkpoints);
        if (checkpoints > 1) throw WireError("checkpoints flag " + std::to_string(checkpoints) + " is not a bool");
        h.cluster.checkpoints = checkpoints != 0;
        LoadString(ar, buf, h.cluster.restore_run, kMaxRunText, "run description");
        uint8_t survives = 0;
        ar(survives);
        if (survives > 1) throw WireError("survives_worker_death flag " + std::to_string(survives) + " is not a bool");
        h.cluster.survives_worker_death = survives != 0;
        ar(h.cluster.checkpoint_timeout_ms);
        if (h.cluster.checkpoint_timeout_ms < 0)
          throw WireError("checkpoint timeout " + std::to_string(h.cluster.checkpoint_timeout_ms) + " ms is negative");
      }
      ar(h.membership.version, h.membership.job_state);
      if (h.membership.job_state > Membership::kAborted)
        throw WireError("job state " + std::to_string(int(h.membership.job_state)) + " is unknown");
      LoadPodVector(ar, buf, h.membership.worker_alive, kMaxNodes, "worker list");
      for (uint8_t state : h.membership.worker_alive)
        if (state > Membership::kWorkerDying) throw WireError("worker state " + std::to_string(state) + " is unknown");
      LoadPodVector(ar, buf, h.membership.server_alive, kMaxNodes, "server list");
      LoadPodVector(ar, buf, h.membership.worker_done, kMaxNodes, "done list");
      LoadPodVector(ar, buf, h.membership.worker_last_clock, kMaxNodes, "last clock list");
      LoadString(ar, buf, h.membership.reason, kMaxErrorText, "reason");
      break;
    case MsgType::kCreateTable:
    case MsgType::kCreateTableReply:
      LoadSpec(ar, buf, h.spec);
      ar(h.info.id);
      LoadSpec(ar, buf, h.info.spec);
      LoadPodVector(ar, buf, h.info.row_offsets, kMaxNodes + 1, "row offsets");
      LoadPodVector(ar, buf, h.info.bucket_owner, TableInfo::kBuckets, "bucket map");
      break;
    case MsgType::kWorkerClocks:
      LoadPodVector(ar, buf, h.worker_clocks, kMaxNodes, "worker clocks");
      LoadPodVector(ar, buf, h.worker_settled, kMaxNodes, "worker settled flags");
      if (h.worker_settled.size() != h.worker_clocks.size())
        throw WireError(std::to_string(h.worker_clocks.size()) + " worker clocks but " +
                        std::to_string(h.worker_settled.size()) + " settled flags");
      break;
    default: break;
  }
}

bool KnownType(MsgType t) {
  uint8_t v = static_cast<uint8_t>(t);
  return (v >= 1 && v <= 14) || (v >= 20 && v <= 27);
}

}  // namespace

const char* MsgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kRegister: return "Register";
    case MsgType::kRegisterReply: return "RegisterReply";
    case MsgType::kHeartbeat: return "Heartbeat";
    case MsgType::kMembership: return "Membership";
    case MsgType::kCreateTable: return "CreateTable";
    case MsgType::kCreateTableReply: return "CreateTableReply";
    case MsgType::kBarrier: return "Barrier";
    case MsgType::kBarrierReply: return "BarrierReply";
    case MsgType::kDone: return "Done";
    case MsgType::kDoneReply: return "DoneReply";
    case MsgType::kCheckpoint: return "Checkpoint";
    case MsgType::kCheckpointReply: return "CheckpointReply";
    case MsgType::kWorkerClocks: return "WorkerClocks";
    case MsgType::kNodeExited: return "NodeExited";
    case MsgType::kPush: return "Push";
    case MsgType::kPushReply: return "PushReply";
    case MsgType::kPull: return "Pull";
    case MsgType::kPullReply: return "PullReply";
    case MsgType::kClock: return "Clock";
    case MsgType::kClockReply: return "ClockReply";
    case MsgType::kHello: return "Hello";
    case MsgType::kHelloReply: return "HelloReply";
  }
  return "Unknown";
}

bool IsDataType(MsgType t) { return static_cast<uint8_t>(t) >= 20; }
bool IsReply(MsgType t) {
  switch (t) {
    case MsgType::kRegisterReply:
    case MsgType::kCreateTableReply:
    case MsgType::kBarrierReply:
    case MsgType::kDoneReply:
    case MsgType::kCheckpointReply:
    case MsgType::kPushReply:
    case MsgType::kPullReply:
    case MsgType::kClockReply:
    case MsgType::kHelloReply: return true;
    default: return false;
  }
}

void Header::SetStatus(const Status& s) {
  status = s.code();
  error = s.message().substr(0, kMaxErrorText);
}

std::string EncodeHeaderCereal(const Header& h) {
  std::ostringstream os(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(os);
    SaveBody(ar, h);
  }
  return os.str();
}

Frame EncodeHeaderFrame(const Header& h) {
  if (!IsDataType(h.type)) {
    std::string e = EncodeHeaderCereal(h);
    return Frame(e.data(), e.size());
  }
  PodWriter count(nullptr);
  SaveCommon(count, h);
  Frame m(count.size());
  PodWriter w(static_cast<char*>(m.data()));
  SaveCommon(w, h);
  return m;
}

std::string EncodeHeader(const Header& h) {
  Frame m = EncodeHeaderFrame(h);
  return std::string(static_cast<const char*>(m.data()), m.size());
}

Status DecodeHeader(const void* data, size_t size, Header* h, uint16_t oldest_version) {
  if (size > kMaxHeaderBytes)
    return Status::Corruption("header frame of " + std::to_string(size) + " bytes exceeds " +
                              std::to_string(kMaxHeaderBytes));
  // Data messages (the type is the byte after magic and version) are read by hand, the rest
  // through Cereal; both read the same format.
  constexpr size_t kTypeAt = sizeof(h->magic) + sizeof(h->version);
  size_t remaining = 0;
  try {
    if (size > kTypeAt && IsDataType(static_cast<MsgType>(static_cast<const uint8_t*>(data)[kTypeAt]))) {
      PodReader r(data, size);
      LoadCommon(r, r, *h, oldest_version);
      remaining = r.remaining();
    } else {
      FrameBuf buf(data, size);
      std::istream is(&buf);
      cereal::BinaryInputArchive ar(is);
      LoadBody(ar, buf, *h, oldest_version);
      remaining = buf.remaining();
    }
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("header does not decode: ") + e.what());
  }
  if (remaining != 0) return Status::Corruption("header has " + std::to_string(remaining) + " trailing bytes");
  if (!KnownType(h->type)) return Status::Corruption("unknown message type " + std::to_string(int(h->type)));
  return Status::OK();
}

Status Decode(std::vector<Frame>* frames, Message* out, bool* header_ok) {
  if (header_ok) *header_ok = false;
  if (frames->empty()) return Status::Corruption("empty message");
  Status st = DecodeHeader((*frames)[0].data(), (*frames)[0].size(), &out->header);
  if (!st.ok()) return st;
  if (header_ok) *header_ok = true;
  const Header& h = out->header;
  const size_t want = IsDataType(h.type) ? 3 : 1;
  // Only a successful pull reply may split its values over more frames.
  const size_t most = h.type == MsgType::kPullReply && h.status == Code::kOk ? kMaxDataFrames : want;
  if (frames->size() < want || frames->size() > most)
    return Status::Corruption(std::string(MsgTypeName(h.type)) + " needs " + std::to_string(want) +
                              (most > want ? " to " + std::to_string(most) : std::string()) + " frames, got " +
                              std::to_string(frames->size()));
  if (want == 1) return Status::OK();
  // A status is what a reply says; a data request carries none. (An error reply carries no
  // values: a request that claimed a status would so pass with none behind its row count.)
  if (!IsReply(h.type) && h.status != Code::kOk)
    return Status::Corruption(std::string(MsgTypeName(h.type)) + " request carries status " +
                              std::to_string(int(h.status)) + "; only replies carry one");
  if (!(h.push_norm == -1.0f || (std::isfinite(h.push_norm) && h.push_norm >= 0.0f)))
    return Status::Corruption("push norm " + std::to_string(h.push_norm) + " is neither -1 nor a finite norm");
  const uint8_t flags_known = kFlagRange | (h.type == MsgType::kPush ? kFlagContinues : 0) |
                              (h.type == MsgType::kClock ? kFlagSettled : 0) |
                              (h.type == MsgType::kPull && !(h.flags & kFlagRange) ? kFlagNoCreate : 0) |
                              (h.type == MsgType::kPullReply && !(h.flags & kFlagRange) ? kFlagByStripe : 0);
  if (h.flags & ~flags_known)
    return Status::Corruption(std::string(MsgTypeName(h.type)) + " carries flags " + std::to_string(int(h.flags)) +
                              " it cannot have");
  out->keys = std::move((*frames)[1]);
  out->values = std::move((*frames)[2]);
  out->more_values.clear();
  for (size_t i = 3; i < frames->size(); ++i) out->more_values.push_back(std::move((*frames)[i]));
  const bool range = h.flags & kFlagRange;
  if (h.num_keys > kMaxKeysPerMessage || h.num_rows > kMaxKeysPerMessage)
    return Status::Corruption("row count exceeds " + std::to_string(kMaxKeysPerMessage));
  if (h.dim > (1u << 24)) return Status::Corruption("dim " + std::to_string(h.dim) + " too large");
  uint64_t key_bytes = (range || IsReply(h.type)) ? 0 : h.num_keys * sizeof(Key);  // replies carry no keys
  if (out->keys.size() != key_bytes)
    return Status::Corruption("keys frame has " + std::to_string(out->keys.size()) + " bytes, header implies " +
                              std::to_string(key_bytes));
  // ZeroMQ may hand small frames out at any offset of its receive buffer: realign (a copy,
  // small frames only in practice) so keys and values can be read in place as u64 and float.
  auto align = [](Frame& f, size_t a) {
    if (reinterpret_cast<uintptr_t>(f.data()) % a == 0) return;
    Frame copy(f.size());
    std::memcpy(copy.data(), f.data(), f.size());
    f = std::move(copy);
  };
  align(out->keys, alignof(Key));
  align(out->values, alignof(float));
  bool carries_values = h.type == MsgType::kPush || h.type == MsgType::kPullReply;
  uint64_t value_bytes = carries_values ? h.row_count() * h.dim * sizeof(float) : 0;
  if (carries_values && h.status != Code::kOk) value_bytes = 0;
  if (out->more_values.empty()) {
    if (out->values.size() != value_bytes)
      return Status::Corruption("values frame has " + std::to_string(out->values.size()) + " bytes, header implies " +
                                std::to_string(value_bytes));
    return Status::OK();
  }
  // Split values: each frame whole rows, together what the header implies.
  const uint64_t row_bytes = uint64_t(h.dim) * sizeof(float);
  uint64_t total = 0;
  for (size_t i = 0; i < out->num_value_frames(); ++i) {
    Frame& f = out->value_frame(i);
    if (row_bytes == 0 || f.size() == 0 || f.size() % row_bytes != 0)
      return Status::Corruption("values frame " + std::to_string(i) + " has " + std::to_string(f.size()) +
                                " bytes, not a whole number of rows of dim " + std::to_string(h.dim));
    if (i > 0) align(f, alignof(float));  // (the first was realigned above)
    total += f.size();
  }
  if (total != value_bytes)
    return Status::Corruption(std::to_string(out->more_values.size() + 1) + " values frames have " +
                              std::to_string(total) + " bytes, header implies " + std::to_string(value_bytes));
  return Status::OK();
}

Frame ZeroCopyFrame(const void* data, size_t size, std::shared_ptr<const void> owner) {
  if (size < 4096) return Frame(data, size);
  auto* hint = new std::shared_ptr<const void>(std::move(owner));
  return Frame(
      const_cast<void*>(data), size, [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); },
      hint);
}

bool RecvFrames(Socket& sock, std::vector<Frame>* frames, size_t max_frames, int64_t wait_ms) {
  return sock.Recv(frames, max_frames, wait_ms);
}

namespace {

// [identity?][header][keys][values...]: frames taken from the caller, without a copy.
Status SendFramesOver(Socket& sock, const Frame* identity, const Header& h, Frame* keys, Frame* values,
                      size_t num_values) {
  Frame* parts[kMaxDataFrames + 1];
  size_t n = 0;
  Frame id;
  if (identity) {
    id = Frame(identity->data(), identity->size());
    parts[n++] = &id;
  }
  Frame hm = EncodeHeaderFrame(h);
  parts[n++] = &hm;
  if (IsDataType(h.type)) {
    parts[n++] = keys;
    for (size_t i = 0; i < num_values; ++i) parts[n++] = &values[i];
  }
  bool would_block = false;
  // A router never blocks: a peer whose queue is full is refused now rather than stall every other.
  Status st = sock.Send(parts, n, identity != nullptr, &would_block);
  if (!st.ok()) return Status::Unavailable(std::string("send ") + MsgTypeName(h.type) + ": " + st.message());
  if (would_block) return Status::Unavailable(identity ? "peer send queue full" : "send would block");
  return Status::OK();
}

}  // namespace

Status SendMessage(Socket& sock, const Frame* identity, const Header& h, Frame keys, Frame values) {
  return SendFramesOver(sock, identity, h, &keys, &values, 1);
}

Status SendMessage(Socket& sock, const Frame* identity, const Header& h, Frame keys, std::vector<Frame>* values) {
  if (values->empty() || values->size() > kMaxValueFrames)
    return Status::InvalidArgument(std::to_string(values->size()) + " values frames (1 to " +
                                   std::to_string(kMaxValueFrames) + " allowed)");
  return SendFramesOver(sock, identity, h, &keys, values->data(), values->size());
}

Status SendDataFrames(Socket& sock, Frame header, Frame keys, Frame values, bool* would_block) {
  Frame* parts[] = {&header, &keys, &values};
  Status st = sock.Send(parts, 3, /*dont_wait=*/true, would_block);
  if (!st.ok()) return Status::Unavailable("send: " + st.message());
  return Status::OK();
}

Result<std::string> BindTcp(Socket& sock, const std::string& bind_host, int port, const std::string& advertise_host,
                            int advertise_port) {
  const std::string ep = "tcp://" + bind_host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
  PP_ASSIGN_OR_RETURN(std::string last, sock.Bind(ep));
  const auto colon = last.rfind(':');
  return "tcp://" + advertise_host + (advertise_port > 0 ? ":" + std::to_string(advertise_port) : last.substr(colon));
}

std::string RandomRoutingId(const std::string& prefix) {
  std::random_device rd;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%08x%08x", rd(), rd());
  return prefix + "-" + hex;
}

}  // namespace pushpull
