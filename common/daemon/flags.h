// Command-line parsing for the binaries' main()s: gflags, with a --help that lists only the
// binary's own flags (not gflags' internals).
#pragma once

#include <string>

namespace pushpull {

// The directory of the running binary (from /proc/self/exe); "." when it cannot be read. Used to
// find the sibling binaries (pushpull-launch starts pushpull-server beside itself).
std::string ExecutableDir();

// Parses flags; on --help prints `usage` and the flags defined in files whose path contains
// `flag_file` (e.g. "server_main"), then exits 0. An unknown flag is refused (exit 2), with
// `unknown_flag_hint` after the message when given.
void ParseFlagsOrHelp(int* argc, char*** argv, const char* usage, const char* flag_file, bool remove_flags = true,
                      const char* unknown_flag_hint = "");
// After ParseFlagsOrHelp, for a binary that takes flags only: an argument left over (a typo such
// as `epochs=3`, without its dashes) is refused, naming it: exit 2.
void RefuseArguments(int argc, char** argv);

}  // namespace pushpull
