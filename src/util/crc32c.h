// CRC-32C (Castagnoli): checksums on-media structures. Short buffers (a
// record, a name, a header) with the SSE4.2 instruction inline; long ones
// (a checkpoint image, a block, a patch's bytes) with ISA-L's crc32_iscsi,
// which folds several streams at once where the loop below waits 3 cycles
// on each 8 bytes: 52 against 510 ns for 4 KiB, 194 against 664 us for
// 5 MiB on the development VM (scratch loop, docs/design.md "Checksums").
// Both give the same value (tests/format_test.cc, Crc32c). The machine baseline
// (x86-64 with SSE4.2) is documented in docs/design.md.
#pragma once

#include <isa-l/crc.h>
#include <nmmintrin.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace upfs {

// From this many bytes on, ISA-L's call costs less than the loop (it took
// 16.9 against 32.9 ns at 256 bytes and 23.9 against 17.1 at 128).
inline constexpr size_t kCrc32cLibraryFrom = 256;

// The SSE4.2 loop, for any length (Crc32c's short path; tests compare the
// two paths with it).
inline uint32_t Crc32cInline(const void* data, size_t n, uint32_t seed = 0) {
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

// ISA-L's, for any length: crc32_iscsi neither inverts its initial value
// nor its result, and takes an int length (chunks of at most 1 GiB).
inline uint32_t Crc32cLibrary(const void* data, size_t n, uint32_t seed = 0) {
  // crc32_iscsi only reads the buffer; its prototype is not const.
  auto* p = const_cast<unsigned char*>(static_cast<const unsigned char*>(data));
  uint32_t c = ~seed;
  constexpr size_t kChunk = size_t{1} << 30;
  static_assert(kChunk <= size_t(INT_MAX));
  while (n > 0) {
    const size_t k = n < kChunk ? n : kChunk;
    c = crc32_iscsi(p, int(k), c);
    p += k;
    n -= k;
  }
  return ~c;
}

// Crc32c(b, n2, Crc32c(a, n1)) is the checksum of a followed by b.
inline uint32_t Crc32c(const void* data, size_t n, uint32_t seed = 0) {
  return n >= kCrc32cLibraryFrom ? Crc32cLibrary(data, n, seed) : Crc32cInline(data, n, seed);
}

}  // namespace upfs
