// Sub-block writes as granule flips (format version 4; anywhere shadows,
// version 5), over the per-file container: a block's first small write
// pairs it with a shadow from anywhere (in a version 4 file, copies it
// into a pair of neighbours), and every small write persists its granules
// and a line of log, not its block; reads, GC, reopen,
// truncation, punching and appends see exactly the bytes written and
// leak no block; damage to a flip is refused, a flip a crash cut short
// is discarded only after a crash; older files get patches instead; a
// granule claim held by someone alive is waited for only briefly, one left by
// the dead is taken over; threads and processes flipping the same blocks
// lose, tear and reorder nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "container/perfile/inspect.h"
#include "engine/file.h"
#include "engine/reclamation.h"
#include "format/format.h"
#include "medium/persist_counter.h"
#include "opened_per_file.h"
#include "patch_test_util.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs {
namespace {

using namespace format;
using upfs_test::Opened;
using upfs_test::PatchBytes;
using upfs_test::TempDir;

uint64_t Persisted(Opened* f, const std::string& b, uint64_t off) {
  PersistCounter counter;
  f->Write(b, off);
  return counter.bytes();
}

// The file's log, read from the host file: the entries' words.
std::vector<uint64_t> FlipSlots(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  std::string all(lseek(fd, 0, SEEK_END), '\0');
  EXPECT_EQ(pread(fd, all.data(), all.size(), 0), ssize_t(all.size()));
  close(fd);
  // Atomics have no copy assignment; their bytes are what the file holds.
  FileHeader h;
  std::memcpy(static_cast<void*>(&h), all.data(), sizeof(h));
  LogBlock b;
  std::memcpy(static_cast<void*>(&b), all.data() + h.log_head.load() * kBlockSize, sizeof(b));
  std::vector<uint64_t> out;
  for (uint32_t s = 0; s < kSlotsPerLogBlock; ++s) out.push_back(b.slots[s].load());
  return out;
}

// The offset in the host file of slot `s` of the first log block.
off_t SlotOffset(const std::string& path, uint32_t s) {
  const int fd = open(path.c_str(), O_RDONLY);
  FileHeader h;
  EXPECT_EQ(pread(fd, &h, sizeof(h), 0), ssize_t(sizeof(h)));
  close(fd);
  return off_t(h.log_head.load() * kBlockSize + offsetof(LogBlock, slots) + 8 * s);
}

// fn(s) for the first slot of each entry in the first log block, in order.
template <typename Fn>
void ForEachEntry(const std::vector<uint64_t>& slots, Fn fn) {
  for (uint32_t s = 0; s + 1 < slots.size() && slots[s];) {
    fn(s);
    s += KindOf(slots[s]) == EntryKind::kReserve ? 1 + ReserveCount(slots[s])
         : KindOf(slots[s]) == EntryKind::kGrowTailChecked ? 2
                                                          : 1;
  }
}

// The slot of the last granule flip in the first log block.
uint32_t LastFlip(const std::vector<uint64_t>& slots) {
  uint32_t last = kSlotsPerLogBlock;
  ForEachEntry(slots, [&](uint32_t s) {
    if (IsGranuleFlip(slots[s])) last = s;
  });
  return last;
}

// What opening the file (a strict per-file open, as a process's first)
// says of its log.
Status OpenStatus(const std::string& path) {
  const int host = open(path.c_str(), O_RDWR);
  std::unique_ptr<File> file;
  Status st = OpenPerFile(host, path, false, Consistency::kStrict, nullptr, &file);
  close(host);
  return st;
}

TEST(Flip, ASmallWriteAfterPairingPersistsItsGranulesNotItsBlock) {
  TempDir d;
  Opened f(d.File("a"));
  f.Write(PatchBytes(64 * kBlockSize, 1), 0);
  // The first small write to a block takes a shadow from anywhere: its
  // granule and the flip's line, the block stays where it is.
  const uint64_t first = Persisted(&f, PatchBytes(128, 2), 5 * kBlockSize + 1024);
  EXPECT_LE(first, 3 * kCacheLine);
  // Then 128 aligned bytes: one granule (two lines) and the flip's line.
  EXPECT_LE(Persisted(&f, PatchBytes(128, 3), 5 * kBlockSize + 640), 3 * kCacheLine);
  // 100 bytes across two granules: both granules, completed from their
  // live homes, and the flip's line.
  EXPECT_LE(Persisted(&f, PatchBytes(100, 4), 5 * kBlockSize + 2000), 5 * kCacheLine);
  // 1 KiB: eight granules and the flip's line.
  EXPECT_LE(Persisted(&f, PatchBytes(1024, 5), 5 * kBlockSize + 2048), 1024 + kCacheLine);
  // A write across a block edge is copied on write (two blocks).
  EXPECT_GE(Persisted(&f, PatchBytes(128, 6), 7 * kBlockSize - 64), 2 * kBlockSize);
  std::string model = PatchBytes(64 * kBlockSize, 1);
  model.replace(5 * kBlockSize + 1024, 128, PatchBytes(128, 2));
  model.replace(5 * kBlockSize + 640, 128, PatchBytes(128, 3));
  model.replace(5 * kBlockSize + 2000, 100, PatchBytes(100, 4));
  model.replace(5 * kBlockSize + 2048, 1024, PatchBytes(1024, 5));
  model.replace(7 * kBlockSize - 64, 128, PatchBytes(128, 6));
  EXPECT_EQ(f.ReadAll(), model);
}

// Random writes of every size and alignment (mostly inside blocks), GC,
// shrinking into and growing past paired blocks, punching them, appending
// to a paired tail block: the bytes read back as a model says, before and
// after a reopen, and the allocation accounts for every block.
TEST(Flip, EverySizeAndAlignmentReadsBackAcrossGcTruncateAndReopen) {
  TempDir d;
  const std::string path = d.File("b");
  const uint64_t seed = upfs_test::TestSeed(20261130);
  std::string model = PatchBytes(16 * kBlockSize + 1000, 7);
  {
    Opened f(path);
    f.Write(model, 0);
    std::mt19937_64 r(seed);
    for (int i = 0; i < 4000; ++i) {
      const uint64_t len = 1 + r() % (i % 3 == 0 ? kBlockSize + 200 : 300);
      const uint64_t off = r() % (model.size() - std::min<uint64_t>(len, model.size() - 1));
      std::string b = PatchBytes(len, uint32_t(100 + i));
      f.Write(b, off);
      if (off + len > model.size()) model.resize(off + len, '\0');
      model.replace(off, len, b);
      if (i % 500 == 0) {
        ASSERT_TRUE(f.file->CollectGarbage(true).ok());  // folds every pair
      }
      if (i % 97 == 0) {
        ASSERT_EQ(f.ReadAll(), model) << "after write " << i << ", seed " << seed;
      }
      if (i % 700 == 350) {
        // Shrink into a block, grow past it, append to the tail block.
        const uint64_t cut = model.size() - 1 - r() % (3 * kBlockSize);
        ASSERT_TRUE(f.file->Truncate(cut).ok());
        model.resize(cut);
        ASSERT_TRUE(f.file->Truncate(cut + 5000).ok());
        model.resize(cut + 5000, '\0');
        const std::string tail = PatchBytes(300, uint32_t(i));
        f.Append(tail);
        model += tail;
        ASSERT_EQ(f.ReadAll(), model) << "after truncations at " << i;
      }
      if (i % 900 == 450) {
        const uint64_t at = r() % (model.size() - 3000);
        ASSERT_TRUE(f.file->Fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, 2500).ok());
        model.replace(at, 2500, std::string(2500, '\0'));
      }
    }
    ASSERT_EQ(f.ReadAll(), model);
    ASSERT_TRUE(f.file->CollectGarbage(true).ok());
    ASSERT_EQ(f.ReadAll(), model);
    // The forced GC folded every pair: two small writes pair two blocks
    // again, one of them the last, partial block.
    for (const uint64_t off : {uint64_t{kBlockSize + 10}, uint64_t{model.size() - 50}}) {
      const std::string b = PatchBytes(40, uint32_t(off));
      f.Write(b, off);
      model.replace(off, b.size(), b);
    }
    ASSERT_EQ(f.ReadAll(), model);
    uint64_t leaked = 1, unmarked = 1;
    ASSERT_TRUE(f.file->AuditAllocation(&leaked, &unmarked).ok());
    EXPECT_EQ(leaked, 0u);
    EXPECT_EQ(unmarked, 0u);
  }
  Opened g(path);
  EXPECT_EQ(g.ReadAll(), model) << "after reopen (replay)";
  g.file.reset();
  FileReport rep;
  ASSERT_TRUE(InspectFile(path, true, &rep).ok()) << (rep.problems.empty() ? "" : rep.problems.front());
  EXPECT_EQ(rep.paired_blocks, 2u) << "fsck sees the pairs";
  EXPECT_EQ(rep.patch_count, 0u) << "a version 4 file gets no patches";
}

// Damage to a committed flip is refused at open, naming its entry.
TEST(Flip, ADamagedFlipIsRefusedAtOpen) {
  for (const int damage : {0, 1}) {
    SCOPED_TRACE(damage ? "home past the end" : "reserved bits set");
    TempDir d;
    const std::string path = d.File("dmg");
    {
      Opened f(path);
      f.Write(PatchBytes(4 * kBlockSize, 1), 0);
      f.Write(std::string(100, 'x'), kBlockSize + 8);
      f.Write(std::string(100, 'y'), kBlockSize + 8);
    }
    const uint32_t s = LastFlip(FlipSlots(path));
    ASSERT_LT(s, kSlotsPerLogBlock);
    const int fd = open(path.c_str(), O_RDWR);
    uint64_t w0 = 0, w1 = 0;
    ASSERT_EQ(pread(fd, &w0, 8, SlotOffset(path, s)), 8);
    ASSERT_EQ(pread(fd, &w1, 8, SlotOffset(path, s + 1)), 8);
    if (damage == 0) {
      w1 |= uint64_t{1} << 40;
      ASSERT_EQ(pwrite(fd, &w1, 8, SlotOffset(path, s + 1)), 8);
    } else {
      w0 = EncodeGranuleFlip0(GranuleFlipVblock(w0), 0x7fffff00);
      ASSERT_EQ(pwrite(fd, &w0, 8, SlotOffset(path, s)), 8);
    }
    close(fd);
    const Status st = OpenStatus(path);
    EXPECT_EQ(st.err(), EUCLEAN);
    EXPECT_NE(st.message().find("granule flip"), std::string::npos) << st.message();
    FileReport rep;
    EXPECT_EQ(InspectFile(path, true, &rep).err(), EUCLEAN);
  }
}

// An anywhere shadow that names a block the file maps as data (a forged
// or damaged log) would make reads of the shadow's granules return that
// block's bytes: opening the file refuses it, and fsck names the block
// referenced twice.
TEST(Flip, AShadowNamingAMappedBlockIsRefused) {
  TempDir d;
  const std::string path = d.File("dup");
  {
    Opened f(path);
    f.Write(PatchBytes(4 * kBlockSize, 1), 0);
    f.Write(std::string(100, 'x'), kBlockSize + 8);  // the first flip: an anywhere shadow
  }
  const std::vector<uint64_t> slots = FlipSlots(path);
  uint32_t first = kSlotsPerLogBlock, data = 0;
  ForEachEntry(slots, [&](uint32_t i) {
    const EntryKind k = KindOf(slots[i]);
    if ((k == EntryKind::kMap || k == EntryKind::kMapExtend) && DecodeInline(slots[i]).vblock == 0)
      data = DecodeInline(slots[i]).lblock;
    if (IsGranuleFlip(slots[i]) && first == kSlotsPerLogBlock) first = i;
  });
  ASSERT_LT(first, kSlotsPerLogBlock);
  ASSERT_NE(data, 0u) << "the four blocks' map entry";
  ASSERT_TRUE(GranuleFlipAnywhere(slots[first + 1]));
  const int fd = open(path.c_str(), O_RDWR);
  const uint64_t w0 = EncodeGranuleFlip0(GranuleFlipVblock(slots[first]), data + 2);  // block 2's
  ASSERT_EQ(pwrite(fd, &w0, 8, SlotOffset(path, first)), 8);
  close(fd);
  const Status st = OpenStatus(path);
  EXPECT_EQ(st.err(), EUCLEAN) << st.ToString();
  FileReport rep;
  InspectFile(path, true, &rep);
  ASSERT_FALSE(rep.problems.empty());
  EXPECT_NE(rep.problems.front().find("referenced twice"), std::string::npos) << rep.problems.front();
}

// A flip whose second word did not reach media (media promise 8-byte
// failure atomicity) as the log's last entry: a commit a crash cut short
// if the file was in use, damage if not. After the crash the next open
// discards it and reads the bytes from before it.
TEST(Flip, AFlipACrashCutShortIsDiscardedOnlyAfterACrash) {
  TempDir d;
  const std::string path = d.File("cut");
  std::string before = PatchBytes(4 * kBlockSize, 1);
  {
    Opened f(path);
    f.Write(before, 0);
    f.Write(std::string(100, 'x'), kBlockSize + 8);
    f.Write(std::string(100, 'y'), kBlockSize + 8);
  }
  before.replace(kBlockSize + 8, 100, std::string(100, 'x'));
  const uint32_t s = LastFlip(FlipSlots(path));
  ASSERT_LT(s, kSlotsPerLogBlock);
  const int fd = open(path.c_str(), O_RDWR);
  const uint64_t zero = 0;
  ASSERT_EQ(pwrite(fd, &zero, 8, SlotOffset(path, s + 1)), 8);
  close(fd);
  upfs_test::ExpectCutShortOnlyAfterACrash(path);
  Opened f(path);
  ASSERT_TRUE(f.file);
  EXPECT_EQ(f.ReadAll(), before);
}

// A version 4 file keeps pairs of neighbours (the builds of version 4
// read it): a block's first flip copies it into a fresh pair, later ones
// persist their granules; the bytes and fsck agree, after a reopen and a
// forced GC too.
TEST(Flip, Version4FilesPairBlocksWithTheirNeighbours) {
  TempDir d;
  const std::string path = d.File("v4");
  { Opened f(path); }
  upfs_test::LabelVersion(path, kFirstAnywhereShadowVersion - 1);
  std::string model = PatchBytes(16 * kBlockSize, 1);
  {
    Opened f(path);
    f.Write(model, 0);
    EXPECT_GE(Persisted(&f, PatchBytes(128, 2), 3 * kBlockSize + 256), kBlockSize) << "the block copied";
    EXPECT_LE(Persisted(&f, PatchBytes(128, 3), 3 * kBlockSize + 512), 3 * kCacheLine);
    model.replace(3 * kBlockSize + 256, 128, PatchBytes(128, 2));
    model.replace(3 * kBlockSize + 512, 128, PatchBytes(128, 3));
    EXPECT_EQ(f.ReadAll(), model);
  }
  std::vector<uint64_t> slots = FlipSlots(path);
  const uint32_t s = LastFlip(slots);
  ASSERT_LT(s, kSlotsPerLogBlock);
  ForEachEntry(slots, [&](uint32_t i) {
    if (IsGranuleFlip(slots[i])) {
      EXPECT_FALSE(GranuleFlipAnywhere(slots[i + 1])) << "slot " << i;
    }
  });
  FileReport rep;
  ASSERT_TRUE(InspectFile(path, true, &rep).ok()) << (rep.problems.empty() ? "" : rep.problems.front());
  EXPECT_EQ(rep.format_version, kFirstAnywhereShadowVersion - 1) << "never upgraded";
  EXPECT_EQ(rep.paired_blocks, 1u);
  {
    Opened f(path);
    EXPECT_EQ(f.ReadAll(), model);
    ASSERT_TRUE(f.file->CollectGarbage(true).ok());
    EXPECT_EQ(f.ReadAll(), model);
  }
  ASSERT_TRUE(InspectFile(path, true, &rep).ok()) << (rep.problems.empty() ? "" : rep.problems.front());
  EXPECT_EQ(rep.paired_blocks, 0u) << "the forced GC folded the pair";
}

TEST(Flip, OlderFilesGetPatchesNotFlips) {
  TempDir d;
  const std::string path = d.File("v3");
  { Opened f(path); }
  upfs_test::LabelVersion(path, kFirstGranuleVersion - 1);
  {
    Opened f(path);
    f.Write(PatchBytes(8 * kBlockSize, 1), 0);
    f.Write(PatchBytes(128, 2), kBlockSize + 100);
  }
  FileReport rep;
  ASSERT_TRUE(InspectFile(path, true, &rep).ok());
  EXPECT_EQ(rep.paired_blocks, 0u);
  EXPECT_EQ(rep.patch_count, 1u);
}

// A granule claim held by a live owner sends the write to copy on write
// after a short bounded wait; one whose owner is gone is taken over.
TEST(Flip, AGranuleClaimIsWaitedForOnlyBrieflyAndIsTakenFromTheDead) {
  TempDir d;
  Opened f(d.File("claim"));
  std::string model = PatchBytes(8 * kBlockSize, 1);
  f.Write(model, 0);
  f.Write(PatchBytes(128, 2), kBlockSize);  // pairs block 1
  model.replace(kBlockSize, 128, PatchBytes(128, 2));
  std::atomic<uint64_t>& claim = f.file->root().words->granule_claim[1 % LogWords::kGranuleClaims];
  ASSERT_EQ(claim.load(), 0u) << "a write gives its claim back";
  // Held from a slot this process owns (its own thread's), alive.
  EpochDomain* epochs = f.file->source()->epochs();
  uint32_t mine = kMaxSlots;
  for (uint32_t i = 0; i < kMaxSlots && mine == kMaxSlots; ++i)
    if (epochs->SlotOwnerAlive(i) && epochs->slot(i)->owner_pid.load() == uint32_t(getpid())) mine = i;
  ASSERT_LT(mine, kMaxSlots);
  const uint64_t alive = (uint64_t(getpid()) << 32) | (mine + 1);
  claim.store(alive);
  const uint64_t cow = Persisted(&f, PatchBytes(128, 4), kBlockSize + 512);
  EXPECT_GE(cow, kBlockSize) << "copied on write around the claim";
  EXPECT_EQ(claim.load(), alive) << "left to its owner";
  model.replace(kBlockSize + 512, 128, PatchBytes(128, 4));
  // A slot number no process can own: its owner is gone. The next small
  // write pairs the block again (the copy on write ended the pairing).
  claim.store((uint64_t(1) << 32) | (kMaxSlots + 1));
  f.Write(PatchBytes(128, 5), kBlockSize + 1024);
  EXPECT_EQ(claim.load(), 0u) << "taken over, then given back";
  EXPECT_LE(Persisted(&f, PatchBytes(128, 6), kBlockSize + 1536), 3 * kCacheLine) << "a flip";
  model.replace(kBlockSize + 1024, 128, PatchBytes(128, 5));
  model.replace(kBlockSize + 1536, 128, PatchBytes(128, 6));
  EXPECT_EQ(f.ReadAll(), model);
}

// Threads flipping overlapping ranges of the same blocks while a thread
// reads; the rule the reader checks is PatchOrderCheck's.
TEST(Flip, ThreadsFlippingTheSameBlocksNeverTearOrReorder) {
  TempDir d;
  Opened f(d.File("t"));
  // Long enough that, without the granule claim, two writers writing the
  // same home show (torn words in three runs of six, on one block).
  upfs_test::RaceSmallWriters(&f, 3, int(upfs_test::Scaled(30000, 5000)), 1);
}

// Processes flipping granules of the same blocks, each its own granules:
// every process's last write to each of its granules is what the file
// holds, and the file is clean.
TEST(Flip, ProcessesFlippingTheSameBlocksLoseNothing) {
  TempDir d;
  const std::string path = d.File("procs");
  constexpr int kProcs = 3, kWrites = 4000;
  constexpr uint64_t kBlocks = 4;
  {
    const int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    const std::string zeros(kBlocks * kBlockSize, '\0');
    ASSERT_EQ(upfs_pwrite(fd, zeros.data(), zeros.size(), 0), ssize_t(zeros.size()));
    ASSERT_EQ(upfs_close(fd), 0);
  }
  // Granule g of every block belongs to process g % kProcs; a write
  // fills its granule with (process, write number).
  auto fill = [](int p, int w) {
    std::string b(kGranuleSize, '\0');
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
      const uint64_t x = (uint64_t(p + 1) << 32) | uint64_t(w + 1);
      std::memcpy(&b[i], &x, 8);
    }
    return b;
  };
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int fd = upfs_open(path.c_str(), O_RDWR);
      if (fd < 0) _exit(2);
      std::mt19937 r(p);
      for (int w = 0; w < kWrites; ++w) {
        const uint64_t b = r() % kBlocks;
        const uint64_t g = p + kProcs * (r() % (kGranulesPerBlock / kProcs));
        const std::string x = fill(p, w);
        if (upfs_pwrite(fd, x.data(), x.size(), b * kBlockSize + g * kGranuleSize) != ssize_t(x.size()))
          _exit(3);
      }
      _exit(upfs_close(fd) == 0 ? 0 : 4);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k, &status, 0), k);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  // The model: each process's writes replayed in its own order.
  std::string model(kBlocks * kBlockSize, '\0');
  for (int p = 0; p < kProcs; ++p) {
    std::mt19937 r(p);
    for (int w = 0; w < kWrites; ++w) {
      const uint64_t b = r() % kBlocks;
      const uint64_t g = p + kProcs * (r() % (kGranulesPerBlock / kProcs));
      model.replace(b * kBlockSize + g * kGranuleSize, kGranuleSize, fill(p, w));
    }
  }
  const int fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(model.size(), '\0');
  ASSERT_EQ(upfs_pread(fd, got.data(), got.size(), 0), ssize_t(got.size()));
  ASSERT_EQ(upfs_close(fd), 0);
  EXPECT_TRUE(got == model) << "a process's write was lost or reordered";
  FileReport rep;
  ASSERT_TRUE(InspectFile(path, true, &rep).ok()) << (rep.problems.empty() ? "" : rep.problems.front());
  EXPECT_GT(rep.paired_blocks, 0u);
}

}  // namespace
}  // namespace upfs
