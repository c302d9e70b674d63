// Differential test of the pool: the same random namespace and data
// operations on a pool and on a kernel tmpfs directory, every result and
// errno compared, and the two trees (names, types, modes, link counts,
// sizes, contents, symbolic link targets) compared after every step. Every
// 100 steps one top-level name is removed recursively on both sides, which
// keeps the trees small enough to compare whole each time. Names come from a small set, so
// that operations collide: over existing names, into files, directories that
// are not empty, links to directories, a directory moved below itself.
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

#include "test_util.h"
#include "upfs/upfs.h"

namespace {

// One side of the comparison: the kernel's calls or upfs's.
struct Side {
  std::string root;
  bool pool;
  int Open(const std::string& p, int flags, mode_t m) {
    return pool ? upfs_open((root + p).c_str(), flags, m) : open((root + p).c_str(), flags, m);
  }
  int Close(int fd) { return pool ? upfs_close(fd) : close(fd); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t o) { return pool ? upfs_pwrite(fd, b, n, o) : pwrite(fd, b, n, o); }
  ssize_t Pread(int fd, void* b, size_t n, off_t o) { return pool ? upfs_pread(fd, b, n, o) : pread(fd, b, n, o); }
  int Ftruncate(int fd, off_t l) { return pool ? upfs_ftruncate(fd, l) : ftruncate(fd, l); }
  int Mkdir(const std::string& p, mode_t m) { return pool ? upfs_mkdir((root + p).c_str(), m) : mkdir((root + p).c_str(), m); }
  int Rmdir(const std::string& p) { return pool ? upfs_rmdir((root + p).c_str()) : rmdir((root + p).c_str()); }
  int Unlink(const std::string& p) { return pool ? upfs_unlink((root + p).c_str()) : unlink((root + p).c_str()); }
  int Link(const std::string& a, const std::string& b) {
    return pool ? upfs_link((root + a).c_str(), (root + b).c_str()) : link((root + a).c_str(), (root + b).c_str());
  }
  int Symlink(const std::string& t, const std::string& p) {
    return pool ? upfs_symlink(t.c_str(), (root + p).c_str()) : symlink(t.c_str(), (root + p).c_str());
  }
  int Rename(const std::string& a, const std::string& b, unsigned f) {
    return pool ? upfs_renameat2(AT_FDCWD, (root + a).c_str(), AT_FDCWD, (root + b).c_str(), f)
                : renameat2(AT_FDCWD, (root + a).c_str(), AT_FDCWD, (root + b).c_str(), f);
  }
  int Chmod(const std::string& p, mode_t m) { return pool ? upfs_chmod((root + p).c_str(), m) : chmod((root + p).c_str(), m); }
  int Truncate(const std::string& p, off_t l) {
    return pool ? upfs_truncate((root + p).c_str(), l) : truncate((root + p).c_str(), l);
  }
  int Lstat(const std::string& p, struct stat* st) {
    return pool ? upfs_lstat((root + p).c_str(), st) : lstat((root + p).c_str(), st);
  }
  ssize_t Readlink(const std::string& p, char* b, size_t n) {
    return pool ? upfs_readlink((root + p).c_str(), b, n) : readlink((root + p).c_str(), b, n);
  }
  std::vector<std::string> List(const std::string& p) {
    std::vector<std::string> out;
    if (pool) {
      UPFS_DIR* d = upfs_opendir((root + p).c_str());
      if (!d) return out;
      while (struct dirent* e = upfs_readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) out.push_back(e->d_name);
      upfs_closedir(d);
    } else {
      DIR* d = opendir((root + p).c_str());
      if (!d) return out;
      while (struct dirent* e = readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) out.push_back(e->d_name);
      closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // rm -r through this side's calls; returns the number of failed calls.
  int RemoveAll(const std::string& p) {
    struct stat st;
    if (Lstat(p, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return Unlink(p) == 0 ? 0 : 1;
    int failed = 0;
    for (const std::string& name : List(p)) failed += RemoveAll(p + "/" + name);
    return failed + (Rmdir(p) == 0 ? 0 : 1);
  }
  std::string Content(const std::string& p) {
    int fd = Open(p, O_RDONLY, 0);
    if (fd < 0) return "<open " + std::to_string(errno) + ">";
    std::string s;
    char buf[65536];
    for (off_t off = 0;;) {
      ssize_t n = Pread(fd, buf, sizeof(buf), off);
      if (n <= 0) break;
      s.append(buf, size_t(n));
      off += n;
    }
    Close(fd);
    return s;
  }
};

// Every entry of a tree as a line: path, type, mode, links, size, content
// hash or target.
void Describe(Side& s, const std::string& dir, std::vector<std::string>* out) {
  for (const std::string& name : s.List(dir)) {
    const std::string p = dir + "/" + name;
    struct stat st;
    if (s.Lstat(p, &st) != 0) {
      out->push_back(p + " <lstat " + std::to_string(errno) + ">");
      continue;
    }
    std::string line = p + " mode=" + std::to_string(st.st_mode) + " nlink=" + std::to_string(st.st_nlink);
    if (S_ISREG(st.st_mode)) {
      const std::string c = s.Content(p);
      line += " size=" + std::to_string(st.st_size) + " crc=" + std::to_string(upfs::Crc32c(c.data(), c.size())) +
              " len=" + std::to_string(c.size());
    } else if (S_ISLNK(st.st_mode)) {
      char t[4096];
      ssize_t n = s.Readlink(p, t, sizeof(t));
      line += " -> " + std::string(t, n > 0 ? size_t(n) : 0);
    }
    out->push_back(line);
    if (S_ISDIR(st.st_mode)) Describe(s, p, out);
  }
}

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
      case 7:
        desc = "mkdir " + a;
        both([&](Side& s) { return s.Mkdir(a, 0755); });
        break;
      case 8:
        desc = "rmdir " + a;
        both([&](Side& s) { return s.Rmdir(a); });
        break;
      case 9: {
        // Relative targets only: an absolute one names different trees.
        const std::string t = std::string(kNames[pick(10)]) + (pick(2) ? "/" + std::string(kNames[pick(10)]) : "");
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
