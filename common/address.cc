#include "common/address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace pushpull {

bool ParseTcpAddress(const std::string& address, TcpAddress* out) {
  const std::string prefix = "tcp://";
  const size_t colon = address.rfind(':');
  if (address.compare(0, prefix.size(), prefix) != 0 || colon == std::string::npos || colon < prefix.size())
    return false;
  std::string host = address.substr(prefix.size(), colon - prefix.size());
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  out->host = std::move(host);
  out->port = address.substr(colon + 1);
  return true;
}

int ResolveHost(const std::string& host, std::string* ipv4) {
  addrinfo hints{};
  hints.ai_family = ipv4 ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int err = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (err == 0 && found && ipv4) {
    char ip[INET_ADDRSTRLEN] = {0};
    if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, ip, sizeof ip)) *ipv4 = ip;
  }
  if (found) freeaddrinfo(found);
  return err;
}

std::string NumericTcpAddress(const std::string& address) {
  TcpAddress a;
  std::string ip;
  if (!ParseTcpAddress(address, &a) || ResolveHost(a.host, &ip) != 0 || ip.empty()) return address;
  return "tcp://" + ip + ":" + a.port;
}

std::string UnresolvedHostNote(const std::string& address) {
  TcpAddress a;
  if (!ParseTcpAddress(address, &a) || a.host.empty() || a.host == "*") return "";
  const int err = ResolveHost(a.host);
  // (Only a name the resolver says does not exist: a resolver that cannot answer now is no typo.)
  return err == EAI_NONAME ? "; " + a.host + " does not resolve (" + gai_strerror(err) + "): is the name right?" : "";
}

namespace {

// One non-blocking connection attempt to `to`: "" when it was made, else why not.
std::string ConnectOnce(const addrinfo& to, int64_t wait_ms) {
  const int fd = socket(to.ai_family, to.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, to.ai_protocol);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  int err = connect(fd, to.ai_addr, to.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready;
    do {
      ready = poll(&p, 1, static_cast<int>(std::clamp<int64_t>(wait_ms, 0, INT_MAX)));
    } while (ready < 0 && errno == EINTR);
    socklen_t len = sizeof(err);
    if (ready == 0)
      err = ETIMEDOUT;
    else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
  }
  close(fd);
  if (err == 0) return "";
  if (err == ECONNREFUSED) return "connection refused";
  if (err == ETIMEDOUT) return "no answer (the connection attempt timed out)";
  return std::strerror(err);
}

}  // namespace

std::string ProbeTcp(const TcpAddress& address, int64_t wait_ms) {
  addrinfo hints{};
  // ZeroMQ's sockets (ZMQ_IPV6 off) look names up for IPv4 addresses only: a name it cannot use
  // does not resolve here either.
  hints.ai_family = address.host.find(':') == std::string::npos ? AF_INET : AF_INET6;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found);
  if (gai != 0 || found == nullptr) {
    if (found) freeaddrinfo(found);
    if (gai == EAI_SERVICE) return "port '" + address.port + "' is no port number";
    return std::string("host name does not resolve (") + (gai != 0 ? gai_strerror(gai) : "no address") + ")";
  }
  std::string why;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    why = ConnectOnce(*a, wait_ms);
    if (why.empty()) break;
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace pushpull
