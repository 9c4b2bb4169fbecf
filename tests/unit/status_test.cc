// Status and Result: what every call returns.
#include <gtest/gtest.h>

#include <memory>
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

Result<int> Half(int n) {
  if (n % 2 != 0) return Status::InvalidArgument(std::to_string(n) + " is odd");
  return n / 2;
}

// Two unwraps in one function (each its own temporary), into a declaration each.
Result<int> Quarter(int n) {
  PP_ASSIGN_OR_RETURN(const int half, Half(n));
  PP_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

// Into something assignable, in a function that returns a Status.
Status QuarterInto(int n, int* out) {
  PP_ASSIGN_OR_RETURN(*out, Quarter(n));
  return Status::OK();
}

Result<std::unique_ptr<int>> Boxed(int n) {
  if (n < 0) return Status::NotFound("no box for " + std::to_string(n));
  return std::make_unique<int>(n);
}

// A move-only value is moved out, not copied.
Result<int> Unboxed(int n) {
  PP_ASSIGN_OR_RETURN(std::unique_ptr<int> box, Boxed(n));
  return *box;
}

Status BothHalves(int a, int b) {
  PP_RETURN_IF_ERROR(Half(a).status());
  PP_RETURN_IF_ERROR(Half(b).status());
  return Status::OK();
}

TEST(Status, AssignOrReturnUnwrapsAValueAndReturnsAnError) {
  Result<int> q = Quarter(12);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, 3);
  // The first error is returned as it is, and nothing after it runs.
  EXPECT_EQ(Quarter(7).status().ToString(), "InvalidArgument: 7 is odd");
  EXPECT_EQ(Quarter(6).status().ToString(), "InvalidArgument: 3 is odd");
  int out = -1;
  EXPECT_TRUE(QuarterInto(8, &out).ok());
  EXPECT_EQ(out, 2);
  out = -1;
  EXPECT_EQ(QuarterInto(10, &out).code(), Code::kInvalidArgument);
  EXPECT_EQ(out, -1);  // not assigned
  Result<int> u = Unboxed(5);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, 5);
  EXPECT_EQ(Unboxed(-1).status().ToString(), "NotFound: no box for -1");
}

TEST(Status, ReturnIfErrorReturnsTheFirstError) {
  EXPECT_TRUE(BothHalves(2, 4).ok());
  EXPECT_EQ(BothHalves(3, 5).ToString(), "InvalidArgument: 3 is odd");
  EXPECT_EQ(BothHalves(2, 5).ToString(), "InvalidArgument: 5 is odd");
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
