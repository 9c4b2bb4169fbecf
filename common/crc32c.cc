#include "common/crc32c.h"

#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace pushpull {
namespace {

struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));  // reflected Castagnoli
      t[i] = c;
    }
  }
};

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  static const Table table;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table.t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
#else
  return Crc32cPortable(crc, data, n);
#endif
}

}  // namespace pushpull
