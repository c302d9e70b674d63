// The attribute calls of the C API (include/upfs/upfs.h, "attributes, as
// the kernel's"): stat, chmod, chown, utimensat and truncate, on any path
// or descriptor.
//
// The kernel keeps the host inode's owner, group, mode, atime and the ctime
// of what it changes; upfs keeps the size, the mtime and the time of its
// own changes to the data (docs/design.md, "Attributes"). Every call that
// changes something lets the kernel do it first, so that the kernel's
// permission checks decide, and then brings what upfs keeps into step.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "container/container.h"
#include "format/format.h"
#include "posix/api_internal.h"
#include "posix/pool_api.h"
#include "posix/pool_escape.h"
#include "posix/file_registry.h"
#include "posix/op_guard.h"
#include "upfs/upfs.h"
#include "util/time_ns.h"

namespace upfs {

namespace {

std::string SelfPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Opens (dirfd, path) to read it, without changing its atime where the
// kernel lets us (the owner, or CAP_FOWNER).
int OpenToLook(int dirfd, const char* path, int at_flags) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (at_flags & AT_SYMLINK_NOFOLLOW) flags |= O_NOFOLLOW;
  int fd = openat(dirfd, path, flags | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = openat(dirfd, path, flags);
  return fd;
}

// Whether the host file at (dirfd, path), whose attributes are st, is a upfs
// file: marked, or (an unmarked file of an earlier version) carrying the
// magic.
bool IsUpfsHost(int dirfd, const char* path, int at_flags, const struct stat& st) {
  Container& c = HostFileContainer();
  if (c.Marked(st)) return true;
  if (!c.MaybeHolds(st)) return false;
  const int saved = errno;
  int fd = OpenToLook(dirfd, path, at_flags);
  bool upfs = fd >= 0 && c.Holds(fd);
  if (fd >= 0) close(fd);
  errno = saved;
  return upfs;
}

// Replaces the host attributes in *st with the upfs ones if (dirfd, path)
// is a upfs file this caller may read; a marked file it may not read keeps
// the host's size and times (see the README), with the marker hidden.
void FillUpfsAttributes(int dirfd, const char* path, int at_flags, struct stat* st) {
  if (upfs_stat_if_open(st, st) == 1) return;
  const int saved = errno;
  int fd = OpenToLook(dirfd, path, at_flags);
  struct stat ust;
  if (fd >= 0 && upfs_stat_host_fd(fd, &ust) == 0 && ust.st_dev == st->st_dev &&
      ust.st_ino == st->st_ino)
    *st = ust;
  else if (HostFileContainer().Marked(*st))
    st->st_mode &= ~HostFileContainer().MarkerBits();
  if (fd >= 0) close(fd);
  errno = saved;
}

// After the kernel changed the owner, group or mode of a upfs host file.
void AfterAttributeChange(const struct stat& host) {
  HostFileContainer().AttributesChanged(HostIdentity{uint64_t(host.st_dev), uint64_t(host.st_ino)},
                                       host);
}

// The engine File of the upfs file `host` (named `path` for opening), the
// process's own if it has one. An owner who may not write the file may
// still set its times (the kernel allows it): the file then gets owner
// read and write for the moment it takes to open it, and its mode back.
Status AcquireWritable(const std::string& path, const struct stat& host,
                       std::shared_ptr<File>* out) {
  if ((*out = FindWritableFile(host))) return Status::OK();
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  auto open_new = [&](std::unique_ptr<File>* nf) {
    return HostFileContainer().Open(fd, path, Container::OpenOptions{}, nf);
  };
  Status st = AcquireFile(host, true, open_new, out);
  if (st.err() == EACCES && geteuid() == host.st_uid) {
    const std::string self = SelfPath(fd);
    const mode_t mode = host.st_mode & 07777;
    struct stat opened = host;  // what the shared state must admit meanwhile
    opened.st_mode |= S_IRUSR | S_IWUSR;
    if (chmod(self.c_str(), opened.st_mode & 07777) == 0) {
      AfterAttributeChange(opened);
      st = AcquireFile(host, true, open_new, out);
      if (chmod(self.c_str(), mode) != 0 && st.ok())
        st = Status::FromErrno("restore the mode of " + path);
      AfterAttributeChange(host);
    }
  }
  close(fd);
  return st;
}

// Brings the upfs mtime of a upfs file into step after the kernel's
// utimensat on its host file (`times` as given to it).
Status SetUpfsMtime(const std::string& path, const struct stat& host,
                    const struct timespec times[2], std::shared_ptr<File> file) {
  // UTIME_NOW: the time the kernel gave atime and ctime just now.
  const int64_t mtime = (!times || times[1].tv_nsec == UTIME_NOW) ? int64_t(TimespecNs(host.st_mtim))
                                                                  : int64_t(TimespecNs(times[1]));
  if (!file) UPFS_RETURN_IF_ERROR(AcquireWritable(path, host, &file));
  OpGuard g(DescriptorUse::None());
  return file->SetMtime(mtime);
}

}  // namespace

Status ClearPrivilegesOf(File* file, const struct stat& host) {
  if (!(host.st_mode & (S_ISUID | S_ISGID))) return Status::OK();
  // The kernel's write path clears them (file_remove_privs), with the
  // caller's credentials.
  return HostFileContainer().WriteThroughKernel(*file);
}

bool MaybeUpfs(const struct stat& st) {
  return HostFileContainer().MaybeHolds(st);
}

void SetUpfsAttributes(const FileStat& fs, struct stat* out) {
  out->st_mode &= ~HostFileContainer().MarkerBits();
  out->st_size = off_t(fs.size);
  out->st_blocks = blkcnt_t(fs.blocks * (format::kBlockSize / 512));
  out->st_blksize = format::kBlockSize;
  out->st_mtim = NsTimespec(uint64_t(fs.mtime_ns));
  // The kernel's ctime covers what it changed (mode, owner, links, names,
  // utimensat); upfs's covers the data and size.
  if (fs.data_ctime_ns > int64_t(TimespecNs(out->st_ctim))) out->st_ctim = NsTimespec(uint64_t(fs.data_ctime_ns));
}

}  // namespace upfs

using namespace upfs;

extern "C" {

int upfs_fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH | AT_STATX_SYNC_TYPE))
    return FailErrno(EINVAL, "bad flags");  // first, as the kernel's vfs_fstatat
  if (!path || !st) return FailErrno(EFAULT, "null argument");
  if (*path == '\0' && (flags & AT_EMPTY_PATH)) {
    if (int r = PoolFstatFd(dirfd, st); r != -2) return r;
  }
  if (PoolPath p; InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolStat(p, st, !(flags & AT_SYMLINK_NOFOLLOW)); },
                        [&](const std::string& to, int) { return upfs_fstatat(AT_FDCWD, to.c_str(), st, flags); });
  if (*path == '\0' && (flags & AT_EMPTY_PATH) && ApiFileOf(dirfd, nullptr))
    return upfs_fstat(dirfd, st);
  if (fstatat(dirfd, path, st, flags) != 0) return FailErrno(errno, "stat failed");
  if (!MaybeUpfs(*st)) return 0;
  if (*path == '\0') {
    const std::string self = SelfPath(dirfd);
    FillUpfsAttributes(AT_FDCWD, self.c_str(), 0, st);
  } else {
    FillUpfsAttributes(dirfd, path, flags, st);
  }
  return 0;
}

int upfs_stat(const char* path, struct stat* st) { return upfs_fstatat(AT_FDCWD, path, st, 0); }

int upfs_lstat(const char* path, struct stat* st) {
  return upfs_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

int upfs_fchmodat(int dirfd, const char* path, mode_t mode, int flags) {
  // First, as glibc's fchmodat (the only flag it passes on).
  if (flags & ~AT_SYMLINK_NOFOLLOW) return FailErrno(EINVAL, "bad flags");
  if (!path) return FailErrno(EFAULT, "null path");
  if (PoolPath p; InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolChmod(p, mode, !(flags & AT_SYMLINK_NOFOLLOW)); },
                        [&](const std::string& to, int) { return upfs_fchmodat(AT_FDCWD, to.c_str(), mode, flags); });
  const int look = flags & AT_SYMLINK_NOFOLLOW;
  struct stat st;
  const bool upfs = fstatat(dirfd, path, &st, look) == 0 && IsUpfsHost(dirfd, path, look, st);
  // A upfs file keeps its marker whatever the mode asked for.
  const mode_t host_mode = upfs ? mode | HostFileContainer().MarkerBits() : mode;
  if (fchmodat(dirfd, path, host_mode, flags) != 0) return FailErrno(errno, "chmod failed");
  if (upfs && fstatat(dirfd, path, &st, look) == 0) AfterAttributeChange(st);
  return 0;
}

int upfs_chmod(const char* path, mode_t mode) { return upfs_fchmodat(AT_FDCWD, path, mode, 0); }

int upfs_fchmod(int fd, mode_t mode) {
  if (int r = PoolFchmod(fd, mode); r != -2) return r;
  struct stat st;
  if (fstat(fd, &st) != 0) return FailErrno(errno, "fstat failed");
  const std::string self = SelfPath(fd);
  const bool upfs = ApiFileOf(fd, nullptr) || IsUpfsHost(AT_FDCWD, self.c_str(), 0, st);
  const mode_t host_mode = upfs ? mode | HostFileContainer().MarkerBits() : mode;
  if (fchmod(fd, host_mode) != 0) return FailErrno(errno, "chmod failed");
  if (upfs && fstat(fd, &st) == 0) AfterAttributeChange(st);
  return 0;
}

int upfs_fchownat(int dirfd, const char* path, uid_t owner, gid_t group, int flags) {
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return FailErrno(EINVAL, "bad flags");  // first, as the kernel's
  if (!path) return FailErrno(EFAULT, "null path");
  if (PoolPath p; InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolChown(p, owner, group, !(flags & AT_SYMLINK_NOFOLLOW)); },
                        [&](const std::string& to, int) {
                          return upfs_fchownat(AT_FDCWD, to.c_str(), owner, group, flags);
                        });
  if (fchownat(dirfd, path, owner, group, flags) != 0) return FailErrno(errno, "chown failed");
  const int look = flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH);
  struct stat st;
  if (fstatat(dirfd, path, &st, look) == 0 && S_ISREG(st.st_mode)) {
    const std::string self = SelfPath(dirfd);
    const bool upfs = *path == '\0' ? IsUpfsHost(AT_FDCWD, self.c_str(), 0, st)
                                    : IsUpfsHost(dirfd, path, look, st);
    if (upfs) AfterAttributeChange(st);
  }
  return 0;
}

int upfs_chown(const char* path, uid_t owner, gid_t group) {
  return upfs_fchownat(AT_FDCWD, path, owner, group, 0);
}

int upfs_lchown(const char* path, uid_t owner, gid_t group) {
  return upfs_fchownat(AT_FDCWD, path, owner, group, AT_SYMLINK_NOFOLLOW);
}

int upfs_fchown(int fd, uid_t owner, gid_t group) {
  if (int r = PoolFchown(fd, owner, group); r != -2) return r;
  if (fchown(fd, owner, group) != 0) return FailErrno(errno, "chown failed");
  struct stat st;
  const std::string self = SelfPath(fd);
  if (fstat(fd, &st) == 0 && (ApiFileOf(fd, nullptr) || IsUpfsHost(AT_FDCWD, self.c_str(), 0, st)))
    AfterAttributeChange(st);
  return 0;
}

int upfs_futimens(int fd, const struct timespec times[2]) {
  if (int r = PoolFutimens(fd, times); r != -2) return r;
  if (futimens(fd, times) != 0) return FailErrno(errno, "utimensat failed");
  if (times && times[1].tv_nsec == UTIME_OMIT) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0) return FailErrno(errno, "fstat failed");
  const std::string self = SelfPath(fd);
  std::shared_ptr<File> file = ApiFileOf(fd, nullptr);
  if (!file && !IsUpfsHost(AT_FDCWD, self.c_str(), 0, st)) return 0;
  // A descriptor open for reading only has a File that writes nothing.
  if (file && file->read_only()) file = nullptr;
  Status s = SetUpfsMtime(self, st, times, std::move(file));
  return s.ok() ? 0 : Fail(s);
}

int upfs_utimensat(int dirfd, const char* path, const struct timespec times[2], int flags) {
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return FailErrno(EINVAL, "bad flags");  // first, as the kernel's
  // A null path is the kernel's futimens through utimensat.
  if (!path) return upfs_futimens(dirfd, times);
  if (PoolPath p; InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolUtimens(p, times, !(flags & AT_SYMLINK_NOFOLLOW)); },
                        [&](const std::string& to, int) { return upfs_utimensat(AT_FDCWD, to.c_str(), times, flags); });
  if (*path == '\0' && (flags & AT_EMPTY_PATH)) return upfs_futimens(dirfd, times);
  if (utimensat(dirfd, path, times, flags) != 0) return FailErrno(errno, "utimensat failed");
  if (times && times[1].tv_nsec == UTIME_OMIT) return 0;
  const int look = flags & AT_SYMLINK_NOFOLLOW;
  struct stat st;
  if (fstatat(dirfd, path, &st, look) != 0 || !IsUpfsHost(dirfd, path, look, st)) return 0;
  // Named through a descriptor of its own, so that a rename meanwhile
  // cannot make us set the times of another file.
  int fd = openat(dirfd, path, O_PATH | O_CLOEXEC | (look ? O_NOFOLLOW : 0));
  if (fd < 0) return FailErrno(errno, "open for utimensat failed");
  struct stat now;
  Status s;
  if (fstat(fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    s = Status::Error(EAGAIN, std::string(path) + ": replaced during utimensat");
  else
    s = SetUpfsMtime(SelfPath(fd), st, times, nullptr);
  close(fd);
  return s.ok() ? 0 : Fail(s);
}

int upfs_truncate(const char* path, off_t length) {
  if (!path) return FailErrno(EFAULT, "null path");
  if (PoolPath p; InPool(AT_FDCWD, path, &p))
    return FollowEscape({&p}, [&] { return PoolTruncate(p, length); },
                        [&](const std::string& to, int) { return upfs_truncate(to.c_str(), length); });
  struct stat st;
  if (fstatat(AT_FDCWD, path, &st, 0) != 0 || !IsUpfsHost(AT_FDCWD, path, 0, st)) {
    if (truncate(path, length) != 0) return FailErrno(errno, "truncate failed");
    return 0;
  }
  if (length < 0) return FailErrno(EINVAL, "negative length");
  // The kernel's check for truncate(2); the File may be one this process
  // opened before a chmod. No descriptor of the file is opened and closed
  // here, which would drop the process's record locks on it.
  if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0) return FailErrno(errno, "truncate failed");
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return FailErrno(errno, "truncate failed");
  struct stat now;
  std::shared_ptr<File> file;
  Status s;
  if (fstat(fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    s = Status::Error(EAGAIN, std::string(path) + ": replaced during truncate");
  else
    s = AcquireWritable(SelfPath(fd), now, &file);
  if (s.ok()) s = ClearPrivilegesOf(file.get(), now);
  if (s.ok()) {
    OpGuard g(DescriptorUse::None());
    s = file->Truncate(uint64_t(length));
  }
  close(fd);
  return s.ok() ? 0 : Fail(s);
}

}  // extern "C"
