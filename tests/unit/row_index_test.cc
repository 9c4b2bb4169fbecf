// A stripe's index of its sparse rows' keys (server/table/shard.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "server/table/shard.h"

namespace pushpull {
namespace {

TEST(RowIndex, FindsEveryKeyAndNoOther) {
  table::RowIndex idx;
  EXPECT_EQ(idx.Find(5), table::RowIndex::kNone);
  std::vector<Key> keys{0, ~Key(0), 1, 64, 128};
  for (uint64_t i = 0; i < 5000; ++i) keys.push_back(SplitMix64(i) & ~Key(1));  // even keys, like one server's
  for (uint32_t r = 0; r < keys.size(); ++r) idx.Insert(keys[r], r);
  EXPECT_EQ(idx.size(), keys.size());
  for (uint32_t r = 0; r < keys.size(); ++r) ASSERT_EQ(idx.Find(keys[r]), r) << keys[r];
  for (uint64_t i = 0; i < 5000; ++i) EXPECT_EQ(idx.Find(SplitMix64(i) | 1), table::RowIndex::kNone);
  EXPECT_EQ(idx.KeysByRow(), keys);
}

// Erasing keys (a refused request's new rows go again) keeps every other key findable, whatever
// probe runs the erased ones sat in.
TEST(RowIndex, ErasedKeysAreGoneAndTheOthersStay) {
  table::RowIndex idx;
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 20000; ++i) keys.push_back(SplitMix64(i));
  for (uint32_t r = 0; r < keys.size(); ++r) idx.Insert(keys[r], r);
  for (size_t i = 0; i < keys.size(); i += 3) idx.Erase(keys[i]);
  idx.Erase(12345);  // not there: nothing changes
  EXPECT_EQ(idx.size(), keys.size() - (keys.size() + 2) / 3);
  for (uint32_t r = 0; r < keys.size(); ++r) ASSERT_EQ(idx.Find(keys[r]), r % 3 == 0 ? table::RowIndex::kNone : r) << r;
  for (size_t i = 0; i < keys.size(); i += 3) idx.Insert(keys[i], static_cast<uint32_t>(i));
  for (uint32_t r = 0; r < keys.size(); ++r) ASSERT_EQ(idx.Find(keys[r]), r) << r;
}

}  // namespace
}  // namespace pushpull
