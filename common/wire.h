// The wire protocol (DESIGN.md "Wire protocol"): a ZeroMQ multipart message
//   [header][keys][values]            data plane (worker <-> server), three frames ...
//   [header][keys][values]...[values] ... except a pull reply, whose values may come in up to
//                                     kMaxValueFrames frames of whole rows, in row order (a
//                                     server sends each stripe's rows in place, zero-copy)
//   [header]                          control plane (node <-> scheduler), one frame
// The header is a Cereal binary archive; keys are raw u64, values raw float32, sent zero-copy
// and read in place. Every received message goes through Decode(), which checks the frame count,
// that the header decodes inside its frame with every length bounded before anything is
// allocated, and that counts times sizes equal the frame sizes. Semantic checks that need state
// (table exists, rows in range) are the receiver's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "common/transport.h"
#include "pushpull/status.h"

namespace pushpull {

constexpr uint32_t kWireMagic = 0x50505348;  // "PPSH"
// Peers must speak this version exactly; docs/WIRE.md lists what each version added.
constexpr uint16_t kWireVersion = 11;
// A RegisterReply lists every server's address (up to kMaxNodes of at most 256 bytes): 1.1 MB
// at most; data-message headers are a few dozen bytes.
constexpr uint32_t kMaxNodes = 4096;
constexpr size_t kMaxHeaderBytes = 2 * 1024 * 1024;
constexpr uint32_t kMaxRunText = 1024;            // Client::Checkpoint(run)'s description
constexpr uint16_t kOldestCheckpointVersion = 3;  // the first with checkpoints (DecodeHeader)
constexpr size_t kMaxErrorText = 1024;
constexpr uint64_t kMaxKeysPerMessage = uint64_t(1) << 31;
constexpr size_t kMaxValueFrames = TableInfo::kMaxBlocks;  // a pull reply's value frames (a server's stripes)
// A worker's requests to one server that may be unanswered at once: what a server's record of a
// worker's requests keeps (server/request_record.h), so that one sent again after a dropped
// connection always finds its answer there (a push beyond it could not be told applied or not).
constexpr size_t kMaxUnansweredRequests = 1024;
constexpr size_t kMaxDataFrames = 2 + kMaxValueFrames;  // header, keys, values

enum class MsgType : uint8_t {
  // control plane
  kRegister = 1,          // node -> scheduler: role, address; clock: the node's heartbeat interval, ms
  kRegisterReply = 2,     // rank, cluster map, membership (sent once everyone registered)
  kHeartbeat = 3,         // node -> scheduler; clock: the membership version the node holds
  kMembership = 4,        // scheduler -> node: membership (also the heartbeat reply)
  kCreateTable = 5,       // worker -> scheduler: spec; scheduler -> server: info
  kCreateTableReply = 6,  // info or error
  kBarrier = 7,
  kBarrierReply = 8,
  kDone = 9,  // worker -> scheduler: this worker finished
  kDoneReply = 10,
  kCheckpoint = 11,  // worker -> scheduler: at this clock; scheduler -> server: write into `address`
  kCheckpointReply = 12,
  // server -> scheduler, while a worker is kWorkerDying: clock: the membership version it answers;
  // worker_clocks, worker_settled: this server's clock of each worker, and whether the Clock that
  // brought it was settled (kFlagSettled).
  kWorkerClocks = 13,
  // launcher -> scheduler: a node it started exited. sender_role, sender_rank: the node's; status,
  // error: what it died of (its exit status or signal, as the launcher saw it); clock: 1 when the
  // launcher starts another process in its place (--on_worker_death=wait), else 0. Unanswered.
  kNodeExited = 14,
  // data plane
  kPush = 20,  // keys (or a row range) + gradients, tagged with the worker's clock
  kPushReply = 21,
  kPull = 22,       // keys (or a row range), at the worker's clock
  kPullReply = 23,  // values
  kClock = 24,      // the worker's new clock
  kClockReply = 25,
  kHello = 26,       // a client checks that replies addressed to its receive socket arrive; clock: its
                     // membership version; row_begin: 1 + Membership::worker_last_clock of its rank (0: none)
  kHelloReply = 27,  // num_rows: the largest frame the server takes, bytes (0: no limit)
};
const char* MsgTypeName(MsgType t);
bool IsDataType(MsgType t);
bool IsReply(MsgType t);

enum HeaderFlags : uint8_t {
  kFlagRange = 1,  // rows [row_begin, row_begin + num_rows), keys frame empty
  // A push's request after its call's first to this server (a call split into a request a
  // block): the table's schedule step advances once a call, on the first.
  kFlagContinues = 2,
  // A keyed pull's reply over several stripes (MinClock::PreparePull, server/min_clock.cc): its values frames hold
  // each stripe's rows in turn, stripe 0 first, each in the request's key order; row_begin says
  // how many stripes the server's shard has (TableInfo::SparseStripeOf places a key).
  kFlagByStripe = 4,
  // A Clock sent once every push and Clock the worker sent before it was answered by every server
  // (Client::Clock after pushes to a BSP table): each server then holds all the worker's pushes
  // tagged below it, so a server its Clock did not reach, the worker dying, may count it reached.
  kFlagSettled = 8,
  // A keyed pull (Client::Lookup) that adds no row: a key the table does not hold reads as its
  // row would start (initial values, optimizer slots at their start) and stays absent.
  kFlagNoCreate = 16,
};

struct Header {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  MsgType type = MsgType::kHeartbeat;
  uint8_t flags = 0;
  uint64_t request_id = 0;
  Role sender_role = Role::kWorker;
  int32_t sender_rank = -1;
  uint32_t table = 0;
  int64_t clock = 0;       // the sender's clock; kHeartbeat, kRegister: see MsgType
  uint64_t num_keys = 0;   // keyed requests: keys in the keys frame
  uint32_t dim = 0;        // floats per row in the values frame
  uint64_t row_begin = 0;  // kFlagRange
  uint64_t num_rows = 0;   // kFlagRange
  int32_t slot = -1;       // pull: -1 parameters, s >= 0 optimizer slot s (debugging)
  int32_t staleness = 0;   // pull reply: own clock - slowest live worker's clock when served
  // Push to a table with clip_norm, split over servers: the L2 norm of the whole push, which each
  // part is clipped by (-1: the part is the whole push; the server computes it).
  float push_norm = -1.0f;
  std::string reply_to;  // data requests: the ZeroMQ routing id to answer (empty: the sender)
  Code status = Code::kOk;
  std::string error;  // status text, at most kMaxErrorText bytes

  // Control payloads, present according to type.
  std::string address;                  // kRegister: where a server listens; kCheckpoint: the directory (to a
                                        // server), the run's description (from a worker)
  ClusterMap cluster;                   // kRegisterReply
  Membership membership;                // kRegisterReply, kMembership
  TableSpec spec;                       // kCreateTable (worker -> scheduler)
  TableInfo info;                       // kCreateTable (scheduler -> server), kCreateTableReply
  std::vector<int64_t> worker_clocks;   // kWorkerClocks
  std::vector<uint8_t> worker_settled;  // kWorkerClocks

  // Rows addressed by the message: num_keys, or num_rows with kFlagRange.
  uint64_t row_count() const { return (flags & kFlagRange) ? num_rows : num_keys; }
  Status status_obj() const { return status == Code::kOk ? Status::OK() : Status(status, error); }
  void SetStatus(const Status& s);
};

// A received message. For a ROUTER socket `identity` names the peer to reply to. keys and
// values are the frames as received: read in place, never copied. A pull reply's values may go
// on in more_values (each frame whole rows, in row order, or for kFlagByStripe each stripe's
// rows in turn); every other message has one values
// frame and more_values empty.
struct Message {
  Frame identity;
  Header header;
  Frame keys;
  Frame values;
  std::vector<Frame> more_values;

  // The values frames in order: values, then more_values.
  size_t num_value_frames() const { return 1 + more_values.size(); }
  Frame& value_frame(size_t i) { return i == 0 ? values : more_values[i - 1]; }
  const Frame& value_frame(size_t i) const { return i == 0 ? values : more_values[i - 1]; }
  size_t value_bytes() const {
    size_t n = values.size();
    for (const Frame& f : more_values) n += f.size();
    return n;
  }

  const Key* key_data() const { return static_cast<const Key*>(keys.data()); }
  const float* value_data() const { return static_cast<const float*>(values.data()); }
  float* mutable_value_data() { return static_cast<float*>(values.data()); }
};

// Headers of data messages are packed by hand, the others with Cereal; the bytes are what
// Cereal's binary archive writes either way (EncodeHeaderCereal: the Cereal path for any type,
// which tests compare against).
std::string EncodeHeader(const Header& h);
Frame EncodeHeaderFrame(const Header& h);
std::string EncodeHeaderCereal(const Header& h);
// oldest_version: the oldest protocol version accepted (kWireVersion: live peers match exactly;
// kOldestCheckpointVersion: a table description a checkpoint file kept).
Status DecodeHeader(const void* data, size_t size, Header* h, uint16_t oldest_version = kWireVersion);

// Validates a multipart message (identity already removed) and moves it into *out.
// *header_ok (optional) says whether the header itself decoded, i.e. whether the sender can be
// answered even though the message as a whole is malformed.
Status Decode(std::vector<Frame>* frames, Message* out, bool* header_ok = nullptr);

// A frame over `size` bytes at `data`, sent without copying: `owner` keeps the memory alive
// until ZeroMQ is done with it. Small payloads are copied (cheaper than the callback).
Frame ZeroCopyFrame(const void* data, size_t size, std::shared_ptr<const void> owner);

// Receives one multipart message (Socket::Recv): at most max_frames frames are kept; the rest
// of an oversized message is drained and the message reported as malformed by Decode. Waits up
// to wait_ms for it (0: not at all); false when none came, or a signal interrupted the wait.
bool RecvFrames(Socket& sock, std::vector<Frame>* frames, size_t max_frames = 8, int64_t wait_ms = 0);
// Sends [identity?][header][keys][values] (data) or [identity?][header] (control); a router's
// (identity given) never blocks: a peer whose queue is full is refused (Unavailable).
Status SendMessage(Socket& sock, const Frame* identity, const Header& h, Frame keys = Frame(), Frame values = Frame());
// A pull reply whose values are split over frames (1 to kMaxValueFrames, whole rows each).
Status SendMessage(Socket& sock, const Frame* identity, const Header& h, Frame keys, std::vector<Frame>* values);
// Sends a data request whose header is already encoded (EncodeHeaderFrame): [header][keys][values].
// A worker keeps copies of its requests' frames (Frame::copy shares the buffer: no payload is
// copied) until they are answered, to send them again after a dropped connection. Never blocks:
// when the transport cannot take the message now (no connection to queue it on, or the queue
// full) nothing is sent and *would_block is set (the status is OK).
Status SendDataFrames(Socket& sock, Frame header, Frame keys, Frame values, bool* would_block);
// Binds to tcp://host:port (port 0: an ephemeral port) and returns the address to advertise:
// advertise_host and the port bound, or advertise_port when it is set (NAT, port forwarding).
Result<std::string> BindTcp(Socket& sock, const std::string& bind_host, int port, const std::string& advertise_host,
                            int advertise_port = 0);

// A routing id for a socket that must keep it across reconnects: `prefix`, '-' and 64 random bits
// (routers hand an id over to whoever connects with it, so it must not be guessable).
std::string RandomRoutingId(const std::string& prefix);

}  // namespace pushpull
