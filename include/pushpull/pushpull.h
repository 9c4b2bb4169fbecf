// pushpull: the one header a training program includes. Everything under include/pushpull/ is
// the public API (plain C++17, nothing of the transport or the cluster's internals):
//   pushpull/status.h            Status, Result<T>, Code: how calls report failure
//   pushpull/optimizer_config.h  opt::OptimizerConfig and its schedule: how a table's rows learn
//   pushpull/table.h             TableSpec, Key, Consistency, InitKind: what a table is
//   pushpull/client.h            Client, ClientOptions, Table, Future, PulledRows: the calls
//   pushpull/version.h           Version(): the library's release
#pragma once

#include "pushpull/client.h"
#include "pushpull/optimizer_config.h"
#include "pushpull/status.h"
#include "pushpull/table.h"
#include "pushpull/version.h"
