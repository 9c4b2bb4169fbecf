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
  Result<int64_t> lowest = links_.Open();
  if (!lowest.ok()) return lowest.status();
  // Each server says where this rank's clock is. Ahead of the job's start: this client takes the
  // place of a dead worker, and goes on from the lowest of them (a server ahead, which the dead
  // one's last clock reached, answers what it redoes of that clock without applying it).
  if (*lowest > state_.clock) {
    PP_LOG(Warning) << "worker " << control_.rank() << " takes a dead worker's place at clock " << *lowest;
    state_.clock = *lowest;
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

Future ClientImpl::PullKeys(const Table& t, KeyBuffer keys, int slot, float* out, PulledRows* view, bool create) {
  if (view) ClientAccess::parts(view).reset();  // nothing of an earlier pull stays readable
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.FailedPull(st, view);  // (marks the view failed)
  Commands cmds;
  st = SplitPull(*info, keys, slot, create, out, view, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.FailedPull(st, view);
  auto fs = sender_.NewState(slot < 0 ? "pull from table" : "pull of optimizer slot from", t.name,
                             static_cast<int64_t>(keys->size()), static_cast<int>(cmds.size()));
  fs->writes_destination = out != nullptr;
  return PostCall(std::move(fs), std::move(cmds));
}

Future ClientImpl::PullWholeTable(const Table& t, float* out, PulledRows* view) {
  if (view) ClientAccess::parts(view).reset();
  const TableInfo* info;
  Status st = state_.CheckTable(t, &info);
  if (!st.ok()) return sender_.FailedPull(st, view);
  Commands cmds;
  st = SplitPullDense(*info, out, view, num_servers(), state_.clock, &cmds);
  if (!st.ok()) return sender_.FailedPull(st, view);
  auto fs = sender_.NewState("dense pull from table", t.name, -1, static_cast<int>(cmds.size()));
  fs->writes_destination = out != nullptr;
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
  Result<ClientOptions> resolved = ResolveOptions(given);
  if (!resolved.ok()) return resolved.status();
  const ClientOptions& options = *resolved;
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

}  // namespace pushpull
