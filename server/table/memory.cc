// The message of a refusal by the tables' memory limit (server/table/memory.h).
//
// Threading: reads the limit's atomics only; any thread.
#include "server/table/memory.h"

#include <cstdio>

namespace pushpull::table {

std::string MemoryRefusal(const TableSpec& spec, const ByteBudget& memory, const std::string& what, size_t bytes) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "table '%s': %s (%.1f MB) would take this server's tables past their limit of %.1f MB "
                "(--max_table_mb; %.1f MB in use)",
                spec.name.c_str(), what.c_str(), bytes / 1e6, memory.limit() / 1e6, memory.used() / 1e6);
  return buf;
}

}  // namespace pushpull::table
