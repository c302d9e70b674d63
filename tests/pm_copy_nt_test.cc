// pm::CopyNT: whole, aligned lines shorter than a block go through its own
// streaming loop, everything else through libpmem (medium/pm.h). Both must
// copy exactly the bytes asked for, from a source at any alignment, and be
// seen by a recorder (the crash explorer, the write-amplification counter)
// as one copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "medium/persist_counter.h"
#include "medium/pm.h"

namespace upfs {
namespace {

constexpr size_t kMax = 5 * 1024;  // past the loop's bound (4 KiB)

struct alignas(64) Media {
  unsigned char bytes[kMax + 128];
};

// Copies n bytes from src + shift to dst_offset in fresh media; checks the
// copy and that nothing around it changed.
void CheckCopy(size_t dst_offset, size_t n, size_t shift, const std::vector<unsigned char>& src) {
  Media m;
  std::memset(m.bytes, 0xee, sizeof m.bytes);
  pm::CopyNT(m.bytes + dst_offset, src.data() + shift, n);
  pm::Fence();
  ASSERT_EQ(std::memcmp(m.bytes + dst_offset, src.data() + shift, n), 0)
      << "offset " << dst_offset << " length " << n << " shift " << shift;
  for (size_t i = 0; i < sizeof m.bytes; ++i)
    if (i < dst_offset || i >= dst_offset + n)
      ASSERT_EQ(m.bytes[i], 0xee) << "byte " << i << " outside a copy of " << n << " at " << dst_offset;
}

std::vector<unsigned char> Source() {
  std::vector<unsigned char> src(kMax + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  return src;
}

TEST(PmCopyNT, WholeAlignedLinesOfEveryLengthFromEveryAlignment) {
  const std::vector<unsigned char> src = Source();
  for (size_t shift : {0, 1, 7, 8, 15, 16, 33, 63})
    for (size_t n = 0; n <= kMax; n += 64) ASSERT_NO_FATAL_FAILURE(CheckCopy(0, n, shift, src));
}

TEST(PmCopyNT, PartLinesAndUnalignedTargets) {
  const std::vector<unsigned char> src = Source();
  for (size_t dst : {0, 1, 8, 60, 64})
    for (size_t n : {1, 63, 65, 100, 128, 1000, 4095, 4096, 4097})
      ASSERT_NO_FATAL_FAILURE(CheckCopy(dst, n, 3, src));
}

TEST(PmCopyNT, ARecorderSeesEveryLineCopied) {
  Media m;
  const std::vector<unsigned char> src = Source();
  PersistCounter c;  // a recorder: counts the lines each copy touches
  pm::CopyNT(m.bytes, src.data(), 128);
  EXPECT_EQ(c.bytes(), 128u);
  pm::CopyNT(m.bytes + 256, src.data() + 3, 2048);
  EXPECT_EQ(c.bytes(), 128u + 2048u);
  pm::CopyNT(m.bytes, src.data(), 4096);  // libpmem's path
  EXPECT_EQ(c.bytes(), 128u + 2048u + 4096u);
  pm::Fence();
}

}  // namespace
}  // namespace upfs
