#include "deploy/launch/verdict.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "common/cluster.h"
#include "common/wire.h"

namespace pushpull {
namespace launch {

Verdict ReadVerdict(const std::string& path) {
  Verdict v;
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return v;
  const size_t tab = line.find('\t');
  if (tab == std::string::npos) return v;
  v.code = std::atoi(line.substr(0, tab).c_str());
  v.cause = line.substr(tab + 1);
  return v;
}

Code CodeOfExit(int status) {
  if (!WIFEXITED(status)) return Code::kUnavailable;
  switch (WEXITSTATUS(status)) {
    case 2: return Code::kInvalidArgument;
    case 3: return Code::kTargetMissed;
    case 4: return Code::kDiverged;
    case 127: return Code::kNotFound;
    default: return Code::kUnavailable;
  }
}

void ExitReporter::Connect(const std::string& scheduler) {
  SocketOptions o;
  o.linger_ms = 1000;  // (the last report goes out before the launcher exits)
  auto sock = transport_->MakeSocket(SocketKind::kDealer, o);
  if (sock.ok() && (*sock)->Connect(scheduler).ok()) sock_ = std::move(*sock);
}

void ExitReporter::Report(const Child& c, const std::string& what, Code code, bool replaced) {
  if (!sock_ || c.rank < 0) return;
  Header h;
  h.type = MsgType::kNodeExited;
  h.sender_role = c.role == "server" ? Role::kServer : Role::kWorker;
  h.sender_rank = c.rank;
  h.clock = replaced ? 1 : 0;
  h.SetStatus(Status(code, what));
  SendMessage(*sock_, nullptr, h).IgnoreError();
}

}  // namespace launch
}  // namespace pushpull
