#include "common/flags.h"

#include <gflags/gflags.h>

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

DECLARE_bool(help);
DECLARE_bool(helpshort);

namespace pushpull {

void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags) {
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
