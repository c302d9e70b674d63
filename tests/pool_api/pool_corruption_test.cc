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
// requires only that nothing crashes.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"
#include "format/format.h"
#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace {

using namespace upfs::format;
using namespace upfs::format::pool;

constexpr uint64_t kB = kBlockSize;

double Scale() {
  const char* s = getenv("UPFS_TEST_SCALE");
  const double v = s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

// -- host file helpers ---------------------------------------------------------

// Copies src to dst keeping holes (pools are mostly holes).
bool CopySparse(const std::string& src, const std::string& dst) {
  unlink(dst.c_str());
  int in = open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  int out = open(dst.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return false;
  }
  struct stat st;
  fstat(in, &st);
  bool ok = ftruncate(out, st.st_size) == 0;
  std::vector<char> buf(1 << 20);
  for (off_t at = 0; ok && at < st.st_size;) {
    off_t data = lseek(in, at, SEEK_DATA);
    if (data < 0) break;
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t o = data; ok && o < hole;) {
      const size_t n = size_t(std::min<off_t>(hole - o, off_t(buf.size())));
      ok = pread(in, buf.data(), n, o) == ssize_t(n) && pwrite(out, buf.data(), n, o) == ssize_t(n);
      o += off_t(n);
    }
    at = hole;
  }
  close(in);
  close(out);
  return ok;
}

// FNV-1a over the pool's durable bytes: every block but the volatile area
// [1, kDataStart), with the superblock's `clean` word left out (both are
// soft state that attaching rewrites).
uint64_t DurableHash(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  fstat(fd, &st);
  uint64_t h = 1469598103934665603ull ^ uint64_t(st.st_size);
  std::vector<unsigned char> blk(kB);
  static const std::vector<unsigned char> zero(kB, 0);
  for (off_t at = 0; at < st.st_size;) {
    off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) break;
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t o = data / off_t(kB) * off_t(kB); o < hole; o += off_t(kB)) {
      const uint64_t b = uint64_t(o) / kB;
      if (b >= 1 && b < kDataStart) continue;
      const ssize_t n = pread(fd, blk.data(), kB, o);
      if (n <= 0) break;
      if (b == 0) std::memset(blk.data() + offsetof(Superblock, clean), 0, 8);
      if (std::memcmp(blk.data(), zero.data(), size_t(n)) == 0) continue;  // a hole and zeros are alike
      h ^= b;
      h *= 1099511628211ull;
      for (ssize_t i = 0; i < n; ++i) {
        h ^= blk[size_t(i)];
        h *= 1099511628211ull;
      }
    }
    at = hole;
  }
  close(fd);
  return h;
}

bool PWrite(const std::string& path, const void* p, size_t n, uint64_t off) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = pwrite(fd, p, n, off_t(off)) == ssize_t(n);
  close(fd);
  return ok;
}
bool PRead(const std::string& path, void* p, size_t n, uint64_t off) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = pread(fd, p, n, off_t(off)) == ssize_t(n);
  close(fd);
  return ok;
}
uint64_t Word(const std::string& path, uint64_t off) {
  uint64_t w = 0;
  PRead(path, &w, 8, off);
  return w;
}
void SetWord(const std::string& path, uint64_t off, uint64_t w) { ASSERT_TRUE(PWrite(path, &w, 8, off)); }
void Set32(const std::string& path, uint64_t off, uint32_t w) { ASSERT_TRUE(PWrite(path, &w, 4, off)); }
void FlipBit(const std::string& path, uint64_t off, int bit) {
  unsigned char c;
  ASSERT_TRUE(PRead(path, &c, 1, off));
  c ^= uint8_t(1u << bit);
  ASSERT_TRUE(PWrite(path, &c, 1, off));
}
uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// Checksums a writer would compute (to damage what is behind them).
void FixSuperblockCrc(const std::string& path) {
  Superblock sb;
  ASSERT_TRUE(PRead(path, &sb, sizeof(sb), 0));
  Set32(path, offsetof(Superblock, sb_crc), upfs::Crc32c(&sb, offsetof(Superblock, sb_crc)));
}
void FixCheckpointCrcs(const std::string& path, uint64_t header_block) {
  CheckpointHeader h;
  ASSERT_TRUE(PRead(path, &h, sizeof(h), header_block * kB));
  // The image: every word of the runs, up to image_words.
  uint32_t crc = 0;
  uint64_t left = h.image_words;
  std::vector<char> blk(kB);
  for (uint32_t r = 0; r < std::min(h.nruns, kMaxCheckpointRuns) && left > 0; ++r)
    for (uint32_t i = 0; i < h.runs[r].count && left > 0; ++i) {
      if (!PRead(path, blk.data(), kB, (uint64_t(h.runs[r].lblock) + i) * kB)) return;
      const uint64_t n = std::min<uint64_t>(left, kB / 8);
      crc = upfs::Crc32c(blk.data(), n * 8, crc);
      left -= n;
    }
  h.image_crc = crc;
  uint32_t c = upfs::Crc32c(&h, offsetof(CheckpointHeader, header_crc));
  c = upfs::Crc32c(&h.multi, 16, c);
  h.header_crc = upfs::Crc32c(h.runs, std::min(h.nruns, kMaxCheckpointRuns) * sizeof(Run), c);
  ASSERT_TRUE(PWrite(path, &h, sizeof(h), header_block * kB));
}

// -- the base pools and where their structures are ---------------------------

struct LogSlot {
  uint32_t block = 0;
  uint32_t slot = 0;
  uint64_t Off() const { return uint64_t(block) * kB + offsetof(LogBlock, slots) + uint64_t(slot) * 8; }
};

struct Layout {
  Superblock sb;
  uint64_t blocks = 0;
  uint32_t ck = 0;  // checkpoint header block
  std::vector<uint32_t> image_blocks;
  std::vector<uint32_t> log_blocks;  // from the head, in chain order
  uint32_t cont_block = 0;
  uint32_t cont_slot = 0;
  LogSlot tail;                  // the first empty slot
  LogSlot delta_reserve;         // the first record after the checkpoint: its kReserve
  LogSlot delta_apply;           // and its kApply
  std::vector<uint32_t> inode_blocks;
  uint64_t ino_big = 0, ino_small = 0, ino_long_link = 0, ino_short_link = 0, ino_dir = 0, ino_delta_file = 0;
  uint32_t big_log_head = 0;
};

void ReadLayout(const std::string& path, Layout* L) {
  ASSERT_TRUE(PRead(path, &L->sb, sizeof(L->sb), 0));
  L->blocks = FileSize(path) / kB;
  L->ck = uint32_t(L->sb.checkpoint.load());
  ASSERT_NE(L->ck, 0u) << "the base pool has no checkpoint";
  CheckpointHeader h;
  ASSERT_TRUE(PRead(path, &h, sizeof(h), uint64_t(L->ck) * kB));
  for (uint32_t r = 0; r < h.nruns; ++r)
    for (uint32_t i = 0; i < h.runs[r].count; ++i) L->image_blocks.push_back(h.runs[r].lblock + i);
  L->cont_block = h.cont_lblock;
  L->cont_slot = h.cont_slot;
  for (uint64_t l = L->sb.nslog_head.load(); l != 0;) {
    L->log_blocks.push_back(uint32_t(l));
    ASSERT_LT(L->log_blocks.size(), 10000u);
    l = NextBlock(Word(path, l * kB));
  }
  // From the checkpoint's continuation to the tail.
  uint32_t b = L->cont_block, s = L->cont_slot;
  bool found = false;
  for (;;) {
    if (s >= kSlotsPerLogBlock) {
      const uint32_t n = NextBlock(Word(path, uint64_t(b) * kB));
      if (n == 0) break;
      b = n;
      s = 0;
      continue;
    }
    const uint64_t e = Word(path, LogSlot{b, s}.Off());
    if (e == 0) break;
    if (KindOf(e) == EntryKind::kReserve) {
      s += 1 + ReserveCount(e);
    } else {
      if (!found && KindOf(e) == EntryKind::kApply) {
        L->delta_apply = LogSlot{b, s};
        L->delta_reserve = LogSlot{b, ApplySlot(e)};
        found = true;
      }
      s += 1;
    }
  }
  L->tail = LogSlot{b, s};
  ASSERT_TRUE(found) << "the base pool has no log delta after its checkpoint";
  ASSERT_LT(L->tail.slot, kSlotsPerLogBlock - 8);
  for (uint64_t l = L->sb.inode_chain.load(); l != 0;) {
    L->inode_blocks.push_back(uint32_t(l));
    ASSERT_LT(L->inode_blocks.size(), 10000u);
    l = Word(path, l * kB + 8);
  }
}

uint64_t InodeOff(uint64_t ino) { return ino * kInodeSize; }

// The walk: every directory listed, every name lstat'ed, every link read,
// every regular file read to its end (errors are counted, not fatal).
struct WalkStats {
  int entries = 0;
  int errors = 0;
};
void Walk(const std::string& dir, WalkStats* w, int depth = 0) {
  if (depth > 64) return;
  UPFS_DIR* d = upfs_opendir(dir.c_str());
  if (!d) {
    ++w->errors;
    return;
  }
  std::vector<std::string> names;
  while (struct dirent* e = upfs_readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    names.push_back(e->d_name);
    if (names.size() > 100000) break;
  }
  upfs_closedir(d);
  for (const std::string& n : names) {
    ++w->entries;
    const std::string p = dir + "/" + n;
    struct stat st;
    if (upfs_lstat(p.c_str(), &st) != 0) {
      ++w->errors;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      Walk(p, w, depth + 1);
    } else if (S_ISLNK(st.st_mode)) {
      char buf[4200];
      if (upfs_readlink(p.c_str(), buf, sizeof(buf)) < 0) ++w->errors;
    } else if (S_ISREG(st.st_mode)) {
      int fd = upfs_open(p.c_str(), O_RDONLY);
      if (fd < 0) {
        ++w->errors;
        continue;
      }
      char buf[65536];
      uint64_t total = 0;
      for (ssize_t r; (r = upfs_read(fd, buf, sizeof(buf))) != 0;) {
        if (r < 0) {
          ++w->errors;
          break;
        }
        total += uint64_t(r);
        if (total > (64u << 20)) break;
      }
      upfs_close(fd);
    }
  }
}

class PoolCorruptionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string tag = std::to_string(getpid());
    base_ = "/dev/shm/upfs-poolcorrupt-" + tag + ".base";
    crashed_ = "/dev/shm/upfs-poolcorrupt-" + tag + ".crashed";
    mnt_ = "/upfs-poolcorrupt-" + tag;
    unlink(base_.c_str());
    unlink(crashed_.c_str());
    built_ = BuildBase();
    if (built_) ReadLayout(base_, &layout_);
    if (built_) ReadLayout(crashed_, &crashed_layout_);
  }
  static void TearDownTestSuite() {
    unlink(base_.c_str());
    unlink(crashed_.c_str());
  }
  void SetUp() override {
    ASSERT_TRUE(built_) << "building the base pools failed";
    work_ = "/dev/shm/upfs-poolcorrupt-" + std::to_string(getpid()) + ".work";
    ASSERT_TRUE(CopySparse(base_, work_));
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(work_.c_str());
  }

  static std::string M(const std::string& rel) { return mnt_ + "/" + rel; }
  static bool Put(const std::string& rel, const std::string& data) {
    int fd = upfs_open(M(rel).c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) return false;
    bool ok = upfs_write(fd, data.data(), data.size()) == ssize_t(data.size());
    return upfs_close(fd) == 0 && ok;
  }
  static uint64_t Ino(const std::string& rel) {
    struct stat st;
    return upfs_lstat(M(rel).c_str(), &st) == 0 ? uint64_t(st.st_ino) : 0;
  }

  static bool BuildBase() {
    if (upfs_mkfs(base_.c_str(), 0) != 0) return false;
    // Session 1: the namespace, and churn enough for a checkpoint at detach.
    if (upfs_mount(base_.c_str(), mnt_.c_str()) != 0) return false;
    bool ok = upfs_mkdir(M("d1").c_str(), 0755) == 0 && upfs_mkdir(M("d1/d2").c_str(), 0750) == 0 &&
              upfs_mkdir(M("churn").c_str(), 0755) == 0 && Put("d1/small", "hello, pool") &&
              Put("d1/d2/big", std::string(5 * kB + 123, 'b')) && Put("top", "top file") &&
              upfs_symlink("d1/small", M("short_link").c_str()) == 0 &&
              upfs_symlink(std::string(200, 'L').c_str(), M("d1/long_link").c_str()) == 0 &&
              upfs_link(M("d1/d2/big").c_str(), M("big_link").c_str()) == 0;
    for (int i = 0; ok && i < 700; ++i) {
      const std::string n = "churn/c" + std::to_string(i);
      ok = Put(n, i % 7 == 0 ? std::string(100, char('a' + i % 26)) : "");
      if (ok && i % 3 != 0) ok = upfs_unlink(M(n).c_str()) == 0;
    }
    ok = ok && upfs_umount(mnt_.c_str()) == 0;
    // Session 2: a delta after the checkpoint.
    ok = ok && upfs_mount(base_.c_str(), mnt_.c_str()) == 0;
    ok = ok && upfs_mkdir(M("d4").c_str(), 0755) == 0 && Put("d4/delta_file", std::string(3 * kB, 'd')) &&
         upfs_symlink("../top", M("d4/delta_link").c_str()) == 0 &&
         upfs_link(M("d1/small").c_str(), M("d4/small_link").c_str()) == 0 &&
         upfs_rename(M("top").c_str(), M("d4/top_moved").c_str()) == 0 &&
         upfs_renameat2(AT_FDCWD, M("d4/delta_file").c_str(), AT_FDCWD, M("d1/small").c_str(),
                        RENAME_EXCHANGE) == 0 &&
         upfs_mkdir(M("gone").c_str(), 0755) == 0 && upfs_rmdir(M("gone").c_str()) == 0 &&
         upfs_unlink(M("churn/c3").c_str()) == 0;
    // (after the exchange d1/small holds the 3-block file, d4/delta_file "hello, pool")
    layout_.ino_big = Ino("d1/d2/big");
    layout_.ino_small = Ino("d4/delta_file");
    layout_.ino_long_link = Ino("d1/long_link");
    layout_.ino_short_link = Ino("short_link");
    layout_.ino_dir = Ino("d1/d2");
    layout_.ino_delta_file = Ino("d1/small");
    if (upfs_umount(mnt_.c_str()) != 0) ok = false;
    if (!ok) {
      ADD_FAILURE() << "building the base pool: " << upfs_last_error();
      return false;
    }
    upfs::PoolReport r;
    if (!upfs::CheckPool(base_, &r).ok() || !r.problems.empty() || r.checkpoint_number < 1) {
      ADD_FAILURE() << "the base pool is not consistent or has no checkpoint";
      return false;
    }
    // The crashed base: a process dies attached, with an unlinked file open.
    if (!CopySparse(base_, crashed_)) return false;
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      if (upfs_mount(crashed_.c_str(), mnt_.c_str()) != 0) _exit(2);
      int fd = upfs_open(M("d1/orphan").c_str(), O_CREAT | O_RDWR, 0644);
      upfs_write(fd, std::string(2 * kB, 'o').data(), 2 * kB);
      upfs_unlink(M("d1/orphan").c_str());
      int k = upfs_open(M("kept").c_str(), O_CREAT | O_RDWR, 0644);
      upfs_write(k, "kept", 4);
      kill(getpid(), SIGKILL);
      _exit(3);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status)) return false;
    if (!upfs::CheckPool(crashed_, &r).ok() || !r.problems.empty() || r.orphans != 1 || r.clean) {
      ADD_FAILURE() << "the crashed base pool is not as expected";
      return false;
    }
    layout_.big_log_head = uint32_t(Word(base_, InodeOff(layout_.ino_big) + offsetof(Inode, log_head)));
    return layout_.ino_big && layout_.ino_small && layout_.ino_long_link && layout_.ino_dir &&
           layout_.big_log_head != 0;
  }

  // What one damaged pool did.
  struct Outcome {
    bool mounted = false;
    int mount_errno = 0;
    std::string mount_error;
    bool unchanged = true;  // durable bytes the same after a refused mount
    WalkStats walk;
    bool check_ok = false;
    std::string check;  // CheckPool's error, or its problems joined
    bool check_problems = false;
  };

  // Mounts work_ (walks it and unmounts if mounted) and runs CheckPool.
  Outcome Try(const std::function<void()>& after_walk = nullptr) {
    Outcome o;
    const uint64_t before = DurableHash(work_);
    if (upfs_mount(work_.c_str(), mnt_.c_str()) == 0) {
      o.mounted = true;
      Walk(mnt_, &o.walk);
      if (after_walk) after_walk();
      EXPECT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
    } else {
      o.mount_errno = errno;
      o.mount_error = upfs_last_error();
      o.unchanged = DurableHash(work_) == before;
    }
    upfs::PoolReport r;
    upfs::Status st = upfs::CheckPool(work_, &r);
    o.check_ok = st.ok();
    if (!st.ok()) o.check = st.message();
    for (const std::string& p : r.problems) o.check += p + "; ";
    o.check_problems = !r.problems.empty();
    return o;
  }

  static bool Names(const std::string& msg, const std::vector<std::string>& words) {
    for (const std::string& w : words)
      if (msg.find(w) != std::string::npos) return true;
    return false;
  }

  // The damage must be refused by mount with a message naming one of
  // `words`, the durable bytes untouched, and CheckPool must name it too.
  void ExpectRefused(const Outcome& o, const std::vector<std::string>& words, int err = EUCLEAN) {
    EXPECT_FALSE(o.mounted) << "a damaged pool was mounted";
    if (o.mounted) return;
    EXPECT_EQ(o.mount_errno, err) << o.mount_error;
    EXPECT_TRUE(Names(o.mount_error, words)) << "mount's error names none of the structures: " << o.mount_error;
    EXPECT_TRUE(o.unchanged) << "a refused mount changed the pool (silent repair): " << o.mount_error;
    EXPECT_TRUE(!o.check_ok || o.check_problems) << "CheckPool found nothing";
    EXPECT_TRUE(Names(o.check, words)) << "CheckPool's report names none of the structures: " << o.check;
  }
  // The damage is in a structure mount does not read (or reads lazily): the
  // mount may succeed, the walk may fail (cleanly), but either the mount
  // names it or CheckPool must.
  void ExpectDetected(const Outcome& o, const std::vector<std::string>& words) {
    if (!o.mounted) {
      EXPECT_TRUE(o.mount_errno == EUCLEAN || o.mount_errno == EMEDIUMTYPE) << o.mount_error;
      EXPECT_TRUE(Names(o.mount_error, words)) << "mount's error names none of the structures: " << o.mount_error;
      EXPECT_TRUE(o.unchanged) << "a refused mount changed the pool (silent repair): " << o.mount_error;
    }
    EXPECT_TRUE(!o.check_ok || o.check_problems) << "CheckPool found nothing";
    EXPECT_TRUE(Names(o.check, words)) << "CheckPool's report names none of the structures: " << o.check;
  }
  // Unused space: everything works and CheckPool is content.
  void ExpectHarmless(const Outcome& o) {
    EXPECT_TRUE(o.mounted) << o.mount_error;
    EXPECT_EQ(o.walk.errors, 0);
    EXPECT_TRUE(o.check_ok) << o.check;
    EXPECT_FALSE(o.check_problems) << o.check;
  }

  // Use the crashed base (mount runs recovery) instead of the clean one.
  void UseCrashed() { ASSERT_TRUE(CopySparse(crashed_, work_)); }

  static inline std::string base_, crashed_, mnt_;
  static inline bool built_ = false;
  static inline Layout layout_, crashed_layout_;
  std::string work_;
};

const std::vector<std::string> kSb = {"superblock"};
const std::vector<std::string> kLog = {"namespace log"};
const std::vector<std::string> kCk = {"checkpoint"};
const std::vector<std::string> kInode = {"inode"};
// Truncation: whichever structure first reaches past the end.
const std::vector<std::string> kAny = {"superblock", "namespace log", "checkpoint", "inode", "log", "block"};

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
  // Truncated past everything in use (to whole blocks): still a pool.
  ASSERT_TRUE(CopySparse(base_, work_));
  ASSERT_EQ(truncate(work_.c_str(), off_t((used + 1) * kB)), 0);
  ExpectHarmless(Try());
}

// -- superblock ------------------------------------------------------------------

TEST_F(PoolCorruptionTest, SuperblockMagicVersionAndChecksum) {
  FlipBit(work_, 0, 1);
  Outcome o = Try();
  EXPECT_FALSE(o.mounted);
  EXPECT_EQ(o.mount_errno, EMEDIUMTYPE) << o.mount_error;
  EXPECT_TRUE(o.unchanged);

  ASSERT_TRUE(CopySparse(base_, work_));
  Set32(work_, offsetof(Superblock, version), 3);
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

TEST_F(PoolCorruptionTest, SuperblockUnusedSpaceAndSoftWords) {
  // Reserved word, padding of the pointer line and of the block: unused.
  Set32(work_, offsetof(Superblock, reserved0), 0xdeadbeef);
  SetWord(work_, offsetof(Superblock, pad1) + 8, 0x1234);
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
  // The first directory's first used name slot: ino, meta, name position.
  struct { uint64_t table = 0, slots = 0; } d0;
  {
    uint64_t row[8];
    for (int i = 0; i < 8; ++i) row[i] = Word(base_, word_off(i));
    d0.table = row[4];
    d0.slots = row[5];
  }
  uint64_t first_slot = ~uint64_t{0};
  for (uint64_t s = 0; s < d0.slots; ++s) {
    const uint64_t at = d0.table + s * kNameSlotWords;
    if (Word(base_, word_off(at)) == 0) continue;
    cases.push_back({"slot ino 1", at, 1});
    cases.push_back({"slot ino huge", at, ~uint64_t{0}});
    cases.push_back({"slot meta type 9", at + 1, Word(base_, word_off(at + 1)) | (uint64_t(9) << 32)});
    cases.push_back({"slot meta length 255", at + 1, Word(base_, word_off(at + 1)) | (uint64_t(255) << 40)});
    cases.push_back({"slot meta crc wrong", at + 1, Word(base_, word_off(at + 1)) ^ 0x5555});
    cases.push_back({"slot name out of the image", at + 2, h.image_words + 10});
    cases.push_back({"slot name at a block end", at + 2, 511});
    cases.push_back({"slot name huge", at + 2, ~uint64_t{0} - 1});
    cases.push_back({"slot name at 2^64 - 1", at + 2, ~uint64_t{0}});
    // A one-word name at 2^64 - 1: the range check wrapped, and listing the
    // directory read far outside the image (a SEGV found by fuzz_pool).
    first_slot = at;
    break;
  }
  for (const C& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(CopySparse(base_, work_));
    SetWord(work_, word_off(c.word), c.value);
    FixCheckpointCrcs(work_, L.ck);
    Outcome o = Try();
    // Refused naming the checkpoint, or (a name slot: read lazily) mounted
    // with the damage found by CheckPool.
    if (o.mounted) {
      ExpectDetected(o, {"checkpoint", "inode", "name", "directory", "links"});
    } else {
      ExpectRefused(o, {"checkpoint", "inode", "namespace"});
    }
  }
  ASSERT_NE(first_slot, ~uint64_t{0});
  ASSERT_TRUE(CopySparse(base_, work_));
  SetWord(work_, word_off(first_slot + 1),
          (Word(base_, word_off(first_slot + 1)) & ~(uint64_t(0xff) << 40)) | (uint64_t(1) << 40));
  SetWord(work_, word_off(first_slot + 2), ~uint64_t{0});
  FixCheckpointCrcs(work_, L.ck);
  Outcome o = Try();
  if (o.mounted) {
    ExpectDetected(o, {"checkpoint", "inode", "name", "directory", "links"});
  } else {
    ExpectRefused(o, {"checkpoint", "inode", "namespace"});
  }
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
  // The bitmap's capacity and hint words, and the free-inode stack head.
  const uint64_t words = uint64_t(kWordsBlock) * kB;
  for (const auto& [off, v] :
       std::vector<std::pair<uint64_t, uint64_t>>{{offsetof(PoolWords, bitmap), ~uint64_t{0}},
                                                  {offsetof(PoolWords, bitmap), 0},
                                                  {offsetof(PoolWords, bitmap) + 8, ~uint64_t{0}},
                                                  {offsetof(PoolWords, free_inodes), ~uint64_t{0}},
                                                  {offsetof(PoolWords, free_inodes), layout_.ino_big},
                                                  {offsetof(PoolWords, free_inodes), 17}}) {
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

// Runs `upfs fsck path`: exit status and output.
int Fsck(const std::string& path, std::string* out) {
  const std::string cmd = std::string(UPFS_CLI_PATH) + " fsck '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out->clear();
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

TEST_F(PoolCorruptionTest, FsckCommandNamesTheStructure) {
  std::string out;
  EXPECT_EQ(Fsck(work_, &out), 0) << out;
  EXPECT_NE(out.find("clean"), std::string::npos) << out;
  const std::string before = std::to_string(DurableHash(work_));
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
    const uint64_t h = DurableHash(work_);
    EXPECT_EQ(Fsck(work_, &out), 1) << out;
    EXPECT_NE(out.find(c.word), std::string::npos) << out;
    EXPECT_EQ(DurableHash(work_), h) << "fsck changed the pool";
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
