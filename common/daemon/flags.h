// Command-line parsing for the binaries' main()s: gflags, with a --help that lists only the
// binary's own flags (not gflags' internals).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace pushpull {

// The directory of the running binary (from /proc/self/exe); "." when it cannot be read. Used to
// find the sibling binaries (pushpull-launch starts pushpull-server beside itself).
std::string ExecutableDir();

// Parses flags; on --help prints `usage` and the flags defined in files whose path contains
// `flag_file` (e.g. "server_main"), then exits 0. An unknown flag is refused (exit 2), with
// `unknown_flag_hint` after the message when given.
void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags = true,
                      const char* unknown_flag_hint = "");

// The flags a binary takes and its --help lists, where some are defined in a file it shares with
// other binaries (common/daemon/daemon_flags.h builds one of these for the daemons and the launcher).
struct FlagSelection {
  const char* flag_file = "";                      // its own: the flags defined in files whose path contains this
  std::vector<std::string> shared;                 // and these, defined elsewhere
  std::vector<std::string> refused;                // linked in, but not its: unknown flags to it, not listed
  std::map<std::string, std::string> help_prefix;  // --help writes this before a flag's help
};
void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const FlagSelection& flags, bool remove_flags = true,
                      const char* unknown_flag_hint = "");
// After ParseFlagsOrHelp, for a binary that takes flags only: an argument left over (a typo such
// as `epochs=3`, without its dashes) is refused, naming it: exit 2.
void RefuseArguments(int argc, char** argv);

}  // namespace pushpull
