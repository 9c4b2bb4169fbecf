// Status and Result: what every call returns.
#include <gtest/gtest.h>

#include <string>

#include "pushpull/status.h"

namespace pushpull {
namespace {

TEST(Status, EachCauseHasItsExitCode) {
  EXPECT_EQ(ExitCodeOf(Code::kOk), 0);
  EXPECT_EQ(ExitCodeOf(Code::kUnavailable), 1);
  EXPECT_EQ(ExitCodeOf(Code::kAborted), 1);
  EXPECT_EQ(ExitCodeOf(Code::kInvalidArgument), 2);
  EXPECT_EQ(ExitCodeOf(Code::kNotFound), 2);
  EXPECT_EQ(ExitCodeOf(Code::kResourceExhausted), 2);
  EXPECT_EQ(ExitCodeOf(Code::kTargetMissed), 3);
  EXPECT_EQ(ExitCodeOf(Code::kDiverged), 4);
  EXPECT_STREQ(CodeName(Code::kDiverged), "Diverged");
  EXPECT_STREQ(CodeName(Code::kTargetMissed), "TargetMissed");
}

TEST(Status, AResultHoldsItsValue) {
  Result<std::string> r = std::string("rows");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "rows");
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(std::move(r).value(), "rows");
}

// Reading the value of an error stops the process naming the error, rather than reading memory
// that holds no value.
TEST(StatusDeathTest, ReadingTheValueOfAnErrorStopsTheProcessSayingWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Result<std::string> r = Status::NotFound("no table 'w'");
  EXPECT_DEATH((void)r.value(), "the value of a Result that holds an error was read: NotFound: no table 'w'");
  EXPECT_DEATH((void)r->size(), "holds an error was read: NotFound");
  EXPECT_DEATH((void)*r, "holds an error was read: NotFound");
}

}  // namespace
}  // namespace pushpull
