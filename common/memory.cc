#include "common/memory.h"

#include <malloc.h>

namespace pushpull {

void TuneMallocForLargeMessages() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);      // serve big blocks from the heap, where they are reused
  mallopt(M_TRIM_THRESHOLD, 2048 << 20);   // keep up to 2 GiB of freed memory mapped
  mallopt(M_ARENA_MAX, 4);                 // a few arenas: frees from ZeroMQ's I/O thread land in one
}

}  // namespace pushpull
