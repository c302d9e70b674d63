// What the pool concurrency tests share (pool_concurrency_test.cc: tokens
// moved by rename, closes and detaches racing; pool_churn_test.cc:
// create/unlink churn and checkpoints written while threads work): an
// error list, token files, small file helpers, and the fixture (a fresh
// pool in /dev/shm, mounted; removed at the end).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/pool_check.h"
#include "posix/pool_mounts.h"
#include "test_util.h"
#include "upfs/upfs.h"


namespace pool_conc {

using upfs_test::ErrnoText;
using upfs_test::Scaled;
using upfs_test::TestSeed;

inline constexpr size_t kMaxErrors = 20;

// Errors of every thread: the first kMaxErrors kept, all counted.
class Errors {
 public:
  void Add(const std::string& e) {
    std::lock_guard<std::mutex> g(mu_);
    ++count_;
    if (list_.size() < kMaxErrors) list_.push_back(e);
  }
  bool Many() const { return count_.load(std::memory_order_relaxed) >= kMaxErrors; }
  uint64_t count() const { return count_.load(); }
  std::string Text() {
    std::lock_guard<std::mutex> g(mu_);
    std::string s;
    for (const auto& e : list_) s += "  " + e + "\n";
    if (count_ > list_.size()) s += "  ... " + std::to_string(count_ - list_.size()) + " more\n";
    return s;
  }

 private:
  std::mutex mu_;
  std::atomic<uint64_t> count_{0};
  std::vector<std::string> list_;
};

inline uint32_t Mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352d;
  x ^= x >> 15;
  x *= 0x846ca68b;
  return x ^ (x >> 16);
}

// A token's whole content (fixed size).
inline std::string TokenText(uint32_t id) {
  char b[64];
  std::snprintf(b, sizeof b, "token %08u %08x\n", id, Mix(id));
  return b;
}

inline bool ParseToken(const std::string& s, uint32_t* id) {
  unsigned v, h;
  char nl;
  if (s.size() != TokenText(0).size() || std::sscanf(s.c_str(), "token %8u %8x%c", &v, &h, &nl) != 3) return false;
  if (nl != '\n' || h != Mix(v)) return false;
  *id = v;
  return true;
}

// The whole content of pool file `path`: 0, or the errno of open/read.
inline int ReadFile(const std::string& path, std::string* out) {
  out->clear();
  int fd = upfs_open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  char buf[256];
  ssize_t n = upfs_pread(fd, buf, sizeof buf, 0);
  int e = n < 0 ? errno : 0;
  if (n > 0) out->assign(buf, size_t(n));
  upfs_close(fd);
  return e;
}

// Creates pool file `path` with `data` (O_EXCL): 0 or errno.
inline int CreateFile(const std::string& path, const std::string& data) {
  int fd = upfs_open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return errno;
  int e = 0;
  if (upfs_pwrite(fd, data.data(), data.size(), 0) != ssize_t(data.size())) e = errno ? errno : EIO;
  if (upfs_close(fd) != 0 && e == 0) e = errno;
  return e;
}

// One scan of a directory with opendir/readdir: the names in the order
// listed, or false (and *err) if opendir or readdir failed.
inline bool Scan(const std::string& dir, std::vector<std::string>* names, int* err) {
  names->clear();
  UPFS_DIR* d = upfs_opendir(dir.c_str());
  if (!d) {
    *err = errno;
    return false;
  }
  for (;;) {
    errno = 0;
    struct dirent* e = upfs_readdir(d);
    if (!e) break;
    names->push_back(e->d_name);
  }
  *err = errno;
  upfs_closedir(d);
  return *err == 0;
}

inline int Rename(const std::string& a, const std::string& b, unsigned flags) {
  return upfs_renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), flags) == 0 ? 0 : errno;
}

// Counts and remembers results, e.g. to show that a run was not trivial.
struct OpStats {
  uint64_t ok = 0, enoent = 0, eexist = 0;
  void Count(int e) {
    if (e == 0) ++ok;
    if (e == ENOENT) ++enoent;
    if (e == EEXIST) ++eexist;
  }
  std::string Text() const {
    return std::to_string(ok) + " ok/" + std::to_string(enoent) + " ENOENT/" + std::to_string(eexist) + " EEXIST";
  }
  void Add(const OpStats& o) {
    ok += o.ok;
    enoent += o.enoent;
    eexist += o.eexist;
  }
};

// ---------------------------------------------------------------------------
// The fixture: a fresh pool in /dev/shm, mounted; removed at the end.

class PoolConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const std::string tag = std::to_string(getpid()) + "-" + std::to_string(counter++);
    pool_ = "/dev/shm/upfs-poolconc-" + tag + ".pool";
    mnt_ = "/upfs-poolconc-" + tag;
    unlink(pool_.c_str());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    Mount();
  }
  void TearDown() override {
    if (mounted_) upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
  }
  void Mount() {
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
    mounted_ = true;
  }
  void Umount() {
    mounted_ = false;
    ASSERT_EQ(upfs_umount(mnt_.c_str()), 0) << upfs_last_error();
  }
  std::string P(const std::string& rel) const { return mnt_ + "/" + rel; }

  // Detaches and checks the pool: no problem, nothing orphaned, no block
  // leaked, no inode in use but the files and directories named. Leaves
  // the pool detached.
  void CheckDetached(uint64_t want_files, uint64_t want_dirs) {
    Umount();
    upfs::PoolReport r;
    upfs::Status st = upfs::CheckPool(pool_, &r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::string probs;
    for (size_t i = 0; i < r.problems.size() && i < 10; ++i) probs += "  " + r.problems[i] + "\n";
    EXPECT_TRUE(r.problems.empty()) << r.problems.size() << " problems:\n" << probs;
    EXPECT_TRUE(r.clean);
    EXPECT_EQ(r.attached_processes, 0u);
    EXPECT_EQ(r.orphans, 0u);
    EXPECT_EQ(r.leaked_blocks, 0);
    EXPECT_EQ(r.files, want_files);
    EXPECT_EQ(r.directories, want_dirs);
    EXPECT_EQ(r.inodes_in_use, r.files + r.directories + r.symlinks);
    std::printf("CheckPool: %" PRIu64 " files, %" PRIu64 " directories, %" PRIu64 " inodes, %" PRIu64
                " log records, checkpoint %" PRIu64 ", %" PRId64 " leaked blocks\n",
                r.files, r.directories, r.inodes_in_use, r.log_records, r.checkpoint_number, r.leaked_blocks);
  }

  std::string pool_, mnt_;
  bool mounted_ = false;
};


}  // namespace pool_conc
