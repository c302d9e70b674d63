// Corruption of pool images, continued from pool_corruption_test.cc (which
// says what every case must do): the checkpoint, inodes and file logs, the
// allocation state, `upfs fsck`, and a sweep flipping one bit in every
// metadata word.
#include "pool_corruption_fixture.h"

namespace {

// -- the checkpoint ---------------------------------------------------------------

TEST_F(PoolCorruptionTest, CheckpointHeader) {
  const Layout& L = layout_;
  const uint64_t h = uint64_t(L.ck) * kB;
  // Unchecksummed: each byte of the header's fields flipped.
  for (uint64_t off = 0; off < 96 + 8; ++off) {
    SCOPED_TRACE("header byte " + std::to_string(off));
    ASSERT_TRUE(CopySparse(base_, work_));
    FlipBit(work_, h + off, int(off % 8));
    ExpectRefused(Try(), kCk);
  }
  // With the checksums recomputed: fields out of range.
  struct F {
    std::string what;
    size_t off, size;
    uint64_t value;
    std::vector<std::string> words;
  };
  const std::vector<F> fields = {
      {"nruns 0", offsetof(CheckpointHeader, nruns), 4, 0, kCk},
      {"nruns too many", offsetof(CheckpointHeader, nruns), 4, 481, kCk},
      {"run in the header", offsetof(CheckpointHeader, runs), 4, 3, kCk},
      {"run past the end", offsetof(CheckpointHeader, runs), 4, uint32_t(L.blocks - 1), kCk},
      {"run count huge", offsetof(CheckpointHeader, runs) + 4, 4, 0xffffffff, kCk},
      {"dirs 0", offsetof(CheckpointHeader, dirs), 8, 0, kCk},
      {"dirs huge", offsetof(CheckpointHeader, dirs), 8, uint64_t{1} << 61, kCk},
      {"image_words huge", offsetof(CheckpointHeader, image_words), 8, ~uint64_t{0}, kCk},
      {"multi huge", offsetof(CheckpointHeader, multi), 8, uint64_t{1} << 63, kCk},
      {"multi_words huge", offsetof(CheckpointHeader, multi_words), 8, ~uint64_t{0} - 1, kCk},
      {"cont_slot past the block", offsetof(CheckpointHeader, cont_slot), 4, 511, kCk},
      {"cont_lblock out of range", offsetof(CheckpointHeader, cont_lblock), 4, 0xfffffff0, kCk},
      {"cont_lblock not a log block", offsetof(CheckpointHeader, cont_lblock), 4, L.inode_blocks[0],
       {"namespace log", "checkpoint"}},
      {"cont_seq wrong", offsetof(CheckpointHeader, cont_seq), 8, 77777, {"namespace log", "checkpoint"}},
      {"keep_seq after cont_seq", offsetof(CheckpointHeader, keep_seq), 8, ~uint64_t{0}, kCk},
      {"keep_lblock out of range", offsetof(CheckpointHeader, keep_lblock), 4, 0xfffffff0, kCk},
  };
  for (const F& f : fields) {
    SCOPED_TRACE(f.what);
    ASSERT_TRUE(CopySparse(base_, work_));
    ASSERT_TRUE(PWrite(work_, &f.value, f.size, h + f.off));
    FixCheckpointCrcs(work_, L.ck);
    ExpectRefused(Try(), f.words);
  }
  // The padding after the runs is neither checksummed nor read.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, h + kB - 8, 0xabcdef);
  ExpectHarmless(Try());
}

TEST_F(PoolCorruptionTest, CheckpointImageTables) {
  const Layout& L = layout_;
  CheckpointHeader h;
  ASSERT_TRUE(PRead(base_, &h, sizeof(h), uint64_t(L.ck) * kB));
  auto word_off = [&](uint64_t w) { return uint64_t(L.image_blocks[w / 512]) * kB + (w % 512) * 8; };
  // Any bit of the image: the image checksum.
  for (uint64_t w : {uint64_t{0}, uint64_t{1}, uint64_t{4}, uint64_t{5}, h.dirs * kDirRowWords,
                     h.dirs * kDirRowWords + 1, h.image_words / 2, h.multi_words, h.image_words - 1}) {
    if (w >= h.image_words) continue;
    SCOPED_TRACE("image word " + std::to_string(w));
    ASSERT_TRUE(CopySparse(base_, work_));
    FlipBit(work_, word_off(w), int(w % 8));
    ExpectRefused(Try(), kCk);
  }
  // Past image_words in its last block: unused.
  if (h.image_words % 512 != 0) {
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, word_off(h.image_words), 0x77);
    ExpectHarmless(Try());
  }
  // With the checksum recomputed: rows and slots that do not hold.
  struct C {
    std::string what;
    uint64_t word, value;
  };
  std::vector<C> cases = {
      {"row 0 ino 0", 0, 0},
      {"row 0 table out of range", 4, ~uint64_t{0} - 3},
      {"row 0 table near 2^64", 4, ~uint64_t{0} - 7},
      {"row 0 slots not a power of two", 5, 3},
      {"row 0 slots huge", 5, uint64_t{1} << 62},
      {"row 0 entries > slots", 3, 1u << 20},
      {"rows out of order", kDirRowWords, 1},
  };
  if (h.multi > 0) {
    cases.push_back({"multi-link count 0", h.multi_words + 1, 0});
    cases.push_back({"multi-link count huge", h.multi_words + 1, 0xffffffff});
    cases.push_back({"multi-link ino unknown", h.multi_words, 12345});
  }
  // Name slots (after their directory's tags): the first slot of a short
  // name (held in the slot), of a long one (placed apart), and the first
  // empty slot; for each, its tag.
  ASSERT_EQ(h.magic, kCheckpointMagic);
  struct Slot {
    uint64_t tag = ~uint64_t{0}, at = ~uint64_t{0};
  } short_name, long_name, empty;
  for (uint64_t r = 0; r < h.dirs; ++r) {
    const uint64_t table = Word(base_, word_off(r * kDirRowWords + 4));
    const uint64_t slots = Word(base_, word_off(r * kDirRowWords + 5));
    for (uint64_t s = 0; s < slots; ++s) {
      const Slot here{table + s, table + slots + s * kNameSlotWords};
      if (Word(base_, word_off(here.at)) == 0) {
        if (empty.at == ~uint64_t{0}) empty = here;
        continue;
      }
      const uint64_t len = (Word(base_, word_off(here.at + 1)) >> 40) & 0xff;
      Slot& kind = len <= kInlineNameMax ? short_name : long_name;
      if (kind.at == ~uint64_t{0}) kind = here;
    }
  }
  ASSERT_NE(short_name.at, ~uint64_t{0});
  ASSERT_NE(long_name.at, ~uint64_t{0});
  ASSERT_NE(empty.at, ~uint64_t{0});
  for (const Slot& sl : {short_name, long_name}) {
    const uint64_t at = sl.at, meta = Word(base_, word_off(at + 1));
    const std::string k = &sl == &short_name ? "short name " : "long name ";
    cases.push_back({k + "slot ino 1", at, 1});
    cases.push_back({k + "slot ino huge", at, ~uint64_t{0}});
    cases.push_back({k + "slot meta type 9", at + 1, meta | (uint64_t(9) << 32)});
    cases.push_back({k + "slot meta length 255", at + 1, meta | (uint64_t(255) << 40)});
    cases.push_back({k + "slot meta crc wrong", at + 1, meta ^ 0x5555});
    cases.push_back({k + "slot meta reserved bits", at + 1, meta | (uint64_t(1) << 50)});
    cases.push_back({k + "tag ino wrong", sl.tag, Word(base_, word_off(sl.tag)) ^ 1});
    cases.push_back({k + "tag crc wrong", sl.tag, Word(base_, word_off(sl.tag)) ^ (uint64_t(1) << 40)});
    cases.push_back({k + "tag cleared", sl.tag, 0});
  }
  cases.push_back({"short name changed in its slot", short_name.at + 2, Word(base_, word_off(short_name.at + 2)) ^ 1});
  cases.push_back({"bytes after a short name", short_name.at + 3, uint64_t(0x7a) << 56});
  cases.push_back({"long name out of the image", long_name.at + 2, h.image_words + 10});
  cases.push_back({"long name at a block end", long_name.at + 2, 511});
  cases.push_back({"long name huge", long_name.at + 2, ~uint64_t{0} - 1});
  cases.push_back({"long name at 2^64 - 1", long_name.at + 2, ~uint64_t{0}});
  cases.push_back({"a tag over an empty slot", empty.tag, Word(base_, word_off(short_name.tag))});
  const uint64_t first_slot = long_name.at;
  // Refused naming the checkpoint, or (a name slot: read lazily) mounted
  // with the damage found by CheckPool.
  auto expect_found = [&] {
    FixCheckpointCrcs(work_, L.ck);
    Outcome o = Try();
    if (o.mounted) {
      ExpectDetected(o, {"checkpoint", "inode", "name", "directory", "links"});
    } else {
      ExpectRefused(o, {"checkpoint", "inode", "namespace"});
    }
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, word_off(c.word), c.value);
    expect_found();
  }
  // A one-word name at 2^64 - 1: the range check wrapped, and listing the
  // directory read far outside the image (a SEGV found by fuzz_pool).
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, word_off(first_slot + 1),
          (Word(base_, word_off(first_slot + 1)) & ~(uint64_t(0xff) << 40)) | (uint64_t(1) << 40));
  SetWord(work_, word_off(first_slot + 2), ~uint64_t{0});
  expect_found();
}

// -- inodes -------------------------------------------------------------------------

TEST_F(PoolCorruptionTest, InodeBlocks) {
  const Layout& L = layout_;
  // Magic and chain link of each inode block. A clean mount does not walk
  // the inode chain (fsck and recovery do).
  for (size_t i = 0; i < L.inode_blocks.size(); ++i) {
    const uint64_t b = uint64_t(L.inode_blocks[i]) * kB;
    for (int what = 0; what < 3; ++what) {
      SCOPED_TRACE("inode block " + std::to_string(i) + " damage " + std::to_string(what));
      ASSERT_TRUE(CopySparse(base_, work_));
      if (what == 0) Set32(work_, b, 0x12345678);
      if (what == 1) SetWord(work_, b + 8, L.blocks + 100);
      if (what == 2) SetWord(work_, b + 8, L.inode_blocks[0]);  // a loop
      if (what == 2 && L.inode_blocks.size() == 1) continue;
      ExpectDetected(Try(), {"inode", "block map"});
    }
  }
  // The same on the crashed base: recovery walks the chain, and refuses.
  UseCrashed();
  Set32(work_, uint64_t(crashed_layout_.inode_blocks.back()) * kB, 0x12345678);
  ExpectRefused(Try(), kInode);
  // The header's unused bytes.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, uint64_t(L.inode_blocks[0]) * kB + 100, 0x99);
  ExpectHarmless(Try());
}

TEST_F(PoolCorruptionTest, InodeFields) {
  const Layout& L = layout_;
  struct C {
    std::string what;
    uint64_t ino;
    size_t off, size;
    uint64_t value;
  };
  const std::vector<C> cases = {
      {"file kind unknown", L.ino_big, offsetof(Inode, ident), 8, EncodeIdent(FileType(9), 1)},
      {"file marked free", L.ino_big, offsetof(Inode, ident), 8, EncodeIdent(FileType::kFree, 1)},
      {"file says directory", L.ino_small, offsetof(Inode, ident), 8, EncodeIdent(FileType::kDirectory, 1)},
      {"file junk ident bits", L.ino_big, offsetof(Inode, ident), 8, EncodeIdent(FileType::kRegular, 1) | (1ull << 60)},
      {"directory says file", L.ino_dir, offsetof(Inode, ident), 8, EncodeIdent(FileType::kRegular, 1)},
      {"root says file", L.sb.root_ino, offsetof(Inode, ident), 8, EncodeIdent(FileType::kRegular, 1)},
      {"root free", L.sb.root_ino, offsetof(Inode, ident), 8, 0},
      {"mode out of range", L.ino_big, offsetof(Inode, mode), 8, 0177777},
      {"consistency 0", L.ino_big, offsetof(Inode, consistency), 4, 0},
      {"consistency 9", L.ino_small, offsetof(Inode, consistency), 4, 9},
      {"log head huge", L.ino_big, offsetof(Inode, log_head), 8, ~uint64_t{0}},
      {"log head past the file", L.ino_big, offsetof(Inode, log_head), 8, L.blocks + 7},
      {"log head in the header", L.ino_big, offsetof(Inode, log_head), 8, 3},
      {"log head an inode block", L.ino_big, offsetof(Inode, log_head), 8, L.inode_blocks[0]},
      {"log head a namespace log block", L.ino_small, offsetof(Inode, log_head), 8, L.log_blocks.back()},
      {"log head another file's", L.ino_small, offsetof(Inode, log_head), 8, L.big_log_head},
      {"link target length 0", L.ino_short_link, offsetof(Inode, target_len), 4, 0},
      {"link target length 4096", L.ino_short_link, offsetof(Inode, target_len), 4, 4096},
      {"link target length 0xffffffff", L.ino_long_link, offsetof(Inode, target_len), 4, 0xffffffff},
      {"short link target length long", L.ino_short_link, offsetof(Inode, target_len), 4, 300},
      {"long link target length short", L.ino_long_link, offsetof(Inode, target_len), 4, 5},
      {"long link target block huge", L.ino_long_link, offsetof(Inode, target_block), 8, ~uint64_t{0}},
      {"long link target block past the file", L.ino_long_link, offsetof(Inode, target_block), 8, L.blocks},
      {"long link target block 0", L.ino_long_link, offsetof(Inode, target_block), 8, 0},
      {"long link target block in the header", L.ino_long_link, offsetof(Inode, target_block), 8, 2},
      {"short link gets a target block", L.ino_short_link, offsetof(Inode, target_block), 8, L.inode_blocks[0]},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_NE(c.ino, 0u);
    ASSERT_TRUE(CopySparse(base_, work_));
    ASSERT_TRUE(PWrite(work_, &c.value, c.size, InodeOff(c.ino) + c.off));
    // Inodes are read when used: the mount may succeed, the walk fails
    // cleanly where it reads the inode, and fsck names it.
    ExpectDetected(Try(), {"inode", "file", "symbolic link", "block map", "name"});
  }
  // Soft and unchecked fields: times, open_count, the log's soft words.
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, InodeOff(L.ino_big) + offsetof(Inode, atime_ns), ~uint64_t{0});
  SetWord(work_, InodeOff(L.ino_big) + offsetof(Inode, open_count), 5);
  ExpectHarmless(Try());
}

// A damaged symbolic link's target block, met when the link's inode is
// released (its last name removed): the release frees nothing and the
// call does not crash (fuzz_pool found a release clearing a bitmap bit far
// outside the bitmap: a SEGV); CheckPool names the damage.
TEST_F(PoolCorruptionTest, ReleasingALinkWithADamagedTargetFreesNothing) {
  const Layout& L = layout_;
  for (uint64_t target : {~uint64_t{0}, uint64_t{1} << 40, (uint64_t{1} << 32) + 5, uint64_t(L.blocks) + 1000}) {
    SCOPED_TRACE("target block " + std::to_string(target));
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, InodeOff(L.ino_long_link) + offsetof(Inode, target_block), target);
    const Outcome o = Try([&] {
      // The name goes (its record is valid); the inode's blocks stay.
      EXPECT_EQ(upfs_unlink((mnt_ + "/d1/long_link").c_str()), 0) << upfs_last_error();
    });
    EXPECT_TRUE(o.mounted) << o.mount_error;
    EXPECT_TRUE(!o.check_ok || o.check_problems) << "CheckPool found nothing";
  }
}

// Recovery (the crashed base) that finds damage refuses the pool before it
// writes anything: no orphan freed, no soft word reset, no free-inode link
// rewritten, whatever inode the damage is in.
TEST_F(PoolCorruptionTest, RecoveryRefusesBeforeItWrites) {
  const Layout& L = crashed_layout_;
  for (uint64_t ino : {layout_.ino_big, layout_.ino_small, layout_.ino_delta_file}) {
    SCOPED_TRACE("damaged file log of inode " + std::to_string(ino));
    UseCrashed();
    SetWord(work_, InodeOff(ino) + offsetof(Inode, log_head), L.inode_blocks.back());
    ExpectRefused(Try(), {"log", "file", "inode"});
  }
  for (uint64_t ino : {layout_.ino_big, layout_.ino_long_link}) {
    SCOPED_TRACE("unknown kind of inode " + std::to_string(ino));
    UseCrashed();
    SetWord(work_, InodeOff(ino), EncodeIdent(FileType(9), 1));
    ExpectRefused(Try(), kInode);
  }
}

TEST_F(PoolCorruptionTest, FileLogBlocks) {
  const Layout& L = layout_;
  const uint64_t b = uint64_t(L.big_log_head) * kB;
  // The link word's magic, and entries after the first (the head block's
  // seq is where the chain starts: any value is valid there; a bit of the
  // first entry, an inline mapping, can give another valid mapping).
  for (uint64_t off : {uint64_t{4}, uint64_t{24}, uint64_t{32}, uint64_t{40}}) {
    SCOPED_TRACE("file log byte " + std::to_string(off));
    ASSERT_TRUE(CopySparse(base_, work_));
    FlipBit(work_, b + off, 5);
    ExpectDetected(Try(), {"file", "log", "block map"});
  }
  // Entries replaced with junk.
  for (uint64_t v : {uint64_t{7}, ~uint64_t{0}, uint64_t{0x1} | (uint64_t{0xfffffff} << 3)}) {
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, b + 16, v);
    ExpectDetected(Try(), {"file", "log", "block map"});
  }
}

// -- the allocation state (volatile area) -------------------------------------------

TEST_F(PoolCorruptionTest, AllocationState) {
  // Write something after the walk: the allocator is used.
  auto write_some = [&] {
    int fd = upfs_open(M("after").c_str(), O_CREAT | O_RDWR, 0644);
    if (fd >= 0) {
      std::string d(3 * kB, 'w');
      (void)upfs_write(fd, d.data(), d.size());
      upfs_close(fd);
    }
  };
  // The volatile area's magic or pool id: rebuilt by the first attach.
  for (uint64_t off : {uint64_t{0}, uint64_t{8}}) {
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, uint64_t(kWordsBlock) * kB + off, 0x4242);
    Outcome o = Try(write_some);
    ExpectHarmless(o);
  }
  // The epoch 0, which a pin stores as "idle" (so nothing it reads was
  // protected: an assertion in CatchUp, found by fuzz_pool), or one no
  // advancing reaches, whose next advance wraps to 0: rebuilt by the
  // first attach too.
  for (uint64_t v : {uint64_t{0}, ~uint64_t{0}}) {
    SCOPED_TRACE("epoch " + std::to_string(v));
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, uint64_t(kWordsBlock) * kB + offsetof(PoolWords, epochs), v);
    Outcome o = Try(write_some);
    ExpectHarmless(o);
  }
  // The bitmap: the last process left it consistent (clean = 1), so it is
  // trusted; cleared bits are found by fsck, and no allocation may go
  // outside the pool whatever the bitmap says.
  const uint64_t bitmap = uint64_t(kBitmapBlock) * kB;
  ASSERT_TRUE(CopySparse(base_, work_));
  std::vector<char> zeros(kB, 0);
  ASSERT_TRUE(PWrite(work_, zeros.data(), zeros.size(), bitmap + (kDataStart / 8) / kB * kB));
  {
    upfs::PoolReport r;
    ASSERT_TRUE(upfs::CheckPool(work_, &r).ok());
    ASSERT_FALSE(r.problems.empty());
    EXPECT_NE(r.problems[0].find("allocation bitmap"), std::string::npos) << r.problems[0];
  }
  (void)Try(write_some);
  // All bits set (a full pool): writes fail with ENOSPC or grow the pool.
  ASSERT_TRUE(CopySparse(base_, work_));
  std::vector<char> ones(kB, char(0xff));
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(PWrite(work_, ones.data(), ones.size(), bitmap + ((kDataStart / 8) / kB + i) * kB));
  (void)Try(write_some);
  // The bitmap's capacity and hint words, the free-inode stack head, the
  // count of extents given back and the first 64 extents' bits (all given
  // back: taken back, with the blocks in use among them, by the writes).
  const uint64_t words = uint64_t(kWordsBlock) * kB;
  for (const auto& [off, v] :
       std::vector<std::pair<uint64_t, uint64_t>>{{offsetof(PoolWords, bitmap), ~uint64_t{0}},
                                                  {offsetof(PoolWords, bitmap), 0},
                                                  {offsetof(PoolWords, bitmap) + 8, ~uint64_t{0}},
                                                  {offsetof(PoolWords, free_inodes), ~uint64_t{0}},
                                                  {offsetof(PoolWords, free_inodes), layout_.ino_big},
                                                  {offsetof(PoolWords, free_inodes), 17},
                                                  {offsetof(PoolWords, punched_blocks), ~uint64_t{0}},
                                                  {uint64_t(kPunchedBlock - kWordsBlock) * kB, ~uint64_t{0}}}) {
    SCOPED_TRACE("volatile word at " + std::to_string(off) + " = " + std::to_string(v));
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, words + off, v);
    Outcome o = Try([&] {
      write_some();
      // A new name needs an inode: the free-inode stack is used.
      int fd = upfs_open(M("new_inode").c_str(), O_CREAT | O_RDWR, 0644);
      if (fd >= 0) upfs_close(fd);
    });
    (void)o;  // errors allowed; no crash, and the pool stays checkable
  }
}

// Two files referencing one block: fsck says so (a double reference).
TEST_F(PoolCorruptionTest, BlockReferencedTwice) {
  const Layout& L = layout_;
  ASSERT_TRUE(CopySparse(base_, work_));
  // The small file's log head set to the big file's: both files share a log.
  SetWord(work_, InodeOff(L.ino_small) + offsetof(Inode, log_head), L.big_log_head);
  Outcome o = Try();
  EXPECT_TRUE(!o.check_ok || o.check_problems);
  EXPECT_TRUE(Names(o.check, {"referenced twice", "block map"})) << o.check;
}

// -- `upfs fsck` ---------------------------------------------------------------------

TEST_F(PoolCorruptionTest, FsckCommandNamesTheStructure) {
  std::string out;
  EXPECT_EQ(Fsck(work_, &out), 0) << out;
  EXPECT_NE(out.find("clean"), std::string::npos) << out;
  const std::string before = std::to_string(PoolDurableHash(work_));
  struct C {
    std::string what;
    std::function<void()> damage;
    std::string word;
  };
  const std::vector<C> cases = {
      {"superblock checksum", [&] { FlipBit(work_, 20, 0); }, "superblock"},
      {"checkpoint header", [&] { FlipBit(work_, uint64_t(layout_.ck) * kB + 9, 0); }, "checkpoint"},
      {"log record", [&] { FlipBit(work_, layout_.delta_reserve.Off() + 16, 0); }, "namespace log"},
      {"inode kind", [&] { SetWord(work_, InodeOff(layout_.ino_big), EncodeIdent(FileType(9), 1)); }, "inode"},
      {"inode block magic", [&] { Set32(work_, uint64_t(layout_.inode_blocks[0]) * kB, 1); }, "inode block"},
      {"past the log tail", [&] { SetWord(work_, LogSlot{layout_.tail.block, layout_.tail.slot + 2}.Off(), 0x5); },
       "namespace log"},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(CopySparse(base_, work_));
    c.damage();
    const uint64_t h = PoolDurableHash(work_);
    EXPECT_EQ(Fsck(work_, &out), 1) << out;
    EXPECT_NE(out.find(c.word), std::string::npos) << out;
    EXPECT_EQ(PoolDurableHash(work_), h) << "fsck changed the pool";
  }
  // A foreign file.
  ASSERT_TRUE(CopySparse(base_, work_));
  FlipBit(work_, 0, 0);
  EXPECT_EQ(Fsck(work_, &out), 1) << out;
  EXPECT_NE(out.find("not a upfs"), std::string::npos) << out;
}

// -- the sweep: one bit in every word of the metadata -------------------------------

TEST_F(PoolCorruptionTest, BitFlipSweepNeverCrashes) {
  for (int crashed = 0; crashed < 2; ++crashed) {
    const Layout& L = crashed ? crashed_layout_ : layout_;
    const std::string& src = crashed ? crashed_ : base_;
    std::vector<uint32_t> blocks = {0};
    blocks.push_back(L.ck);
    blocks.insert(blocks.end(), L.image_blocks.begin(), L.image_blocks.end());
    blocks.insert(blocks.end(), L.inode_blocks.begin(), L.inode_blocks.end());
    // The log: the blocks from the continuation on, and the head block.
    blocks.push_back(L.log_blocks.front());
    bool from_cont = false;
    for (uint32_t l : L.log_blocks) {
      from_cont = from_cont || l == L.cont_block;
      if (from_cont) blocks.push_back(l);
    }
    blocks.push_back(layout_.big_log_head);
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    // Bounded: about 1,200 flips per base at scale 1.
    const uint64_t words = blocks.size() * (kB / 8);
    const uint64_t budget = std::max<uint64_t>(50, uint64_t(1200 * Scale()));
    const uint64_t stride = std::max<uint64_t>(1, (words + budget - 1) / budget);
    uint64_t flips = 0, mounted = 0, refused = 0;
    for (uint64_t w = (crashed ? stride / 2 : 0); w < words; w += stride) {
      const uint32_t b = blocks[w / (kB / 8)];
      const uint64_t off = uint64_t(b) * kB + (w % (kB / 8)) * 8;
      const int bit = int((w * 37 + 11) % 64);
      ASSERT_TRUE(CopySparse(src, work_));
      FlipBit(work_, off + uint64_t(bit / 8), bit % 8);
      SCOPED_TRACE("block " + std::to_string(b) + " word " + std::to_string(w % (kB / 8)) + " bit " +
                   std::to_string(bit) + (crashed ? " (crashed base)" : ""));
      Outcome o = Try();
      ++flips;
      if (o.mounted) {
        ++mounted;
      } else {
        ++refused;
        EXPECT_TRUE(o.mount_errno == EUCLEAN || o.mount_errno == EMEDIUMTYPE ||
                    o.mount_errno == EPROTONOSUPPORT)
            << o.mount_error;
        EXPECT_NE(o.mount_error.find(": "), std::string::npos) << o.mount_error;
        EXPECT_TRUE(o.unchanged) << o.mount_error;  // also recovery: checks before it writes
      }
      if (HasFatalFailure()) return;
    }
    fprintf(stderr, "sweep (%s base): %llu flips over %zu blocks, %llu mounted, %llu refused\n",
            crashed ? "crashed" : "clean", (unsigned long long)flips, blocks.size(),
            (unsigned long long)mounted, (unsigned long long)refused);
  }
}

}  // namespace
