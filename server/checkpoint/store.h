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
//
// This file is the store: the directory names, MANIFEST and LATEST, which the scheduler reads
// and writes. A server's file of shards is server/checkpoint/shard_file.h; the crash-safe file
// I/O under both is server/checkpoint/file_io.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pushpull/status.h"

namespace pushpull::checkpoint {

std::string CheckpointDir(const std::string& root, int64_t clock);
std::string ServerCheckpointFile(const std::string& dir, int rank);

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

}  // namespace pushpull::checkpoint
