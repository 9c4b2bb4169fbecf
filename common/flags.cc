#include "common/flags.h"

#include <gflags/gflags.h>

#include <limits.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

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

void RefuseBadFlags(int argc, char** argv) {
  auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s (see --help)\n", argv[0], why.c_str());
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
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
        if (i + 1 >= argc) refuse("flag --" + name + " needs a value");
        value = argv[++i];
      } else if (!has_value) {
        continue;  // --boolflag
      }
      if (!ValueParses(info.type, value)) refuse("--" + name + "=" + value + " is not a valid " + info.type);
      continue;
    }
    if (!has_value && name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info) &&
        info.type == "bool")
      continue;  // --noflag
    refuse("unknown flag " + a);
  }
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
