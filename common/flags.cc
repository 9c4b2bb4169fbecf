#include "common/flags.h"

#include <gflags/gflags.h>

#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

DECLARE_bool(help);
DECLARE_bool(helpshort);

namespace pushpull {

namespace {

// gflags exits 1 on a flag it does not know, the code this project's binaries use for a failed
// job (pushpull-launch restarts those): an unknown flag is bad flags, exit 2, caught first.
void RefuseUnknownFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;  // what follows is another program's (pushpull-launch's workers')
    if (a.size() < 2 || a[0] != '-') continue;
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    name = name.substr(0, name.find('='));
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      if (a.find('=') == std::string::npos && info.type != "bool") ++i;  // "--flag value": skip the value
      continue;
    }
    if (name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info) && info.type == "bool")
      continue;  // --noflag
    std::fprintf(stderr, "%s: unknown flag %s (see --help)\n", argv[0], a.c_str());
    std::exit(2);
  }
}

}  // namespace

void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags) {
  RefuseUnknownFlags(*argc, *argv);
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
