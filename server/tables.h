// A server's tables: its shard of each (server/table/shard.h), by table id; their creation when
// the scheduler asks (kCreateTable), and their restore from the checkpoint the job resumes from
// (the rows read at start, taken by each table as it is created again). Also the two budgets
// every shard shares: the copy-on-write memory and the limit on what the tables hold.
//
// Threading: the I/O thread's only, except that a checkpoint writer thread reads the shards and
// the saved rows (restoring()) while the I/O thread leaves them alone (server/checkpoint_writer.h),
// and the budgets, which are thread-safe. Filling or restoring a large table runs on a helper
// thread while the I/O thread keeps the heartbeats going (WhileHeartbeating).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cluster.h"
#include "common/control.h"
#include "pushpull/status.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/store.h"
#include "server/server_context.h"
#include "server/table/shard.h"

namespace pushpull::server {

// Runs f on another thread while this one keeps the heartbeats to the scheduler going: filling
// or restoring a large table takes seconds, which would otherwise look like a dead server.
template <typename F>
auto WhileHeartbeating(ControlChannel* control, F&& f) -> decltype(f()) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  while (done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) control->Tick().IgnoreError();
  return done.get();
}

class Tables {
 public:
  Tables(ServerContext* ctx, ControlChannel* control);
  Tables(const Tables&) = delete;
  Tables& operator=(const Tables&) = delete;

  // Memory for arrays that pull replies hold while their stripe moved on (every table's).
  const std::shared_ptr<table::CopyOnWriteBudget>& cow_budget() const { return cow_budget_; }
  // What every table's rows hold, against ServerOptions::max_table_bytes.
  const table::ByteBudget& memory() const { return *memory_; }

  // Table `id`'s shard here (nullptr: none).
  table::TableShard* Find(uint32_t id) const { return id < tables_.size() ? tables_[id].get() : nullptr; }
  // Every shard, by table id (null where none).
  const std::vector<std::unique_ptr<table::TableShard>>& all() const { return tables_; }

  // Reads this server's rows of the checkpoint the job resumes from (cluster.restore_from), if
  // any: each table takes its own as it is created again. An error (a damaged or missing file)
  // says which earlier checkpoint to try; the server cannot serve.
  Status ReadRestore(const ClusterMap& cluster);
  // The checkpoint's tables not created again yet (a checkpoint written meanwhile writes them
  // too, as read), and those whose restore failed part way, with why.
  const std::map<std::string, checkpoint::TableCheckpoint>& restoring() const { return restore_; }
  const std::map<std::string, Status>& restore_failed() const { return restore_failed_; }

  // Creates table `info` (kCreateTable), restoring its rows when the checkpoint holds them; OK
  // when it is there already with that spec. before_restore(name) runs before a checkpoint's saved
  // rows are taken: the checkpoint writer may be reading them (it waits for the writer).
  Status Create(const TableInfo& info, const std::function<void(const std::string& name)>& before_restore);

  // Tables a failed creation left here, dropped but not freed yet: something may still use them
  // (the checkpoint writer, a request handed to the update threads, a parked pull).
  bool has_retired() const { return !retired_.empty(); }
  // Frees those `used` does not claim. With no checkpoint being written and nothing handed to the
  // update threads.
  void FreeRetired(const std::function<bool(const table::TableShard*)>& used);

 private:
  ServerContext* const ctx_;
  ControlChannel* const control_;
  const std::shared_ptr<table::CopyOnWriteBudget> cow_budget_;
  const std::shared_ptr<table::ByteBudget> memory_;
  std::vector<std::unique_ptr<table::TableShard>> tables_;  // by table id
  std::vector<std::unique_ptr<table::TableShard>> retired_;
  // Restoring: the checkpoint's tables of this server not created yet, by name. A restore that
  // failed part way consumed its rows: its error, for every later creation of the name (a retry
  // would restore an empty table).
  std::map<std::string, checkpoint::TableCheckpoint> restore_;
  std::map<std::string, Status> restore_failed_;
};

}  // namespace pushpull::server
