// pm::CopyNTLines: the non-temporal copy of whole lines that a granule
// flip writes its runs with (docs/design.md, "A toggle"). It must copy
// exactly the bytes CopyNT would, from a source at any alignment, and be
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

constexpr size_t kLines = 40;  // 2,560 bytes: a 2 KiB run and more

struct alignas(64) Media {
  unsigned char bytes[kLines * 64 + 64];
};

TEST(PmCopyNTLines, CopiesEveryLengthFromEveryAlignmentAndNothingElse) {
  std::vector<unsigned char> src(kLines * 64 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t shift : {0, 1, 7, 8, 15, 16, 33, 63}) {
    for (size_t lines = 1; lines <= kLines; ++lines) {
      Media m;
      std::memset(m.bytes, 0xee, sizeof m.bytes);
      pm::CopyNTLines(m.bytes, src.data() + shift, lines * 64);
      pm::Fence();
      ASSERT_EQ(std::memcmp(m.bytes, src.data() + shift, lines * 64), 0) << shift << " " << lines;
      for (size_t i = lines * 64; i < sizeof m.bytes; ++i)
        ASSERT_EQ(m.bytes[i], 0xee) << "byte " << i << " past a copy of " << lines << " lines";
    }
  }
}

TEST(PmCopyNTLines, ARecorderSeesEveryLineCopied) {
  Media m;
  std::vector<unsigned char> src(kLines * 64, 5);
  PersistCounter c;  // a recorder: counts the lines each copy touches
  pm::CopyNTLines(m.bytes, src.data(), 128);
  EXPECT_EQ(c.bytes(), 128u);
  pm::CopyNTLines(m.bytes + 256, src.data() + 3, 2048);
  EXPECT_EQ(c.bytes(), 128u + 2048u);
  pm::Fence();
}

}  // namespace
}  // namespace upfs
