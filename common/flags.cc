#include "common/flags.h"

#include <gflags/gflags.h>

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

}  // namespace pushpull
