// common/address: how nodes split and resolve "tcp://HOST:PORT".
#include <gtest/gtest.h>
#include <netdb.h>

#include "common/address.h"

namespace pushpull {
namespace {

TEST(Address, TcpEndpointsSplitIntoHostAndPort) {
  TcpAddress a;
  ASSERT_TRUE(ParseTcpAddress("tcp://node-3.cluster:5555", &a));
  EXPECT_EQ(a.host, "node-3.cluster");
  EXPECT_EQ(a.port, "5555");
  ASSERT_TRUE(ParseTcpAddress("tcp://[::1]:7", &a));
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, "7");
  ASSERT_TRUE(ParseTcpAddress("tcp://*:0", &a));
  EXPECT_EQ(a.host, "*");
  a = TcpAddress{"kept", "kept"};
  EXPECT_FALSE(ParseTcpAddress("ipc:///tmp/x:1", &a));
  EXPECT_FALSE(ParseTcpAddress("tcp://noport", &a));
  EXPECT_FALSE(ParseTcpAddress("tcp:/", &a));
  EXPECT_EQ(a.host, "kept");  // untouched on failure
}

TEST(Address, NamesResolveToTheNumericEndpointZeroMqReports) {
  EXPECT_EQ(NumericTcpAddress("tcp://127.0.0.1:6000"), "tcp://127.0.0.1:6000");
  if (ResolveHost("localhost") == 0) {
    const std::string n = NumericTcpAddress("tcp://localhost:6000");
    EXPECT_EQ(n.rfind("tcp://127.", 0), 0u) << n;  // some loopback address, port kept
    EXPECT_EQ(n.substr(n.rfind(':')), ":6000") << n;
  }
  // Unchanged where there is nothing to resolve (or no IPv4 address for it).
  EXPECT_EQ(NumericTcpAddress("ipc:///tmp/sock"), "ipc:///tmp/sock");
  EXPECT_EQ(NumericTcpAddress("tcp://[::1]:6000"), "tcp://[::1]:6000");
  EXPECT_EQ(UnresolvedHostNote("tcp://127.0.0.1:6000"), "");
  EXPECT_EQ(UnresolvedHostNote("tcp://*:6000"), "");
  EXPECT_EQ(UnresolvedHostNote("ipc:///tmp/sock"), "");
  if (ResolveHost("nosuchhost.invalid") != EAI_NONAME) GTEST_SKIP() << "this resolver does not answer for .invalid";
  EXPECT_EQ(NumericTcpAddress("tcp://nosuchhost.invalid:6000"), "tcp://nosuchhost.invalid:6000");
  EXPECT_NE(UnresolvedHostNote("tcp://nosuchhost.invalid:6000").find("nosuchhost.invalid does not resolve"),
            std::string::npos);
}

}  // namespace
}  // namespace pushpull
