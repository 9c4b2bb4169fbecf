// PullOptions (include/pushpull/client.h) as the tests make them: the reads that are not one of
// Client's common pulls (Pull, Lookup, PullDense).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "pushpull/client.h"

namespace pushpull {

inline KeyBuffer KeysOf(std::vector<Key> keys) { return std::make_shared<const std::vector<Key>>(std::move(keys)); }

// The rows of keys, read in place into `view`.
inline PullOptions IntoView(KeyBuffer keys, PulledRows* view) {
  PullOptions o;
  o.keys = std::move(keys);
  o.view = view;
  return o;
}
inline PullOptions IntoView(std::vector<Key> keys, PulledRows* view) { return IntoView(KeysOf(std::move(keys)), view); }

// The whole dense table, read in place into `view`.
inline PullOptions WholeTableInto(PulledRows* view) {
  PullOptions o;
  o.view = view;
  return o;
}

// Optimizer state slot `slot` of the rows of keys, into out.
inline PullOptions SlotOf(std::vector<Key> keys, int slot, float* out) {
  PullOptions o;
  o.keys = KeysOf(std::move(keys));
  o.out = out;
  o.slot = slot;
  return o;
}

}  // namespace pushpull
