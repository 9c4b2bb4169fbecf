// Table descriptions (common/cluster.h): a spec's size is checked without wrapping, its description
// names what its optimizer uses, a table's rows and keys are partitioned evenly over servers, and
// consistency models parse strictly.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster.h"

namespace pushpull {
namespace {

// A dense table's size is checked without wrapping: 2^40 rows of dim 2^24 is 2^64 floats, which
// would wrap to 0 (a server would then reserve 0 floats for it and write past them).
TEST(TableSpecs, SizesThatWouldWrapAreRefused) {
  TableSpec spec;
  spec.name = "huge";
  spec.rows = uint64_t(1) << 40;
  spec.dim = 1u << 24;
  EXPECT_EQ(spec.Validate().code(), Code::kInvalidArgument);
  spec.rows = (uint64_t(1) << 36) / spec.dim;  // exactly 2^36 floats: the most a table may hold
  EXPECT_TRUE(spec.Validate().ok()) << spec.Validate().ToString();
  spec.rows += 1;
  EXPECT_EQ(spec.Validate().code(), Code::kInvalidArgument);
}

// A table's description (logged when it is created) names the step size its optimizer uses:
// FTRL's alpha, not the lr it ignores.
TEST(TableSpecs, TableDescriptionNamesTheStepSizeUsed) {
  TableSpec spec;
  spec.name = "w";
  spec.sparse = true;
  spec.dim = 1;
  spec.optimizer.kind = opt::Kind::kFtrl;
  spec.optimizer.ftrl_alpha = 0.2f;
  const std::string ftrl = spec.ToString();
  EXPECT_NE(ftrl.find("optimizer=ftrl alpha=0.2 "), std::string::npos) << ftrl;
  EXPECT_EQ(ftrl.find("lr="), std::string::npos) << ftrl;
  spec.optimizer.kind = opt::Kind::kAdam;
  spec.optimizer.lr = 0.001f;
  EXPECT_NE(spec.ToString().find("optimizer=adam lr=0.001 "), std::string::npos) << spec.ToString();
}

TEST(TableSpecs, PartitionIsBalancedAndOwnersAgree) {
  TableSpec s;
  s.name = "t";
  s.rows = 10;
  TableInfo t = TableInfo::Make(0, s, 3);
  EXPECT_EQ(t.row_offsets, (std::vector<uint64_t>{0, 4, 7, 10}));
  EXPECT_EQ(t.OwnerOf(0), 0);
  EXPECT_EQ(t.OwnerOf(3), 0);
  EXPECT_EQ(t.OwnerOf(4), 1);
  EXPECT_EQ(t.OwnerOf(9), 2);
  s.sparse = true;
  TableInfo sp = TableInfo::Make(0, s, 3);
  int count[3] = {};
  for (Key k = 0; k < 30000; ++k) count[sp.OwnerOf(k * 7919)]++;
  for (int c : count) EXPECT_NEAR(c, 10000, 600);
  EXPECT_FALSE(ParseConsistency("ssp:x").ok());
  EXPECT_FALSE(ParseConsistency("ssp:-1").ok());
  EXPECT_EQ(ParseConsistency("ssp:4")->staleness, 4);
}

}  // namespace
}  // namespace pushpull
