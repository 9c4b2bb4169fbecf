// The transport: how pushpull's nodes exchange multipart messages. Client, server and scheduler
// reach the network only through this interface. ZeroMQ implements it (common/zmq_transport.cc);
// tests wrap it to drop, delay or duplicate messages and cut connections
// (tests/support/fault_transport.h).
//
// A message is a sequence of frames. A Frame is ZeroMQ's reference-counted message buffer: a
// payload built with ZeroCopyFrame (common/wire.h) is sent without a copy, and a received one is
// read in place, whatever the transport.
//
// Threading: a Transport is thread-safe. A Socket is not: one thread at a time uses it (its
// owner says which, and under which lock). Poll() may be given sockets used by the calling
// thread only.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pushpull/status.h"

namespace pushpull {

using Frame = zmq::message_t;

enum class SocketKind : uint8_t {
  kRouter,  // many peers; each received message starts with the sender's routing id frame
  kDealer,  // requests out, replies in, to every peer it is connected to
  kPush,    // one-way pipes between threads of a process (inproc://)
  kPull,
};

struct SocketOptions {
  // A dealer's identity, kept across reconnects, so that routers can address it ("": ZeroMQ's).
  std::string routing_id;
  // Messages larger than this are refused as they arrive (-1: no limit).
  int64_t max_msg_bytes = -1;
  // False: a dropped connection stays down, and the owner replaces the socket (the worker's
  // request sockets: a reconnect must not send what was queued after the drop first).
  bool reconnect = true;
  // Messages queued per peer before sends block or fail (0: no limit).
  int send_hwm = 100000;
  int recv_hwm = 100000;
  // How long unsent messages are kept at close, ms.
  int linger_ms = 200;
  // A connection between processes: transport heartbeats and large kernel buffers. False for
  // the in-process pipes between a node's threads.
  bool network = true;
  // Socket security (keys, mechanism) joins these options: every socket a transport makes takes
  // them from here, so no caller sets them one by one.
};

// A change in one of a socket's connections, reported by a ConnectionWatch.
struct ConnectionEvent {
  enum Kind : uint8_t {
    kConnected,     // a connection's handshake completed: messages flow
    kDisconnected,  // a connection dropped: what was in flight on it may be lost
  };
  Kind kind = kConnected;
  std::string endpoint;  // as given to Connect(), or the peer's address for bound sockets
};

// A socket's connection events, in the order they happened. Used by one thread at a time, which
// need not be the socket's: an I/O thread watches the connections that calling threads send on.
// It may outlive its socket (then it reports nothing more).
class ConnectionWatch {
 public:
  virtual ~ConnectionWatch() = default;
  // The next event, without waiting. False when there is none.
  virtual bool Next(ConnectionEvent* event) = 0;
};

class Socket {
 public:
  virtual ~Socket() = default;
  Socket() = default;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  virtual SocketKind kind() const = 0;

  // Listens at `endpoint` (tcp://host:port, port 0 or * for any free one; inproc://name).
  // Returns the endpoint bound, with the port chosen.
  virtual Result<std::string> Bind(const std::string& endpoint) = 0;
  virtual Status Connect(const std::string& endpoint) = 0;
  virtual Status Disconnect(const std::string& endpoint) = 0;

  // Sends *frames[0..n) as one message, taking their contents (the Frames are left empty).
  // With dont_wait, a message that cannot be queued now (no peer connected yet, or its queue
  // full) is not sent: OK is returned with *would_block set. Without, the send may block until
  // it is queued. A router's first frame is the peer's routing id: an unknown peer is
  // Unavailable. Other errors are Unavailable with ZeroMQ's reason.
  virtual Status Send(Frame* const* frames, size_t n, bool dont_wait, bool* would_block) = 0;

  // Receives one message into *frames (cleared first), keeping at most max_frames of its frames
  // (an oversized message is drained; the caller sees max_frames and refuses it when decoding).
  // Waits up to wait_ms for its first frame (0: never waits). False when nothing arrived in time,
  // or a signal interrupted the wait.
  virtual bool Recv(std::vector<Frame>* frames, size_t max_frames, int64_t wait_ms) = 0;

  // Reports this socket's connection events from now on (connections made before are not
  // reported: watch before connecting).
  virtual Result<std::unique_ptr<ConnectionWatch>> WatchConnections() = 0;
};

// What to wait on: a message on `socket`, or (socket null) an event on `watch`.
struct PollItem {
  Socket* socket = nullptr;
  ConnectionWatch* watch = nullptr;
  bool ready = false;  // set by Poll
  PollItem() = default;
  PollItem(Socket* s) : socket(s) {}  // NOLINT: a socket is what is polled most
  explicit PollItem(ConnectionWatch* w) : watch(w) {}
};

class Transport {
 public:
  virtual ~Transport() = default;
  // The transport outlives every socket it made.
  virtual Result<std::unique_ptr<Socket>> MakeSocket(SocketKind kind, const SocketOptions& options) = 0;
  // Waits up to timeout_ms (-1: no limit) until one of the items is ready, and marks those that
  // are. Returns how many are ready; 0 on a timeout or when a signal interrupted the wait. Every
  // socket and watch must come from this transport.
  virtual int Poll(PollItem* items, size_t n, int64_t timeout_ms) = 0;
};

// ZeroMQ over TCP (and inproc:// between a process's threads), with its own context and
// io_threads background I/O threads.
std::shared_ptr<Transport> NewZmqTransport(int io_threads = 1);

}  // namespace pushpull
