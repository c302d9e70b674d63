// Appends inside the tail block of a per-file file: which entry commits
// them (a checked append in version 3 strict files, a kGrowTail word in
// older files and in sync mode, so that the builds that made them can still
// read them), and what one persists (docs/design.md, "Checked appends").
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "engine/log.h"
#include "format/format.h"
#include "medium/persist_counter.h"
#include "patch_test_util.h"
#include "opened_per_file.h"
#include "test_util.h"
#include "util/crc32c.h"

namespace upfs {
namespace {

using namespace format;
using upfs_test::PatchBytes;
using upfs_test::TempDir;

using upfs_test::LabelVersion;
using upfs_test::Opened;

// The kinds of the entries in the file's first log block, as on media.
std::vector<EntryKind> LogKinds(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  FileHeader h;
  EXPECT_EQ(pread(fd, &h, sizeof(h), 0), ssize_t(sizeof(h)));
  alignas(64) LogBlock b;
  EXPECT_EQ(pread(fd, &b, sizeof(b), off_t(h.log_head.load()) << kBlockShift), ssize_t(sizeof(b)));
  close(fd);
  std::vector<EntryKind> kinds;
  for (uint32_t s = 0; s < kSlotsPerLogBlock;) {
    const uint64_t e = b.slots[s].load();
    if (e == 0) break;
    kinds.push_back(KindOf(e));
    s += EntrySlots(e);
  }
  return kinds;
}

size_t Count(const std::vector<EntryKind>& v, EntryKind k) { return size_t(std::count(v.begin(), v.end(), k)); }


TEST(Append, InsideTheTailBlockOfAStrictFileItIsOneCheckedEntry) {
  TempDir d;
  const std::string path = d.File("a");
  std::string model;
  {
    Opened f(path);
    for (int i = 0; i < 5; ++i) {
      const std::string b = PatchBytes(100, i + 1);
      f.Append(b);
      model += b;
    }
    EXPECT_EQ(f.ReadAll(), model);
  }
  const auto kinds = LogKinds(path);
  // The first append maps a block (there is no tail block yet).
  EXPECT_EQ(Count(kinds, EntryKind::kGrowTailChecked), 4u);
  EXPECT_EQ(Count(kinds, EntryKind::kGrowTail), 0u);
  Opened again(path);
  EXPECT_EQ(again.ReadAll(), model);
}

TEST(Append, OlderFilesAndSyncModeGetTwoRoundGrowTailEntries) {
  TempDir d;
  for (uint32_t version : {1u, 2u}) {
    SCOPED_TRACE("version " + std::to_string(version));
    const std::string path = d.File("v" + std::to_string(version));
    { Opened f(path); f.Append(PatchBytes(100, 1)); }
    LabelVersion(path, version);
    {
      Opened f(path);
      f.Append(PatchBytes(100, 2));
      f.Append(PatchBytes(100, 3));
    }
    const auto kinds = LogKinds(path);
    EXPECT_EQ(Count(kinds, EntryKind::kGrowTailChecked), 0u);
    EXPECT_EQ(Count(kinds, EntryKind::kGrowTail), 2u);
  }
  const std::string path = d.File("sync");
  {
    Opened f(path, Consistency::kSync);
    f.Append(PatchBytes(100, 1));
    f.Append(PatchBytes(100, 2));
  }
  const auto kinds = LogKinds(path);
  EXPECT_EQ(Count(kinds, EntryKind::kGrowTailChecked), 0u);
  EXPECT_EQ(Count(kinds, EntryKind::kGrowTail), 1u);
}

TEST(Append, ASmallAppendPersistsItsBytesAndOneEntryLine) {
  TempDir d;
  Opened f(d.File("p"));
  f.Append(PatchBytes(10, 1));
  for (int i = 0; i < 8; ++i) {
    PersistCounter counter;
    f.Append(PatchBytes(100, i + 2));
    // 100 bytes touch two or three lines; the entry's line; nothing else
    // (the bytes are not flushed twice, the entry not before its CAS).
    EXPECT_LE(counter.bytes(), 4 * kCacheLine) << i;
  }
}

// A write that makes a new tail block writes it only up to the size: the
// bytes past it are zeroed when the size rises over them (AppendInPlace
// tests in engine_test.cc), not by every first write of a small file.
TEST(Append, ANewTailBlockIsWrittenOnlyUpToTheSize) {
  TempDir d;
  Opened f(d.File("p"));
  const std::string first = PatchBytes(512, 1);
  uint64_t bytes = 0;
  {
    PersistCounter counter;
    f.Write(first, 0);
    bytes = counter.bytes();
  }
  // 512 bytes are 8 lines; the entry's line; a zero-filled block was 64.
  EXPECT_LE(bytes, 512 + 2 * kCacheLine);
  EXPECT_GE(bytes, 512u);
  // Later writes past the tail block and a growing truncate read zeros.
  f.Write("Z", kBlockSize + 9);
  ASSERT_TRUE(f.file->Truncate(2 * kBlockSize).ok());
  EXPECT_EQ(f.ReadAll(), first + std::string(kBlockSize + 9 - 512, '\0') + "Z" +
                             std::string(kBlockSize - 10, '\0'));
}

// An in-place append is applied to the table by its committer (not decoded
// again by the next call's catch-up): what the file's own handle sees next,
// size and bytes, is the append, in strict (checked) and sync mode alike.
TEST(Append, TheNextCallSeesAnInPlaceAppendItsCommitterApplied) {
  for (const Consistency mode : {Consistency::kStrict, Consistency::kSync}) {
    TempDir d;
    Opened f(d.File("own"), mode);
    std::string model = PatchBytes(300, 3);
    f.Write(model, 0);
    for (int i = 0; i < 12; ++i) {
      const std::string more = PatchBytes(33 + i, uint32_t(10 + i));
      f.Write(more, model.size());
      model += more;
      FileStat st;
      ASSERT_TRUE(f.file->Stat(&st).ok());
      ASSERT_EQ(st.size, model.size()) << "append " << i;
      ASSERT_EQ(f.ReadAll(), model) << "append " << i;
    }
  }
}

// A truncate that cuts a block writes its new last block only up to the
// new size (its last line) too; when the size rises again over the rest,
// by a growing truncate or a write past the end, it reads as zeros
// (with the line's bytes past 100 filled with junk instead of zeros, the
// growing truncate's ZeroTailForGap is what keeps them from showing).
TEST(Append, ATruncatedTailBlockIsWrittenOnlyUpToTheSize) {
  TempDir d;
  Opened f(d.File("t"));
  const std::string full(3 * kBlockSize, 'x');
  for (int round = 0; round < 8; ++round) {
    f.Write(full, 0);
    uint64_t bytes = 0;
    {
      PersistCounter counter;
      ASSERT_TRUE(f.file->Truncate(100).ok());
      bytes = counter.bytes();
    }
    // 100 bytes are two lines; the entry's line or two; a whole block was 64.
    EXPECT_LE(bytes, 4 * kCacheLine) << "round " << round;
    if (round % 2) {
      ASSERT_TRUE(f.file->Truncate(2 * kBlockSize).ok());
    } else {
      f.Write("Z", kBlockSize + 9);
      ASSERT_TRUE(f.file->Truncate(2 * kBlockSize).ok());
    }
    std::string want = full.substr(0, 100) + std::string(2 * kBlockSize - 100, '\0');
    if (!(round % 2)) want[kBlockSize + 9] = 'Z';
    ASSERT_EQ(f.ReadAll(), want) << "round " << round;
  }
}

}  // namespace
}  // namespace upfs
