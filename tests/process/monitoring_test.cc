// Monitoring: the Prometheus text a daemon serves at /metrics, the HTTP endpoint's answers to good
// and bad clients, and what a running job's scheduler and servers report.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/app.h"
#include "apps/linreg.h"
#include "common/daemon/metrics.h"
#include "common/time.h"
#include "tests/support/eventually.h"
#include "tests/support/local_cluster.h"
#include "tests/support/pull_options.h"

namespace pushpull {
namespace {

// A TCP connection to 127.0.0.1:port (-1 on failure), reads bounded by 10 s.
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Everything the peer sends until it closes (or 10 s without a byte).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, size_t(n));
  return out;
}

// Sends `request` in one piece and returns the whole answer.
std::string Ask(int port, const std::string& request) {
  int fd = Connect(port);
  if (fd < 0) return "(no connection)";
  std::string out = SendAll(fd, request) ? ReadAll(fd) : "(send failed)";
  close(fd);
  return out;
}

std::string Get(int port, const std::string& path = "/metrics") {
  return Ask(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n");
}

// The value of the sample line that starts with `series` ("name{labels}"), or NaN.
double Sample(const std::string& text, const std::string& series) {
  for (size_t at = 0; (at = text.find(series + " ", at)) != std::string::npos; at += series.size()) {
    if (at != 0 && text[at - 1] != '\n') continue;
    return std::stod(text.substr(at + series.size() + 1));
  }
  return std::nan("");
}

TEST(Monitoring, TextIsThePrometheusFormat) {
  MetricsText m;
  m.Counter("pp_requests_total", "Requests.\nAll of them.", 3, {{"server", "0"}});
  m.Counter("pp_requests_total", "Requests.", 4, {{"server", "1"}});  // one head for both
  m.Gauge("pp_clock", "A clock.", -1);
  m.Gauge("pp_ratio", "A ratio.", 0.25, {{"name", "a\"b\\c\nd"}});
  m.Histogram("pp_staleness", "Staleness.", {0, 1, 2}, {5, 0, 2, 1}, 7, {{"server", "0"}});
  EXPECT_EQ(m.str(),
            "# HELP pp_requests_total Requests.\\nAll of them.\n"
            "# TYPE pp_requests_total counter\n"
            "pp_requests_total{server=\"0\"} 3\n"
            "pp_requests_total{server=\"1\"} 4\n"
            "# HELP pp_clock A clock.\n"
            "# TYPE pp_clock gauge\n"
            "pp_clock -1\n"
            "# HELP pp_ratio A ratio.\n"
            "# TYPE pp_ratio gauge\n"
            "pp_ratio{name=\"a\\\"b\\\\c\\nd\"} 0.25\n"
            "# HELP pp_staleness Staleness.\n"
            "# TYPE pp_staleness histogram\n"
            "pp_staleness_bucket{server=\"0\",le=\"0\"} 5\n"
            "pp_staleness_bucket{server=\"0\",le=\"1\"} 5\n"
            "pp_staleness_bucket{server=\"0\",le=\"2\"} 7\n"
            "pp_staleness_bucket{server=\"0\",le=\"+Inf\"} 8\n"
            "pp_staleness_sum{server=\"0\"} 7\n"
            "pp_staleness_count{server=\"0\"} 8\n");
}

TEST(Monitoring, HttpAnswersGetAndHeadOfMetricsAndRefusesTheRest) {
  int rendered = 0;
  auto render = [&] {
    ++rendered;
    return std::string("pp_up 1\n");
  };
  const std::string get = HttpAnswer("GET /metrics HTTP/1.1\r\nHost: x", render);
  EXPECT_EQ(get.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << get;
  EXPECT_NE(get.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << get;
  EXPECT_NE(get.find("Content-Length: 8\r\n"), std::string::npos) << get;
  EXPECT_EQ(get.substr(get.size() - 12), "\r\n\r\npp_up 1\n") << get;
  const std::string head = HttpAnswer("HEAD /metrics?x=1 HTTP/1.0", render);
  EXPECT_EQ(head.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;  // (no body)
  EXPECT_EQ(rendered, 2);
  EXPECT_EQ(HttpAnswer("GET /other HTTP/1.1", render).rfind("HTTP/1.0 404 ", 0), 0u);
  const std::string post = HttpAnswer("POST /metrics HTTP/1.1", render);
  EXPECT_EQ(post.rfind("HTTP/1.0 405 ", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
  for (const char* bad : {"", "GET", "GET /metrics", "GET /metrics FTP/1.0", "\x01\x02\x03 \xff \x00"})
    EXPECT_EQ(HttpAnswer(bad, render).rfind("HTTP/1.0 400 ", 0), 0u) << bad;
  EXPECT_EQ(rendered, 2);  // (only GET and HEAD of /metrics render)
  EXPECT_EQ(HttpAnswer("GET / HTTP/1.1", render).rfind("HTTP/1.0 200 OK", 0), 0u);
}

// Clients that send too much, too little, in pieces, or garbage each get their answer or lose
// their connection; none stops the endpoint answering the next.
TEST(Monitoring, TheEndpointSurvivesBadClients) {
  std::atomic<int> rendered{0};
  auto e = MetricsEndpoint::Start("127.0.0.1", 0, [&] {
    ++rendered;
    return std::string("pp_up 1\n");
  });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const int port = (*e)->port();
  ASSERT_GT(port, 0);
  std::string ok = Get(port);
  EXPECT_EQ(ok.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << ok;
  EXPECT_EQ(Sample(ok.substr(ok.find("\r\n\r\n") + 4), "pp_up"), 1.0);
  // Headers past the limit: 431, and the connection closed.
  std::string big = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(MetricsEndpoint::kMaxRequestBytes, 'a');
  EXPECT_EQ(Ask(port, big).rfind("HTTP/1.0 431 ", 0), 0u);
  // Garbage that ends like a request head: 400.
  EXPECT_EQ(
      Ask(port, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 15)).rfind("HTTP/1.0 400 ", 0), 0u);
  // A request in two pieces.
  {
    int fd = Connect(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /metr"));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ASSERT_TRUE(SendAll(fd, "ics HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(ReadAll(fd).rfind("HTTP/1.0 200 OK\r\n", 0), 0u);
    close(fd);
  }
  // More silent connections than it holds, and some that go at once: the oldest silent ones are
  // closed, and a request still gets its answer.
  std::vector<int> silent;
  for (size_t i = 0; i < MetricsEndpoint::kMaxConnections + 16; ++i) {
    int fd = Connect(port);
    ASSERT_GE(fd, 0);
    silent.push_back(fd);
  }
  for (int i = 0; i < 8; ++i) close(Connect(port));
  ok = Get(port);
  EXPECT_EQ(ok.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << ok;
  // The first silent one was closed by the endpoint: its read sees the close (0), not its own
  // 10 s timeout (-1).
  char byte;
  EXPECT_EQ(recv(silent.front(), &byte, 1, 0), 0);
  for (int fd : silent) close(fd);
  EXPECT_EQ(rendered.load(), 3);
  EXPECT_EQ((*e)->requests(), 5u);  // (two GETs, the 431, the 400, the one in pieces)
  // Port in use: a clear error.
  auto again = MetricsEndpoint::Start("127.0.0.1", port, [] { return std::string(); });
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("cannot serve metrics at tcp://127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << again.status().ToString();
}

// A large answer to a slow reader arrives whole: the endpoint closes the connection after its
// answer, and what was queued before the close is still sent (the daemons' bodies are a few KB:
// this is what checks it). 8 MB, read after a pause, several times.
TEST(Monitoring, ALargeAnswerReachesASlowReaderWhole) {
  std::string body;
  for (int i = 0; body.size() < (8u << 20); ++i)
    body += "pp_series_" + std::to_string(i) + " " + std::to_string(i) + "\n";
  auto e = MetricsEndpoint::Start("127.0.0.1", 0, [&] { return body; });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  for (int round = 0; round < 3; ++round) {
    int fd = Connect((*e)->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\n\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // (the socket buffers fill meanwhile)
    const std::string got = ReadAll(fd);
    close(fd);
    ASSERT_EQ(got.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << got.substr(0, 200);
    const size_t at = got.find("\r\n\r\n");
    ASSERT_NE(at, std::string::npos);
    EXPECT_NE(got.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
    EXPECT_EQ(got.size() - at - 4, body.size()) << "round " << round;
    EXPECT_TRUE(got.compare(at + 4, std::string::npos, body) == 0) << "round " << round;
  }
}

// A running job: each server's counters follow its requests, the scheduler's gauges its workers.
TEST(Monitoring, TheSchedulerAndServersReportTheJob) {
  LocalClusterConfig cfg;
  cfg.servers = 2;
  cfg.workers = 2;
  cfg.metrics = true;
  LocalCluster cluster(cfg);
  ASSERT_TRUE(cluster.Start().ok());
  TableSpec spec;
  spec.name = "w";
  spec.rows = 64;
  spec.dim = 4;
  spec.optimizer.lr = 0.1f;
  auto t = cluster.client(0).CreateTable(spec);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<float> v(64 * 4);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(cluster.client(0).PushDense(*t, std::vector<float>(64 * 4, 1.0f)).Wait().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.client(0).PullDense(*t, v.data()).Wait().ok());
  // A pull of an optimizer slot SGD does not keep, of a row on server 0: refused there, and
  // counted so.
  float row[4];
  EXPECT_FALSE(cluster.client(0).Pull(*t, SlotOf({0}, 0, row)).Wait().ok());
  for (int s = 0; s < 2; ++s) {
    const std::string text = Get(cluster.server(s).metrics_port());
    ASSERT_EQ(text.rfind("HTTP/1.0 200 OK", 0), 0u) << text;
    const std::string l = "{server=\"" + std::to_string(s) + "\"}";
    // (A dense table of 64 rows lies on both servers: each push and pull went to both.)
    EXPECT_EQ(Sample(text, "pushpull_server_pushes_total" + l), 3.0) << text;
    EXPECT_EQ(Sample(text, "pushpull_server_pulls_total" + l), 2.0) << text;
    EXPECT_EQ(Sample(text, "pushpull_server_refused_total" + l), s == 0 ? 1.0 : 0.0) << text;
    EXPECT_EQ(Sample(text, "pushpull_server_tables" + l), 1.0) << text;
    EXPECT_GT(Sample(text, "pushpull_server_received_bytes_total" + l), 3.0 * 32 * 4 * sizeof(float)) << text;
    EXPECT_EQ(Sample(text, "pushpull_server_sent_bytes_total" + l), 2.0 * 32 * 4 * sizeof(float)) << text;
    EXPECT_GT(Sample(text, "pushpull_server_table_bytes" + l), 32.0 * 4 * sizeof(float)) << text;
    // (The request loop's own state, as it last published it: within a control pass.)
    std::string now;
    EXPECT_TRUE(Eventually([&] {
      now = Get(cluster.server(s).metrics_port());
      return Sample(now, "pushpull_server_pull_staleness_count" + l) == 2.0;
    })) << now;
    EXPECT_EQ(Sample(now, "pushpull_server_pull_staleness_bucket{server=\"" + std::to_string(s) + "\",le=\"0\"}"), 2.0)
        << now;
    EXPECT_EQ(Sample(now, "pushpull_server_slowest_worker_clock" + l), 0.0) << now;
    EXPECT_GT(Sample(text, "pushpull_server_resident_bytes" + l), 1e6) << text;
  }
  const int sp = cluster.scheduler_metrics_port();
  std::string job = Get(sp);
  EXPECT_EQ(Sample(job, "pushpull_job_state{state=\"running\"}"), 1.0) << job;
  EXPECT_EQ(Sample(job, "pushpull_job_registered"), 1.0) << job;
  EXPECT_EQ(Sample(job, "pushpull_job_workers{state=\"live\"}"), 2.0) << job;
  EXPECT_EQ(Sample(job, "pushpull_job_servers_alive"), 2.0) << job;
  EXPECT_EQ(Sample(job, "pushpull_job_tables"), 1.0) << job;
  // A worker finishes: the scheduler's next pass shows it.
  ASSERT_TRUE(cluster.client(1).Finish().ok());
  EXPECT_TRUE(Eventually([&] {
    job = Get(sp);
    return Sample(job, "pushpull_job_workers{state=\"finished\"}") == 1.0;
  })) << job;
  EXPECT_EQ(Sample(job, "pushpull_job_workers{state=\"live\"}"), 1.0) << job;
  ASSERT_TRUE(cluster.FinishAndJoin().ok());
  // The job's end stays readable until the daemon goes.
  job = Get(sp);
  EXPECT_EQ(Sample(job, "pushpull_job_state{state=\"finished\"}"), 1.0) << job;
}

// A worker's /metrics read while its app trains (another thread: what pushpull-worker
// --metrics_port does): its client's counters and the app's progress, the last epoch's figures.
TEST(Monitoring, AWorkersMetricsFollowItsApp) {
  LocalCluster cluster(LocalClusterConfig{});
  ASSERT_TRUE(cluster.Start().ok());
  Client& c = cluster.client(0);
  auto e = MetricsEndpoint::Start("127.0.0.1", 0, [&c] { return WorkerMetricsText(&c, "linreg"); });
  ASSERT_TRUE(e.ok());
  std::atomic<bool> done{false};
  std::vector<std::string> scraped;
  std::thread scraper([&] {
    while (!done) {
      scraped.push_back(Get((*e)->port()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  AppOptions app;
  app.consistency = *ParseConsistency("bsp");
  app.epochs = 3;
  app.progress_interval_s = 0;
  LinregOptions o;
  o.examples_per_worker = 2000;
  AppResult r;
  Status st = RunLinreg(c, app, o, &r);
  done = true;
  scraper.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_FALSE(scraped.empty());
  const std::string last = Get((*e)->port());
  const std::string l = "{worker=\"0\",app=\"linreg\"";
  EXPECT_EQ(Sample(last, "pushpull_app_last_epoch" + l + ",field=\"epoch\"}"), 3.0) << last;
  EXPECT_EQ(Sample(last, "pushpull_app_samples_total" + l + "}"), 3.0 * 2000) << last;
  EXPECT_EQ(Sample(last, "pushpull_worker_clock{worker=\"0\"}"), double(c.clock())) << last;
  EXPECT_EQ(Sample(last, "pushpull_worker_pushes_total{worker=\"0\"}"), double(c.stats().pushes)) << last;
  EXPECT_GT(Sample(last, "pushpull_app_step" + l + "}"), 0.0) << last;
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
}

// pushpull-launch --metrics_port: the scheduler at the port, server s at port + 1 + s, each
// scraped while the job (real processes) runs.
TEST(Monitoring, TheLauncherServesEachDaemonsMetrics) {
  // (Three consecutive free ports: the first of a bound range the kernel picked, let go.)
  int port = 0;
  for (int attempt = 0; attempt < 20 && port == 0; ++attempt) {
    auto probe = MetricsEndpoint::Start("127.0.0.1", 0, [] { return std::string(); });
    ASSERT_TRUE(probe.ok());
    const int p = (*probe)->port();
    probe->reset();
    if (p > 65000) continue;
    auto next = MetricsEndpoint::Start("127.0.0.1", p + 1, [] { return std::string(); });
    auto after = MetricsEndpoint::Start("127.0.0.1", p + 2, [] { return std::string(); });
    if (next.ok() && after.ok()) port = p;
  }
  ASSERT_GT(port, 0);
  std::string scheduler_text, server_text, worker_text;
  std::string out;
  int worker_port = -1;
  const int code =
      RunCommandLines(BinDir() + "/pushpull-launch --servers=2 --workers=1 --metrics_port=" + std::to_string(port) +
                          " -- --app=linreg --epochs=150 --metrics_port=0",  // (seconds: scraped after the first epoch)
                      120, &out, [&](const std::string& line) {
                        const std::string tag = "metrics at http://0.0.0.0:";  // (the worker's: any free port)
                        if (line.rfind("worker 0 |", 0) == 0 && line.find(tag) != std::string::npos)
                          worker_port = std::stoi(line.substr(line.find(tag) + tag.size()));
                        // (Once a worker trains, its servers count: scraped then, every daemon alive.)
                        if (server_text.empty() && line.find("[worker 0]") != std::string::npos &&
                            line.find("epoch") != std::string::npos) {
                          scheduler_text = Get(port);
                          server_text = Get(port + 2);
                          if (worker_port > 0) worker_text = Get(worker_port);
                        }
                      });
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("metrics at http://127.0.0.1:" + std::to_string(port) + "/metrics"), std::string::npos) << out;
  EXPECT_EQ(Sample(scheduler_text, "pushpull_job_workers{state=\"live\"}"), 1.0) << scheduler_text << out;
  EXPECT_EQ(Sample(scheduler_text, "pushpull_job_servers_alive"), 2.0) << scheduler_text;
  EXPECT_GT(Sample(server_text, "pushpull_server_pushes_total{server=\"1\"}"), 0.0) << server_text;
  ASSERT_GT(worker_port, 0) << out;
  EXPECT_GT(Sample(worker_text, "pushpull_worker_pushes_total{worker=\"0\"}"), 0.0) << worker_text;
  EXPECT_GT(Sample(worker_text, "pushpull_app_samples_total{worker=\"0\",app=\"linreg\"}"), 0.0) << worker_text;
  EXPECT_GE(Sample(worker_text, "pushpull_app_last_epoch{worker=\"0\",app=\"linreg\",field=\"epoch\"}"), 1.0)
      << worker_text;
  // A port the launcher cannot give out: refused before anything starts.
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --metrics_port=65535 -- --app=linreg", 30, &out), 2) << out;
  EXPECT_NE(out.find("--metrics_port must be"), std::string::npos) << out;
  // 0: each daemon a free port of its own, which it logs (the daemons take 0, so the launcher does).
  EXPECT_EQ(RunCommand(BinDir() + "/pushpull-launch --servers=2 --metrics_port=0 -- --app=linreg --epochs=1", 60, &out),
            0)
      << out;
  for (const std::string who : {"scheduler | ", "server 0 | ", "server 1 | "}) {
    bool logged = false;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      logged |= line.rfind(who, 0) == 0 && line.find("metrics at http://127.0.0.1:") != std::string::npos;
    EXPECT_TRUE(logged) << who << out;
  }
}

}  // namespace
}  // namespace pushpull
