// Pushes and pulls split into per-server, per-block requests. Threading: none (see
// worker/call_split.h).

#include "worker/call_split.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/memory.h"
#include "optimizers/optimizer.h"

namespace pushpull {
namespace internal {
namespace {

// A table that clips pushes by their L2 norm (OptimizerConfig::clip_norm) clips the whole push:
// split over servers (and blocks), each part carries the whole one's norm, so that every server
// scales its part alike (a part clipped by its own norm would change the push's direction).
void SetPushNorm(const TableSpec& spec, const SharedFloats& grads, Commands* cmds) {
  if (spec.optimizer.clip_norm <= 0 || cmds->size() < 2) return;
  const float norm = static_cast<float>(std::sqrt(opt::SquaredNorm(grads.data(), grads.size())));
  if (!std::isfinite(norm)) return;  // (a non-finite gradient: each server refuses its part)
  for (auto& c : *cmds) c->header.push_norm = norm;
}

// A push or pull of server s's whole row range of a dense table: a request per block
// (TableInfo::BlockRows), in row order, so that the server applies or reads one block while the
// next arrives (a pull's first block comes back before the server has read its last one); none
// when s owns no rows.
Commands RangeCommands(MsgType type, const TableInfo& info, int s, int64_t clock) {
  Commands cmds;
  const uint64_t first = info.row_offsets[s], end = info.row_offsets[s + 1], block = info.BlockRows(s);
  for (uint64_t b = first; b < end; b += block) {
    auto c = std::make_unique<Command>();
    c->header.type = type;
    c->header.flags = kFlagRange | (type == MsgType::kPush && b > first ? kFlagContinues : 0);
    c->header.table = info.id;
    c->header.clock = clock;
    c->header.row_begin = b;
    c->header.num_rows = std::min(block, end - b);
    c->header.dim = info.spec.dim;
    c->part.target = s;
    c->part.reply_type = type == MsgType::kPush ? MsgType::kPushReply : MsgType::kPullReply;
    c->part.bsp = type == MsgType::kPush && info.spec.consistency.model == Consistency::kBsp;
    cmds.push_back(std::move(c));
  }
  return cmds;
}

}  // namespace

KeysByServer SplitByServer(const TableInfo& info, const std::vector<Key>& keys, int S) {
  KeysByServer k;
  k.first.assign(S, 0);
  k.count.assign(S, 0);
  if (S == 1) {
    k.count[0] = keys.size();
    return k;
  }
  k.owner.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const int o = k.owner[i] = info.OwnerOf(keys[i]);
    if (i && o < k.owner[i - 1]) k.grouped = false;
    ++k.count[o];
  }
  for (int s = 1; s < S; ++s) k.first[s] = k.first[s - 1] + k.count[s - 1];
  return k;
}

Status GroupKeysByServer(const TableInfo& info, std::vector<Key>* keys, int S, std::vector<uint32_t>* order) {
  if (keys->size() > kMaxKeysPerMessage)
    return Status::InvalidArgument("grouping keys of '" + info.spec.name + "': " + std::to_string(keys->size()) +
                                   " keys, at most " + std::to_string(kMaxKeysPerMessage) + " per call");
  // A counting sort by owner (stable): each key to the next place of its server's part.
  KeysByServer by = SplitByServer(info, *keys, S);
  order->resize(keys->size());
  for (size_t i = 0; i < order->size(); ++i) (*order)[i] = static_cast<uint32_t>(i);
  if (by.grouped) return Status::OK();
  std::vector<Key> grouped(keys->size());
  for (size_t i = 0; i < keys->size(); ++i) {
    const size_t at = by.first[by.owner[i]]++;
    (*order)[at] = static_cast<uint32_t>(i);
    grouped[at] = (*keys)[i];
  }
  *keys = std::move(grouped);
  return Status::OK();
}

Status SplitPush(const TableInfo& info, const KeyBuffer& kbuf, const FloatBuffer& vbuf, int S, int64_t clock,
                 Commands* cmds) {
  const std::string& name = info.spec.name;
  if (!kbuf) return Status::InvalidArgument("push to '" + name + "': no key buffer (null)");
  const std::vector<Key>& keys = *kbuf;
  const uint32_t dim = info.spec.dim;
  if (keys.size() > kMaxKeysPerMessage)
    return Status::InvalidArgument("push to '" + name + "': " + std::to_string(keys.size()) + " keys, at most " +
                                   std::to_string(kMaxKeysPerMessage) + " per call");
  if (!vbuf || vbuf.size() != keys.size() * dim)
    return Status::InvalidArgument("push to '" + name + "': " + std::to_string(keys.size()) + " keys of dim " +
                                   std::to_string(dim) + " need " + std::to_string(keys.size() * dim) +
                                   " floats, got " + std::to_string(vbuf.size()));
  for (Key k : keys)
    if (!info.spec.sparse && k >= info.spec.rows)
      return Status::InvalidArgument("push to '" + name + "': row " + std::to_string(k) + " out of range [0, " +
                                     std::to_string(info.spec.rows) + ")");
  // Keys in server order -> each server its slices of the caller's buffers, zero-copy; otherwise
  // each server's rows gathered.
  const KeysByServer by = SplitByServer(info, keys, S);
  auto make = [&](int s, Frame kf, Frame vf, uint64_t n, bool continues) {
    auto c = std::make_unique<Command>();
    c->header.type = MsgType::kPush;
    if (continues) c->header.flags = kFlagContinues;
    c->header.table = info.id;
    c->header.clock = clock;
    c->header.num_keys = n;
    c->header.dim = dim;
    c->keys = std::move(kf);
    c->values = std::move(vf);
    c->part.target = s;
    c->part.reply_type = MsgType::kPushReply;
    c->part.bsp = info.spec.consistency.model == Consistency::kBsp;
    cmds->push_back(std::move(c));
  };
  // A server's n keys from `ks` and their rows from `vs`: a request per TableInfo::KeysPerRequest
  // keys (sparse: a block's, so that the server applies one while the next arrives).
  auto make_requests = [&](int s, const Key* ks, const float* vs, size_t n, const std::shared_ptr<const void>& kown,
                           const std::shared_ptr<const void>& vown) {
    for (size_t j = 0, per = info.KeysPerRequest(n); j < n; j += per) {
      const size_t m = std::min(per, n - j);
      make(s, ZeroCopyFrame(ks + j, m * sizeof(Key), kown), ZeroCopyFrame(vs + j * dim, m * dim * sizeof(float), vown),
           m, j > 0);
    }
  };
  if (by.grouped) {
    for (int s = 0; s < S; ++s) {
      const size_t i = by.first[s], n = by.count[s];
      make_requests(s, kbuf->data() + i, vbuf.data() + i * dim, n, kbuf, vbuf.owner());
    }
  } else {
    // Gather each server's rows (one pass; exact sizes, so no regrowth copies).
    std::vector<size_t> fill(S, 0);
    std::vector<std::vector<Key>> ks(S);
    std::vector<FloatArray> vs(S);
    for (int s = 0; s < S; ++s) {
      ks[s].resize(by.count[s]);
      vs[s].resize(by.count[s] * dim);
    }
    const float* src = vbuf.data();
    for (size_t i = 0; i < kbuf->size(); ++i) {
      const int o = by.owner[i];
      ks[o][fill[o]] = (*kbuf)[i];
      std::memcpy(vs[o].data() + fill[o] * dim, src + i * dim, dim * sizeof(float));
      ++fill[o];
    }
    for (int s = 0; s < S; ++s) {
      if (ks[s].empty()) continue;
      auto kk = std::make_shared<std::vector<Key>>(std::move(ks[s]));
      auto vv = std::make_shared<FloatArray>(std::move(vs[s]));
      make_requests(s, kk->data(), vv->data(), kk->size(), kk, vv);
    }
  }
  SetPushNorm(info.spec, vbuf, cmds);
  return Status::OK();
}

Status SplitPushDense(const TableInfo& info, const FloatBuffer& vbuf, int S, int64_t clock, Commands* cmds) {
  const std::string& name = info.spec.name;
  if (info.spec.sparse) return Status::InvalidArgument("PushDense on sparse table '" + name + "'");
  const uint32_t dim = info.spec.dim;
  if (!vbuf || vbuf.size() != info.spec.rows * dim)
    return Status::InvalidArgument("push to '" + name + "': table holds " + std::to_string(info.spec.rows * dim) +
                                   " floats, got " + std::to_string(vbuf.size()));
  for (int s = 0; s < S; ++s) {
    for (auto& c : RangeCommands(MsgType::kPush, info, s, clock)) {
      const uint64_t b = c->header.row_begin, n = c->header.num_rows;
      c->values = ZeroCopyFrame(vbuf.data() + b * dim, n * dim * sizeof(float), vbuf.owner());
      cmds->push_back(std::move(c));
    }
  }
  SetPushNorm(info.spec, vbuf, cmds);
  return Status::OK();
}

Status SplitPull(const TableInfo& info, const KeyBuffer& kbuf, int slot, bool create, float* out, PulledRows* view,
                 int S, int64_t clock, Commands* cmds) {
  const std::string& name = info.spec.name;
  if (!kbuf) return Status::InvalidArgument("pull from '" + name + "': no key buffer (null)");
  if (!out && !view && !kbuf->empty())
    return Status::InvalidArgument("pull from '" + name + "': no destination (neither PullOptions::out nor view)");
  const std::vector<Key>& keys = *kbuf;
  const uint32_t dim = info.spec.dim;
  if (keys.size() > kMaxKeysPerMessage)
    return Status::InvalidArgument("pull from '" + name + "': " + std::to_string(keys.size()) + " keys, at most " +
                                   std::to_string(kMaxKeysPerMessage) + " per call");
  for (Key k : keys)
    if (!info.spec.sparse && k >= info.spec.rows)
      return Status::InvalidArgument("pull from '" + name + "': row " + std::to_string(k) + " out of range [0, " +
                                     std::to_string(info.spec.rows) + ")");
  const size_t total_keys = keys.size();
  // Keys in server order (GroupByServer; always with one server): each server is sent its slice
  // of the one key buffer, zero-copy, and its rows go to consecutive places from `first(s)`.
  // Otherwise its keys are gathered, and where each of its rows goes is listed (pos).
  const KeysByServer by = SplitByServer(info, keys, S);
  const std::vector<size_t>& count = by.count;
  auto first = [&](int s) { return by.grouped ? by.first[s] : 0; };  // (else placed by `pos`)
  // Server s's keys: from ks_at[s], kept alive by ks_own[s].
  std::vector<const Key*> ks_at(S);
  std::vector<std::shared_ptr<const void>> ks_own(S);
  std::vector<std::vector<uint32_t>> pos(S);
  if (by.grouped) {
    for (int s = 0; s < S; ++s) {
      ks_at[s] = kbuf->data() + first(s);
      ks_own[s] = kbuf;
    }
  } else {
    std::vector<std::shared_ptr<std::vector<Key>>> ks(S);
    for (int s = 0; s < S; ++s) {
      ks[s] = std::make_shared<std::vector<Key>>();
      ks[s]->reserve(count[s]);
      pos[s].reserve(count[s]);
    }
    for (size_t i = 0; i < total_keys; ++i) {
      ks[by.owner[i]]->push_back((*kbuf)[i]);
      pos[by.owner[i]].push_back(static_cast<uint32_t>(i));
    }
    for (int s = 0; s < S; ++s) {
      ks_at[s] = ks[s]->data();
      ks_own[s] = ks[s];
    }
  }
  std::shared_ptr<PulledParts> parts;
  if (view) {
    parts = std::make_shared<PulledParts>();
    parts->keyed = true;
    parts->rows = total_keys;
    parts->dim = dim;
    ClientAccess::parts(view) = parts;
  }
  // A request per TableInfo::KeysPerRequest keys of each server's (sparse: a block's): keys
  // [j, j + m) of its, whose rows go to consecutive places from first(s) + j, or (gathered keys)
  // to places pos[s][j, j + m).
  for (int s = 0; s < S; ++s) {
    for (size_t j = 0, n = count[s], per = info.KeysPerRequest(n); j < n; j += per) {
      const size_t m = std::min(per, n - j), at = by.grouped ? first(s) + j : 0;  // (else placed by positions)
      auto c = std::make_unique<Command>();
      c->header.type = MsgType::kPull;
      c->header.table = info.id;
      c->header.clock = clock;
      c->header.num_keys = m;
      c->header.dim = dim;
      c->header.slot = slot;
      if (!create && info.spec.sparse) c->header.flags |= kFlagNoCreate;
      c->keys = ZeroCopyFrame(ks_at[s] + j, m * sizeof(Key), ks_own[s]);
      c->part.target = s;
      c->part.reply_type = MsgType::kPullReply;
      c->part.out = out ? out + at * dim : nullptr;
      c->part.rows = m;
      c->part.dim = dim;
      c->part.sparse = info.spec.sparse;
      if (!pos[s].empty()) c->part.positions.assign(pos[s].begin() + j, pos[s].begin() + j + m);
      if (parts) {
        c->part.view = parts;
        c->part.view_index = parts->frames.size();
        parts->frames.emplace_back();
        parts->first_row.push_back(at);
        parts->positions.push_back(std::move(c->part.positions));
        parts->key_of_row.emplace_back();
      }
      cmds->push_back(std::move(c));
    }
  }
  return Status::OK();
}

Status SplitPullDense(const TableInfo& info, float* out, PulledRows* view, int S, int64_t clock, Commands* cmds) {
  const std::string& name = info.spec.name;
  if (!out && !view)
    return Status::InvalidArgument("pull from '" + name + "': no destination (neither PullOptions::out nor view)");
  if (info.spec.sparse) return Status::InvalidArgument("whole-table pull (PullDense) of sparse table '" + name + "'");
  const uint32_t dim = info.spec.dim;
  std::shared_ptr<PulledParts> parts;
  if (view) {
    parts = std::make_shared<PulledParts>();
    parts->rows = info.spec.rows;
    parts->dim = dim;
    ClientAccess::parts(view) = parts;
  }
  for (int s = 0; s < S; ++s) {
    for (auto& c : RangeCommands(MsgType::kPull, info, s, clock)) {
      const uint64_t b = c->header.row_begin;
      if (parts) {
        c->part.view = parts;
        c->part.view_index = parts->frames.size();
        parts->frames.emplace_back();
        parts->first_row.push_back(b);
      }
      c->part.out = out ? out + b * dim : nullptr;
      c->part.rows = c->header.num_rows;
      c->part.dim = dim;
      cmds->push_back(std::move(c));
    }
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace pushpull
