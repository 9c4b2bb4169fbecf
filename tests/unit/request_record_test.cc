// The record a server keeps of a worker's requests (server/request_record.h), on its own.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/wire.h"
#include "server/request_record.h"

namespace pushpull {
namespace {

// The record a server keeps of a worker's requests (server/request_record.h).
TEST(RequestRecord, RepeatsAreAnsweredOnceAndOnlyOldAnswersAreForgotten) {
  server::RequestRecord r;
  const server::RequestRecord::Answer* a = nullptr;
  using Seen = server::RequestRecord::Seen;
  EXPECT_EQ(r.Look(5, &a), Seen::kNew);
  r.Begin(5);
  EXPECT_EQ(r.Look(5, &a), Seen::kInProgress);
  server::RequestRecord::Answer refused;
  refused.code = Code::kInvalidArgument;
  refused.error = "NaN";
  r.End(5, refused);
  ASSERT_EQ(r.Look(5, &a), Seen::kAnswered);
  EXPECT_EQ(a->code, Code::kInvalidArgument);
  EXPECT_EQ(a->error, "NaN");
  r.End(5, server::RequestRecord::Answer{});  // a second answer changes nothing
  ASSERT_EQ(r.Look(5, &a), Seen::kAnswered);
  EXPECT_EQ(a->code, Code::kInvalidArgument);
  // An older request never seen is new (a lost one sent again), not forgotten, while nothing was.
  EXPECT_EQ(r.Look(3, &a), Seen::kNew);
  // A pull served again is in progress again until its new answer.
  r.Begin(6);
  server::RequestRecord::Answer pulled;
  pulled.type = MsgType::kPullReply;
  r.End(6, pulled);
  ASSERT_EQ(r.Look(6, &a), Seen::kAnswered);
  EXPECT_EQ(a->type, MsgType::kPullReply);
  r.Begin(6);
  EXPECT_EQ(r.Look(6, &a), Seen::kInProgress);
  r.End(6, pulled);
  // Past kKept answers the oldest are forgotten, and only those; one in progress stops that.
  r.Begin(7);
  const uint64_t n = server::RequestRecord::kKept + 10;
  for (uint64_t id = 100; id < 100 + n; ++id) {
    r.Begin(id);
    r.End(id, {});
  }
  EXPECT_EQ(r.Look(5, &a), Seen::kForgotten);
  EXPECT_EQ(r.Look(6, &a), Seen::kForgotten);
  r.Begin(5);  // a forgotten pull served again, then trimmed: what is forgotten stays so
  r.End(5, pulled);
  EXPECT_EQ(r.Look(6, &a), Seen::kForgotten);
  EXPECT_EQ(r.Look(7, &a), Seen::kInProgress);
  EXPECT_EQ(r.Look(100, &a), Seen::kAnswered);  // kept while 7, older, waits
  EXPECT_GT(r.size(), server::RequestRecord::kKept);
  r.End(7, {});
  r.Begin(100 + n);
  r.End(100 + n, {});
  EXPECT_EQ(r.Look(7, &a), Seen::kForgotten);
  EXPECT_EQ(r.Look(100, &a), Seen::kForgotten);
  EXPECT_EQ(r.Look(4, &a), Seen::kForgotten);  // (never seen, but older than what is kept)
  EXPECT_EQ(r.Look(100 + n, &a), Seen::kAnswered);
  EXPECT_EQ(r.Look(100 + n + 1, &a), Seen::kNew);
  EXPECT_LE(r.size(), server::RequestRecord::kKept);
  // One that never gets its answer (its handling failed) holds the trim up to twice the limit.
  const uint64_t stuck = 100 + n + 1;
  r.Begin(stuck);
  for (uint64_t id = stuck + 1; id <= stuck + 2 * server::RequestRecord::kKept; ++id) {
    r.Begin(id);
    r.End(id, {});
  }
  EXPECT_EQ(r.Look(stuck, &a), Seen::kForgotten);
  EXPECT_LE(r.size(), 2 * server::RequestRecord::kKept);
}

}  // namespace
}  // namespace pushpull
