// Checkpoints (DESIGN.md "Failure model", stage 2). At a clock boundary every live worker calls
// Client::Checkpoint(); the scheduler, once all have, asks every server to write its shards; a
// server does so once every live worker's clock has reached the boundary and its update threads
// are idle, so each file holds exactly the updates tagged below the boundary (under BSP: every
// closed clock's mean, no open sum). When every server has written, the scheduler writes the
// MANIFEST and points LATEST at it; only then do the workers go on. A job started with
// --restore_from resumes every table, optimizer state and clock from the newest complete one.
//
//   <root>/ckpt-0000000120/server-0.ckpt   one server's shards of every table
//   <root>/ckpt-0000000120/MANIFEST        clock, servers, workers (written last)
//   <root>/LATEST                          "ckpt-0000000120" (renamed into place)
//
// Every file is written to a temporary name, fsync'd and renamed, so a crash leaves the previous
// checkpoint intact. A server file ends with its length and a CRC-32C of everything before it,
// checked before a byte of it is trusted. Rows are stored in the shard's row order whatever the
// number of update threads, so a job may resume with another --update_threads, and with another
// number of servers (each then gathers the rows it owns from every file).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "pushpull/status.h"
#include "server/table_shard.h"

namespace pushpull {

std::string CheckpointDir(const std::string& root, int64_t clock);
std::string ServerCheckpointFile(const std::string& dir, int rank);

// One table as a server's checkpoint file holds it.
struct TableCheckpoint {
  TableInfo info;
  int64_t table_step = 0;  // the schedule's step: SSP/ASP pushes applied; BSP the clock, one past the last applied
  ShardRows rows;
};

// Writes this server's shards of `tables` into dir (created if missing) as of `clock`. Only
// while no update thread works on them. *bytes: the file's size. `abandon`, when given, is asked
// before each write of at most 4 MB (the last comes just before the sync): once it says yes, the write
// stops, what it wrote is removed and the result is Aborted (a server stopping mid-write).
// kept: tables restored from a checkpoint that no worker has created again yet, written as they
// were read (a table is part of the job's state whether or not this run has used it yet).
Status WriteServerCheckpoint(const std::string& dir, int rank, int num_servers, int64_t clock,
                             const std::vector<const TableShard*>& tables, uint64_t* bytes,
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

// Creates `dir` (and its parents) when missing and checks that a file can be written in it:
// InvalidArgument naming it otherwise (an operator's setup: it fails the same way again).
Status EnsureWritableDir(const std::string& dir);

struct CheckpointManifest {
  int64_t clock = 0;
  int servers = 0;
  int workers = 0;
  std::string dir;  // <root>/ckpt-<clock>
  // How the run that took it counts its clocks (Client::Checkpoint's description: an app's
  // epochs and what they follow from); empty when it gave none. One line.
  std::string run;
};
// Before a checkpoint is written into dir (under root): one committed there earlier (another
// run's, at the same clock) is uncommitted first, so that a failed write cannot leave its MANIFEST
// over files of two runs; FailedPrecondition when it is the one LATEST names (the newest is never
// rewritten in place). own_before: this job's newest complete checkpoint (its last committed, or
// the one it restored), which LATEST then names while dir is rewritten; "" or not under root:
// LATEST goes (never to another run's checkpoint: a restart would resume from it).
Status PrepareCheckpointDir(const std::string& root, const std::string& dir, const std::string& own_before = "");
// dir's MANIFEST, checked, with every server file it names present.
Result<CheckpointManifest> ReadManifest(const std::string& dir);
// Writes dir's MANIFEST, then LATEST, then deletes all but the `keep` newest checkpoints.
Status CommitCheckpoint(const std::string& root, const CheckpointManifest& m, int keep);
// The newest complete checkpoint under root (LATEST and its MANIFEST); NotFound when none.
Result<CheckpointManifest> ReadLatestCheckpoint(const std::string& root);
// The checkpoint directories under root (ckpt-...), oldest first (names sort by clock); none
// where root cannot be listed.
std::vector<std::string> CheckpointNames(const std::string& root);
// Reads every server file m names once, checking its length and CRC-32C (nothing is decoded):
// Corruption naming the first damaged file, NotFound for a missing one.
Status VerifyCheckpointFiles(const CheckpointManifest& m);
// What a job resuming from `root` restores: the checkpoint LATEST names when every file of it is
// intact, else the newest older complete one that is (a disk or copy that damaged the newest
// must not end the job when the one before it is sound). *skipped gets one line per damaged or
// incomplete checkpoint passed over. Checkpoints newer than LATEST's are another run's and are
// never taken. The first error when none is usable.
Result<CheckpointManifest> NewestIntactCheckpoint(const std::string& root, std::vector<std::string>* skipped);

}  // namespace pushpull
