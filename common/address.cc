#include "common/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

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

}  // namespace pushpull
