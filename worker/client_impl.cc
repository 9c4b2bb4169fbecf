// The worker client composed of its parts, and Client::Connect. Threading: see
// worker/client_impl.h.

#include "worker/client_impl.h"

#include <utility>

#include "common/log.h"
#include "worker/job_environment.h"

namespace pushpull {
namespace internal {
namespace {

// A worker's side of the control plane, from its options.
ControlOptions ControlOptionsOf(const ClientOptions& o) {
  return ControlOptions{o.scheduler,           o.heartbeat_interval_ms, o.scheduler_timeout_ms,
                        o.register_timeout_ms, o.requested_rank,        o.connect_timeout_ms};
}

}  // namespace

ClientImpl::ClientImpl(const ClientOptions& o, std::shared_ptr<Transport> transport)
    : options_(o),
      consistency_(ParseConsistency(o.consistency).value()),
      transport_(std::move(transport)),
      control_(*transport_, Role::kWorker, ControlOptionsOf(o)),
      queue_(*transport_),
      links_(*transport_, options_, control_, state_, requests_),
      sender_(options_, control_, state_, requests_, links_, queue_),
      control_calls_(options_, control_, state_, requests_, sender_),
      loop_(*transport_, control_, state_, requests_, links_, control_calls_, queue_) {}

ClientImpl::~ClientImpl() {
  links_.SetReceiver(nullptr);  // waits for a receiving caller's slice
  loop_.Stop();
  const Status closed = Status::Aborted("client closed");
  FailAll(state_, requests_, closed);
  loop_.FailUnsent(closed);
}

Status ClientImpl::Start() {
  PP_RETURN_IF_ERROR(control_.Register(""));
  state_.clock = control_.cluster().start_clock;  // a restored job resumes at its checkpoint's clock
  PP_ASSIGN_OR_RETURN(int64_t lowest, links_.Open());
  // Each server says where this rank's clock is. Ahead of the job's start: this client takes the
  // place of a dead worker, and goes on from the lowest of them (a server ahead, which the dead
  // one's last clock reached, answers what it redoes of that clock without applying it).
  if (lowest > state_.clock) {
    PP_LOG(Warning) << "worker " << control_.rank() << " takes a dead worker's place at clock " << lowest;
    state_.clock = lowest;
    replacement_ = true;
  }
  PP_RETURN_IF_ERROR(queue_.Open());
  links_.SetReceiver(&loop_);
  loop_.Start();
  return Status::OK();
}

ClientStats ClientImpl::stats() const {
  ClientStats st;
  {
    MutexLock l(&state_.mu);
    st = state_.stats;
  }
  st.unanswered_bytes = requests_.bytes();
  st.pulls_dropped = state_.dropped_pulls->count.load(std::memory_order_relaxed);
  return st;
}

Future ClientImpl::PostCall(std::shared_ptr<FutureState> fs, Commands cmds) {
  for (auto& c : cmds) c->part.fs = fs;
  sender_.Post(std::move(cmds));
  return Future(std::move(fs));
}

Future ClientImpl::Push(const Table& t, KeyBuffer keys, SharedFloats grads) {
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.Failed(st);
  Commands cmds;
  st = SplitPush(*info, keys, grads, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.RefusedPush(st);
  auto fs =
      sender_.NewState("push to table", t.name, static_cast<int64_t>(keys->size()), static_cast<int>(cmds.size()));
  return PostCall(std::move(fs), std::move(cmds));
}

Future ClientImpl::PushDense(const Table& t, SharedFloats grads) {
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.Failed(st);
  Commands cmds;
  st = SplitPushDense(*info, grads, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.RefusedPush(st);
  auto fs = sender_.NewState("dense push to table", t.name, -1, static_cast<int>(cmds.size()));
  return PostCall(std::move(fs), std::move(cmds));
}

Future ClientImpl::DoPull(const Table& t, const PullOptions& o) {
  if (o.view) ClientAccess::parts(o.view).reset();  // nothing of an earlier pull stays readable
  // Options that do not fit together, whatever the table holds.
  const std::string what = "pull from '" + t.name + "'";
  if (o.out && o.view)
    return sender_.FailedPull(
        Status::InvalidArgument(what + ": both PullOptions::out and view are set; a pull goes to one of them"), o.view);
  if (o.slot < -1)
    return sender_.FailedPull(Status::InvalidArgument(what + ": PullOptions::slot " + std::to_string(o.slot) +
                                                      ": -1 reads the parameters, 0 and up an optimizer slot"),
                              o.view);
  if (!o.keys && o.slot >= 0)
    return sender_.FailedPull(Status::InvalidArgument(what + ": PullOptions::slot " + std::to_string(o.slot) +
                                                      " without keys: a whole-table pull reads the parameters "
                                                      "only; name the rows whose optimizer state to read"),
                              o.view);
  if (!o.keys && t.sparse)
    return sender_.FailedPull(Status::InvalidArgument(what + ": no PullOptions::keys (a whole-table pull), but the "
                                                             "table is sparse: a pull of it names its keys"),
                              o.view);
  return o.keys ? PullKeys(t, o) : PullWholeTable(t, o);
}

Future ClientImpl::PullKeys(const Table& t, const PullOptions& o) {
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.FailedPull(st, o.view);  // (marks the view failed)
  Commands cmds;
  st = SplitPull(*info, o.keys, o.slot, o.create, o.out, o.view, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.FailedPull(st, o.view);
  auto fs = sender_.NewState(o.slot < 0 ? "pull from table" : "pull of optimizer slot from", t.name,
                             static_cast<int64_t>(o.keys->size()), static_cast<int>(cmds.size()));
  if (o.out) fs->dropped = state_.dropped_pulls;  // a pull into the caller's memory
  return PostCall(std::move(fs), std::move(cmds));
}

Future ClientImpl::PullWholeTable(const Table& t, const PullOptions& o) {
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.FailedPull(st, o.view);
  Commands cmds;
  st = SplitPullDense(*info, o.out, o.view, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.FailedPull(st, o.view);
  auto fs = sender_.NewState("dense pull from table", t.name, -1, static_cast<int>(cmds.size()));
  if (o.out) fs->dropped = state_.dropped_pulls;
  return PostCall(std::move(fs), std::move(cmds));
}

Result<std::vector<uint32_t>> ClientImpl::GroupByServer(const Table& t, std::vector<Key>* keys) {
  const TableInfo* info;
  PP_RETURN_IF_ERROR(state_.CheckTable(t, &info));
  std::vector<uint32_t> order;
  PP_RETURN_IF_ERROR(GroupKeysByServer(*info, keys, num_servers(), &order));
  return order;
}

Result<std::unique_ptr<Client>> ConnectOver(const ClientOptions& given, std::shared_ptr<Transport> transport) {
  PP_ASSIGN_OR_RETURN(const ClientOptions options, ResolveOptions(given));
  PP_RETURN_IF_ERROR(ControlOptionsOf(options).Validate());
  if (options.request_timeout_ms < 1)
    return Status::InvalidArgument("request_timeout_ms must be at least 1, not " +
                                   std::to_string(options.request_timeout_ms));
  if (options.max_unanswered_mb < 0)
    return Status::InvalidArgument("max_unanswered_mb must be 0 (no limit) or more, not " +
                                   std::to_string(options.max_unanswered_mb));
  auto c = std::make_unique<ClientImpl>(options, std::move(transport));
  PP_RETURN_IF_ERROR(c->Start());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace internal

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  return internal::ConnectOver(options, NewZmqTransport());
}

namespace {
// The keyed pulls' own check: null keys would make them whole-table pulls, writing rows * dim
// floats into a destination sized for keys.
Future RefusedNullKeys(const char* call, const Table& t) {
  return Future(std::make_shared<internal::FutureState>(
      std::string(), 0, 0, 0, nullptr,
      Status::InvalidArgument(std::string(call) + " from '" + t.name +
                              "': no key buffer (null); the whole table is PullDense, or PullOptions with no keys")));
}
}  // namespace

Future Client::Pull(const Table& t, KeyBuffer keys, float* out) {
  if (!keys) return RefusedNullKeys("pull", t);
  PullOptions o;
  o.keys = std::move(keys);
  o.out = out;
  return Pull(t, o);
}

Future Client::Lookup(const Table& t, KeyBuffer keys, float* out) {
  if (!keys) return RefusedNullKeys("lookup", t);
  PullOptions o;
  o.keys = std::move(keys);
  o.out = out;
  o.create = false;
  return Pull(t, o);
}

}  // namespace pushpull
