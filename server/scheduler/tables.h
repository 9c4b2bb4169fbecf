// Table creation (server/scheduler/scheduler.h): a worker's CreateTable gets the table its id and is sent
// to every server; the worker is answered once every server created it, or with the first
// refusal, or when table_timeout_ms passed. The same spec asked again is answered with the table
// (any number of workers may create it); another spec under its name is refused.
//
// Threading: the scheduler's loop thread only (scheduler_state.h).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/time.h"
#include "server/scheduler/state.h"

namespace pushpull::scheduler {

class Tables {
 public:
  explicit Tables(State* state) : state_(*state), options_(state->options) {}
  Tables(const Tables&) = delete;
  Tables& operator=(const Tables&) = delete;

  // A worker's kCreateTable.
  void HandleCreate(const std::string& identity, const Header& h);
  // A server's kCreateTableReply.
  void HandleServerReply(const Node& server, const Header& h);
  // Once a pass while the job runs: the servers that have not answered are asked again, and a
  // creation past its deadline fails.
  void Check();
  // The job ended: every creation in progress is answered with `st`.
  void FailAll(const Status& st);
  size_t created() const { return tables_.size(); }

 private:
  struct PendingTable {
    TableInfo info;
    std::vector<Waiter> waiters;
    std::set<int> acked;  // server ranks
    Deadline deadline = Deadline::Never();
    uint64_t request_id = 0;
    int64_t resend_ms = 0;  // when the servers that have not answered are asked again
  };
  static Header Request(const PendingTable& p);

  State& state_;
  const SchedulerOptions& options_;
  std::map<std::string, TableInfo> tables_;  // by name
  std::map<std::string, PendingTable> pending_;
  // By name: creations that failed (a server refused, or did not answer in time). Tried again, a
  // table keeps its id (HandleCreate).
  std::map<std::string, TableInfo> failed_;
  uint32_t next_table_id_ = 0;
};

}  // namespace pushpull::scheduler
