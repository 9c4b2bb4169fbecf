#include "server/scheduler/tables.h"

#include "common/log.h"

namespace pushpull::scheduler {

void Tables::HandleCreate(const std::string& identity, const Header& h) {
  Waiter w{identity, h.request_id};
  const TableSpec& spec = h.spec;
  Status st = spec.Validate();
  if (!st.ok()) {
    state_.ReplyTo(w, MsgType::kCreateTableReply, st);
    return;
  }
  auto done = tables_.find(spec.name);
  if (done != tables_.end()) {
    if (done->second.spec == spec)
      state_.ReplyTo(w, MsgType::kCreateTableReply, Status::OK(), &done->second);
    else
      state_.ReplyTo(w, MsgType::kCreateTableReply,
                     Status::AlreadyExists("table '" + spec.name + "' exists as " + done->second.spec.ToString() +
                                           "; asked for " + spec.ToString()));
    return;
  }
  auto pending = pending_.find(spec.name);
  if (pending != pending_.end()) {
    if (pending->second.info.spec == spec)
      pending->second.waiters.push_back(w);
    else
      state_.ReplyTo(w, MsgType::kCreateTableReply,
                     Status::AlreadyExists("table '" + spec.name + "' is being created with another spec"));
    return;
  }
  if (next_table_id_ >= TableInfo::kMaxTables && !failed_.count(spec.name)) {
    state_.ReplyTo(w, MsgType::kCreateTableReply,
                   Status::ResourceExhausted("table '" + spec.name + "': this job has used all " +
                                             std::to_string(TableInfo::kMaxTables) + " table ids"));
    return;
  }
  PendingTable& p = pending_[spec.name];
  // A creation tried before and failed (a server refused it or did not answer in time) may have
  // succeeded on some servers: the same table again is the same id, which those servers answer
  // at once, so that every server holds the table once (and a restored one holds its
  // checkpoint's rows, which a server reads into the first table of that name it creates).
  auto tried = failed_.find(spec.name);
  p.info = tried != failed_.end() && tried->second.spec == spec
               ? tried->second
               : TableInfo::Make(next_table_id_++, spec, options_.num_servers);
  p.waiters.push_back(w);
  p.deadline = Deadline::In(options_.table_timeout_ms);
  p.request_id = state_.NextRequestId();
  if (state_.ResendDue(&p.resend_ms)) state_.SendToServers(Request(p), p.acked);
}

Header Tables::Request(const PendingTable& p) {
  Header h;
  h.type = MsgType::kCreateTable;
  h.request_id = p.request_id;
  h.info = p.info;
  return h;
}

void Tables::HandleServerReply(const Node& server, const Header& h) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    PendingTable& p = it->second;
    if (p.request_id != h.request_id) continue;
    if (h.status != Code::kOk) {
      Status st =
          h.status_obj().Annotate("server " + std::to_string(server.rank) + " refused table '" + it->first + "'");
      for (auto& w : p.waiters) state_.ReplyTo(w, MsgType::kCreateTableReply, st);
      failed_[it->first] = p.info;
      pending_.erase(it);
      return;
    }
    p.acked.insert(server.rank);
    if (static_cast<int>(p.acked.size()) == options_.num_servers) {
      PP_LOG(Info) << "table " << p.info.id << " " << p.info.spec.ToString() << " created";
      tables_[it->first] = p.info;
      failed_.erase(it->first);
      for (auto& w : p.waiters) state_.ReplyTo(w, MsgType::kCreateTableReply, Status::OK(), &p.info);
      pending_.erase(it);
    }
    return;
  }
}

void Tables::Check() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!it->second.deadline.Expired()) {
      if (state_.ResendDue(&it->second.resend_ms)) state_.SendToServers(Request(it->second), it->second.acked);
      ++it;
      continue;
    }
    std::string missing;
    for (Node* s : state_.servers)
      if (!it->second.acked.count(s->rank)) missing += (missing.empty() ? "" : ", ") + NodeName(*s);
    Status st = Status::DeadlineExceeded("creating table '" + it->first + "': no answer within " +
                                         std::to_string(options_.table_timeout_ms) + " ms from " + missing);
    for (auto& w : it->second.waiters) state_.ReplyTo(w, MsgType::kCreateTableReply, st);
    failed_[it->first] = it->second.info;
    it = pending_.erase(it);
  }
}

void Tables::FailAll(const Status& st) {
  for (auto& [name, p] : pending_)
    for (auto& w : p.waiters) state_.ReplyTo(w, MsgType::kCreateTableReply, st);
  pending_.clear();
}

}  // namespace pushpull::scheduler
