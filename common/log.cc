#include "common/log.h"

#include <pthread.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "common/mutex.h"

namespace pushpull {
namespace {
std::string& Tag() {
  static std::string tag;
  return tag;
}
thread_local std::string t_tag;  // a thread's own tag (in-process clusters run many roles)
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const char* LevelChar(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}
}  // namespace

Mutex g_tag_mu;  // guards Tag(): in-process clusters set tags from several threads

void SetLogTag(const std::string& tag) {
  MutexLock l(&g_tag_mu);
  Tag() = tag;
  t_tag = tag;
}
void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

LogLine::~LogLine() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  char ts[32];
  std::snprintf(ts, sizeof(ts), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::string line = std::string(LevelChar(level_)) + " " + ts + " ";
  std::string tag = t_tag;
  if (tag.empty()) {
    MutexLock l(&g_tag_mu);
    tag = Tag();
  }
  if (!tag.empty()) line += "[" + tag + "] ";
  line += os_.str();
  line += '\n';
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

void SetThreadName(const std::string& name) { pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); }

}  // namespace pushpull
