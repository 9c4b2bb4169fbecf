// The apps' fault injection flags (--straggler, --slowdown: apps/app.h), and the line a worker
// logs of what it injects.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "apps/app.h"

namespace pushpull {
namespace {

// --straggler and --slowdown take RANK:VALUE lists; anything else is refused naming the item
// ("x:50" is no rank 0, nor "1abc:50" rank 1: every digit of the rank is checked).
TEST(Injection, RankMapsAreParsedWhole) {
  std::map<int, double> m;
  ASSERT_TRUE(InjectionOptions::ParseRankMap("straggler", "1:50,3:2.5", &m).ok());
  EXPECT_EQ(m, (std::map<int, double>{{1, 50.0}, {3, 2.5}}));
  for (const char* bad : {"x:50", "1abc:50", ":50", "1:", "1:5x", "-1:5", "1:-5", "150", " 1:50", "+1:50",
                          "4294967296:50", "1:inf", "1:1e999"}) {
    std::map<int, double> b;
    Status st = InjectionOptions::ParseRankMap("straggler", bad, &b);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("is not RANK:VALUE"), std::string::npos) << bad << ": " << st.ToString();
  }
}

// A worker says what it injects only when it injects something: a run without injection, the
// common case, has no "injection for worker 0: none" line.
TEST(Injection, OnlyAWorkerThatInjectsSaysWhat) {
  InjectionOptions o;
  testing::internal::CaptureStderr();
  { Injector none(o, 0, 1); }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("injection for worker"), std::string::npos) << err;
  o.fixed_delay_ms[1] = 20;
  testing::internal::CaptureStderr();
  { Injector other(o, 0, 1); }  // (worker 1 straggles, not worker 0)
  err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("injection for worker"), std::string::npos) << err;
  testing::internal::CaptureStderr();
  { Injector straggler(o, 1, 1); }
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("injection for worker 1: fixed delay 20 ms per clock"), std::string::npos) << err;
}

}  // namespace
}  // namespace pushpull
