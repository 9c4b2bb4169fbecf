// Status and Result<T>: how every call that touches the network, the disk or a peer's bytes
// reports failure. No exceptions cross a module boundary (see docs/ERRORS.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace pushpull {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,     // the caller's input is wrong (bad shape, bad hyper-parameter, ...)
  kNotFound = 2,            // unknown table, missing file
  kCorruption = 3,          // bytes that do not decode (a malformed message, a bad IDX header)
  kUnavailable = 4,         // a peer is dead or unreachable
  kDeadlineExceeded = 5,    // a wait ran past its deadline
  kFailedPrecondition = 6,  // the system is not in a state to do this (e.g. clock mismatch)
  kAlreadyExists = 7,       // same name, different spec
  kAborted = 8,             // the job is shutting down
  kInternal = 9,            // a bug: a local invariant does not hold
  kResourceExhausted = 10,  // out of memory, or past a configured limit (a server's --max_table_mb)
  kDiverged = 11,           // a push held NaN or Inf: the training diverged
  kTargetMissed = 12,       // the job ran to its end but missed the quality it was to reach
  kLastCode = kTargetMissed,
};

const char* CodeName(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;
  // Prefixes the message with context ("pull table 'w': ").
  Status Annotate(const std::string& context) const { return ok() ? *this : Status(code_, context + ": " + msg_); }
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

inline const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kUnavailable: return "Unavailable";
    case Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kAborted: return "Aborted";
    case Code::kInternal: return "Internal";
    case Code::kResourceExhausted: return "ResourceExhausted";
    case Code::kDiverged: return "Diverged";
    case Code::kTargetMissed: return "TargetMissed";
  }
  return "Unknown";
}

// Errors that a restart meets again as they are: bad flags or arguments, a missing file, a table
// that outgrows its servers' memory limit. A worker exits 2 on them, the scheduler ends the job
// with them, and pushpull-launch does not restart it.
inline bool IsSetupError(Code c) {
  return c == Code::kInvalidArgument || c == Code::kNotFound || c == Code::kResourceExhausted;
}

// The exit status a process ends with for a job that ended with `c`, the same in every binary
// (docs/fault-tolerance.md, "Exit codes"): 0 finished, 1 a process died or a call failed, 2 bad
// flags or setup, 3 a missed target, 4 the training diverged.
inline int ExitCodeOf(Code c) {
  if (c == Code::kOk) return 0;
  if (IsSetupError(c)) return 2;
  if (c == Code::kTargetMissed) return 3;
  if (c == Code::kDiverged) return 4;
  return 1;
}

inline std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + msg_;
}

// A value or the Status saying why there is none. Reading the value of an error (value(), ->, *)
// is a bug in the caller: it stops the process, printing the error, rather than read garbage.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }
  T& operator*() { return Checked(); }
  const T& operator*() const { return Checked(); }

 private:
  T& Checked() {
    if (!value_) Die();
    return *value_;
  }
  const T& Checked() const {
    if (!value_) Die();
    return *value_;
  }
  [[noreturn]] void Die() const {
    std::fprintf(stderr, "pushpull: the value of a Result that holds an error was read: %s\n",
                 status_.ToString().c_str());
    std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

// Returns the Status `expr` gives from the enclosing function when it is an error.
#define PP_RETURN_IF_ERROR(expr)     \
  do {                               \
    ::pushpull::Status _st = (expr); \
    if (!_st.ok()) return _st;       \
  } while (0)

// Evaluates `expr`, a Result<T>; on an error returns its Status from the enclosing function (one
// that returns Status or any Result), else moves its value into `lhs`, a declaration (`auto x`,
// `const Table t`) or something assignable (`o.rank`):
//   PP_ASSIGN_OR_RETURN(auto table, client.CreateTable(spec));
// A statement, not an expression: not after an `if` without braces, and `lhs` holds no commas
// outside parentheses (`std::pair<int, int> p` needs an alias).
#define PP_ASSIGN_OR_RETURN(lhs, expr) PP_ASSIGN_OR_RETURN_IMPL_(PP_STATUS_CONCAT_(pp_result_, __LINE__), lhs, expr)
#define PP_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                              \
  if (!result.ok()) return result.status();          \
  lhs = std::move(result).value()
#define PP_STATUS_CONCAT_(a, b) PP_STATUS_CONCAT_INNER_(a, b)
#define PP_STATUS_CONCAT_INNER_(a, b) a##b

}  // namespace pushpull
