// The apps' fault injection flags (--straggler, --slowdown: apps/app.h).
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

}  // namespace
}  // namespace pushpull
