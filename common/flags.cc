#include "common/flags.h"

#include <gflags/gflags.h>

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

DECLARE_bool(help);
DECLARE_bool(helpshort);

namespace pushpull {

namespace {

// gflags exits 1 on a flag it does not know or a value it cannot parse, the code this project's
// binaries use for a failed job (pushpull-launch restarts those): both are bad flags, exit 2,
// caught first.
bool ValueParses(const std::string& type, const std::string& v) {
  if (type == "string") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const int base = v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X') ? 16 : 10;  // as gflags reads them
  if (type == "double") {
    (void)std::strtod(v.c_str(), &end);
  } else if (type == "bool") {
    std::string l;
    for (char ch : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* ok : {"true", "false", "t", "f", "yes", "no", "y", "n", "1", "0"})
      if (l == ok) return true;
    return false;
  } else if (type == "uint32" || type == "uint64") {
    if (v[0] == '-') return false;
    (void)std::strtoull(v.c_str(), &end, base);
  } else {  // int32, int64
    const long long x = std::strtoll(v.c_str(), &end, base);
    if (type == "int32" && (x < INT32_MIN || x > INT32_MAX)) return false;
  }
  return errno == 0 && end != nullptr && *end == '\0';
}

[[noreturn]] void Refuse(const char* prog, const std::string& why) {
  std::fprintf(stderr, "%s: %s (see --help)\n", prog, why.c_str());
  std::exit(2);
}

std::set<std::string> SplitCommas(const std::string& v) {
  std::set<std::string> out;
  size_t b = 0;
  while (b <= v.size()) {
    const size_t e = std::min(v.find(',', b), v.size());
    if (e > b) out.insert(v.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// The flags in a --flagfile, as gflags reads them: one per line, "#" comments and blank lines
// skipped (a line not starting with '-' names files the next lines apply to: not flags).
std::vector<std::string> FlagfileArgs(const char* prog, const std::string& path) {
  std::ifstream in(path);
  if (!in) Refuse(prog, "--flagfile=" + path + ": cannot open it");
  std::vector<std::string> args;
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] != '-') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    args.push_back(line.substr(b, e - b + 1));
  }
  return args;
}

// Checks args (from the command line, or a flagfile named `source`) against the flags defined;
// `undefok`: names that may be unknown (gflags' --undefok).
void CheckArgs(const char* prog, const std::vector<std::string>& args, const std::string& source,
               const std::set<std::string>& undefok, int depth) {
  const std::string in = source.empty() ? "" : " in --flagfile=" + source;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;  // what follows is another program's (pushpull-launch's workers')
    if (a.size() < 2 || a[0] != '-') continue;
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    std::string value = has_value ? name.substr(eq + 1) : "";
    name = name.substr(0, eq);
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      if (!has_value && info.type != "bool") {  // "--flag value"
        if (i + 1 >= args.size()) Refuse(prog, "flag --" + name + in + " needs a value");
        value = args[++i];
      } else if (!has_value) {
        continue;  // --boolflag
      }
      if (!ValueParses(info.type, value)) Refuse(prog, "--" + name + "=" + value + in + " is not a valid " + info.type);
      if (name == "flagfile") {
        if (depth > 8) Refuse(prog, "--flagfile=" + value + ": flagfiles nested more than 8 deep");
        for (const std::string& f : SplitCommas(value)) CheckArgs(prog, FlagfileArgs(prog, f), f, undefok, depth + 1);
      }
      continue;
    }
    if (!has_value && name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info) &&
        info.type == "bool")
      continue;  // --noflag
    if (undefok.count(name) || (name.rfind("no", 0) == 0 && undefok.count(name.substr(2)))) continue;
    Refuse(prog, "unknown flag " + a + in);
  }
}

void RefuseBadFlags(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::set<std::string> undefok;
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    if (args[i].rfind("--undefok=", 0) == 0 || args[i].rfind("-undefok=", 0) == 0)
      for (const std::string& n : SplitCommas(args[i].substr(args[i].find('=') + 1))) undefok.insert(n);
    else if ((args[i] == "--undefok" || args[i] == "-undefok") && i + 1 < args.size())
      for (const std::string& n : SplitCommas(args[i + 1])) undefok.insert(n);
  }
  CheckArgs(argv[0], args, "", undefok, 0);
}

}  // namespace

void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags) {
  RefuseBadFlags(*argc, *argv);
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineNonHelpFlags(argc, argv, remove_flags);
  if (FLAGS_help || FLAGS_helpshort) {
    gflags::ShowUsageWithFlagsRestrict((*argv)[0], flag_file);
    std::exit(0);
  }
  gflags::HandleCommandLineHelpFlags();
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

}  // namespace pushpull
