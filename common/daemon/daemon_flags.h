// The flags pushpull-launch shares with the daemons it starts: each defined once (gflags), in
// common/daemon/daemon_flags.cc, with the daemons that take it. The scheduler, the server and
// pushpull-worker take their own entries as their flags; pushpull-launch takes every entry and
// passes each on to the daemons that take it (DaemonFlagArgs), so that a flag cannot be taken by
// the launcher and forgotten on the way, nor mean one thing to it and another to a daemon.
// Not in the client library (no gflags there).
#pragma once

#include <gflags/gflags.h>

#include <map>
#include <string>
#include <vector>

#include "common/daemon/flags.h"

namespace pushpull {

// The daemons, as bits: a flag's entry says which take it.
enum DaemonRoleBits : unsigned {
  kSchedulerFlag = 1u << 0,  // pushpull-scheduler
  kServerFlag = 1u << 1,     // pushpull-server
  kWorkerFlag = 1u << 2,     // pushpull-worker (a user's own command gets no flags: its environment)
  kEveryDaemonFlag = kSchedulerFlag | kServerFlag | kWorkerFlag,
};

struct DaemonFlag {
  const char* name;
  unsigned roles;                // DaemonRoleBits: the daemons that take it
  const char* launcher_default;  // pushpull-launch's default when it is not the daemons' (nullptr: theirs)
};

// Every entry, in the order common/daemon/daemon_flags.cc defines them.
const std::vector<DaemonFlag>& DaemonFlags();

// "--name=value" for each entry `role` (one bit) takes, its value this process's (gflags: the
// command line's, else the default), or values[name] when given there (a value the launcher
// works out per run, such as the --restore_from of a restart). In the table's order.
std::vector<std::string> DaemonFlagArgs(unsigned role, const std::map<std::string, std::string>& values = {});

// The daemons that take an entry, in words: "scheduler", "servers and workers", "every process".
std::string DaemonRoleNames(unsigned roles);

// pushpull-launch: gives the entries that have one their launcher_default, as the default (a
// flag on the command line still sets it; --help shows it). Before ParseFlagsOrHelp.
void UseLauncherDefaults();

// What a binary's --help lists and its command line takes: its own flags (defined in files whose
// path contains flag_file), and the table's entries `roles` take; the others, though linked in,
// are refused as unknown flags. The launcher (roles: every daemon's) has each entry's help begin
// with the daemons it goes to.
FlagSelection DaemonFlagSelection(const char* flag_file, unsigned roles, bool launcher = false);

}  // namespace pushpull

DECLARE_string(consistency);
DECLARE_string(on_worker_death);
DECLARE_int32(replacement_timeout_s);
DECLARE_int32(heartbeat_timeout_ms);
DECLARE_int32(heartbeat_interval_ms);
DECLARE_int32(register_timeout_ms);
DECLARE_int32(table_timeout_ms);
DECLARE_int32(update_threads);
DECLARE_int32(stats_every_s);
DECLARE_int32(copy_on_write_budget_mb);
DECLARE_int64(max_table_mb);
DECLARE_string(checkpoint_dir);
DECLARE_int32(checkpoint_keep);
DECLARE_int32(checkpoint_timeout_s);
DECLARE_string(restore_from);
DECLARE_bool(verify_restore);
