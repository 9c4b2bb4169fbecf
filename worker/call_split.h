// Call splitting: how a push or pull over a table becomes requests, a Command per server and per
// block of its rows (TableInfo::BlockRows, KeysPerRequest), each with the CallPart that says where
// its reply goes. Keys in server order (GroupByServer) are sent as slices of the caller's buffers,
// zero-copy; keys in another order are gathered per server first.
//
// Threading: none. Pure functions of their arguments, run on the calling thread; the caller
// gives the commands a FutureState and posts them (CallSender::Post).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "common/wire.h"
#include "pushpull/client.h"
#include "pushpull/status.h"
#include "worker/requests.h"

namespace pushpull {
namespace internal {

using Commands = std::vector<std::unique_ptr<Command>>;
using KeyBuffer = Client::KeyBuffer;
using FloatBuffer = SharedFloats;

// Which server holds each of a call's keys. `owner` is filled with more than one server only;
// count[s] is server s's number of keys and first[s] where they start in server order. When the
// owners never go down (keys in server order, as GroupByServer leaves them; always with one
// server) `grouped` is set: server s's keys are then [first[s], first[s] + count[s]) as given.
struct KeysByServer {
  std::vector<int> owner;
  std::vector<size_t> first, count;
  bool grouped = true;
};
KeysByServer SplitByServer(const TableInfo& info, const std::vector<Key>& keys, int num_servers);

// Client::GroupByServer: reorders *keys server by server (stably) and sets *order to where each
// came from.
Status GroupKeysByServer(const TableInfo& info, std::vector<Key>* keys, int num_servers, std::vector<uint32_t>* order);

// The requests of a keyed push (Client::Push), of a whole dense table's push (PushDense), of a
// keyed pull (Client::Pull with PullOptions::keys: `create` false for a lookup, slot >= 0 for an
// optimizer slot, into `out` or kept in `view`), and of a whole dense table's pull (no keys: into
// `out` or `view`), each
// stamped with `clock`. A view is given its PulledParts here. InvalidArgument, naming the table,
// for arguments that do not fit it (nothing is made then).
Status SplitPush(const TableInfo& info, const KeyBuffer& keys, const FloatBuffer& grads, int num_servers, int64_t clock,
                 Commands* cmds);
Status SplitPushDense(const TableInfo& info, const FloatBuffer& grads, int num_servers, int64_t clock, Commands* cmds);
Status SplitPull(const TableInfo& info, const KeyBuffer& keys, int slot, bool create, float* out, PulledRows* view,
                 int num_servers, int64_t clock, Commands* cmds);
Status SplitPullDense(const TableInfo& info, float* out, PulledRows* view, int num_servers, int64_t clock,
                      Commands* cmds);

}  // namespace internal
}  // namespace pushpull
