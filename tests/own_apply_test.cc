// The committer applies its own entry (File::ApplyOwn): a flip, a patch,
// an append in place and a copy on write's inline mapping leave this
// process's block table at the log's end, with no catch-up to decode the
// entry again. Nothing else notices
// when this stops happening: the next call's catch-up applies the entry
// (only slower), and a wrong own effect is refused by BlockTable::Apply
// and left to the catch-up too.
#include <gtest/gtest.h>

#include <string>

#include "engine/file.h"
#include "format/format.h"
#include "opened_per_file.h"
#include "patch_test_util.h"
#include "test_util.h"

namespace upfs {
namespace {

using format::kBlockSize;
using upfs_test::Opened;
using upfs_test::PatchBytes;
using upfs_test::TempDir;

// A file of `version` with 16 blocks and 1,000 bytes written (one
// mapping entry: the log's tail is then at an odd slot), its table caught
// up.
std::string Prepared(const TempDir& d, const char* name, uint32_t version) {
  const std::string path = d.File(name);
  { Opened f(path); }
  if (version != format::kFormatVersion) upfs_test::LabelVersion(path, version);
  Opened f(path);
  f.Write(PatchBytes(16 * kBlockSize + 1000, 1), 0);
  uint64_t size;
  EXPECT_TRUE(f.file->Size(&size).ok());  // a catch-up
  EXPECT_TRUE(f.file->TableAtLogEndForTest());
  return path;
}

void ExpectOwnApply(Opened* f, const std::string& bytes, uint64_t off, bool append, const char* what) {
  f->Write(bytes, off, append);
  EXPECT_TRUE(f->file->TableAtLogEndForTest()) << what << ": left to the next catch-up";
}

TEST(OwnApply, FlipsAndAppendsAreAppliedByTheirCommitter) {
  TempDir d;
  Opened f(Prepared(d, "v5", format::kFormatVersion));
  // At an odd slot: the flip's two words follow an alignment pad.
  ExpectOwnApply(&f, PatchBytes(128, 2), 3 * kBlockSize + 256, false, "a first flip after a pad");
  ExpectOwnApply(&f, PatchBytes(128, 3), 3 * kBlockSize + 256, false, "a toggle");
  ExpectOwnApply(&f, PatchBytes(1000, 4), 3 * kBlockSize + 1000, false, "a toggle of several granules");
  ExpectOwnApply(&f, PatchBytes(100, 5), 0, true, "an append in place");
  ExpectOwnApply(&f, PatchBytes(100, 6), 0, true, "a second append in place");
  // A copy on write of a whole block (an inline entry, one slot: the
  // tail is at an odd slot again after it).
  ExpectOwnApply(&f, PatchBytes(kBlockSize, 7), 5 * kBlockSize, false, "a copy on write");
  ExpectOwnApply(&f, PatchBytes(100, 8), 0, true, "an append in place after a pad");
  ExpectOwnApply(&f, PatchBytes(2 * kBlockSize, 9), 6 * kBlockSize, false, "a copy on write of two blocks");
  ExpectOwnApply(&f, PatchBytes(256, 10), 3 * kBlockSize, false, "a toggle after a pad");
  // A payload entry (a write that extends the file to a size inside a
  // block) is left to the next catch-up: the check can tell.
  uint64_t size;
  ASSERT_TRUE(f.file->Size(&size).ok());
  f.Write(PatchBytes(kBlockSize + 10, 11), size);
  EXPECT_FALSE(f.file->TableAtLogEndForTest()) << "the check sees an entry left to a catch-up";
}

// An entry that opens a log block: the table was left at the end of the
// block before, and a GC the write waited for could compact that block
// under it (then the next call replayed the whole log). Copies on write
// of a whole block (one slot) and toggles (two, at an even slot) in turn:
// every other block ends with a pad (a toggle that met slot 509).
TEST(OwnApply, AnEntryThatOpensALogBlockIsAppliedByItsCommitter) {
  TempDir d;
  Opened f(Prepared(d, "blocks", format::kFormatVersion));
  for (uint32_t i = 0; i < 3 * format::kSlotsPerLogBlock / 2; ++i) {
    const bool cow = i % 2 == 0;
    if (cow) f.Write(PatchBytes(kBlockSize, 20 + i % 7), 9 * kBlockSize);
    else f.Write(PatchBytes(128, 20 + i % 7), 3 * kBlockSize + 512);
    ASSERT_TRUE(f.file->TableAtLogEndForTest()) << (cow ? "copy on write " : "toggle ") << i
                                                << ": left to the next catch-up";
  }
}

TEST(OwnApply, AVersion4FirstFlipIsAppliedByItsCommitter) {
  TempDir d;
  Opened f(Prepared(d, "v4", format::kFirstGranuleVersion));
  ExpectOwnApply(&f, PatchBytes(128, 2), 7 * kBlockSize + 128, false, "a version 4 first flip");
  ExpectOwnApply(&f, PatchBytes(128, 3), 7 * kBlockSize + 128, false, "a version 4 toggle");
}

TEST(OwnApply, APatchIsAppliedByItsCommitter) {
  TempDir d;
  Opened f(Prepared(d, "v3", format::kFirstGranuleVersion - 1));
  ExpectOwnApply(&f, PatchBytes(200, 2), 2 * kBlockSize + 40, false, "a patch");
}

}  // namespace
}  // namespace upfs
