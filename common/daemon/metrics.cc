#include "common/daemon/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <zmq.hpp>

#include "common/log.h"
#include "common/time.h"

namespace pushpull {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)  // integral: no exponent
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string LabelText(const MetricsText::Labels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i)
    s += (i ? "," : "") + labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  return s + "}";
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void MetricsText::Head(const std::string& name, const std::string& help, const char* type) {
  if (name == last_head_) return;  // (samples of one metric with other labels follow its head)
  last_head_ = name;
  std::string h;  // HELP text escapes backslash and newline
  for (char c : help) h += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
  out_ += "# HELP " + name + " " + h + "\n# TYPE " + name + " " + type + "\n";
}

void MetricsText::Sample(const std::string& name, const Labels& labels, double value) {
  out_ += name + LabelText(labels) + " " + Number(value) + "\n";
}

void MetricsText::Counter(const std::string& name, const std::string& help, double value, const Labels& labels) {
  Head(name, help, "counter");
  Sample(name, labels, value);
}

void MetricsText::Gauge(const std::string& name, const std::string& help, double value, const Labels& labels) {
  Head(name, help, "gauge");
  Sample(name, labels, value);
}

void MetricsText::Histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                            const std::vector<uint64_t>& counts, double sum, const Labels& labels) {
  Head(name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    Labels l = labels;
    l.emplace_back("le", i < bounds.size() ? Number(bounds[i]) : "+Inf");
    Sample(name + "_bucket", l, double(cumulative));
  }
  Sample(name + "_sum", labels, sum);
  Sample(name + "_count", labels, double(cumulative));
}

std::string HttpAnswer(const std::string& head, const std::function<std::string()>& render) {
  auto answer = [](const char* status, const std::string& body, const std::string& type = "text/plain; charset=utf-8",
                   const std::string& extra = "", bool with_body = true) {
    return std::string("HTTP/1.0 ") + status + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n" + extra + "\r\n" +
           (with_body ? body : std::string());
  };
  const size_t eol = head.find_first_of("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return answer("400 Bad Request", "pushpull: not an HTTP request line\n");
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (path != "/metrics" && path != "/")
    return answer("404 Not Found", "pushpull: no " + path.substr(0, 200) + " here; metrics are at /metrics\n");
  if (method != "GET" && method != "HEAD")
    return answer("405 Method Not Allowed", "pushpull: GET or HEAD only\n", "text/plain; charset=utf-8",
                  "Allow: GET, HEAD\r\n");
  if (path == "/")
    return answer("200 OK", "pushpull: metrics are at /metrics\n", "text/plain; charset=utf-8", "", method == "GET");
  return answer("200 OK", render(), "text/plain; version=0.0.4; charset=utf-8", "", method == "GET");
}

struct MetricsEndpoint::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::stream};
  struct Conn {
    std::string buf;
    int64_t since_ms = 0;
  };
  std::map<std::string, Conn> conns;  // by the connection's ZeroMQ routing id
};

MetricsEndpoint::~MetricsEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& host, int port,
                                                                std::function<std::string()> render) {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("metrics port " + std::to_string(port) +
                                   " must be in [0, 65535] (0: any free port)");
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->impl_ = std::make_unique<Impl>();
  e->render_ = std::move(render);
  const std::string ep = "tcp://" + (host == "0.0.0.0" ? std::string("*") : host) + ":" +
                         (port == 0 ? std::string("*") : std::to_string(port));
  try {
    e->impl_->sock.set(zmq::sockopt::linger, 0);
    e->impl_->sock.set(zmq::sockopt::sndhwm, 256);
    e->impl_->sock.bind(ep);
    const std::string bound = e->impl_->sock.get(zmq::sockopt::last_endpoint);
    e->port_ = std::stoi(bound.substr(bound.rfind(':') + 1));
  } catch (const std::exception& ex) {
    return Status::Unavailable("cannot serve metrics at " + ep + ": " + ex.what());
  }
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  return e;
}

void MetricsEndpoint::Loop() {
  SetThreadName("pp-metrics");
  zmq::socket_t& sock = impl_->sock;
  auto& conns = impl_->conns;
  auto close = [&](const std::string& id, const std::string* answer) {
    try {
      zmq::message_t idm(id.data(), id.size());
      if (answer && sock.send(idm, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        sock.send(zmq::message_t(answer->data(), answer->size()), zmq::send_flags::dontwait);
        idm = zmq::message_t(id.data(), id.size());
      }
      if (sock.send(idm, zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        sock.send(zmq::message_t(), zmq::send_flags::dontwait);  // an empty frame closes it
    } catch (const zmq::error_t&) {
      // (Gone already, or not taking more: nothing to answer.)
    }
    conns.erase(id);
  };
  while (!stop_) {
    zmq::pollitem_t item{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 100) < 0) continue;
    const int64_t now = NowMs();
    for (int i = 0; i < 256 && (item.revents & ZMQ_POLLIN); ++i) {
      zmq::message_t idm, data;
      try {
        if (!sock.recv(idm, zmq::recv_flags::dontwait)) break;
        if (!sock.recv(data, zmq::recv_flags::dontwait)) break;
      } catch (const zmq::error_t&) {
        break;
      }
      const std::string id(static_cast<const char*>(idm.data()), idm.size());
      auto it = conns.find(id);
      if (data.size() == 0) {  // a connection opened, or closed by the client
        if (it != conns.end())
          conns.erase(it);
        else
          conns[id].since_ms = now;  // (the oldest past kMaxConnections are closed below)
        continue;
      }
      if (it == conns.end()) it = conns.emplace(id, Impl::Conn{std::string(), now}).first;
      std::string& buf = it->second.buf;
      buf.append(static_cast<const char*>(data.data()), std::min(data.size(), kMaxRequestBytes + 1));
      size_t end = buf.find("\r\n\r\n");
      if (end == std::string::npos) end = buf.find("\n\n");
      if (end == std::string::npos && buf.size() <= kMaxRequestBytes) continue;
      std::string answer;
      if (end == std::string::npos) {
        answer = "HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      } else {
        try {
          answer = HttpAnswer(buf.substr(0, end), render_);
        } catch (const std::exception& ex) {  // (out of memory rendering: this scrape fails, not the daemon)
          answer = "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
          PP_LOG(Warning) << "metrics: " << ex.what();
        }
      }
      ++requests_;
      close(id, &answer);
    }
    // Slots held too long (a client that sends nothing), and the oldest past the limit.
    std::vector<std::pair<int64_t, std::string>> by_age;
    for (auto& [id, c] : conns) by_age.emplace_back(c.since_ms, id);
    std::sort(by_age.begin(), by_age.end());
    for (size_t i = 0; i < by_age.size(); ++i)
      if (now - by_age[i].first > kIdleMs || by_age.size() - i > kMaxConnections) close(by_age[i].second, nullptr);
  }
}

}  // namespace pushpull
