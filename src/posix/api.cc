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
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "container/perfile.h"
#include "format/header.h"
#include "engine/file.h"
#include "engine/shared_state.h"
#include "posix/op_guard.h"

namespace upfs {
namespace {

using format::LooksLikeUpfs;
using format::ReadFileId;

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

std::atomic<int> g_default_consistency{int(format::Consistency::kStrict)};

// One engine File per (device, inode) in this process.
struct FileKey {
  dev_t dev;
  ino_t ino;
  bool operator<(const FileKey& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};
std::mutex g_files_mu;
std::map<FileKey, std::weak_ptr<File>> g_files;

struct OpenFile {
  int fd;
  int flags;  // O_ACCMODE | O_APPEND
  std::shared_ptr<File> file;
  std::mutex pos_mu;  // serializes offset-dependent calls, like f_pos_lock
  uint64_t pos = 0;
};

// Descriptor table: two levels of atomic pointers, so lookups take no lock.
constexpr int kPageBits = 10;
constexpr int kPages = 1024;  // descriptors up to 2^20
struct FdPage {
  std::atomic<OpenFile*> e[1 << kPageBits];
};
std::atomic<FdPage*> g_fd_pages[kPages];
std::mutex g_fd_mu;

std::atomic<OpenFile*>* FdSlot(int fd, bool create) {
  if (fd < 0 || fd >= (kPages << kPageBits)) return nullptr;
  std::atomic<FdPage*>& pg = g_fd_pages[fd >> kPageBits];
  FdPage* p = pg.load(std::memory_order_acquire);
  if (!p) {
    if (!create) return nullptr;
    std::lock_guard<std::mutex> g(g_fd_mu);
    p = pg.load();
    if (!p) {
      p = new FdPage();
      pg.store(p, std::memory_order_release);
    }
  }
  return &p->e[fd & ((1 << kPageBits) - 1)];
}

// Looks up a descriptor inside an OpGuard (which keeps it alive).
OpenFile* Lookup(int fd) {
  std::atomic<OpenFile*>* s = FdSlot(fd, false);
  return s ? s->load(std::memory_order_acquire) : nullptr;
}

int OpenImpl(const char* path, int flags, mode_t mode, format::Consistency consistency) {
  if (!path) return FailErrno(EFAULT, "null path");
  int acc = flags & O_ACCMODE;
  if (acc == O_ACCMODE) return FailErrno(EINVAL, "bad access mode");
  if (flags & O_DIRECTORY) return FailErrno(EISDIR, "upfs files are regular files");
  // O_TRUNC must not reach the kernel: it would drop the upfs metadata.
  // O_DIRECT is meaningless for a mapped file; durability is already given.
  int kflags = flags & ~(O_TRUNC | O_DIRECT | O_APPEND);
  int fd = open(path, kflags, mode);
  if (fd < 0) {
    t_last_error = std::string("open ") + path + ": " + strerror(errno);
    return -1;
  }
  bool create = flags & O_CREAT;
  auto fail = [&](const Status& st) {
    close(fd);
    return Fail(st);
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(Status::FromErrno("fstat"));
  if ((flags & O_TRUNC) && create && st.st_size > 0 && !LooksLikeUpfs(fd)) {
    // Truncating a plain file yields an empty file, which becomes upfs.
    if (acc == O_RDONLY) return fail(Status::Error(EINVAL, "O_TRUNC with O_RDONLY"));
    if (ftruncate(fd, 0) != 0) return fail(Status::FromErrno("truncate"));
  }
  std::shared_ptr<File> file;
  {
    std::lock_guard<std::mutex> g(g_files_mu);
    FileKey key{st.st_dev, st.st_ino};
    auto it = g_files.find(key);
    if (it != g_files.end()) {
      file = it->second.lock();
      if (!file) g_files.erase(it);
    }
    // Drop entries of files closed since (amortized: when the map doubled).
    static size_t sweep_at = 64;
    if (g_files.size() >= sweep_at) {
      std::erase_if(g_files, [](const auto& kv) { return kv.second.expired(); });
      sweep_at = std::max<size_t>(64, 2 * g_files.size());
    }
    if (!file) {
      std::unique_ptr<File> f;
      Status s = OpenPerFile(fd, path, create, consistency, &f);
      if (!s.ok()) return fail(s);
      file = std::shared_ptr<File>(f.release());
      g_files[key] = file;
    }
  }
  if ((flags & O_TRUNC) && acc != O_RDONLY) {
    Status s = file->Truncate(0);
    if (!s.ok()) return fail(s);
  }
  auto* of = new OpenFile();
  of->fd = fd;
  of->flags = acc | (flags & O_APPEND);
  of->file = std::move(file);
  std::atomic<OpenFile*>* slot = FdSlot(fd, true);
  if (!slot) {
    delete of;
    return fail(Status::Error(EMFILE, "descriptor number too large for upfs"));
  }
  slot->store(of, std::memory_order_release);
  return fd;
}

// After fork the child must not use the parent's engine state: its
// per-thread free lists and reclamation slots belong to the parent, and
// using them from two processes would hand out the same blocks twice. The
// child re-opens every inherited upfs file and leaks the inherited objects
// (destroying them would return the parent's blocks to the shared bitmap).
void ReopenAfterFork() {
  std::map<const File*, std::shared_ptr<File>> fresh;
  for (int p = 0; p < kPages; ++p) {
    FdPage* pg = g_fd_pages[p].load(std::memory_order_relaxed);
    if (!pg) continue;
    for (int i = 0; i < (1 << kPageBits); ++i) {
      OpenFile* of = pg->e[i].load(std::memory_order_relaxed);
      if (!of) continue;
      const File* old = of->file.get();
      auto it = fresh.find(old);
      if (it == fresh.end()) {
        std::unique_ptr<File> f;
        std::string self = "/proc/self/fd/" + std::to_string(of->fd);
        Status st = OpenPerFile(of->fd, self, false, of->file->consistency(), &f);
        std::shared_ptr<File> nf(f.release());
        it = fresh.emplace(old, nf).first;
      }
      of->file->shared()->DetachAfterFork();
      new std::shared_ptr<File>(of->file);  // intentionally leaked, see above
      of->file = it->second;
      if (!of->file) {
        // Could not re-open (e.g. the file was damaged): the descriptor
        // stays valid for close but fails every call with EIO.
        pg->e[i].store(nullptr, std::memory_order_relaxed);
      }
    }
  }
  // The parent's registry entries point at leaked objects.
  new std::map<FileKey, std::weak_ptr<File>>(std::move(g_files));
  g_files.clear();
  for (auto& [old, nf] : fresh) {
    if (!nf) continue;
    struct stat st;
    if (fstat(nf->medium()->fd(), &st) == 0) g_files[FileKey{st.st_dev, st.st_ino}] = nf;
  }
}

struct AtForkRegistration {
  AtForkRegistration() {
    pthread_atfork([] { g_files_mu.lock(); }, [] { g_files_mu.unlock(); },
                   [] {
                     new (&g_files_mu) std::mutex();
                     ReopenAfterFork();
                   });
  }
} g_atfork_registration;

bool CanRead(const OpenFile* of) { return (of->flags & O_ACCMODE) != O_WRONLY; }
bool CanWrite(const OpenFile* of) { return (of->flags & O_ACCMODE) != O_RDONLY; }

}  // namespace
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
  OpenFile* of = slot ? slot->exchange(nullptr, std::memory_order_acq_rel) : nullptr;
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  // The descriptor number is reused by the kernel as soon as it is closed;
  // the OpenFile (and with the last one, the engine File) goes when no
  // call can still be using it.
  int host = of->fd;
  RetireAfterOps([of] { delete of; });
  close(host);
  return 0;
}

ssize_t upfs_pread(int fd, void* buf, size_t count, off_t offset) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanRead(of)) return FailErrno(EBADF, "descriptor not open for reading");
  if (offset < 0) return FailErrno(EINVAL, "negative offset");
  size_t done = 0;
  Status st = of->file->Read(buf, count, uint64_t(offset), &done);
  if (!st.ok()) return Fail(st);
  return ssize_t(done);
}

ssize_t upfs_pwrite(int fd, const void* buf, size_t count, off_t offset) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");
  if (offset < 0) return FailErrno(EINVAL, "negative offset");
  uint64_t at = 0;
  // Linux appends pwrite data on O_APPEND descriptors too.
  Status st = of->file->Write(buf, count, uint64_t(offset), of->flags & O_APPEND, &at);
  if (!st.ok()) return Fail(st);
  return ssize_t(count);
}

ssize_t upfs_read(int fd, void* buf, size_t count) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanRead(of)) return FailErrno(EBADF, "descriptor not open for reading");
  std::lock_guard<std::mutex> pl(of->pos_mu);
  size_t done = 0;
  Status st = of->file->Read(buf, count, of->pos, &done);
  if (!st.ok()) return Fail(st);
  of->pos += done;
  return ssize_t(done);
}

ssize_t upfs_write(int fd, const void* buf, size_t count) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");
  std::lock_guard<std::mutex> pl(of->pos_mu);
  uint64_t at = 0;
  Status st = of->file->Write(buf, count, of->pos, of->flags & O_APPEND, &at);
  if (!st.ok()) return Fail(st);
  of->pos = at + count;
  return ssize_t(count);
}

off_t upfs_lseek(int fd, off_t offset, int whence) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  std::lock_guard<std::mutex> pl(of->pos_mu);
  int64_t base = 0;
  switch (whence) {
    case SEEK_SET:
      base = 0;
      break;
    case SEEK_CUR:
      base = int64_t(of->pos);
      break;
    case SEEK_END: {
      uint64_t size;
      Status st = of->file->Size(&size);
      if (!st.ok()) return Fail(st);
      base = int64_t(size);
      break;
    }
    case SEEK_DATA:
    case SEEK_HOLE: {
      if (offset < 0) return FailErrno(ENXIO, "negative offset");
      uint64_t r;
      Status st = of->file->SeekDataHole(uint64_t(offset), whence == SEEK_DATA, &r);
      if (!st.ok()) return Fail(st);
      of->pos = r;
      return off_t(r);
    }
    default:
      return FailErrno(EINVAL, "bad whence");
  }
  int64_t np;
  if (__builtin_add_overflow(base, int64_t(offset), &np) || np < 0)
    return FailErrno(EINVAL, "resulting offset is negative or overflows");
  of->pos = uint64_t(np);
  return off_t(np);
}

int upfs_ftruncate(int fd, off_t length) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EINVAL, "descriptor not open for writing");
  if (length < 0) return FailErrno(EINVAL, "negative length");
  Status st = of->file->Truncate(uint64_t(length));
  return st.ok() ? 0 : Fail(st);
}

int upfs_fallocate(int fd, int mode, off_t offset, off_t len) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (!CanWrite(of)) return FailErrno(EBADF, "descriptor not open for writing");
  if (offset < 0 || len <= 0) return FailErrno(EINVAL, "bad offset or length");
  Status st = of->file->Fallocate(mode, uint64_t(offset), uint64_t(len));
  return st.ok() ? 0 : Fail(st);
}

int upfs_fsync(int fd) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  Status st = of->file->Sync();
  return st.ok() ? 0 : Fail(st);
}

int upfs_fdatasync(int fd) { return upfs_fsync(fd); }

int upfs_settle(int fd) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  of->file->Settle();
  return 0;
}

int upfs_fstat(int fd, struct stat* out) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  if (fstat(of->fd, out) != 0) return FailErrno(errno, "fstat of host file failed");
  FileStat fs;
  Status st = of->file->Stat(&fs);
  if (!st.ok()) return Fail(st);
  out->st_size = off_t(fs.size);
  out->st_blocks = blkcnt_t(fs.blocks * (format::kBlockSize / 512));
  out->st_blksize = format::kBlockSize;
  struct timespec t;
  t.tv_sec = time_t(fs.mtime_ns / 1000000000ull);
  t.tv_nsec = long(fs.mtime_ns % 1000000000ull);
  out->st_mtim = t;
  out->st_ctim = t;
  return 0;
}

int upfs_is_upfs_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  int r = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && LooksLikeUpfs(fd) ? 1 : 0;
  close(fd);
  return r;
}

int upfs_unlink(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  SharedState::Identity id{};
  struct stat st;
  bool last_link = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
                   ReadFileId(fd, &id.file_id).ok();
  if (fd >= 0) close(fd);
  if (unlink(path) != 0) return FailErrno(errno, "unlink failed");
  if (last_link) {
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    SharedState::Remove(id);
  }
  return 0;
}

int upfs_host_fd(int fd) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  return of->fd;
}

const char* upfs_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"

// Narrow hooks for src/posix/api_fd.cc (descriptor duplication and F_SETFL
// for the LD_PRELOAD layer); they need the descriptor table above.
namespace upfs {

int ApiAdoptDuplicate(int oldfd, int newfd) {
  OpGuard g;
  OpenFile* old = Lookup(oldfd);
  if (!old) return FailErrno(EBADF, "not a upfs descriptor");
  std::atomic<OpenFile*>* slot = FdSlot(newfd, true);
  if (!slot) return FailErrno(EMFILE, "descriptor number too large for upfs");
  auto* of = new OpenFile();
  of->fd = newfd;
  of->flags = old->flags;
  of->file = old->file;
  {
    std::lock_guard<std::mutex> pl(old->pos_mu);
    of->pos = old->pos;
  }
  OpenFile* prev = slot->exchange(of, std::memory_order_acq_rel);
  if (prev) RetireAfterOps([prev] { delete prev; });
  return newfd;
}

int ApiSetAppend(int fd, bool on) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  std::lock_guard<std::mutex> pl(of->pos_mu);
  of->flags = (of->flags & ~O_APPEND) | (on ? O_APPEND : 0);
  return 0;
}

int ApiGetFlags(int fd) {
  OpGuard g;
  OpenFile* of = Lookup(fd);
  if (!of) return FailErrno(EBADF, "not a upfs descriptor");
  return of->flags;
}

}  // namespace upfs
