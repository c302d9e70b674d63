// upfs bench --pool: the namespace calls of one side, by path, and what
// the namespace rounds share (bench_pool.cc, bench_pool_rounds.cc).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/bench_written.h"
#include "cli/cli.h"
#include "upfs/upfs.h"
#include "util/status.h"

namespace upfs::cli::bench {

// The namespace calls of one side.
struct Ns {
  bool upfs;

  int Open(const char* p, int flags) const {
    return upfs ? upfs_open(p, flags, 0600) : open(p, flags | O_CLOEXEC, 0600);
  }
  int Close(int fd) const { return upfs ? upfs_close(fd) : close(fd); }
  int Stat(const char* p, struct stat* st) const { return upfs ? upfs_stat(p, st) : stat(p, st); }
  int Unlink(const char* p) const { return upfs ? upfs_unlink(p) : unlink(p); }
  int Rename(const char* a, const char* b) const { return upfs ? upfs_rename(a, b) : rename(a, b); }
  int Mkdir(const char* p) const { return upfs ? upfs_mkdir(p, 0700) : mkdir(p, 0700); }
  int Rmdir(const char* p) const { return upfs ? upfs_rmdir(p) : rmdir(p); }
  bool Write(int fd, const char* buf, size_t n) const {
    if ((upfs ? upfs_write(fd, buf, n) : write(fd, buf, n)) != ssize_t(n)) return false;
    CountWritten(n);
    return true;
  }
  int Fsync(int fd) const { return upfs ? upfs_fsync(fd) : fsync(fd); }

  bool Create(const char* p) const {
    int fd = Open(p, O_WRONLY | O_CREAT | O_EXCL);
    return fd >= 0 && Close(fd) == 0;
  }

  // The number of entries of directory p but "." and "..", or -1.
  long Count(const char* p) const {
    UPFS_DIR* pd = nullptr;
    DIR* kd = nullptr;
    if (upfs ? !(pd = upfs_opendir(p)) : !(kd = opendir(p))) return -1;
    long n = 0;
    errno = 0;
    while (struct dirent* e = upfs ? upfs_readdir(pd) : readdir(kd)) {
      n += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
    }
    const int err = errno;
    upfs ? upfs_closedir(pd) : closedir(kd);
    errno = err;
    return err ? -1 : n;
  }
};

// Paths "DIR/PREFIXi", formatted in place: no allocation on the clock, and
// no snprintf either (72-121 ns a name in a scratch loop on a busy machine,
// against 7-8 for the digits by hand; pool-stat measured 295 ns a call with
// it, on both sides, so the ratio measured the formatting as well).
class Names {
 public:
  Names(const std::string& dir, const char* prefix) {
    const std::string head = dir + "/" + prefix;
    head_len_ = std::min(head.size(), sizeof(buf_) - 21);
    std::memcpy(buf_, head.data(), head_len_);
  }
  const char* operator()(uint64_t i) {
    char digits[20];
    int n = 0;
    do {
      digits[n++] = char('0' + i % 10);
      i /= 10;
    } while (i != 0);
    char* p = buf_ + head_len_;
    while (n > 0) *p++ = digits[--n];
    *p = '\0';
    return buf_;
  }

 private:
  size_t head_len_ = 0;
  char buf_[512];
};

inline Status SideError(bool upfs, const std::string& what, int err) {
  errno = err;
  if (upfs) return Status::Error(err, "upfs: " + ApiError(what));
  return Status::Error(err, "kernel: " + what + ": " + std::strerror(err));
}

}  // namespace upfs::cli::bench
