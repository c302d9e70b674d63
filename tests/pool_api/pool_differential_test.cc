// Differential test of the pool: the same random namespace and data
// operations on a pool and on a kernel tmpfs directory, every result and
// errno compared, and the two trees (names, types, modes, link counts,
// sizes, contents, symbolic link targets) compared after every step. Every
// 100 steps one top-level name is removed recursively on both sides, which
// keeps the trees small enough to compare whole each time. Names come from a small set, so
// that operations collide: over existing names, into files, directories that
// are not empty, links to directories, a directory moved below itself;
// and paths with a trailing slash, "." and ".." components and "//".
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pool_side.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using pool_test::Describe;
using pool_test::Side;

class PoolDifferential : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string id = std::to_string(getpid());
    pool_ = "/dev/shm/upfs-pooldiff-" + id + ".pool";
    kdir_ = "/dev/shm/upfs-pooldiff-" + id + ".kernel";
    mnt_ = "/upfs-pooldiff-" + id;
    // Both sides start as the same empty directory, with the same umask
    // (a pool reads it at mount).
    umask(022);
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
    ASSERT_EQ(mkdir(kdir_.c_str(), 0755), 0);
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
    upfs_test::RemoveTree(kdir_);
  }
  std::string pool_, kdir_, mnt_;
};

TEST_F(PoolDifferential, RandomOperationsMatchTheKernel) {
  const uint64_t seed = upfs_test::TestSeed(20261125);
  const uint64_t steps = upfs_test::Scaled(100000, 2000);
  std::printf("seed %llu, %llu steps\n", (unsigned long long)seed, (unsigned long long)steps);
  std::mt19937_64 rng(seed);
  Side k{kdir_, false}, u{mnt_, true};
  static const char* kNames[] = {"d0", "d1", "d2", "f0", "f1", "f2", "f3", "f4", "s0", "a-much-longer-name"};
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  auto path = [&] {
    std::string p;
    const size_t depth = 1 + pick(3);
    for (size_t i = 0; i < depth; ++i) p += "/" + std::string(kNames[pick(10)]);
    // Now and then a shape programs write too (rm -r d/, cd ..): a trailing
    // slash, a last ".", a "." or ".." component or "//" after the first
    // name, each read by the kernel and a pool in their own ways (a slash
    // after a symbolic link, a ".." out of one).
    const size_t first = p.find('/', 1);
    switch (pick(24)) {
      case 0: case 1: p += "/"; break;
      case 2: p += "/."; break;
      case 3: if (first != std::string::npos) p.insert(first, "/."); break;
      case 4: if (first != std::string::npos) p.insert(first, "/"); break;
      case 5: if (first != std::string::npos) p.insert(first, "/" + std::string(kNames[pick(10)]) + "/.."); break;
      default: break;
    }
    return p;
  };
  std::deque<std::string> history;
  auto fail_report = [&](const std::string& what) {
    std::string h;
    for (const std::string& s : history) h += "  " + s + "\n";
    return what + "\nlast operations:\n" + h;
  };
  for (uint64_t step = 0; step < steps; ++step) {
    std::string desc;
    // Each operation runs on both sides; r and e hold (kernel, upfs).
    int rk = 0, ru = 0, ek = 0, eu = 0;
    auto both = [&](const std::function<int(Side&)>& f) {
      errno = 0;
      rk = f(k);
      ek = rk < 0 ? errno : 0;
      errno = 0;
      ru = f(u);
      eu = ru < 0 ? errno : 0;
    };
    const std::string a = path(), b = path();
    if (step % 100 == 99) {
      // Trees only grow without this, and comparing them after every step
      // would cost more and more: rm -r of one top-level name, both sides.
      const std::string victim = "/" + std::string(kNames[pick(10)]);
      desc = "rm -r " + victim;
      rk = k.RemoveAll(victim);
      ru = u.RemoveAll(victim);
      history.push_back(desc + " -> kernel " + std::to_string(rk) + " failed, upfs " + std::to_string(ru));
      ASSERT_EQ(rk, 0) << fail_report(desc);
      ASSERT_EQ(ru, 0) << fail_report(desc + " (upfs: " + upfs_last_error() + ")");
    }
    switch (pick(12)) {
      case 0:
      case 1: {
        const int flags = O_CREAT | O_RDWR | (pick(4) == 0 ? O_EXCL : 0) | (pick(6) == 0 ? O_TRUNC : 0);
        const off_t off = off_t(pick(3) == 0 ? pick(20000) : pick(100));
        const size_t n = pick(3) == 0 ? pick(9000) : pick(300);
        std::string data(n, char('a' + pick(26)));
        desc = "write " + a + " flags=" + std::to_string(flags) + " off=" + std::to_string(off) + " n=" + std::to_string(n);
        both([&](Side& s) {
          int fd = s.Open(a, flags, 0644);
          if (fd < 0) return -1;
          ssize_t w = s.Pwrite(fd, data.data(), n, off);
          s.Close(fd);
          return w == ssize_t(n) ? 0 : -1;
        });
        break;
      }
      case 2: {
        const off_t len = off_t(pick(12000));
        desc = "truncate " + a + " " + std::to_string(len);
        both([&](Side& s) { return s.Truncate(a, len); });
        break;
      }
      case 3: {
        static const unsigned kFlags[] = {0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE};
        const unsigned f = kFlags[pick(5)];
        desc = "rename " + a + " " + b + " flags=" + std::to_string(f);
        both([&](Side& s) { return s.Rename(a, b, f); });
        break;
      }
      case 4:
        desc = "link " + a + " " + b;
        both([&](Side& s) { return s.Link(a, b); });
        break;
      case 5:
        desc = "unlink " + a;
        both([&](Side& s) { return s.Unlink(a); });
        break;
      case 6:
      case 7: {
        // Set-ID and sticky bits too: a mkdir keeps only the sticky one.
        static const mode_t kDirModes[] = {0755, 0755, 0700, 01777, 02755, 07777};
        const mode_t m = kDirModes[pick(6)];
        desc = "mkdir " + a + " " + std::to_string(m);
        both([&](Side& s) { return s.Mkdir(a, m); });
        break;
      }
      case 8:
        desc = "rmdir " + a;
        both([&](Side& s) { return s.Rmdir(a); });
        break;
      case 9: {
        // Relative targets only: an absolute one names different trees.
        std::string t = std::string(kNames[pick(10)]) + (pick(2) ? "/" + std::string(kNames[pick(10)]) : "");
        if (pick(8) == 0) t += "/";  // a link that resolves only to a directory
        desc = "symlink " + t + " " + a;
        both([&](Side& s) { return s.Symlink(t, a); });
        break;
      }
      case 10: {
        static const mode_t kModes[] = {0644, 0600, 0755, 0700, 04755, 0444};
        const mode_t m = kModes[pick(6)];
        desc = "chmod " + a + " " + std::to_string(m);
        both([&](Side& s) { return s.Chmod(a, m); });
        break;
      }
      default: {
        desc = "read " + a;
        const std::string ck = k.Content(a), cu = u.Content(a);
        ASSERT_EQ(ck, cu) << fail_report("step " + std::to_string(step) + ": " + desc);
        break;
      }
    }
    history.push_back(desc + " -> kernel " + std::to_string(rk) + "/" + std::to_string(ek) + ", upfs " +
                      std::to_string(ru) + "/" + std::to_string(eu));
    if (history.size() > 20) history.pop_front();
    ASSERT_EQ(rk, ru) << fail_report("step " + std::to_string(step) + ": " + desc + ": results differ (upfs: " +
                                     upfs_last_error() + ")");
    ASSERT_EQ(ek, eu) << fail_report("step " + std::to_string(step) + ": " + desc + ": errno differs (upfs: " +
                                     upfs_last_error() + ")");
    {
      std::vector<std::string> tk, tu;
      Describe(k, "", &tk);
      Describe(u, "", &tu);
      ASSERT_EQ(tk, tu) << fail_report("step " + std::to_string(step) + ": trees differ after " + desc);
    }
  }
}

}  // namespace
