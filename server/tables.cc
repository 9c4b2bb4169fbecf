#include "server/tables.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "common/log.h"

namespace pushpull::server {

Tables::Tables(ServerContext* ctx, ControlChannel* control)
    : ctx_(ctx),
      control_(control),
      cow_budget_(std::make_shared<table::CopyOnWriteBudget>(ctx->options.copy_on_write_budget_bytes,
                                                             ctx->options.copy_on_write_wait_ms)),
      memory_(std::make_shared<table::ByteBudget>(ctx->options.max_table_bytes)) {}

Status Tables::ReadRestore(const ClusterMap& cluster) {
  if (cluster.restore_from.empty()) return Status::OK();
  const int rank = ctx_->rank.load();
  auto r = WhileHeartbeating(control_, [&] {
    return checkpoint::ReadCheckpointForServer(cluster.restore_from, rank, static_cast<int>(cluster.servers.size()),
                                               /*in_blocks=*/true);  // (a stripe per block takes each as read)
  });
  if (!r.ok()) {
    // A damaged or missing file: every restart meets it again (pushpull-server exits 2), and
    // the checkpoint before it may do.
    std::filesystem::path dir = std::filesystem::path(cluster.restore_from).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();  // (a trailing slash)
    const std::string root = dir.has_parent_path() ? dir.parent_path().string() : std::string(".");
    Status st =
        Status(r.status().code(), r.status().message() +
                                      "; to resume from an earlier checkpoint, give the scheduler (or pushpull-launch) "
                                      "--restore_from=" +
                                      root + "/ckpt-... (pushpull-checkpoint --dir=" + root + " lists them)");
    PP_LOG(Error) << "cannot restore: " << st.ToString();
    return st.Annotate("restoring from " + cluster.restore_from);
  }
  restore_ = std::move(r.value());
  PP_LOG(Info) << "restoring " << Count(restore_.size(), "table") << " at clock " << cluster.start_clock << " from "
               << cluster.restore_from;
  return Status::OK();
}

void Tables::FreeRetired(const std::function<bool(const table::TableShard*)>& used) {
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [&](const auto& t) { return !used(t.get()); }),
                 retired_.end());
}

Status Tables::Create(const TableInfo& info, const std::function<void(const std::string& name)>& before_restore) {
  Status st = info.spec.Validate();
  const int S = static_cast<int>(control_->cluster().servers.size());
  if (st.ok() && info.num_servers() != S)
    st = Status::InvalidArgument("table partitioned over " + std::to_string(info.num_servers()) + " servers");
  if (st.ok() && info.id >= TableInfo::kMaxTables)
    st = Status::InvalidArgument("table id " + std::to_string(info.id) + " is over the most a job may use");
  if (st.ok()) {  // (the rows' owners are looked up by it: a partition of another shape reads out of bounds)
    const TableInfo expect = TableInfo::Make(info.id, info.spec, S);
    if (info.row_offsets != expect.row_offsets || info.bucket_owner != expect.bucket_owner)
      st = Status::InvalidArgument("table " + std::to_string(info.id) + "'s partition is not the one its spec and " +
                                   std::to_string(S) + " servers give");
  }
  if (!st.ok()) return st;
  if (info.id >= tables_.size()) tables_.resize(info.id + 1);
  if (tables_[info.id] && !(tables_[info.id]->spec() == info.spec))
    return Status::FailedPrecondition("table id " + std::to_string(info.id) + " is " +
                                      tables_[info.id]->spec().ToString() + " here, not " + info.spec.ToString());
  if (tables_[info.id]) return Status::OK();
  // One table a name: one under another id is what a failed creation left here (the scheduler
  // gives a name a new id only when it was tried with another spec and no creation of it
  // succeeded; no worker knows that id), so it goes.
  for (auto& t : tables_) {
    if (!t || t->spec().name != info.spec.name) continue;
    PP_LOG(Warning) << "dropping table " << t->info().id << " " << t->spec().ToString()
                    << ", left by a failed creation, for table " << info.id << " of that name";
    retired_.push_back(std::move(t));
    --ctx_->stats.tables;
  }
  auto saved = restore_.find(info.spec.name);
  if (auto failed = restore_failed_.find(info.spec.name); failed != restore_failed_.end())
    st = Status(failed->second.code(), "table '" + info.spec.name + "' cannot be restored by this server any more: " +
                                           failed->second.message() + " (restart the job to restore it again)");
  if (st.ok() && saved != restore_.end()) before_restore(info.spec.name);
  const bool fill = saved == restore_.end();
  std::unique_ptr<table::TableShard> shard;
  if (st.ok()) try {
      const int rank = ctx_->rank.load();
      shard = WhileHeartbeating(control_, [&] {
        return std::make_unique<table::TableShard>(info, rank, ctx_->options.update_threads, fill, cow_budget_,
                                                   memory_);
      });
    } catch (const table::TableMemoryExhausted& e) {  // (the scheduler names the server)
      st = Status::ResourceExhausted(e.what());
    } catch (const std::bad_alloc&) {
      st = Status::ResourceExhausted("out of memory for table " + info.spec.ToString());
    } catch (const std::exception& e) {  // (answered, not dropped: the scheduler would ask again and again)
      st = Status::Internal("table " + info.spec.ToString() + ": " + e.what());
    }
  if (!st.ok()) PP_LOG(Error) << "refused table " << info.id << ": " << st.ToString();
  if (st.ok() && saved != restore_.end()) {
    // The checkpoint's rows must be this table's: same shape, optimizer state and consistency
    // model (TableSpec::CanRestoreFrom), same partition over this job's servers
    // (ReadCheckpointForServer re-partitions a checkpoint of another server count). Its
    // learning rate, schedule and the like may change: said, and taken.
    const TableInfo& was = saved->second.info;
    const std::string changed = info.spec.DifferencesFrom(was.spec);
    if (!info.spec.CanRestoreFrom(was.spec) || was.row_offsets != info.row_offsets ||
        was.bucket_owner != info.bucket_owner)
      // (The job's flags and the checkpoint disagree: a setup error, the same on every restart,
      // so InvalidArgument, which a worker exits 2 on.)
      st = Status::InvalidArgument(
          "table '" + info.spec.name + "' cannot take the checkpoint's rows: " +
          (changed.empty() ? std::string("its partition over the servers differs") : changed) +
          " (checkpoint -> asked for; its shape, optimizer state and consistency model must stay)");
    else if (!changed.empty())
      PP_LOG(Warning) << "table '" << info.spec.name << "' restored under new settings: " << changed
                      << " (checkpoint -> now)";
    bool consumed = false;  // (the rows are the shard's, whatever Restore answers)
    if (st.ok()) {
      try {
        consumed = true;
        st = WhileHeartbeating(control_, [&] { return shard->Restore(std::move(saved->second.rows)); });
      } catch (const std::bad_alloc&) {
        st = Status::ResourceExhausted("out of memory restoring table " + info.spec.ToString());
      }
    }
    if (st.ok()) {
      shard->table_step = saved->second.table_step;
      restore_.erase(saved);
      PP_LOG(Info) << "table " << info.id << " '" << info.spec.name << "' restored from the checkpoint";
    } else if (consumed) {
      restore_failed_.emplace(info.spec.name, st);
      restore_.erase(saved);
    }
  }
  if (st.ok()) {
    tables_[info.id] = std::move(shard);
    ++ctx_->stats.tables;
    PP_LOG(Info) << "created table " << info.id << " " << info.spec.ToString();
  }
  return st;
}

}  // namespace pushpull::server
