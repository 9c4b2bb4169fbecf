// A node refuses a registration answer that does not fit itself, rather than index by it: a
// scheduler of this test's own (one ROUTER socket) answers the node's Register so.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/control.h"
#include "common/transport.h"
#include "common/wire.h"

namespace pushpull {
namespace {

TEST(Registration, ARegistrationAnswerThatDoesNotFitItselfIsRefused) {
  std::shared_ptr<Transport> transport = NewZmqTransport();
  for (int bad = 0; bad < 2; ++bad) {
    SocketOptions so;
    so.linger_ms = 0;
    auto made = transport->MakeSocket(SocketKind::kRouter, so);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    std::unique_ptr<Socket> router = std::move(*made);
    auto bound = router->Bind("tcp://127.0.0.1:*");
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    const std::string endpoint = *bound;
    ControlOptions o;
    o.scheduler = endpoint;
    o.register_timeout_ms = 10000;
    ControlChannel node(*transport, Role::kWorker, o);
    Status registered;
    std::thread t([&] { registered = node.Register(""); });
    std::vector<Frame> frames;
    Header reg;
    while (reg.type != MsgType::kRegister) {  // (heartbeats may come first)
      ASSERT_TRUE(RecvFrames(*router, &frames, 8, 5000));
      ASSERT_GE(frames.size(), 2u);
      ASSERT_TRUE(DecodeHeader(static_cast<const char*>(frames[1].data()), frames[1].size(), &reg).ok());
    }
    Header reply;
    reply.type = MsgType::kRegisterReply;
    reply.cluster.num_workers = 2;
    reply.cluster.servers.resize(1);
    reply.membership.worker_alive.assign(2, 1);
    reply.membership.worker_done.assign(2, 0);
    reply.membership.worker_last_clock.assign(2, -1);
    reply.membership.server_alive.assign(1, 1);
    if (bad == 0)
      reply.sender_rank = 5;  // a rank past the job's 2 workers
    else
      reply.membership.worker_alive.assign(7, 1);  // a list of another length
    Frame id(frames[0].data(), frames[0].size());
    ASSERT_TRUE(SendMessage(*router, &id, reply).ok());
    t.join();
    EXPECT_EQ(registered.code(), Code::kCorruption) << registered.ToString();
    EXPECT_NE(registered.message().find(bad == 0 ? "rank 5 of 2 workers" : "lists hold 7/2/2 workers"),
              std::string::npos)
        << registered.ToString();
  }
}

// Data headers are packed by hand on the hot path: the bytes must be exactly Cereal's, both ways.

}  // namespace
}  // namespace pushpull
