// One side of `upfs cp` and `upfs ls`: a mounted pool (through the upfs_*
// calls) or the host. On the host, an existing upfs file is read and
// written through upfs (its bytes are its contents, not its log) and
// everything else goes to the kernel, not through upfs_open, which would
// make new files upfs files. Paths are the side's own: inside the pool
// ("/a/b") or on the host. Calls return what their POSIX twins return,
// with errno set.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace upfs::cli {

class Fs {
 public:
  // The host.
  Fs() = default;
  // The pool `pool` (for messages) mounted at `mount_dir`.
  Fs(std::string pool, std::string mount_dir)
      : pool_(true), name_(std::move(pool)), root_(std::move(mount_dir)) {}

  bool is_pool() const { return pool_; }
  // How the user names `path`: "POOL:/a/b" or the host path.
  std::string Display(const std::string& path) const;
  // "Display(path): strerror(errno)", with upfs's detail for a damaged pool.
  std::string Error(const std::string& path) const;

  int Lstat(const std::string& path, struct stat* st) const;
  int Stat(const std::string& path, struct stat* st) const;
  int Open(const std::string& path, int flags, mode_t mode = 0) const;
  int Mkdir(const std::string& path, mode_t mode) const;
  int Symlink(const std::string& target, const std::string& path) const;
  int Readlink(const std::string& path, std::string* target) const;
  int Link(const std::string& existing, const std::string& path) const;
  int Unlink(const std::string& path) const;
  int Chmod(const std::string& path, mode_t mode) const;
  int Lchown(const std::string& path, uid_t uid, gid_t gid) const;
  int Lutimens(const std::string& path, const struct timespec times[2]) const;
  // The names in directory `path` but "." and "..", in byte order.
  int List(const std::string& path, std::vector<std::string>* names) const;

  int Close(int fd) const;
  ssize_t Pread(int fd, void* buf, size_t n, off_t off) const;
  ssize_t Pwrite(int fd, const void* buf, size_t n, off_t off) const;
  off_t Lseek(int fd, off_t off, int whence) const;
  int Fstat(int fd, struct stat* st) const;
  int Ftruncate(int fd, off_t len) const;
  int Fchmod(int fd, mode_t mode) const;
  int Fchown(int fd, uid_t uid, gid_t gid) const;
  int Futimens(int fd, const struct timespec times[2]) const;

 private:
  std::string Real(const std::string& path) const { return pool_ ? root_ + path : path; }
  // Whether fd is a upfs descriptor (a pool's, or a host upfs file's).
  bool Upfs(int fd) const { return pool_ || upfs_fds_.count(fd) != 0; }

  bool pool_ = false;
  std::string name_;  // the pool file
  std::string root_;  // its mount directory
  mutable std::set<int> upfs_fds_;  // host: the open upfs files' descriptors
};

// `dir` + "/" + `name`, without doubling a trailing slash.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace upfs::cli
