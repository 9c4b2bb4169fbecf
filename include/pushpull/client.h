// pushpull worker client: how a training program reads and updates the parameters
// (pushpull/pushpull.h includes it with the rest of the public API).
//
//   pushpull::ClientOptions o;                            // under pushpull-launch: where the job is
//   auto client = pushpull::Client::Connect(o);          // Result<std::unique_ptr<Client>>
//   auto w = (*client)->CreateTable(spec);                // Result<Table>
//   std::vector<float> params(rows * dim);
//   for (...) {
//     Status s = (*client)->PullDense(*w, params.data()).Wait();   // parameters at this clock
//     ... compute grads ...
//     (*client)->PushDense(*w, std::move(grads));                   // fire and forget, or Wait()
//     s = (*client)->Clock();                                        // end of iteration
//   }
//   (*client)->Finish();
//
// Calls that span servers are split and sent to all of them at once. Every wait has a deadline
// (ClientOptions::request_timeout_ms unless given) and says what it waited for when it expires.
// A dead server or an aborted job fails the pending calls; these, and a push or clock a server
// refused (a bad row, a non-finite gradient: Diverged), are sticky: later calls return it, so a
// step is never counted done without its push, and a program that never waits on its pushes
// learns of a refused one from its next Clock(), pull or Finish(). Other refusals (a pull of a
// row out of range) fail their own call. After Finish() or Leave() every call is
// refused (FailedPrecondition). A Client destroyed without either fails its pending calls and
// tells the scheduler nothing: the job finds the worker silent after its heartbeat timeout.
// A connection to a server that drops is no failure: the calls it had no answer for are sent
// again (ClientStats::resent), and answered once.
//
// Threading: a Client may be used from several threads. Calling threads send their requests
// themselves, one at a time under an internal lock (so request ids and per-server order are
// those of the calls). A thread waiting on a Future receives the servers' replies itself (one
// waiter at a time; it completes other threads' Futures too), so a reply reaches its caller with
// no thread hand-off; replies nobody waits for are drained by an internal I/O thread, which also
// owns the scheduler connection (heartbeats, membership). A Future may be waited on from any one
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pushpull/status.h"
#include "pushpull/table.h"

namespace pushpull {

// Where the job is and how to talk to it. A field left at its default here is read from the
// environment pushpull-launch gives every worker (docs: "The launcher's environment"), so that
// Client::Connect(ClientOptions{}) joins the job it was started in; a field set in code wins.
struct ClientOptions {
  // tcp://host:port of pushpull-scheduler.
  // Default: "": PUSHPULL_SCHEDULER (Connect fails, saying so, when that is unset too).
  std::string scheduler;
  // >= 0: ask for this worker rank, if free.
  // Default: -1: PUSHPULL_RANK, else any free rank.
  int requested_rank = -1;
  // The job's consistency model, Client::consistency(): "bsp", "ssp:K" or "asp".
  // Default: "": PUSHPULL_CONSISTENCY, else "bsp".
  std::string consistency;
  // How often this worker tells the scheduler it is alive.
  // Default: 0: PUSHPULL_HEARTBEAT_INTERVAL_MS, else 500.
  int heartbeat_interval_ms = 0;
  // Scheduler silent this long: calls fail with Unavailable.
  // Default: 0: PUSHPULL_SCHEDULER_TIMEOUT_MS, else 15000.
  int scheduler_timeout_ms = 0;
  // How long Connect waits for the whole job to register.
  // Default: 0: PUSHPULL_REGISTER_TIMEOUT_MS, else 120000.
  int register_timeout_ms = 0;
  // A scheduler address that does not resolve or refuses connections this long fails Connect
  // with the reason (Unavailable; asked again meanwhile, for a name that resolves late or a
  // scheduler that starts late; once it answers, register_timeout_ms alone applies).
  // Default: 0: PUSHPULL_CONNECT_TIMEOUT_MS, else 10000.
  int connect_timeout_ms = 0;
  // The deadline of Future::Wait, Barrier and CreateTable.
  // Default: 120000 (not read from the environment).
  int request_timeout_ms = 120000;
  // Backpressure: a call whose payload (a push's keys and values, a keyed pull's keys) would take
  // the payload of this worker's unanswered requests over this many MiB waits in the call, at most
  // request_timeout_ms, for earlier ones to be answered, rather than keep them all in memory while
  // a server is slow or unreachable; past that it fails unsent, and the client's error is sticky
  // (a push left out must not be clocked). 0: no limit. A single call over it is sent once nothing
  // else is unanswered.
  // Default: 1024 (not read from the environment).
  int max_unanswered_mb = 1024;
  // How long Checkpoint() waits.
  // Default: 0: longer than the scheduler's two deadlines, which answer it first (every worker
  // asking, then every server writing: its --checkpoint_timeout_s each, told at registration),
  // plus request_timeout_ms.
  int checkpoint_timeout_ms = 0;
};

// A table as created: its name, shape and id. Cheap to copy.
struct Table {
  uint32_t id = 0;
  std::string name;
  bool sparse = false;
  uint64_t rows = 0;
  uint32_t dim = 0;
  Consistency consistency;
};

namespace internal {
struct FutureState;
struct PulledParts;
}  // namespace internal

// The values of a pull, read in place from the messages the servers sent: no copy. Readable
// once the pull's Future succeeded (before that, or after it failed, the accessors throw
// std::logic_error; num_rows() too once it failed), for as long as this object lives (it keeps the messages); a new
// pull into it drops the old one's at once.
//
// row(i) is the i-th row: of the table for a whole-table pull (PullOptions::keys null), of the
// key list for a keyed one, dim floats. Dense pulls also list their parts: contiguous runs of whole
// rows in row order, one per frame the servers sent: a dense pull goes to each server as a
// request per 1 MB block of its rows, each answered with a frame per stripe holding its rows
// (one when the pull is small), so num_parts() is not the number of servers.
class PulledRows {
 public:
  size_t num_rows() const;
  const float* row(size_t i) const;
  // Copies every row to out (num_rows() * dim floats) in order.
  void CopyTo(float* out) const;

  // Dense pulls. (A keyed pull's parts are the frames of its servers' replies, part_first_row
  // counting rows within each reply, and a reply over several stripes holds each stripe's rows
  // in turn, not in key order; use row(i).)
  size_t num_parts() const;
  const float* part(size_t i) const;
  size_t part_floats(size_t i) const;
  uint64_t part_first_row(size_t i) const;

 private:
  friend class ClientAccess;
  std::shared_ptr<internal::PulledParts> p_;
};

// Floats a push sends without copying them: size() floats at data(), which stay valid and
// unchanged while owner() lives. The library keeps the owner until it is done with the floats
// (see Client::Push). Made from a shared vector, or from any buffer and whatever keeps it alive
// (View: a NumPy array, a tensor, memory of the program's own).
class SharedFloats {
 public:
  SharedFloats() = default;
  SharedFloats(std::nullptr_t) {}                            // NOLINT: no buffer (a push refuses it)
  SharedFloats(std::shared_ptr<const std::vector<float>> v)  // NOLINT: implicit, as the vector is
      : data_(v ? v->data() : nullptr), size_(v ? v->size() : 0), owner_(std::move(v)) {}
  SharedFloats(std::shared_ptr<std::vector<float>> v)  // NOLINT
      : SharedFloats(std::shared_ptr<const std::vector<float>>(std::move(v))) {}
  // size floats at data, alive while owner is (owner must not be null).
  static SharedFloats View(const float* data, size_t size, std::shared_ptr<const void> owner) {
    SharedFloats f;
    f.data_ = data;
    f.size_ = size;
    f.owner_ = std::move(owner);
    return f;
  }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  explicit operator bool() const { return owner_ != nullptr; }

 private:
  const float* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

// The result of an asynchronous Push or Pull.
// Copies share the call. Once the last copy of the Future of a pull into a buffer
// (PullOptions::out) goes before the call completed, the call is given up as by an expired
// WaitFor: nothing more is written into its destination, so the destination may go with it (an
// app that returns early on an error). That is counted (ClientStats::pulls_dropped) and logged,
// once per client, as a warning naming the table: a pull whose Future is dropped by mistake
// (never waited on) reads nothing. (A pull into a view is not given up: its rows land in the
// view, which keeps them.) A push's Future may be dropped: the push goes on (see Push).
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<internal::FutureState> s);
  Future(const Future& o);
  Future(Future&& o) noexcept = default;
  Future& operator=(const Future& o);
  Future& operator=(Future&& o) noexcept;
  ~Future();
  // Waits for every server's answer, at most the client's request_timeout_ms. A pull's values
  // are in its destination once this returns OK. A WaitFor that expires gives the call up: a
  // pull writes nothing more into its destination, and the Future never turns OK afterwards; a
  // push given up on may still be applied, or, when its connection drops, is not sent again (a
  // Clock() after it closes the step without it: the caller decides whether to go on); a large
  // push, which goes as several requests, may so be applied in part.
  // (A timeout beyond Deadline::Never()'s, such as INT64_MAX, waits without end.) To look
  // without giving up, use Ready(): WaitFor(0) gives the call up at once.
  Status Wait();
  Status WaitFor(int64_t timeout_ms);
  bool Ready() const;
  // Pulls: the largest staleness any server recorded for it (own clock - slowest live clock).
  int32_t staleness() const;

 private:
  void Release();  // this copy goes: the last of a pull's gives it up
  std::shared_ptr<internal::FutureState> s_;
};

struct ClientStats {
  uint64_t pushes = 0, pulls = 0, clocks = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  int32_t max_staleness = 0;
  uint64_t resent = 0;            // requests sent to a server again after a connection to it dropped
  uint64_t unanswered_bytes = 0;  // now: payload of requests not answered yet (max_unanswered_mb)
  uint64_t waits_for_room = 0;  // calls that waited for room (max_unanswered_mb, or kMaxUnansweredRequests to a server)
  uint64_t pulls_dropped = 0;   // pulls into a buffer given up because their last Future went first (see Future)
};

// The keys of a call, in a buffer the library may hold and send without a copy (see Client::Push).
using KeyBuffer = std::shared_ptr<const std::vector<Key>>;

// What a pull reads and where its values go (Client::Pull). Every field has a default; set those
// that differ:
//   client.Pull(t, PullOptions{keys, out})                        // the rows of keys, into out
//   PullOptions o; o.view = &rows; client.Pull(dense, o)         // the whole table, in place
//   PullOptions o; o.keys = keys; o.out = m; o.slot = 0; ...     // Adam's m of some rows
// A pull whose options do not fit together, or not the table, fails with InvalidArgument saying
// which (its Future's Wait() returns it; nothing is sent).
struct PullOptions {
  // The rows to read: a sparse table's keys, or a dense table's row numbers (each < rows), in
  // the order they are wanted; a key may repeat. Sent without a copy, as a push's keys are (see
  // Client::Push): the vector must not change while the pull is unfinished. Keys in server order
  // cost the least (Client::GroupByServer). An empty list reads nothing and succeeds.
  // Default: null: every row of a dense table, in row order (rows * dim floats).
  // REQUIRES: set (not null) for a sparse table, and when slot >= 0.
  // REQUIRES: at most 2^31 keys.
  KeyBuffer keys;
  // Where the values go, copied: keys->size() * dim floats (the whole table: rows * dim), row i
  // at out + i * dim. Written by the library's threads until the pull's Future is done (or its
  // wait expired, or its last copy went: then nothing more is written), so it must stay valid
  // that long.
  // Default: null.
  // REQUIRES: exactly one of out and view is set (a pull of no keys may have neither).
  float* out = nullptr;
  // Or: the values left in the messages the servers sent, read in place with no copy (see
  // PulledRows); a pull into a view drops what the view held before at once.
  // Default: null.
  PulledRows* view = nullptr;
  // false: a lookup. A key a sparse table does not hold yet is not added to it: it reads as its
  // row would start (the table's initial values; an optimizer slot's starting value). For
  // evaluation and inference over keys training may never touch, which a pull that creates would
  // add to the servers' memory, their --max_table_mb and every checkpoint. A dense table holds
  // all its rows: no difference there. A sparse table's lookup is copied on the server (never
  // read in place), also into a view.
  // Default: true (a key not there yet is added, as a push would add it).
  bool create = true;
  // >= 0: reads optimizer state slot `slot` of the rows instead of their parameters (Adam's m is
  // slot 0, v slot 1; see optimizers/), for debugging. Gathered on the server, also into a view.
  // Default: -1 (the parameters).
  // REQUIRES: -1, or a slot of the table's optimizer (the server refuses others, naming it).
  // REQUIRES: keys set: a whole-table pull reads the parameters only.
  int slot = -1;
};

class Client {
 public:
  virtual ~Client() = default;
  // Registers with the scheduler and connects to every server. Blocks until the whole job has
  // registered (register_timeout_ms).
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  virtual int rank() const = 0;
  virtual int num_workers() const = 0;
  virtual int num_servers() const = 0;
  // The job's consistency model (ClientOptions::consistency): what a program gives its tables'
  // TableSpec::consistency when the job, not the program, decides it.
  virtual Consistency consistency() const = 0;

  // Creates the table, or returns it when it exists with the same spec (AlreadyExists when the
  // spec differs). Every worker may call it; the first creates.
  virtual Result<Table> CreateTable(const TableSpec& spec) = 0;

  // Keyed push. grads: keys.size() * dim floats. A key given twice in one push is applied twice,
  // as two optimizer steps in key order (not summed first): sum repeats on the worker when one
  // step is meant.
  // Gradients are sent zero-copy from the buffer; a shared buffer may be reused once the push's
  // Future succeeded (the library holds its reference until then; after a failure, such as a
  // dead server, possibly until the Client is destroyed). Keys given in a shared buffer
  // (KeyBuffer) are sent zero-copy the same way, each server its slice when the keys are in
  // server order (GroupByServer; slices under 4 KB are copied, keys in another order gathered),
  // so a recurring key set is not copied into every call; the vector must not change while any
  // call using it is unfinished (failed or given up calls included, as for gradients).
  // A push's Future may be dropped (fire and forget): a refused push is sticky, so the next
  // Clock(), pull or Finish() says so.
  using KeyBuffer = ::pushpull::KeyBuffer;
  // (With a KeyBuffer, gradients go in a shared buffer too: a by-value form of both would make
  // brace lists of keys such as {0, 1} ambiguous.)
  virtual Future Push(const Table& t, KeyBuffer keys, SharedFloats grads) = 0;
  Future Push(const Table& t, std::vector<Key> keys, SharedFloats grads) {
    return Push(t, std::make_shared<const std::vector<Key>>(std::move(keys)), std::move(grads));
  }
  Future Push(const Table& t, std::vector<Key> keys, std::vector<float> grads) {
    return Push(t, std::move(keys), std::make_shared<const std::vector<float>>(std::move(grads)));
  }
  // Whole dense table: rows * dim floats.
  virtual Future PushDense(const Table& t, SharedFloats grads) = 0;
  Future PushDense(const Table& t, std::vector<float> grads) {
    return PushDense(t, std::make_shared<const std::vector<float>>(std::move(grads)));
  }

  // Reads rows of a table as of this worker's clock, under the table's consistency model (a BSP
  // or SSP pull waits for the slower workers): which rows, where to and what of them as
  // `options` says (PullOptions). Its values are in the destination once the Future succeeded.
  // The Future must be kept until then: dropping it gives the pull up (see Future).
  [[nodiscard]] Future Pull(const Table& t, const PullOptions& options) { return DoPull(t, options); }
  // The common pulls, as the options above make them:
  // the rows of keys into out (keys.size() * dim floats), creating sparse keys not there yet;
  [[nodiscard]] Future Pull(const Table& t, KeyBuffer keys, float* out);  // (null keys: refused)
  [[nodiscard]] Future Pull(const Table& t, std::vector<Key> keys, float* out) {
    return Pull(t, std::make_shared<const std::vector<Key>>(std::move(keys)), out);
  }
  // the same without adding keys a sparse table does not hold (PullOptions::create false);
  [[nodiscard]] Future Lookup(const Table& t, KeyBuffer keys, float* out);  // (null keys: refused)
  [[nodiscard]] Future Lookup(const Table& t, std::vector<Key> keys, float* out) {
    return Lookup(t, std::make_shared<const std::vector<Key>>(std::move(keys)), out);
  }
  // and the whole dense table into out (rows * dim floats).
  [[nodiscard]] Future PullDense(const Table& t, float* out) {
    PullOptions o;
    o.out = out;
    return Pull(t, o);
  }

  // Keys in the order the servers hold them cost the least: reorders `keys` so that each
  // server's keys come one after the other (in the order they were given) and returns where each
  // came from (keys after[i] == keys before[order[i]]). A keyed push of keys in this order sends
  // every server its slice of the caller's buffers as they are, zero-copy (keys in another order:
  // gathered into a buffer per server first), and a keyed pull needs no per-key map to place
  // the rows. Order a recurring key set (a minibatch's unique keys) once and compute its
  // gradients in that order. Dense tables: ascending rows are in server order.
  virtual Result<std::vector<uint32_t>> GroupByServer(const Table& t, std::vector<Key>* keys) = 0;

  // Ends this worker's current iteration: the clock advances on every server. In a job that goes
  // on after a worker dies (--on_worker_death=continue or wait), a worker with a BSP table first
  // waits, up to request_timeout_ms, until this clock's pushes to BSP tables have succeeded and
  // every push and Clock() before it is answered, on every server; otherwise the clock is not
  // sent and the error (sticky) says why (DESIGN.md, "A worker dying between its clocks").
  virtual Status Clock() = 0;
  // This worker's clock: starts at 0 (in a job restored from a checkpoint, the scheduler's
  // --restore_from, at the checkpoint's clock, where the app resumes) and grows by one per Clock().
  virtual int64_t clock() const = 0;
  // Whether this client took the place of a dead worker in a running job (the scheduler's
  // --on_worker_death=wait): clock() then starts where that worker's was, maybe mid-epoch.
  virtual bool replacement() const = 0;
  // Whether the scheduler has a checkpoint directory (Checkpoint() fails without one).
  virtual bool checkpoints_enabled() const = 0;
  // Collective: every live worker calls it at the same clock (after that clock's Clock()). Waits
  // until every server has written its shards of every table, with optimizer state, as of this
  // clock, and the scheduler has committed the checkpoint (server/checkpoint/store.h); a job started
  // with --restore_from resumes there. FailedPrecondition when the scheduler has no
  // --checkpoint_dir, a checkpoint is already in progress or a server refuses (live workers not
  // all at the clock); InvalidArgument when workers call it at different clocks; DeadlineExceeded
  // naming the workers or servers that missed the scheduler's deadline; Aborted when the job ends.
  // `run` describes how this run counts its clocks (an app: how many make an epoch, and what that
  // follows from), at most 1 KB on one line; every worker gives the same (else InvalidArgument).
  // The checkpoint keeps it, and a job restored from it gets it back from restored_run(), so that
  // it can refuse to go on where it would count its clocks otherwise (a changed batch size).
  virtual Status Checkpoint(const std::string& run) = 0;
  Status Checkpoint() { return Checkpoint(std::string()); }
  // A job restored from a checkpoint: the `run` given when it was taken (empty otherwise).
  virtual const std::string& restored_run() const = 0;
  // Waits for every live worker to reach the barrier.
  virtual Status Barrier() = 0;
  // Closes the clock this worker's last pushes are in, if it pushed since its last Clock() (so
  // that under BSP they count in that clock's mean on every server alike), waits until every
  // server has answered this worker's requests (pushes and clocks nobody waited for included),
  // then tells the scheduler this worker is done; no calls after it.
  virtual Status Finish() = 0;
  // Tells the scheduler this worker stops early because of `why` (its app failed, say on a
  // missing file): the job takes it for this worker's death at once, under the scheduler's
  // --on_worker_death, and names `why`, instead of finding it silent after its heartbeat
  // timeout. Waits up to 2 s for the scheduler's answer; no calls after it.
  virtual Status Leave(const Status& why) = 0;

  virtual ClientStats stats() const = 0;

 protected:
  // The one read behind every pull above (Pull(table, options) calls it), which an implementation
  // of Client overrides. Not called directly: GCC does not warn about the dropped result of a
  // virtual call, so the non-virtual Pull carries the [[nodiscard]].
  virtual Future DoPull(const Table& t, const PullOptions& options) = 0;
};

}  // namespace pushpull
