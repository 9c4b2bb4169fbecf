// The cluster's shared vocabulary (internal): how tables are partitioned over servers, the
// cluster map and membership the scheduler hands out. Plain values; the table specs they hold are
// public (pushpull/table.h), their wire form is common/wire.cc's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pushpull/status.h"
#include "pushpull/table.h"

namespace pushpull {

// A 64-bit mixer (Steele et al.'s SplitMix64 finaliser): ids to buckets, seeds to streams.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

enum class Role : uint8_t { kScheduler = 0, kServer = 1, kWorker = 2 };
const char* RoleName(Role r);

// A table as the scheduler created it: its id and its partition over the servers.
struct TableInfo {
  static constexpr uint32_t kBuckets = 1024;       // sparse ids hash into this many virtual buckets
  static constexpr uint32_t kMaxTables = 1 << 20;  // table ids a job may use: [0, kMaxTables)
  uint32_t id = 0;
  TableSpec spec;
  // Dense: server s owns rows [row_offsets[s], row_offsets[s+1]). Size num_servers + 1.
  std::vector<uint64_t> row_offsets;
  // Sparse: bucket b is owned by server bucket_owner[b]. Size kBuckets.
  std::vector<uint16_t> bucket_owner;

  // Dense: server s's rows are cut into blocks from its first row on, each BlockRows(s) rows (the
  // last one fewer): kBlockBytes of parameters, at least one row, and more when a server holds
  // over kMaxBlocks such blocks. A block is what a server copies on write (a stripe holds whole
  // blocks) and what a client sends as one request: a larger dense push or pull goes as one
  // request per block, in row order, so that the server applies one block while the next one
  // arrives and answers a pull's first block before its last one has been read.
  static constexpr uint64_t kBlockBytes = uint64_t(1) << 20;
  static constexpr uint64_t kMaxBlocks = 64;  // per server (a pull reply's value frames: kMaxValueFrames)
  uint64_t BlockRows(int s) const;
  // Sparse: a server keeps each stripe's rows in blocks of KeyedBlockRows rows (kBlockBytes of
  // parameters, at least one row), in the order the rows were first touched, and copies them on
  // write a block at a time. A client sends a keyed call's part for one server as requests of at
  // most that many keys, in call order (more when the part would make over kMaxBlocks requests):
  // a recurring key set, pushed and pulled alike every step, then makes its rows block by block,
  // and each of its requests reads and writes about one block.
  static uint64_t KeyedBlockRows(uint32_t dim) {
    return std::max<uint64_t>(1, kBlockBytes / (uint64_t(std::max<uint32_t>(dim, 1)) * sizeof(float)));
  }
  // A keyed call's requests to a server of n of its keys: at most this many keys each (sparse,
  // as above; dense: all n).
  uint64_t KeysPerRequest(uint64_t n) const;

  static TableInfo Make(uint32_t id, const TableSpec& spec, int num_servers);
  int num_servers() const { return static_cast<int>(row_offsets.size()) - 1; }
  // Owner of a row id; the caller has checked a dense id is < rows.
  int OwnerOf(Key key) const;
  static uint32_t BucketOf(Key key) { return static_cast<uint32_t>(SplitMix64(key) % kBuckets); }
  // Sparse: the stripe of a server's shard of `stripes` that holds `key` (server/table/shard.h).
  static int SparseStripeOf(Key key, int stripes) {
    return stripes <= 1 ? 0 : static_cast<int>((SplitMix64(key) >> 32) % uint64_t(stripes));
  }
};

struct ServerAddress {
  int32_t rank = 0;
  std::string address;  // e.g. tcp://10.0.0.5:41234
};

struct ClusterMap {
  int32_t num_workers = 0;
  std::vector<ServerAddress> servers;
  // A job restored from a checkpoint (server/checkpoint/store.h): its directory and clock, where every
  // worker starts. Empty / 0 for a fresh job.
  std::string restore_from;
  int64_t start_clock = 0;
  std::string restore_run;   // the checkpoint's run description (Client::restored_run)
  bool checkpoints = false;  // the scheduler has a checkpoint directory: Client::Checkpoint() can work
  // The job goes on after a worker dies (--on_worker_death=continue or wait): a Clock() after
  // pushes to a BSP table is settled (kFlagSettled; not needed where a death ends the job).
  bool survives_worker_death = false;
  // The scheduler's deadline for each checkpoint phase (--checkpoint_timeout_s), ms: a worker's
  // Checkpoint() waits past both phases' (ClientOptions::checkpoint_timeout_ms).
  int64_t checkpoint_timeout_ms = 0;
};

// Which nodes are alive and whether the job is ending; the scheduler pushes it on every change
// and repeats it on each heartbeat reply.
struct Membership {
  enum JobState : uint8_t { kRunning = 0, kFinished = 1, kAborted = 2 };
  // worker_alive[w]: kWorkerDead, kWorkerAlive, kWorkerReplacing (declared dead; the job waits
  // for a new worker to take its rank: everyone still waits for its clock, nobody takes its
  // requests), or kWorkerDying (declared dead a moment ago: nobody takes its requests, every
  // server still waits for its clock and says where that clock is, kWorkerClocks; once all have,
  // the scheduler declares it dead or replacing with the clock they agree on, worker_last_clock).
  enum WorkerState : uint8_t { kWorkerDead = 0, kWorkerAlive = 1, kWorkerReplacing = 2, kWorkerDying = 3 };
  uint64_t version = 0;
  std::vector<uint8_t> worker_alive;
  // Per worker declared dead or replacing: the clock every server takes it to have reached (a
  // server behind it, which its last Clock() did not reach, brings it there: see DESIGN.md,
  // "A worker dying between its clocks"); -1: none agreed (each server keeps its own).
  std::vector<int64_t> worker_last_clock;
  std::vector<uint8_t> server_alive;
  std::vector<uint8_t> worker_done;  // finished normally: no longer in anyone's clock vector
  JobState job_state = kRunning;
  std::string reason;  // why the job ended, or who died
};

// Deterministic initial value of element (row, col) of a table: independent of sharding.
float InitialValue(const TableSpec& spec, Key row, uint32_t col);

}  // namespace pushpull
