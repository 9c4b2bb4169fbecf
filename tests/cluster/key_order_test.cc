// Keys grouped by server (Client::GroupByServer): pushes and pulls of keys in any order put every
// row where it belongs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"
#include "tests/support/test_tables.h"

namespace pushpull {
namespace {

// GroupByServer puts each server's keys next to each other, in the order given, and says where
// each came from; keyed pushes and pulls of keys in that order (each server sent its slice of
// the caller's buffers, keys in a shared buffer too) put every row where the same calls of the
// keys in any other order do, also when a server in the middle, or the first, has none of them.
TEST(KeyOrder, KeysGroupedByServerLandInTheirPlaces) {
  LocalClusterConfig cfg;
  cfg.servers = 3;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  const TableSpec sp = AspSparse("grouped", 3);
  auto t = c.CreateTable(sp);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const TableInfo info = TableInfo::Make(0, sp, 3);
  // Key sets, each of new keys: every server's; none of server 1's (a gap in the middle);
  // server 2's only.
  std::vector<std::vector<Key>> sets(3);
  for (Key i = 1; i <= 400; ++i) {
    sets[0].push_back(i * 0x9E3779B97F4A7C15ull);
    const Key k = (i + 1000) * 0x9E3779B97F4A7C15ull;
    if (info.OwnerOf(k) != 1) sets[1].push_back(k);
    const Key k2 = (i + 2000) * 0x9E3779B97F4A7C15ull;
    if (info.OwnerOf(k2) == 2) sets[2].push_back(k2);
  }
  float base = 0.0f;
  for (size_t set = 0; set < sets.size(); ++set) {
    SCOPED_TRACE("key set " + std::to_string(set));
    const std::vector<Key>& keys = sets[set];
    std::vector<Key> grouped = keys;
    auto order = c.GroupByServer(*t, &grouped);
    ASSERT_TRUE(order.ok()) << order.status().ToString();
    ASSERT_EQ(order->size(), keys.size());
    std::vector<bool> seen(keys.size(), false);
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t from = (*order)[i];
      ASSERT_LT(from, keys.size());
      EXPECT_FALSE(seen[from]) << i;
      seen[from] = true;
      EXPECT_EQ(grouped[i], keys[from]) << i;
      if (i > 0) {
        const int prev = info.OwnerOf(grouped[i - 1]), now = info.OwnerOf(grouped[i]);
        EXPECT_LE(prev, now) << i;  // grouped by server
        if (prev == now) {
          EXPECT_LT((*order)[i - 1], from) << i;  // in the order given
        }
      }
    }
    // A push of the grouped keys (gradients in their order); the rows are new: 0 - lr * g.
    std::vector<float> g(keys.size() * sp.dim), gg(g.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = base + float(i);
    for (size_t i = 0; i < keys.size(); ++i)
      std::memcpy(&gg[i * sp.dim], &g[(*order)[i] * sp.dim], sp.dim * sizeof(float));
    // The grouped keys in a shared buffer, sent zero-copy (Client::KeyBuffer), used twice below.
    const Client::KeyBuffer shared_keys = std::make_shared<const std::vector<Key>>(grouped);
    ASSERT_TRUE(c.Push(*t, shared_keys, std::make_shared<const std::vector<float>>(gg)).Wait().ok());
    base += float(g.size());
    // Pulled in the order drawn, and in the grouped order: copied and in place.
    std::vector<float> drawn_rows(g.size(), NAN), grouped_rows(g.size(), NAN);
    ASSERT_TRUE(c.Pull(*t, keys, drawn_rows.data()).Wait().ok());
    ASSERT_TRUE(c.Pull(*t, grouped, grouped_rows.data()).Wait().ok());
    PulledRows view;
    ASSERT_TRUE(c.Pull(*t, IntoView(shared_keys, &view)).Wait().ok());
    ASSERT_EQ(view.num_rows(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      for (uint32_t d = 0; d < sp.dim; ++d) {
        const size_t at = (*order)[i] * sp.dim + d;
        ASSERT_FLOAT_EQ(drawn_rows[at], -0.01f * g[at]) << i << "," << d;
        ASSERT_EQ(grouped_rows[i * sp.dim + d], drawn_rows[at]) << i << "," << d;
        ASSERT_EQ(view.row(i)[d], drawn_rows[at]) << i << "," << d;
      }
    std::vector<float> copied(g.size(), NAN);
    view.CopyTo(copied.data());
    EXPECT_EQ(copied, grouped_rows);
  }
  // A dense table's ascending rows are in server order already; a table this client does not
  // know is refused.
  auto d = c.CreateTable(AspTable("grouped_dense", 30, 2));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<Key> rows = {0, 5, 9, 10, 19, 20, 29};
  auto same = c.GroupByServer(*d, &rows);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(rows, (std::vector<Key>{0, 5, 9, 10, 19, 20, 29}));
  EXPECT_EQ(*same, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(c.Push(*t, Client::KeyBuffer(), std::make_shared<const std::vector<float>>()).Wait().code(),
            Code::kInvalidArgument);  // no key buffer
  PulledRows none;
  EXPECT_EQ(c.Pull(*t, IntoView(Client::KeyBuffer(), &none)).Wait().code(), Code::kInvalidArgument);
  Table unknown = *t;
  unknown.name = "not_made_here";
  EXPECT_EQ(c.GroupByServer(unknown, &rows).status().code(), Code::kNotFound);
  // (The push refused above leaves its step undone: Finish's clock is refused, saying why.)
  Status fin = cluster.FinishAndJoin();
  EXPECT_NE(fin.message().find("push to 'grouped': no key buffer"), std::string::npos) << fin.ToString();
}

}  // namespace
}  // namespace pushpull
