// Side: the same calls made to the kernel or to upfs on a directory each,
// and Describe, a tree's every entry as a line, so that a test compares a
// pool with a kernel tmpfs directory after the same operations (the
// differential test, the rename pair test).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace pool_test {

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
  int Chown(const std::string& p, uid_t u, gid_t g) {
    return pool ? upfs_chown((root + p).c_str(), u, g) : chown((root + p).c_str(), u, g);
  }
  int Lchown(const std::string& p, uid_t u, gid_t g) {
    return pool ? upfs_lchown((root + p).c_str(), u, g) : lchown((root + p).c_str(), u, g);
  }
  int Access(const std::string& p, int m) { return pool ? upfs_access((root + p).c_str(), m) : access((root + p).c_str(), m); }
  int UtimensNow(const std::string& p) {
    return pool ? upfs_utimensat(AT_FDCWD, (root + p).c_str(), nullptr, 0)
                : utimensat(AT_FDCWD, (root + p).c_str(), nullptr, 0);
  }
  int Stat(const std::string& p, struct stat* st) {
    return pool ? upfs_stat((root + p).c_str(), st) : stat((root + p).c_str(), st);
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

}  // namespace pool_test
