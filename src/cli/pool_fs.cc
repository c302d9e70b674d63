#include "cli/pool_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "upfs/upfs.h"

namespace upfs::cli {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string Fs::Display(const std::string& path) const {
  return pool_ ? name_ + ":" + path : path;
}

std::string Fs::Error(const std::string& path) const {
  const int err = errno;
  std::string msg = Display(path) + ": " + std::strerror(err);
  // Only for these does upfs's own message add something strerror lacks
  // (which structure is damaged, what ran out).
  if (pool_ && (err == EUCLEAN || err == EMEDIUMTYPE || err == ENOSPC || err == EFBIG)) {
    msg += std::string(" (") + upfs_last_error() + ")";
  }
  errno = err;
  return msg;
}

// upfs_lstat and upfs_stat are the kernel's for anything but a upfs file,
// and give a upfs file's own size and times.
int Fs::Lstat(const std::string& path, struct stat* st) const {
  return upfs_lstat(Real(path).c_str(), st);
}

int Fs::Stat(const std::string& path, struct stat* st) const {
  return upfs_stat(Real(path).c_str(), st);
}

int Fs::Open(const std::string& path, int flags, mode_t mode) const {
  if (pool_) return upfs_open(Real(path).c_str(), flags, mode);
  if (upfs_is_upfs_file(path.c_str()) != 1) return open(path.c_str(), flags | O_CLOEXEC, mode);
  const int fd = upfs_open(path.c_str(), flags, mode);
  if (fd >= 0) upfs_fds_.insert(fd);
  return fd;
}

int Fs::Mkdir(const std::string& path, mode_t mode) const {
  return pool_ ? upfs_mkdir(Real(path).c_str(), mode) : mkdir(path.c_str(), mode);
}

int Fs::Symlink(const std::string& target, const std::string& path) const {
  return pool_ ? upfs_symlink(target.c_str(), Real(path).c_str())
               : symlink(target.c_str(), path.c_str());
}

int Fs::Readlink(const std::string& path, std::string* target) const {
  std::vector<char> buf(4096);
  for (;;) {
    ssize_t n = pool_ ? upfs_readlink(Real(path).c_str(), buf.data(), buf.size())
                      : readlink(path.c_str(), buf.data(), buf.size());
    if (n < 0) return -1;
    if (size_t(n) < buf.size()) {
      target->assign(buf.data(), size_t(n));
      return 0;
    }
    buf.resize(buf.size() * 2);  // possibly cut: try again with room to spare
  }
}

int Fs::Link(const std::string& existing, const std::string& path) const {
  return pool_ ? upfs_link(Real(existing).c_str(), Real(path).c_str())
               : link(existing.c_str(), path.c_str());
}

// upfs_unlink also removes a host upfs file's shared state.
int Fs::Unlink(const std::string& path) const { return upfs_unlink(Real(path).c_str()); }

int Fs::Chmod(const std::string& path, mode_t mode) const {
  return pool_ ? upfs_chmod(Real(path).c_str(), mode) : chmod(path.c_str(), mode);
}

int Fs::Lchown(const std::string& path, uid_t uid, gid_t gid) const {
  return pool_ ? upfs_lchown(Real(path).c_str(), uid, gid) : lchown(path.c_str(), uid, gid);
}

int Fs::Lutimens(const std::string& path, const struct timespec times[2]) const {
  return pool_ ? upfs_utimensat(AT_FDCWD, Real(path).c_str(), times, AT_SYMLINK_NOFOLLOW)
               : utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

int Fs::List(const std::string& path, std::vector<std::string>* names) const {
  names->clear();
  UPFS_DIR* pd = nullptr;
  DIR* kd = nullptr;
  if (pool_ ? !(pd = upfs_opendir(Real(path).c_str())) : !(kd = opendir(path.c_str()))) return -1;
  for (;;) {
    errno = 0;
    struct dirent* e = pool_ ? upfs_readdir(pd) : readdir(kd);
    if (!e) break;
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names->push_back(e->d_name);
    }
  }
  const int err = errno;
  if (pool_) {
    upfs_closedir(pd);
  } else {
    closedir(kd);
  }
  std::sort(names->begin(), names->end());
  errno = err;
  return err ? -1 : 0;
}

int Fs::Close(int fd) const {
  if (!Upfs(fd)) return close(fd);
  upfs_fds_.erase(fd);
  return upfs_close(fd);
}

ssize_t Fs::Pread(int fd, void* buf, size_t n, off_t off) const {
  return Upfs(fd) ? upfs_pread(fd, buf, n, off) : pread(fd, buf, n, off);
}

ssize_t Fs::Pwrite(int fd, const void* buf, size_t n, off_t off) const {
  return Upfs(fd) ? upfs_pwrite(fd, buf, n, off) : pwrite(fd, buf, n, off);
}

off_t Fs::Lseek(int fd, off_t off, int whence) const {
  return Upfs(fd) ? upfs_lseek(fd, off, whence) : lseek(fd, off, whence);
}

int Fs::Fstat(int fd, struct stat* st) const { return Upfs(fd) ? upfs_fstat(fd, st) : fstat(fd, st); }

int Fs::Ftruncate(int fd, off_t len) const {
  return Upfs(fd) ? upfs_ftruncate(fd, len) : ftruncate(fd, len);
}

int Fs::Fchmod(int fd, mode_t mode) const { return Upfs(fd) ? upfs_fchmod(fd, mode) : fchmod(fd, mode); }

int Fs::Fchown(int fd, uid_t uid, gid_t gid) const {
  return Upfs(fd) ? upfs_fchown(fd, uid, gid) : fchown(fd, uid, gid);
}

int Fs::Futimens(int fd, const struct timespec times[2]) const {
  return Upfs(fd) ? upfs_futimens(fd, times) : futimens(fd, times);
}

}  // namespace upfs::cli
