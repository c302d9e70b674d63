// Corruption of pool images (docs/format.md, "Pools, format version 1"):
// every durable structure of a pool (superblock, namespace log blocks and
// records, checkpoint header and image, inode blocks and inodes, file logs,
// the allocation state) is damaged on purpose, and then
//
//  - upfs_mount either refuses the pool with a clean error (EUCLEAN,
//    EMEDIUMTYPE, EPROTONOSUPPORT) whose message names the damaged
//    structure, leaving the pool file's durable bytes as they were (no
//    silent repair), or — when the damage is where mounting does not look
//    (unused space, an inode nobody reads at mount) — mounts it;
//  - a mounted pool is walked (every directory listed, every name
//    lstat'ed, every symbolic link read, every file read), with errors
//    allowed but no crash;
//  - CheckPool (`upfs fsck`) reports the damage, naming the structure
//    (as an error, or as a problem), or reports a clean pool where the
//    damage was in unused space.
//
// The base pool has a varied namespace: directories, files with data (one
// of several blocks), short and long symbolic links, hard links, a
// checkpoint image and a log delta after it; a second base ("crashed") has
// in addition an unlinked file left open by a process killed while
// attached, so that mounting it runs recovery. A final sweep flips one bit
// in every 8-byte word (with a stride, bounded) of the metadata blocks and
//
// This program: foreign and truncated files, the superblock, the namespace
// log; pool_corruption_state_test.cc has the checkpoint, inodes, the
// allocation state, fsck and the bit-flip sweep.
#include "pool_corruption_fixture.h"

namespace {

// -- base sanity ----------------------------------------------------------------

TEST_F(PoolCorruptionTest, BasePoolsMountWalkAndCheckClean) {
  Outcome o = Try();
  ExpectHarmless(o);
  EXPECT_GE(o.walk.entries, 15);
  UseCrashed();
  o = Try();
  ExpectHarmless(o);
}

// -- foreign and truncated files -----------------------------------------------

TEST_F(PoolCorruptionTest, ForeignFilesAreNotPools) {
  // Random bytes, zeros, an empty file, a text file.
  std::vector<char> junk(3 << 20);
  unsigned s = 7;
  for (char& c : junk) c = char((s = s * 1103515245 + 12345) >> 16);
  for (int kind = 0; kind < 4; ++kind) {
    unlink(work_.c_str());
    int fd = open(work_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    if (kind == 0) { ASSERT_EQ(write(fd, junk.data(), junk.size()), ssize_t(junk.size())); }
    if (kind == 1) { ASSERT_EQ(ftruncate(fd, 40 << 20), 0); }
    if (kind == 3) { ASSERT_EQ(write(fd, "hello\n", 6), 6); }
    close(fd);
    Outcome o = Try();
    EXPECT_FALSE(o.mounted) << kind;
    EXPECT_EQ(o.mount_errno, EMEDIUMTYPE) << kind << ": " << o.mount_error;
    EXPECT_FALSE(o.check_ok) << kind;
  }
  // A directory.
  EXPECT_EQ(upfs_mount("/dev/shm", mnt_.c_str()), -1);
  EXPECT_TRUE(errno == EMEDIUMTYPE || errno == EISDIR) << upfs_last_error();
}

TEST_F(PoolCorruptionTest, PerFileUpfsFileIsNotAPool) {
  const std::string f = "/dev/shm/upfs-poolcorrupt-" + std::to_string(getpid()) + ".perfile";
  upfs_unlink(f.c_str());
  unlink(f.c_str());
  int fd = upfs_open(f.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(fd, "per-file data", 13), 13);
  ASSERT_EQ(upfs_close(fd), 0);
  EXPECT_EQ(upfs_mount(f.c_str(), mnt_.c_str()), -1);
  EXPECT_EQ(errno, EMEDIUMTYPE) << upfs_last_error();
  upfs::PoolReport r;
  EXPECT_EQ(upfs::CheckPool(f, &r).err(), EMEDIUMTYPE);
  EXPECT_EQ(upfs_unlink(f.c_str()), 0);
  // And the other way round: a pool is not a per-file upfs file.
  EXPECT_NE(upfs_is_upfs_file(work_.c_str()), 1);
}

TEST_F(PoolCorruptionTest, TruncatedPoolsAreRefused) {
  const uint64_t size = FileSize(work_);
  // The highest block that is not zeros: the pool's used part.
  uint64_t used = 0;
  {
    int fd = open(work_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::vector<uint64_t> blk(kB / 8);
    for (off_t at = off_t(kDataStart * kB); at < off_t(size);) {
      off_t data = lseek(fd, at, SEEK_DATA);
      if (data < 0) break;
      off_t hole = lseek(fd, data, SEEK_HOLE);
      if (hole < 0) hole = off_t(size);
      for (off_t o = data / off_t(kB) * off_t(kB); o < hole; o += off_t(kB)) {
        ASSERT_EQ(pread(fd, blk.data(), kB, o), ssize_t(kB));
        if (std::any_of(blk.begin(), blk.end(), [](uint64_t w) { return w != 0; })) used = uint64_t(o) / kB;
      }
      at = hole;
    }
    close(fd);
  }
  ASSERT_GT(used, layout_.ck);
  const std::vector<uint64_t> lengths = {0,
                                         1,
                                         100,
                                         kB - 1,
                                         kB,
                                         kB + 8,
                                         uint64_t(kDataStart) * kB,
                                         (uint64_t(kDataStart) + 2) * kB,
                                         (uint64_t(kDataStart) + 3) * kB,
                                         (used + 1) * kB - 1,
                                         used * kB,
                                         (layout_.ck) * kB,
                                         uint64_t(layout_.big_log_head) * kB,
                                         size - 1};
  for (uint64_t len : lengths) {
    SCOPED_TRACE("truncated to " + std::to_string(len));
    ASSERT_TRUE(CopySparse(base_, work_));
    ASSERT_EQ(truncate(work_.c_str(), off_t(len)), 0);
    Outcome o = Try();
    if (len < kB) {
      EXPECT_FALSE(o.mounted);
      EXPECT_EQ(o.mount_errno, EMEDIUMTYPE) << o.mount_error;
    } else if (len % kB != 0 || len < (uint64_t(kDataStart) + 3) * kB || len <= uint64_t(layout_.ck) * kB) {
      // The superblock's size check, or the checkpoint (read at mount).
      ExpectRefused(o, kAny);
    } else if (len == uint64_t(layout_.big_log_head) * kB) {
      // A file's log cut off (read when the file is): fsck finds it.
      ExpectDetected(o, kAny);
    } else if (!o.mounted) {
      // Blocks cut off that may or may not be in use (freed blocks keep
      // their bytes).
      EXPECT_TRUE(Names(o.mount_error, kAny)) << o.mount_error;
      EXPECT_TRUE(o.unchanged) << o.mount_error;
    }
  }
  // Truncated past everything in use (to whole blocks): still a pool, and
  // one that grows again. The base is clean: its volatile area still
  // records the capacity before the cut, and the attach makes it again
  // (before, a write needing a block past the cut failed with EUCLEAN).
  ASSERT_TRUE(CopySparse(base_, work_));
  ASSERT_EQ(truncate(work_.c_str(), off_t((used + 1) * kB)), 0);
  ExpectHarmless(Try([&] {
    const std::string f = mnt_ + "/grown-after-the-cut";
    const std::string data(size - used * kB + (8 << 20), 'g');
    const int fd = upfs_open(f.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    EXPECT_EQ(upfs_write(fd, data.data(), data.size()), ssize_t(data.size())) << upfs_last_error();
    std::string got(data.size(), 0);
    EXPECT_EQ(upfs_pread(fd, got.data(), got.size(), 0), ssize_t(got.size())) << upfs_last_error();
    EXPECT_TRUE(got == data);
    EXPECT_EQ(upfs_close(fd), 0);
  }));
}

// -- superblock ------------------------------------------------------------------

TEST_F(PoolCorruptionTest, SuperblockMagicVersionAndChecksum) {
  FlipBit(work_, 0, 1);
  Outcome o = Try();
  EXPECT_FALSE(o.mounted);
  EXPECT_EQ(o.mount_errno, EMEDIUMTYPE) << o.mount_error;
  EXPECT_TRUE(o.unchanged);

  ASSERT_TRUE(CopySparse(base_, work_));
  Set32(work_, offsetof(Superblock, version), kPoolVersion + 1);
  FixSuperblockCrc(work_);
  o = Try();
  EXPECT_FALSE(o.mounted);
  EXPECT_EQ(o.mount_errno, EPROTONOSUPPORT) << o.mount_error;
  EXPECT_TRUE(o.unchanged);

  // Every byte of the checksummed line, and the checksum itself.
  for (uint64_t off = 8; off < 64; off += 1) {
    if (off >= offsetof(Superblock, reserved0)) break;
    SCOPED_TRACE("superblock byte " + std::to_string(off));
    ASSERT_TRUE(CopySparse(base_, work_));
    FlipBit(work_, off, int(off % 8));
    ExpectRefused(Try(), kSb);
  }
}

TEST_F(PoolCorruptionTest, SuperblockLayoutFieldsWithValidChecksum) {
  struct F {
    size_t off, size;
    uint64_t value;
  };
  const std::vector<F> fields = {
      {offsetof(Superblock, block_size), 4, 8192},
      {offsetof(Superblock, block_size), 4, 0},
      {offsetof(Superblock, max_blocks), 8, uint64_t{1} << 40},
      {offsetof(Superblock, data_start), 4, 1},
      {offsetof(Superblock, data_start), 4, 0xffffffff},
      {offsetof(Superblock, flags), 4, 1},
      {offsetof(Superblock, root_ino), 8, 0},
      {offsetof(Superblock, root_ino), 8, 1},
      {offsetof(Superblock, root_ino), 8, InodeNumber(kDataStart, 0)},
      {offsetof(Superblock, root_ino), 8, ~uint64_t{0}},
      {offsetof(Superblock, root_ino), 8, uint64_t(layout_.blocks + 5) * kInodesPerBlock + 1},
  };
  for (const F& f : fields) {
    SCOPED_TRACE("field at " + std::to_string(f.off) + " = " + std::to_string(f.value));
    ASSERT_TRUE(CopySparse(base_, work_));
    ASSERT_TRUE(PWrite(work_, &f.value, f.size, f.off));
    FixSuperblockCrc(work_);
    ExpectRefused(Try(), kSb);
  }
}

TEST_F(PoolCorruptionTest, SuperblockRootPointersOutOfRange) {
  for (size_t off : {offsetof(Superblock, nslog_head), offsetof(Superblock, inode_chain),
                     offsetof(Superblock, checkpoint)}) {
    for (uint64_t v : {uint64_t{5}, uint64_t(layout_.blocks), uint64_t{1} << 32, ~uint64_t{0}}) {
      SCOPED_TRACE("root word at " + std::to_string(off) + " = " + std::to_string(v));
      ASSERT_TRUE(CopySparse(base_, work_));
      SetWord(work_, off, v);
      ExpectRefused(Try(), kSb);
    }
  }
  // The log head 0 (the checkpoint is not the first structure read).
  SetWord(work_, offsetof(Superblock, nslog_head), 0);
  ExpectRefused(Try(), kSb);
}

TEST_F(PoolCorruptionTest, SuperblockPointersToTheWrongStructure) {
  // The checkpoint word naming an inode block / a log block.
  for (uint64_t v : {uint64_t(layout_.inode_blocks[0]), uint64_t(layout_.log_blocks.back())}) {
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, offsetof(Superblock, checkpoint), v);
    ExpectRefused(Try(), kCk);
  }
  // The log head naming an inode block: mount (from the checkpoint) does
  // not read the head of a clean pool; recovery and fsck do (recovery
  // followed the inode block's magic as a link: a SEGV, fixed).
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, offsetof(Superblock, nslog_head), layout_.inode_blocks[0]);
  ExpectDetected(Try(), kLog);
  UseCrashed();
  SetWord(work_, offsetof(Superblock, nslog_head), crashed_layout_.inode_blocks[0]);
  ExpectRefused(Try(), kLog);
  // The inode chain naming a log block.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, offsetof(Superblock, inode_chain), layout_.log_blocks.back());
  ExpectDetected(Try(), kInode);
  UseCrashed();
  SetWord(work_, offsetof(Superblock, inode_chain), crashed_layout_.log_blocks.back());
  ExpectRefused(Try(), kInode);
  // No checkpoint at all: the log is read from its head. The first
  // checkpoint keeps the whole log (a checkpoint frees the log before the
  // previous one's continuation), so this is the same namespace.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, offsetof(Superblock, checkpoint), 0);
  Outcome o = Try();
  if (!o.mounted) { EXPECT_TRUE(o.unchanged); }
}

TEST_F(PoolCorruptionTest, SuperblockLogReserve) {
  // Out of range: refused at every attach, before anything is read.
  for (uint64_t v : {uint64_t{5}, uint64_t(layout_.blocks), uint64_t{1} << 32, ~uint64_t{0}}) {
    SCOPED_TRACE("reserve word = " + std::to_string(v));
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, offsetof(Superblock, nslog_reserve) + 8, v);
    ExpectRefused(Try(), kSb);
  }
  // Naming a block in use (the log's last one): a clean pool's mount does
  // not look (a removal in a full pool would take it), fsck does; recovery
  // refuses it.
  const std::vector<std::string> twice = {"reserve block " + std::to_string(layout_.log_blocks.back())};
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, offsetof(Superblock, nslog_reserve), layout_.log_blocks.back());
  ExpectDetected(Try(), twice);
  UseCrashed();
  SetWord(work_, offsetof(Superblock, nslog_reserve), crashed_layout_.log_blocks.back());
  ExpectRefused(Try(), {"reserve block " + std::to_string(crashed_layout_.log_blocks.back())});
  // No reserve at all: the pool works, and gets one again as its log grows.
  ASSERT_TRUE(CopySparse(base_, work_));
  for (uint32_t i = 0; i < upfs::format::pool::kLogReserveBlocks; ++i)
    SetWord(work_, offsetof(Superblock, nslog_reserve) + 8 * i, 0);
  Outcome o = Try();
  EXPECT_TRUE(o.mounted) << o.mount_error;
  EXPECT_TRUE(o.check_ok) << o.check;
}

TEST_F(PoolCorruptionTest, SuperblockUnusedSpaceAndSoftWords) {
  // Reserved word, padding of the pointer line and of the block: unused.
  Set32(work_, offsetof(Superblock, reserved0), 0xdeadbeef);
  SetWord(work_, offsetof(Superblock, pad1), 0x1234);
  SetWord(work_, 3000, ~uint64_t{0});
  ExpectHarmless(Try());
  // `clean` 0 or garbage: recovery rebuilds the volatile area.
  for (uint64_t v : {uint64_t{0}, uint64_t{77}}) {
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, offsetof(Superblock, clean), v);
    ExpectHarmless(Try());
  }
}

// -- the namespace log ---------------------------------------------------------

TEST_F(PoolCorruptionTest, LogBlockHeaders) {
  const Layout& L = layout_;
  // The tail block's link word: magic gone, or a successor out of range /
  // not a log block. The tail block is read at mount (from the continuation).
  const uint64_t tail_next = uint64_t(L.tail.block) * kB;
  for (uint64_t v : {uint64_t{0}, uint64_t{12345}, NsNextWord(uint32_t(L.blocks + 10)),
                     NsNextWord(L.inode_blocks[0]), NsNextWord(0xffffffff), NextWord(0)}) {
    SCOPED_TRACE("tail link = " + std::to_string(v));
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, tail_next, v);
    Outcome o = Try();
    // A successor past a block with free slots is never read by mount (it
    // stops at the first empty slot); CheckPool must see it.
    ExpectDetected(o, kLog);
  }
  // The continuation block's sequence number.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, uint64_t(L.cont_block) * kB + 8, 999999);
  ExpectRefused(Try(), kLog);
  // A kept block before the continuation: its link and sequence (recovery
  // and fsck walk the whole chain from the head).
  if (L.log_blocks.size() >= 2 && L.log_blocks[0] != L.cont_block) {
    for (uint64_t v : {uint64_t{0}, NsNextWord(uint32_t(L.blocks + 3)), NsNextWord(7)}) {
      SCOPED_TRACE("head link = " + std::to_string(v));
      ASSERT_TRUE(CopySparse(base_, work_));
      SetWord(work_, uint64_t(L.log_blocks[0]) * kB, v);
      ExpectDetected(Try(), kLog);
      UseCrashed();
      SetWord(work_, uint64_t(crashed_layout_.log_blocks[0]) * kB, v);
      ExpectRefused(Try(), kLog);
    }
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, uint64_t(L.log_blocks[0]) * kB + 8, 424242);
    ExpectDetected(Try(), kLog);
  }
}

TEST_F(PoolCorruptionTest, LogRecordsAndCommitWords) {
  const Layout& L = layout_;
  const uint64_t reserve = Word(base_, L.delta_reserve.Off());
  const uint64_t apply = Word(base_, L.delta_apply.Off());
  const uint32_t n = ReserveCount(reserve);
  ASSERT_GE(n, kRecordHeaderWords);
  struct Case {
    std::string what;
    std::function<void()> damage;
  };
  const std::vector<Case> cases = {
      {"payload word 0 flipped", [&] { FlipBit(work_, L.delta_reserve.Off() + 8, 3); }},
      {"payload ino flipped", [&] { FlipBit(work_, L.delta_reserve.Off() + 16, 0); }},
      {"payload name byte flipped", [&] { FlipBit(work_, L.delta_reserve.Off() + 8 * 6, 1); }},
      {"commit crc flipped", [&] { FlipBit(work_, L.delta_apply.Off() + 5, 2); }},
      {"commit names a later slot", [&] { SetWord(work_, L.delta_apply.Off(), EncodeApply(L.delta_apply.slot, ApplyCrc(apply))); }},
      {"commit names a payload word",
       [&] { SetWord(work_, L.delta_apply.Off(), EncodeApply(L.delta_reserve.slot + 1, ApplyCrc(apply))); }},
      {"commit with junk in its zero bits", [&] { SetWord(work_, L.delta_apply.Off(), apply | (1ull << 20)); }},
      {"reservation count past the block", [&] { SetWord(work_, L.delta_reserve.Off(), EncodeReserve(511)); }},
      {"reservation count short", [&] { SetWord(work_, L.delta_reserve.Off(), EncodeReserve(n - 1)); }},
      {"reservation with junk bits", [&] { SetWord(work_, L.delta_reserve.Off(), reserve | (1ull << 40)); }},
      {"unknown entry kind", [&] { SetWord(work_, L.delta_reserve.Off(), 0x5); }},
      {"file-log entry kind", [&] { SetWord(work_, L.delta_apply.Off(), 0x1 | (uint64_t(L.blocks) << 3)); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(CopySparse(base_, work_));
    c.damage();
    ExpectRefused(Try(), kLog);
  }
}

// A record that passes its checksum but does not fit the namespace (a
// writer's bug, or damage with the checksum recomputed).
TEST_F(PoolCorruptionTest, LogRecordsThatDoNotFitTheNamespace) {
  const Layout& L = layout_;
  const uint64_t reserve = Word(base_, L.delta_reserve.Off());
  const uint32_t n = ReserveCount(reserve);
  auto rewrite = [&](const std::function<void(std::vector<uint64_t>&)>& fn) {
    std::vector<uint64_t> w(n);
    ASSERT_TRUE(PRead(work_, w.data(), n * 8, L.delta_reserve.Off() + 8));
    fn(w);
    ASSERT_TRUE(PWrite(work_, w.data(), n * 8, L.delta_reserve.Off() + 8));
    SetWord(work_, L.delta_apply.Off(), EncodeApply(L.delta_reserve.slot, upfs::Crc32c(w.data(), n * 8)));
  };
  const std::vector<std::pair<std::string, std::function<void(std::vector<uint64_t>&)>>> cases = {
      {"directory that does not exist", [](std::vector<uint64_t>& w) { w[2] = 999999999; }},
      {"directory is a file", [&](std::vector<uint64_t>& w) { w[2] = layout_.ino_big; }},
      {"unknown type", [](std::vector<uint64_t>& w) { w[0] = (w[0] & ~uint64_t(0xff)) | 9; }},
      {"kind out of range", [](std::vector<uint64_t>& w) { w[0] = (w[0] & ~uint64_t(0xff00)) | (7 << 8); }},
      {"name length zero", [](std::vector<uint64_t>& w) { w[0] &= ~(uint64_t(0xffff) << 16); }},
      {"name length too long", [](std::vector<uint64_t>& w) { w[0] |= uint64_t(0x1ff) << 16; }},
      {"second name on a create", [](std::vector<uint64_t>& w) { w[0] |= uint64_t(3) << 32; }},
      // Names no path reaches (were listed as entries: fixed).
      {"name with a slash", [](std::vector<uint64_t>& w) { w[5] = (w[5] & ~uint64_t(0xff)) | '/'; }},
      {"name with a NUL", [](std::vector<uint64_t>& w) { w[5] &= ~uint64_t(0xff00); }},
      {"name is dot-dot", [](std::vector<uint64_t>& w) { w[5] = (w[5] & ~uint64_t(0xffff)) | ('.' | ('.' << 8)); }},
      {"inode 0", [](std::vector<uint64_t>& w) { w[1] = 0; }},
      {"inode out of range", [](std::vector<uint64_t>& w) { w[1] = ~uint64_t{0} - 3; }},
      {"mkdir of the root", [&](std::vector<uint64_t>& w) { w[1] = layout_.sb.root_ino; }},
      {"name exists", [&](std::vector<uint64_t>& w) {
         // "d4" (the record) renamed to "d1", which exists.
         w[5] = (w[5] & ~uint64_t(0xffff)) | ('d' | ('1' << 8));
       }},
  };
  for (const auto& [what, fn] : cases) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(CopySparse(base_, work_));
    rewrite(fn);
    Outcome o = Try();
    // Refused, naming the log (or, for an inode number that names no
    // inode, the inode); never mounted with the record half-applied.
    if (o.mounted) {
      ExpectDetected(o, {"namespace log", "inode", "name", "directory"});
    } else {
      ExpectRefused(o, {"namespace log", "inode", "namespace"});
    }
  }
}

TEST_F(PoolCorruptionTest, GarbagePastTheLogTail) {
  const Layout& L = layout_;
  // A non-zero word past the committed tail, not a reservation: mount stops
  // at the first empty slot and does not see it; fsck must (the next record
  // written would be read together with it).
  for (uint32_t gap : {1u, 2u, 40u}) {
    for (uint64_t v : {uint64_t{0x5}, EncodeApply(L.tail.slot, 1234), uint64_t{0xdeadbeefcafe}, EncodeReserve(511)}) {
      const LogSlot at{L.tail.block, std::min(L.tail.slot + gap, kSlotsPerLogBlock - 1)};
      SCOPED_TRACE("slot +" + std::to_string(gap) + " = " + std::to_string(v));
      ASSERT_TRUE(CopySparse(base_, work_));
      SetWord(work_, at.Off(), v);
      ExpectDetected(Try(), kLog);
    }
  }
  // A dead reservation past a gap (its writer died before its word at an
  // earlier slot was durable) is not damage.
  ASSERT_TRUE(CopySparse(base_, work_));
  const LogSlot at{L.tail.block, L.tail.slot + 1};
  SetWord(work_, at.Off(), EncodeReserve(3));
  SetWord(work_, at.Off() + 8, 0x1111);
  SetWord(work_, at.Off() + 16, 0x2222);
  Outcome o = Try();
  EXPECT_TRUE(o.mounted) << o.mount_error;
  EXPECT_TRUE(o.check_ok) << o.check;
  EXPECT_FALSE(o.check_problems) << o.check;
}

}  // namespace
