// The C API of include/upfs/upfs.h: descriptors, offsets, flags and errno
// over the engine.
//
// A upfs descriptor is the kernel descriptor of the host file, opened with
// the caller's access mode, so that descriptor numbers never collide with
// the process's other files. Open descriptions of one file in one process
// share one engine File.
#include "upfs/upfs.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "container/container.h"
#include "engine/file.h"
#include "posix/api_internal.h"
#include "posix/pool_mounts.h"
#include "posix/pool_api.h"
#include "posix/pool_escape.h"
#include "posix/descriptor_table.h"
#include "posix/host_descriptor.h"
#include "posix/op_guard.h"
#include "posix/preload_hooks.h"
#include "util/leak.h"
#include "posix/file_registry.h"

namespace upfs {

thread_local std::string t_last_error = "no error";

int Fail(const Status& st) {
  t_last_error = st.message();
  errno = st.err();
  return -1;
}

int FailErrno(int err, const char* msg) {
  t_last_error = msg;
  errno = err;
  return -1;
}

namespace {

std::atomic<int> g_default_consistency{int(format::Consistency::kStrict)};

// A write or truncate by a caller without CAP_FSETID clears S_ISUID and
// S_ISGID, as the kernel's does; but the kernel never sees a upfs write.
// So upfs has the kernel apply its own rule, with the caller's
// credentials: it rewrites the header's first byte (immutable: the same
// byte) through the kernel. Looked at once per description, and again
// after a chmod or chown through upfs in any process (attr_seq): one
// relaxed load per write otherwise.
Status ClearPrivileges(const OpenFile* of) {
  if (of->d->pool) return ClearPoolPrivileges(const_cast<OpenFile*>(of));
  Description* d = of->d.get();
  const uint64_t seq = HostFileContainer().AttributeSequence(*d->file);
  if (seq == d->privileges_seen.load(std::memory_order_relaxed)) return Status::OK();
  struct stat st;
  if (fstat(of->fd, &st) != 0) return Status::FromErrno("fstat of host file");
  UPFS_RETURN_IF_ERROR(ClearPrivilegesOf(d->file.get(), st));
  d->privileges_seen.store(seq, std::memory_order_relaxed);
  return Status::OK();
}

// Whether the caller may open the file behind host_fd for writing, as the
// kernel's open decides it (the caller's effective ids and groups, ACLs,
// a read-only mount, an immutable file), asked without opening it: an
// open for writing would also tell watchers the file was written at its
// close (inotify's IN_CLOSE_WRITE).
Status KernelMayWrite(int host_fd) {
  if (faccessat(host_fd, "", W_OK, AT_EACCESS | AT_EMPTY_PATH) == 0) return Status::OK();
  return Status::FromErrno("open for writing");
}

// Linux refuses a read or write whose count is negative as a ssize_t or
// whose end would pass the largest offset (EINVAL, rw_verify_area), before
// any limit of the file system's (EFBIG).
bool RangeOverflows(size_t count, uint64_t pos) {
  constexpr uint64_t kMaxOffset = uint64_t(std::numeric_limits<int64_t>::max());
  return count > kMaxOffset || pos > kMaxOffset - count;
}

int CheckOpenFlags(int flags) {
  if ((flags & O_ACCMODE) == O_ACCMODE) return FailErrno(EINVAL, "bad access mode");
  if ((flags & (O_CREAT | O_DIRECTORY)) == (O_CREAT | O_DIRECTORY))
    return FailErrno(EINVAL, "O_CREAT with O_DIRECTORY");  // as Linux 6.4 on
  if (flags & O_DIRECTORY) return FailErrno(EISDIR, "upfs files are regular files");
  return 0;
}

// Makes the open host file fd (named path in messages) a upfs descriptor;
// on failure fd is closed if `close_on_failure`, else left as it was. A
// file created empty just now becomes a upfs file with mode *new_mode.
// `host_read_only`: the caller opened fd read-only itself (upfs_open).
int OpenOnHostFd(int fd, const char* path, int flags, format::Consistency consistency,
                 bool close_on_failure, bool host_read_only, const mode_t* new_mode = nullptr) {
  int acc = flags & O_ACCMODE;
  bool create = flags & O_CREAT;
  auto fail = [&](const Status& st) {
    if (close_on_failure) close(fd);
    return Fail(st);
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(Status::FromErrno("fstat"));
  Container& host = HostFileContainer();
  if ((flags & O_TRUNC) && create && st.st_size > 0 && !host.Holds(fd)) {
    // Truncating a plain file yields an empty file, which becomes upfs.
    // (By name if fd is read-only, which has the kernel check write
    // permission as its O_TRUNC does: see host_descriptor.h.)
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (ftruncate(fd, 0) != 0 && truncate(self.c_str(), 0) != 0)
      return fail(Status::FromErrno("truncate"));
    if (fstat(fd, &st) != 0) return fail(Status::FromErrno("fstat"));
  }
  // The program's descriptor becomes read-only unless the process has
  // another descriptor of the file (host_descriptor.h).
  const bool first_of_file = host_read_only || FindFile(st) == nullptr;
  // O_TRUNC writes, whatever the access mode: Linux truncates a file
  // opened O_RDONLY | O_TRUNC by a caller who may write it.
  const bool writes = acc != O_RDONLY || (flags & O_TRUNC);
  // A caller who only reads gets a File that writes nothing (and needs no
  // write permission), unless this process has a writing one already. An
  // empty host file opened with O_CREAT is to become a upfs file, which
  // takes writing; a upfs file opened with O_CREAT is only opened.
  const bool writable = writes || new_mode || (create && st.st_size == 0);
  std::shared_ptr<File> file;
  const Container::OpenOptions options{writable, create, consistency, new_mode};
  bool opened_now = false;
  Status s = AcquireFile(st, writable, [&](std::unique_ptr<File>* f) {
    opened_now = true;
    return host.Open(fd, path, options, f);
  }, &file);
  if (!s.ok()) return fail(s);
  // A File opened now for writing had the kernel check read and write
  // permission (it maps the file); one this process already writes with
  // did not, and the caller's may have changed since (a chmod, another
  // user's ids): the kernel decides, as its open would have.
  if (writes && !opened_now && !new_mode) {
    s = KernelMayWrite(fd);
    if (!s.ok()) return fail(s);
  }
  s = ProtectHostDescriptor(fd, acc, first_of_file, host_read_only);
  if (!s.ok()) return fail(s);
  auto* of = new OpenFile();
  of->fd = fd;
  of->d = std::make_shared<Description>();
  of->d->flags = acc | (flags & (O_APPEND | O_PATH));
  of->d->file = std::move(file);
  of->d->dev = st.st_dev;
  of->d->ino = st.st_ino;
  if (flags & O_TRUNC) {
    s = ClearPrivileges(of);
    if (s.ok()) s = of->d->file->Truncate(0);
    if (!s.ok()) {
      delete of;
      return fail(s);
    }
  }
  std::atomic<OpenFile*>* slot = FdSlot(fd, true);
  if (!slot) {
    delete of;
    return fail(Status::Error(EMFILE, "descriptor number too large for upfs"));
  }
  slot->store(of, std::memory_order_release);
  return fd;
}

// Opens path for OpenImpl; *created tells whether this call created it.
// A file is created with owner read and write added to `mode` (its mode
// once it is a upfs file, see OpenOnHostFd): a creator may write the file
// whatever mode it asked for, and upfs must map it to do so.
int OpenOrCreateHost(const char* path, int kflags, mode_t mode, bool* created) {
  *created = false;
  if (!(kflags & O_CREAT)) return open(path, kflags);
  const mode_t create_mode = mode | S_IRUSR | S_IWUSR;
  if (kflags & O_EXCL) {
    int fd = open(path, kflags, create_mode);
    *created = fd >= 0;
    return fd;
  }
  // Creating first: one system call where it is what the caller wants.
  for (int tries = 0;; ++tries) {
    int fd = open(path, kflags | O_EXCL, create_mode);
    if (fd >= 0) {
      *created = true;
      return fd;
    }
    if (errno != EEXIST) return fd;
    fd = open(path, kflags & ~O_CREAT);
    if (fd >= 0 || errno != ENOENT || tries == 8) return fd;  // else removed meanwhile
  }
}

int OpenImpl(const char* path, int flags, mode_t mode, format::Consistency consistency) {
  if (!path) return FailErrno(EFAULT, "null path");
  if (PoolPath p; InPool(AT_FDCWD, path, &p))
    return FollowEscape({&p}, [&] { return PoolOpen(p, flags, mode, consistency); },
                        [&](const std::string& to, int) { return OpenImpl(to.c_str(), flags, mode, consistency); });
  // The descriptor names the file for fstat and refuses the rest
  // (LookupForUse).
  if (flags & O_PATH) flags &= kOPathFlags;
  if (CheckOpenFlags(flags) != 0) return -1;
  // O_TRUNC must not reach the kernel: it would drop the upfs metadata.
  // O_DIRECT is meaningless for a mapped file; durability is already given.
  // The program's descriptor is opened read-only (host_descriptor.h): upfs
  // writes through its own mapping.
  int kflags = (flags & ~(O_TRUNC | O_DIRECT | O_APPEND | O_ACCMODE)) | O_RDONLY;
  bool created;
  int fd = OpenOrCreateHost(path, kflags, mode & 07777, &created);
  if (fd < 0) {
    t_last_error = std::string("open ") + path + ": " + strerror(errno);
    return -1;
  }
  if (!created) return OpenOnHostFd(fd, path, flags, consistency, true, true);
  // The mode the kernel would have given: what it gave, less the owner
  // bits added for creation that `mode` lacks (umask and default ACLs
  // already applied).
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return FailErrno(errno, "fstat of a new file failed");
  }
  const mode_t new_mode = (st.st_mode & 07777) & ~((S_IRUSR | S_IWUSR) & ~mode);
  int r = OpenOnHostFd(fd, path, flags, consistency, true, true, &new_mode);
  if (r < 0) {
    int err = errno;
    unlinkat(AT_FDCWD, path, 0);
    errno = err;
  }
  return r;
}

// Here, not in api_fork.cc: whoever links the C API gets the handlers.
// Registry, then mounts: the child handler takes the mount table's lock
// again (re-attaching) after the registry's was made anew, which a lock
// checker may still count as held. The leaf locks (api_fork.cc) are taken
// last and let go first.
void PrepareFork() {
  LockRegistryForFork();
  LockMountsForFork();
  LockLeafLocksForFork();
}
void ParentAfterFork() {
  UnlockLeafLocksAfterFork();
  UnlockMountsInParent();
  UnlockRegistryInParent();
}
struct AtForkRegistration {
  AtForkRegistration() { pthread_atfork(PrepareFork, ParentAfterFork, ReopenAfterFork); }
} g_atfork_registration;

}  // namespace

Status TruncateOpenFile(OpenFile* of, uint64_t length) {
  UPFS_RETURN_IF_ERROR(EnsureEngine(of));
  UPFS_RETURN_IF_ERROR(ClearPrivileges(of));
  return of->d->file->Truncate(length);
}

}  // namespace upfs

using namespace upfs;

extern "C" {

int upfs_open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return OpenImpl(path, flags, mode, format::Consistency(g_default_consistency.load()));
}

// Callers may pass any int as the enum (C does not check): read it as an
// int before trusting it.
static bool ValidConsistency(enum upfs_consistency c, int* out) {
  int v;
  std::memcpy(&v, &c, sizeof(v));
  *out = v;
  return v == UPFS_STRICT || v == UPFS_SYNC;
}

int upfs_open_mode(const char* path, int flags, mode_t mode, enum upfs_consistency c) {
  int v;
  if (!ValidConsistency(c, &v)) return FailErrno(EINVAL, "bad consistency mode");
  return OpenImpl(path, flags, mode, format::Consistency(v));
}

int upfs_set_default_consistency(enum upfs_consistency c) {
  int v;
  if (!ValidConsistency(c, &v)) return FailErrno(EINVAL, "bad consistency mode");
  g_default_consistency.store(v);
  return 0;
}

int upfs_close(int fd) {
  std::atomic<OpenFile*>* slot = FdSlot(fd, false);
  // seq_cst: ordered before the retirement's look at the running calls.
  OpenFile* of = slot ? slot->exchange(nullptr, std::memory_order_seq_cst) : nullptr;
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (IsPoolDescriptor(of)) return PoolClose(fd, of);
  // The descriptor number is reused by the kernel as soon as it is closed;
  // the OpenFile (and with the last one, the engine File) goes when no
  // call can still be using it.
  int host = of->fd;
  RetireDescriptor(fd, [of] { delete of; });
  close(host);
  return 0;
}

ssize_t upfs_pread(int fd, void* buf, size_t count, off_t offset) {
  if (offset < 0) return FailErrno(EINVAL, "negative offset");  // before the descriptor, as Linux
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  if (!CanRead(of)) return FailErrno(EBADF, "descriptor not open for reading");
  if (RangeOverflows(count, uint64_t(offset))) return FailErrno(EINVAL, "offset + count overflows");
  size_t done = 0;
  Status st = of->d->file->Read(buf, count, uint64_t(offset), &done);
  if (!st.ok()) return Fail(st);
  return ssize_t(done);
}

ssize_t upfs_pwrite(int fd, const void* buf, size_t count, off_t offset) {
  if (offset < 0) return FailErrno(EINVAL, "negative offset");  // before the descriptor, as Linux
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  // The access mode first: a directory's descriptor writes nothing (EBADF
  // before EISDIR, as the kernel's).
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  // The offset given, even under O_APPEND (Linux checks it before it
  // moves the write to the end).
  if (RangeOverflows(count, uint64_t(offset))) return FailErrno(EINVAL, "offset + count overflows");
  if (Status p = ClearPrivileges(of); !p.ok()) return Fail(p);
  uint64_t at = 0;
  // Linux appends pwrite data on O_APPEND descriptors too.
  Status st = of->d->file->Write(buf, count, uint64_t(offset), of->d->flags & O_APPEND, &at);
  if (!st.ok()) return Fail(st);
  return ssize_t(count);
}

ssize_t upfs_read(int fd, void* buf, size_t count) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  if (!CanRead(of)) return FailErrno(EBADF, "descriptor not open for reading");
  std::lock_guard<std::mutex> pl(of->d->pos_mu);
  if (RangeOverflows(count, of->d->pos)) return FailErrno(EINVAL, "position + count overflows");
  size_t done = 0;
  Status st = of->d->file->Read(buf, count, of->d->pos, &done);
  if (!st.ok()) return Fail(st);
  of->d->pos += done;
  return ssize_t(done);
}

ssize_t upfs_write(int fd, const void* buf, size_t count) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");  // as pwrite
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  std::lock_guard<std::mutex> pl(of->d->pos_mu);
  if (RangeOverflows(count, of->d->pos)) return FailErrno(EINVAL, "position + count overflows");
  if (Status p = ClearPrivileges(of); !p.ok()) return Fail(p);
  uint64_t at = 0;
  Status st = of->d->file->Write(buf, count, of->d->pos, of->d->flags & O_APPEND, &at);
  if (!st.ok()) return Fail(st);
  of->d->pos = at + count;
  return ssize_t(count);
}

off_t upfs_lseek(int fd, off_t offset, int whence) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (IsPoolDirectory(of)) return PoolDirSeek(of, offset, whence);
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  std::lock_guard<std::mutex> pl(of->d->pos_mu);
  int64_t base = 0;
  switch (whence) {
    case SEEK_SET:
      base = 0;
      break;
    case SEEK_CUR:
      base = int64_t(of->d->pos);
      break;
    case SEEK_END: {
      uint64_t size;
      Status st = of->d->file->Size(&size);
      if (!st.ok()) return Fail(st);
      base = int64_t(size);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      if (offset < 0) return FailErrno(ENXIO, "negative offset");
      uint64_t r;
      Status st = of->d->file->SeekDataHole(uint64_t(offset), whence == SEEK_DATA, &r);
      if (!st.ok()) return Fail(st);
      of->d->pos = r;
      return off_t(r);
    }
    default:
      return FailErrno(EINVAL, "bad whence");
  }
  int64_t np;
  if (__builtin_add_overflow(base, int64_t(offset), &np) || np < 0)
    return FailErrno(EINVAL, "resulting offset is negative or overflows");
  of->d->pos = uint64_t(np);
  return off_t(np);
}

int upfs_ftruncate(int fd, off_t length) {
  // In the kernel's order: the length, the descriptor, its access mode (a
  // directory's is never writable: EINVAL too).
  if (length < 0) return FailErrno(EINVAL, "negative length");
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EINVAL, "descriptor not open for writing");
  Status st = TruncateOpenFile(of, uint64_t(length));
  return st.ok() ? 0 : Fail(st);
}

int upfs_fallocate(int fd, int mode, off_t offset, off_t len) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  // In the kernel's order (vfs_fallocate): the range, the access mode, the
  // kind of file.
  if (offset < 0 || len <= 0) return FailErrno(EINVAL, "bad offset or length");
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  if (Status p = ClearPrivileges(of); !p.ok()) return Fail(p);
  Status st = of->d->file->Fallocate(mode, uint64_t(offset), uint64_t(len));
  return st.ok() ? 0 : Fail(st);
}

int upfs_fsync(int fd) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (IsPoolDescriptor(of) && !of->d->engine_ready.load(std::memory_order_acquire))
    return PoolSync(of);  // a directory, or a file never written through it
  Status st = of->d->file->Sync();
  return st.ok() ? 0 : Fail(st);
}

int upfs_fdatasync(int fd) { return upfs_fsync(fd); }

int upfs_settle(int fd) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (Status e = EnsureEngine(of); !e.ok()) return Fail(e);
  of->d->file->Settle();
  return 0;
}

int upfs_fstat(int fd, struct stat* out) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (IsPoolDescriptor(of)) return PoolFstat(of, out);
  if (fstat(of->fd, out) != 0) return FailErrno(errno, "fstat of host file failed");
  FileStat fs;
  Status st = of->d->file->Stat(&fs);
  if (!st.ok()) return Fail(st);
  SetUpfsAttributes(fs, out);
  return 0;
}

int upfs_stat_if_open(const struct stat* host, struct stat* out) {
  if (!host) return FailErrno(EFAULT, "null stat");
  std::shared_ptr<File> f = FindFile(*host);
  if (!f) return 0;
  if (!out) return 1;
  OpGuard g(DescriptorUse::None());
  FileStat fs;
  if (!f->Stat(&fs).ok()) return 0;
  *out = *host;
  SetUpfsAttributes(fs, out);
  return 1;
}

int upfs_stat_host_fd(int host_fd, struct stat* out) {
  if (!out) return FailErrno(EFAULT, "null stat");
  struct stat host;
  if (fstat(host_fd, &host) != 0) return FailErrno(errno, "fstat of host file failed");
  if (upfs_stat_if_open(&host, out) == 1) return 0;
  if (!S_ISREG(host.st_mode)) return FailErrno(EMEDIUMTYPE, "not a upfs file");
  Container& c = HostFileContainer();
  const std::string name = "/proc/self/fd/" + std::to_string(host_fd);
  if (!c.Holds(host_fd)) {
    if (c.Marked(host)) return Fail(c.Damaged(name));
    return FailErrno(EMEDIUMTYPE, "not a upfs file");
  }
  FileStat fs;
  Status st;
  // A GC in another process compacting the log under the walk is rare and
  // brief: a few tries, then a real open, which pins the log.
  for (int i = 0; i < 3; ++i) {
    st = c.StatClosed(host_fd, name, &fs);
    if (st.err() != EAGAIN) break;
  }
  if (st.err() == EAGAIN) {
    std::shared_ptr<File> f;
    st = AcquireFile(host, false, [&](std::unique_ptr<File>* nf) {
      return c.Open(host_fd, name, Container::OpenOptions{false}, nf);
    }, &f);
    if (st.ok()) {
      OpGuard g(DescriptorUse::None());
      st = f->Stat(&fs);
    }
  }
  if (!st.ok()) return Fail(st);
  *out = host;
  SetUpfsAttributes(fs, out);
  return 0;
}

int upfs_open_host_fd(int host_fd, int flags, enum upfs_consistency c) {
  int v;
  if (!ValidConsistency(c, &v)) return FailErrno(EINVAL, "bad consistency mode");
  if (CheckOpenFlags(flags) != 0) return -1;
  std::string path = "/proc/self/fd/" + std::to_string(host_fd);
  return OpenOnHostFd(host_fd, path.c_str(), flags, format::Consistency(v), false, false);
}

const char* upfs_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
