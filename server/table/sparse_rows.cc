// A sparse stripe's rows by key (server/table/stripe.h): the row index (server/table/row_index.h) that maps a
// key to its local row, rows made on first touch with their initial values, and the key lists
// kept so that a recurring key set is matched key by key instead of looked up.
//
// Threading: the stripe's (server/table/stripe.h): one thread at a time, no lock.
#include "server/table/stripe.h"

#include <string>
#include <vector>

namespace pushpull::table {

uint32_t Stripe::LocalRow(Key key) {
  if (!spec_.sparse) return static_cast<uint32_t>(key - row_begin_);
  const uint32_t found = index_.Find(key);
  if (found != RowIndex::kNone) return found;
  // Local rows are 32-bit, kNone excluded: a stripe holds fewer (the row after the last would
  // wrap to 0, silently).
  if (steps_.size() >= RowIndex::kNone)
    throw TableMemoryExhausted("table '" + spec_.name + "': a stripe holds at most " + std::to_string(RowIndex::kNone) +
                               " rows (more servers, or --update_threads)");
  uint32_t r = static_cast<uint32_t>(steps_.size());
  if (const size_t grow = index_.GrowthBytes(index_.size() + 1); grow > 0) {
    Charge(grow, "a larger key index");
    try {
      index_.Reserve(index_.size() + 1);  // may throw: nothing changed yet
    } catch (...) {
      Uncharge(grow);
      throw;
    }
  }
  AppendRows(key, 1, &key);  // may throw: the index does not have the key yet
  index_.Insert(key, r);     // has room: does not throw
  return r;
}

size_t Stripe::kept_lists() const {
  size_t n = 0;
  for (const KeyList& l : key_lists_) n += !l.keys.empty();
  return n;
}

size_t Stripe::kept_list_keys() const {
  size_t n = 0;
  for (const KeyList& l : key_lists_) n += l.keys.size();
  return n;
}

const uint32_t* Stripe::LocalRows(const RowSelection& sel, const Key* keys) {
  if (!spec_.sparse || sel.is_range) return nullptr;
  const size_t n = sel.size();
  auto key_at = [&](size_t i) { return keys[sel.pos(i)]; };
  const bool keep = n >= kMinReusedKeys && n <= kMaxReusedKeys;
  if (keep) {
    for (KeyList& l : key_lists_) {
      if (l.keys.size() != n) continue;
      size_t i = 0;
      while (i < n && l.keys[i] == key_at(i)) ++i;
      if (i == n) {
        l.last_use = ++key_list_uses_;
        rows_one_run_ = l.one_run;
        return l.rows.data();
      }
    }
  }
  std::vector<uint32_t>* rows = &rows_scratch_;
  KeyList* list = nullptr;
  if (keep) {
    // An empty slot, or a new one while there is room; else the least recently used list is
    // replaced. More lists go, least recently used first, while they would hold over
    // kMaxReusedKeys keys.
    size_t kept = n;
    for (const KeyList& c : key_lists_) kept += c.keys.size();
    auto least_used = [&](const KeyList* other) {
      KeyList* l = nullptr;
      for (KeyList& c : key_lists_)
        if (&c != other && !c.keys.empty() && (!l || c.last_use < l->last_use)) l = &c;
      return l;
    };
    for (KeyList& c : key_lists_)
      if (c.keys.empty()) list = &c;  // (one let go of below before)
    if (!list && key_lists_.size() < kReusedLists) {
      key_lists_.emplace_back();
      list = &key_lists_.back();
    }
    if (!list) list = least_used(nullptr);  // (the lists are full, so none is empty)
    kept -= list->keys.size();
    while (kept > kMaxReusedKeys) {
      KeyList* old = least_used(list);
      if (!old) break;
      kept -= old->keys.size();
      *old = KeyList();
    }
    list->last_use = ++key_list_uses_;
    rows = &list->rows;
  }
  const size_t rows_before = num_rows();
  size_t i = 0;
  try {
    if (list) list->keys.resize(n);
    rows->resize(n);
    Key* kept = list ? list->keys.data() : nullptr;
    // The index slot of the key kPrefetchAhead entries on is asked of the cache first, so that the
    // lookups of random keys overlap their cache misses instead of taking them one at a time.
    for (; i < n; ++i) {
      if (i + kPrefetchAhead < n) index_.Prefetch(key_at(i + kPrefetchAhead));
      const Key k = key_at(i);
      if (kept) kept[i] = k;
      (*rows)[i] = LocalRow(k);
    }
  } catch (...) {
    // A row that could not be added: the rows this call added go again, so that a refused
    // request leaves the stripe, and the memory limit, as they were; the list is not whole, so
    // it matches nothing.
    for (size_t j = 0; j < i; ++j) {
      const uint32_t r = index_.Find(key_at(j));
      if (r != RowIndex::kNone && r >= rows_before) index_.Erase(key_at(j));
    }
    // (The arrays keep the room they grew into, and it stays charged: the memory is held.)
    TruncateRows(rows_before);
    rows->clear();
    if (list) list->keys.clear();
    throw;
  }
  const uint32_t* r = rows->data();
  bool one_run = true;
  for (size_t j = 1; j < n && one_run; ++j) one_run = r[j] == r[0] + j;
  rows_one_run_ = one_run;
  if (list) list->one_run = one_run;
  return r;
}

}  // namespace pushpull::table
