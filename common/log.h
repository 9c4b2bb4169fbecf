// Minimal leveled logging to stderr. Each line is written with one write(2) so lines from
// threads and processes do not interleave. The tag (e.g. "server 1") is set once by main().
//
// Threading: safe from any thread; SetLogTag/SetLogLevel are meant to be called before threads start.
#pragma once

#include <sstream>
#include <string>

namespace pushpull {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
// Names the calling thread (what top -H and perf show; at most 15 characters).
void SetThreadName(const std::string& name);
void SetLogTag(const std::string& tag);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// "1 server", "2 servers": a count and its noun, for messages.
inline std::string Count(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace pushpull

// A for-statement rather than if/else, so `if (x) PP_LOG(Info) << ...; else ...` parses as written.
#define PP_LOG(level)                                                                                            \
  for (bool pp_log_on_ = ::pushpull::LogEnabled(::pushpull::LogLevel::k##level); pp_log_on_; pp_log_on_ = false) \
  ::pushpull::LogLine(::pushpull::LogLevel::k##level)
