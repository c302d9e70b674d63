// CRC-32C (Castagnoli) with the SSE4.2 instruction: checksums on-media
// structures. The machine baseline (x86-64 with SSE4.2) is documented in
// docs/design.md.
#pragma once

#include <nmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace upfs {

inline uint32_t Crc32c(const void* data, size_t n, uint32_t seed = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t crc = ~seed;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = _mm_crc32_u64(crc, v);
    p += 8;
    n -= 8;
  }
  uint32_t c = static_cast<uint32_t>(crc);
  while (n > 0) {
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  return ~c;
}

}  // namespace upfs
