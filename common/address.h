// ZeroMQ tcp endpoints ("tcp://HOST:PORT") as the nodes name each other: split, resolved, and
// probed for a listener.
#pragma once

#include <cstdint>
#include <string>

namespace pushpull {

struct TcpAddress {
  std::string host;  // without the brackets of an IPv6 literal
  std::string port;  // the text after the last ':'
};

// false (and *out untouched) for an address that is not "tcp://HOST:PORT".
bool ParseTcpAddress(const std::string& address, TcpAddress* out);

// getaddrinfo's error for host (0: it resolved); *ipv4, when given, gets its first IPv4 address
// as text (only IPv4 addresses are looked up then).
int ResolveHost(const std::string& host, std::string* ipv4 = nullptr);

// "tcp://HOST:PORT" with HOST resolved to an IPv4 address, as ZeroMQ names a connection's
// endpoint in its events once it has reconnected; unchanged when HOST does not resolve.
std::string NumericTcpAddress(const std::string& address);

// For "tcp://HOST:PORT": what to add to a message when HOST does not resolve (a typo in the
// name, not a peer yet to start), else "".
std::string UnresolvedHostNote(const std::string& address);

// One attempt to reach a listener at HOST:PORT over TCP: the name resolved (to IPv4 addresses, as
// ZeroMQ's sockets resolve it; an IPv6 literal to itself), then a connection opened to each
// address in turn, waiting up to wait_ms for each, and closed at once. ZeroMQ connects in the
// background and never says why it cannot, so a node asks the address itself before it waits
// for answers. The reason is "" when a connection was made, else why none was: "host name does
// not resolve (...)", "connection refused", "no answer (the connection attempt timed out)", or
// the system's error. Blocks for the name's lookup and up to wait_ms per address.
std::string ProbeTcp(const TcpAddress& address, int64_t wait_ms);

}  // namespace pushpull
