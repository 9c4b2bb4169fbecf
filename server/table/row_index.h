// A sparse table's row index: key -> local row, an open-addressing hash table with linear
// probing over one flat array (one cache miss per lookup instead of std::unordered_map's node
// chase: the lookup is what a sparse push or pull of random keys spends its time on).
//
// Threading: none (a stripe's index is touched only by its update thread).
#pragma once

#include <cstdint>
#include <vector>

#include "common/cluster.h"

namespace pushpull::table {

class RowIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The row of `key`, or kNone.
  uint32_t Find(Key key) const {
    if (slots_.empty()) return kNone;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.row == kNone) return kNone;
      if (s.key == key) return s.row;
    }
  }
  // Asks the cache for the slot where a lookup of `key` starts (a hint; no effect on contents).
  void Prefetch(Key key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(key)]);
  }
  // Adds key -> row; the key must not be there yet. row < kNone.
  void Insert(Key key, uint32_t row) {
    Reserve(size_ + 1);
    Place(key, row);
    ++size_;
  }
  // Room for n keys: the next inserts up to n do not allocate (nor throw). Out of memory here
  // leaves the index as it was.
  void Reserve(size_t n) {
    while (n * 2 > slots_.size()) Grow();
  }
  // Bytes it holds, and what Reserve(n) would add to them.
  size_t bytes() const { return slots_.size() * sizeof(Slot); }
  size_t GrowthBytes(size_t n) const {
    size_t slots = slots_.size();
    while (n * 2 > slots) slots = slots == 0 ? 64 : slots * 2;
    return (slots - slots_.size()) * sizeof(Slot);
  }
  // Removes key (if there): the entries after it in its probe run move back into the gap.
  void Erase(Key key) {
    if (slots_.empty()) return;
    size_t i = Home(key);
    while (slots_[i].row != kNone && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].row == kNone) return;
    for (size_t j = (i + 1) & mask_; slots_[j].row != kNone; j = (j + 1) & mask_) {
      // The entry at j may fill the gap at i unless its home lies cyclically in (i, j].
      const size_t home = Home(slots_[j].key);
      const bool stays = i < j ? (home > i && home <= j) : (home > i || home <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = Slot();
    --size_;
  }
  size_t size() const { return size_; }
  // key of every row, by row (rows are 0..size()-1 when the stripe numbers them densely).
  std::vector<Key> KeysByRow() const {
    std::vector<Key> out(size_);
    for (const Slot& s : slots_)
      if (s.row != kNone && s.row < out.size()) out[s.row] = s.key;
    return out;
  }
  void Clear() {
    slots_.clear();
    mask_ = 0;
    shift_ = 64;
    size_ = 0;
  }

 private:
  struct Slot {
    Key key = 0;
    uint32_t row = kNone;
  };
  // Fibonacci hashing (the product's top bits): independent of the SplitMix64 bits that chose
  // this key's server and stripe, which are all alike within one stripe.
  size_t Home(Key key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void Place(Key key, uint32_t row) {
    size_t i = Home(key);
    while (slots_[i].row != kNone) i = (i + 1) & mask_;
    slots_[i] = Slot{key, row};
  }
  void Grow() {
    std::vector<Slot> old(slots_.empty() ? 64 : slots_.size() * 2);  // may throw: nothing changed yet
    std::swap(old, slots_);
    mask_ = slots_.size() - 1;
    shift_ = 64;
    for (size_t n = slots_.size(); n > 1; n >>= 1) --shift_;
    for (const Slot& s : old)
      if (s.row != kNone) Place(s.key, s.row);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace pushpull::table
