// A server's checkpoint file: its shards of every table, with optimizer state, as of one clock
// (server/checkpoint/store.h has where it goes). Rows are stored in the shard's row order whatever
// the number of update threads, so a job may resume with another --update_threads, and with
// another number of servers (each then gathers the rows it owns from every file). The file ends
// with its length and a CRC-32C (server/checkpoint/file_io.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "pushpull/status.h"
#include "server/table/shard.h"

namespace pushpull::checkpoint {

// One table as a server's checkpoint file holds it.
struct TableCheckpoint {
  TableInfo info;
  int64_t table_step = 0;  // the schedule's step: SSP/ASP pushes applied; BSP the clock, one past the last applied
  table::ShardRows rows;
};

// Writes this server's shards of `tables` into dir (created if missing) as of `clock`. Only
// while no update thread works on them. *bytes: the file's size. `abandon`, when given, is asked
// before each write of at most 4 MB (the last comes just before the sync): once it says yes, the write
// stops, what it wrote is removed and the result is Aborted (a server stopping mid-write).
// kept: tables restored from a checkpoint that no worker has created again yet, written as they
// were read (a table is part of the job's state whether or not this run has used it yet).
Status WriteServerCheckpoint(const std::string& dir, int rank, int num_servers, int64_t clock,
                             const std::vector<const table::TableShard*>& tables, uint64_t* bytes,
                             const std::function<bool()>& abandon = nullptr,
                             const std::vector<const TableCheckpoint*>& kept = {});
// A table as a server's file describes it, its rows not read.
struct TableSummary {
  TableInfo info;
  int64_t table_step = 0;
  uint64_t rows = 0;
  uint32_t slots = 0;
};
// Reads and checks a server's file (checksum, then rank, server count and clock); tables by name.
// in_blocks: dense rows come in pieces of a block each (ShardRows::blocks), what a shard with a
// stripe per block takes without a copy. only: just that table's rows are kept (the others'
// are read through for the checksum, in constant memory). summary: every table's description.
Result<std::map<std::string, TableCheckpoint>> ReadServerCheckpoint(const std::string& dir, int rank, int num_servers,
                                                                    int64_t clock, bool in_blocks = false,
                                                                    const std::string* only = nullptr,
                                                                    std::vector<TableSummary>* summary = nullptr);
// What server `rank` of a job of `num_servers` restores from checkpoint dir: its own file when the
// checkpoint was written by as many servers; otherwise the rows it owns under the new partition,
// gathered from every file (re-sharding: a job may resume on more or fewer servers). The tables'
// info is the new partition's; a table's step is the largest any old server had.
// in_blocks: as ReadServerCheckpoint's, for a checkpoint of as many servers (a server restoring).
Result<std::map<std::string, TableCheckpoint>> ReadCheckpointForServer(const std::string& dir, int rank,
                                                                       int num_servers, bool in_blocks = false,
                                                                       const std::string* only = nullptr);

}  // namespace pushpull::checkpoint
