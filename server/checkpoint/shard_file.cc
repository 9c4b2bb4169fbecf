#include "server/checkpoint/shard_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/log.h"
#include "common/wire.h"
#include "server/checkpoint/file_io.h"
#include "server/checkpoint/store.h"

namespace pushpull::checkpoint {
namespace {

namespace fs = std::filesystem;

// A table's description, stored as the CreateTable message that made it (the wire's own,
// bounds-checked encoding).
std::string EncodeInfo(const TableInfo& info) {
  Header h;
  h.type = MsgType::kCreateTable;
  h.info = info;
  h.spec = info.spec;
  return EncodeHeaderCereal(h);
}

}  // namespace

Status WriteServerCheckpoint(const std::string& dir, int rank, int num_servers, int64_t clock,
                             const std::vector<const table::TableShard*>& tables, uint64_t* bytes,
                             const std::function<bool()>& abandon, const std::vector<const TableCheckpoint*>& kept) {
  // Only the checkpoint's own directory is made: the root is the scheduler's, on a filesystem
  // every server shares. Missing here, this host does not see it (a mount gone, or never made),
  // and writing it afresh on a local disk would pass for a checkpoint nobody can restore.
  std::error_code ec;
  const std::string root = fs::path(dir).parent_path().string();
  if (!fs::is_directory(root, ec))
    return Status::InvalidArgument("checkpoint directory " + root + " does not exist on this server's host: " +
                                   "--checkpoint_dir must be a filesystem every server shares, mounted at that path");
  PP_RETURN_IF_ERROR(MakeDirs(dir));
  FileWriter w(ServerCheckpointFile(dir, rank), abandon);
  w.Put(kMagic, sizeof kMagic);
  w.Pod(int32_t(rank));
  w.Pod(int32_t(num_servers));
  w.Pod(int64_t(clock));
  w.Pod(uint32_t(tables.size() + kept.size()));
  for (const table::TableShard* t : tables) {
    const std::string info = EncodeInfo(t->info());
    w.Pod(uint32_t(info.size()));
    w.Put(info.data(), info.size());
    w.Pod(int64_t(t->table_step));
    const size_t dim = t->spec().dim;
    const int nslots = t->optimizer()->num_slots();
    const int S = t->num_stripes();
    // Stripes in order: a dense shard's rows come out in row order.
    auto stripe = [&](int i) -> const table::Stripe& { return t->stripe(i); };
    uint64_t rows = 0;
    for (int i = 0; i < S; ++i) rows += stripe(i).num_rows();
    w.Pod(rows);
    w.Pod(uint32_t(dim));
    w.Pod(uint32_t(nslots));
    if (t->spec().sparse)
      for (int i = 0; i < S; ++i) {
        std::vector<Key> keys = stripe(i).KeysByRow();
        w.Put(keys.data(), keys.size() * sizeof(Key));
      }
    for (int i = 0; i < S; ++i)  // (a block's rows are contiguous)
      for (size_t r = 0, n = stripe(i).num_rows(), b = stripe(i).block_rows(); r < n; r += b)
        w.Put(stripe(i).row_params(r), std::min<size_t>(b, n - r) * dim * sizeof(float));
    for (int s = 0; s < nslots; ++s)
      for (int i = 0; i < S; ++i) w.Put(stripe(i).slot(s), stripe(i).num_rows() * dim * sizeof(float));
    for (int i = 0; i < S; ++i) w.Put(stripe(i).steps(), stripe(i).num_rows() * sizeof(uint32_t));
  }
  // The same layout from the rows as read: whole, or dense rows in pieces of a block each.
  for (const TableCheckpoint* t : kept) {
    const std::string info = EncodeInfo(t->info);
    w.Pod(uint32_t(info.size()));
    w.Put(info.data(), info.size());
    w.Pod(int64_t(t->table_step));
    const table::ShardRows& all = t->rows;
    std::vector<const table::ShardRows*> pieces;
    if (all.blocks.empty()) pieces.push_back(&all);
    for (const table::ShardRows& b : all.blocks) pieces.push_back(&b);
    const size_t nslots = pieces.front()->slots.size();
    w.Pod(uint64_t(all.rows()));
    w.Pod(uint32_t(t->info.spec.dim));
    w.Pod(uint32_t(nslots));
    w.Put(all.keys.data(), all.keys.size() * sizeof(Key));
    for (const table::ShardRows* p : pieces) w.Put(p->params.data(), p->params.size() * sizeof(float));
    for (size_t s = 0; s < nslots; ++s)
      for (const table::ShardRows* p : pieces) w.Put(p->slots[s].data(), p->slots[s].size() * sizeof(float));
    for (const table::ShardRows* p : pieces) w.Put(p->steps.data(), p->steps.size() * sizeof(uint32_t));
  }
  return w.Commit(bytes);
}

Result<std::map<std::string, TableCheckpoint>> ReadServerCheckpoint(const std::string& dir, int rank, int num_servers,
                                                                    int64_t clock, bool in_blocks,
                                                                    const std::string* only,
                                                                    std::vector<TableSummary>* summary) {
  FileReader r;
  PP_RETURN_IF_ERROR(r.Open(ServerCheckpointFile(dir, rank)));
  int32_t file_rank = 0, file_servers = 0;
  int64_t file_clock = 0;
  uint32_t num_tables = 0;
  if (!r.Pod(&file_rank) || !r.Pod(&file_servers) || !r.Pod(&file_clock) || !r.Pod(&num_tables))
    return r.Fail(r.error());
  if (file_rank != rank || file_servers != num_servers || file_clock != clock)
    return r.Fail("written by server " + std::to_string(file_rank) + " of " + std::to_string(file_servers) +
                  " at clock " + std::to_string(file_clock) + "; expected server " + std::to_string(rank) + " of " +
                  std::to_string(num_servers) + " at clock " + std::to_string(clock));
  std::map<std::string, TableCheckpoint> out;
  for (uint32_t i = 0; i < num_tables; ++i) {
    uint32_t info_bytes = 0;
    if (!r.Pod(&info_bytes) || info_bytes > kMaxHeaderBytes) return r.Fail("table description unreadable");
    std::string info(info_bytes, '\0');
    if (!r.Get(info.data(), info.size())) return r.Fail(r.error());
    Header h;
    // (Any protocol version with checkpoints may have written it, older ones included.)
    Status st = DecodeHeader(info.data(), info.size(), &h, kOldestCheckpointVersion);
    if (!st.ok() || h.type != MsgType::kCreateTable) return r.Fail("table description: " + st.ToString());
    TableCheckpoint t;
    t.info = h.info;
    if (Status valid = t.info.spec.Validate(); !valid.ok())  // (its checksum is checked at the end)
      return r.Fail("table description: " + valid.message() + " (damaged, or a table this build no longer creates)");
    // The partition must be the one this spec and server count give (re-sharding indexes by it).
    const TableInfo expect = TableInfo::Make(t.info.id, t.info.spec, num_servers);
    if (t.info.row_offsets != expect.row_offsets || t.info.bucket_owner != expect.bucket_owner)
      return r.Fail("table '" + t.info.spec.name + "': its description does not fit " + std::to_string(num_servers) +
                    " servers");
    uint64_t rows = 0;
    uint32_t dim = 0, nslots = 0;
    if (!r.Pod(&t.table_step) || !r.Pod(&rows) || !r.Pod(&dim) || !r.Pod(&nslots)) return r.Fail(r.error());
    const bool sparse = t.info.spec.sparse;
    if (!sparse && rows != expect.row_offsets[rank + 1] - expect.row_offsets[rank])
      return r.Fail("table '" + t.info.spec.name + "': " + std::to_string(rows) + " dense rows, server " +
                    std::to_string(rank) + " holds " +
                    std::to_string(expect.row_offsets[rank + 1] - expect.row_offsets[rank]));
    // Sizes are bounded by what the file holds before anything is allocated.
    const long double need = (long double)rows * ((sparse ? 8 : 0) + 4 + 4.0L * dim * (1 + nslots));
    if (dim != t.info.spec.dim || nslots > 8 || need > (long double)r.left())
      return r.Fail("table '" + t.info.spec.name + "': " + std::to_string(rows) + " rows of dim " +
                    std::to_string(dim) + " do not fit in the file");
    if (summary) summary->push_back({t.info, t.table_step, rows, nslots});
    if (only && t.info.spec.name != *only) {  // (read through for the checksum, not kept)
      if (!r.Skip(static_cast<uint64_t>(need))) return r.Fail(r.error());
      continue;
    }
    table::ShardRows& s = t.rows;
    if (sparse) {
      s.keys.resize(rows);
      r.Get(s.keys.data(), rows * sizeof(Key));
    }
    // The file holds each field for all rows in turn: read into a piece per block (in_blocks) or
    // one piece, which then becomes the fields themselves.
    const uint64_t block = in_blocks && !sparse && rows > 0 ? expect.BlockRows(rank) : std::max<uint64_t>(rows, 1);
    std::vector<table::ShardRows>& pieces = s.blocks;
    pieces.resize((rows + block - 1) / block);
    auto piece_rows = [&](size_t i) { return std::min<uint64_t>(block, rows - i * block); };
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].params.resize(piece_rows(i) * dim);
      r.Get(pieces[i].params.data(), pieces[i].params.size() * sizeof(float));
    }
    for (size_t i = 0; i < pieces.size(); ++i) pieces[i].slots.resize(nslots);
    for (uint32_t k = 0; k < nslots; ++k)
      for (size_t i = 0; i < pieces.size(); ++i) {
        pieces[i].slots[k].resize(piece_rows(i) * dim);
        r.Get(pieces[i].slots[k].data(), pieces[i].slots[k].size() * sizeof(float));
      }
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].steps.resize(piece_rows(i));
      r.Get(pieces[i].steps.data(), pieces[i].steps.size() * sizeof(uint32_t));
    }
    if (pieces.size() <= 1) {
      if (!pieces.empty()) {
        s.params = std::move(pieces[0].params);
        s.slots = std::move(pieces[0].slots);
        s.steps = std::move(pieces[0].steps);
      }
      pieces.clear();
      s.slots.resize(nslots);  // (no rows: empty ones)
    }
    if (!r.error().empty()) return r.Fail(r.error());
    const std::string name = t.info.spec.name;
    if (!out.emplace(name, std::move(t)).second) return r.Fail("table '" + name + "' appears twice");
  }
  PP_RETURN_IF_ERROR(r.Verify());
  return out;
}

Result<std::map<std::string, TableCheckpoint>> ReadCheckpointForServer(const std::string& dir, int rank,
                                                                       int num_servers, bool in_blocks,
                                                                       const std::string* only) {
  PP_ASSIGN_OR_RETURN(auto m, ReadManifest(dir));
  if (m.servers == num_servers) return ReadServerCheckpoint(dir, rank, num_servers, m.clock, in_blocks, only);
  // Another number of servers: this one's rows under the new partition, from every old file in
  // turn (old rank order: dense rows come out in row order), one old file in memory at a time.
  std::map<std::string, TableCheckpoint> out;
  std::map<std::string, int> files_with;  // per table: the old files that hold it
  for (int old = 0; old < m.servers; ++old) {
    PP_ASSIGN_OR_RETURN(auto file, ReadServerCheckpoint(dir, old, m.servers, m.clock, false, only));
    // Each table's old rows are let go once this server's are copied out.
    for (auto it = file.begin(); it != file.end(); it = file.erase(it)) {
      const std::string& name = it->first;
      TableCheckpoint& t = it->second;
      ++files_with[name];
      const TableInfo now = TableInfo::Make(t.info.id, t.info.spec, num_servers);
      TableCheckpoint& mine = out[name];
      if (old == 0 && !t.info.spec.sparse) {  // the rows this server will own, known up front
        const size_t rows = now.row_offsets[rank + 1] - now.row_offsets[rank], dim = t.info.spec.dim;
        mine.rows.params.reserve(rows * dim);
        mine.rows.slots.assign(t.rows.slots.size(), {});
        for (auto& sl : mine.rows.slots) sl.reserve(rows * dim);
        mine.rows.steps.reserve(rows);
      }
      mine.info = now;
      // BSP: the clock, the same in every file. SSP/ASP count pushes per server: the most of them.
      mine.table_step = std::max(mine.table_step, t.table_step);
      const size_t dim = t.info.spec.dim;
      table::ShardRows& in = t.rows;
      table::ShardRows& to = mine.rows;
      if (to.slots.size() != in.slots.size()) to.slots.resize(in.slots.size());
      for (size_t r = 0; r < in.rows(); ++r) {
        const Key key = t.info.spec.sparse ? in.keys[r] : t.info.row_offsets[old] + r;
        if (now.OwnerOf(key) != rank) continue;
        if (t.info.spec.sparse) to.keys.push_back(key);
        to.params.insert(to.params.end(), in.params.begin() + r * dim, in.params.begin() + (r + 1) * dim);
        for (size_t s = 0; s < in.slots.size(); ++s)
          to.slots[s].insert(to.slots[s].end(), in.slots[s].begin() + r * dim, in.slots[s].begin() + (r + 1) * dim);
        to.steps.push_back(in.steps[r]);
      }
    }
  }
  // A table some servers' files lack was left there by a creation that failed on the others (no
  // worker ever had its id): its rows here would be only those of the files that hold it, a
  // partial table the shard would refuse. It is not restored; created again, it starts afresh,
  // as it would have in the job that wrote the checkpoint.
  for (const auto& [name, files] : files_with) {
    if (files == m.servers) continue;
    PP_LOG(Warning) << "checkpoint " << dir << ": table '" << name << "' is in " << files << " of its " << m.servers
                    << " server files (left by a creation that failed); not restored";
    out.erase(name);
  }
  return out;
}

}  // namespace pushpull::checkpoint
