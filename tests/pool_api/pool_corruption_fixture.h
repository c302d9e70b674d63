// The fixture of the pool corruption tests (pool_corruption_test.cc,
// pool_corruption_state_test.cc): base pools built once per process, where
// their structures lie, damaging a copy and what mounting, walking and
// checking it must do. Included by exactly one file of each test program.
#pragma once

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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"
#include "format/format.h"
#include "label_version.h"
#include "upfs/upfs.h"
#include "util/crc32c.h"
#include "pool_durable_hash.h"

namespace {

using namespace upfs::format;
using namespace upfs::format::pool;

constexpr uint64_t kB = kBlockSize;

[[maybe_unused]] double Scale() {
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

using upfs_test::PoolDurableHash;

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

// Runs `upfs fsck path`: exit status and output.
[[maybe_unused]] int Fsck(const std::string& path, std::string* out) {
  const std::string cmd = std::string(UPFS_CLI_PATH) + " fsck '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out->clear();
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// Checksums a writer would compute (to damage what is behind them).
[[maybe_unused]] void FixSuperblockCrc(const std::string& path) {
  Superblock sb;
  ASSERT_TRUE(PRead(path, &sb, sizeof(sb), 0));
  Set32(path, offsetof(Superblock, sb_crc), SuperblockCrc(sb));
}
[[maybe_unused]] void FixCheckpointCrcs(const std::string& path, uint64_t header_block) {
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
    // An older version's pool, as its builds made it (the first attach
    // recovers the relabelled pool).
    if (pool_version_ != 0 && !upfs_test::RelabelPoolVersion(base_, pool_version_)) return false;
    // Session 1: the namespace, and churn enough for a checkpoint at detach.
    if (upfs_mount(base_.c_str(), mnt_.c_str()) != 0) return false;
    bool ok = upfs_mkdir(M("d1").c_str(), 0755) == 0 && upfs_mkdir(M("d1/d2").c_str(), 0750) == 0 &&
              upfs_mkdir(M("churn").c_str(), 0755) == 0 && Put("d1/small", "hello, pool") &&
              Put("d1/d2/big", std::string(5 * kB + 123, 'b')) && Put("top", "top file") &&
              Put("d1/a-name-longer-than-a-slot-holds", "long") &&
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
    const uint64_t before = PoolDurableHash(work_);
    if (upfs_mount(work_.c_str(), mnt_.c_str()) == 0) {
      o.mounted = true;
      Walk(mnt_, &o.walk);
      if (after_walk) after_walk();
      EXPECT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
    } else {
      o.mount_errno = errno;
      o.mount_error = upfs_last_error();
      o.unchanged = PoolDurableHash(work_) == before;
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
  // The format version of the pools built (0: this build's); a suite that
  // sets it in its SetUpTestSuite resets it in its TearDownTestSuite.
  static inline uint32_t pool_version_ = 0;
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

}  // namespace
