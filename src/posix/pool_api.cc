// The C API on mounted pools: descriptors of pool files and directories,
// and every path call whose path lies in a pool (docs/design.md, "Pools").
// Each call resolves its path over the pool's DRAM index and changes the
// namespace with one committed record, without a system call.
#include "posix/pool_api.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdarg>
#include <cstring>
#include <mutex>

#include "posix/api_internal.h"
#include "posix/descriptor_table.h"
#include "posix/op_guard.h"
#include "posix/pool_fd_numbers.h"
#include "posix/pool_escape.h"
#include "posix/pool_node.h"
#include "upfs/upfs.h"
#include "util/assert.h"

namespace upfs {

using format::pool::FileType;

namespace {

PoolNamespace Ns(const PoolPath& p) { return PoolNamespace(p.mount->pool.get(), &p.mount->effective); }

// A resolution of p (the call's path number `which`) ended with `st`:
// where the path goes on if it left the pool is noted (pool_escape.h).
Status Noting(Status st, const PoolPath& p, const std::string& escape, int which) {
  if (st.err() == EXDEV && !escape.empty()) NoteEscape(*p.mount, escape, which);
  return st;
}

// With `held`: and a hold on what p names when the lookup can take it
// (PoolNamespace::ResolveHeld).
Status ResolveIn(PoolNamespace& ns, const PoolPath& p, bool follow, Resolved* r, int which = 0,
                 uint32_t* gen = nullptr, bool* held = nullptr) {
  std::string escape;
  return Noting(ns.ResolveHeld(p.inner, follow, r, gen, held, &escape, p.start), p, escape, which);
}

// A path without its trailing slashes (but "/" stays "/").
std::string_view NameWithoutSlashes(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  return path;
}

// Resolves the path of a call that acts on its last name itself (unlink,
// rmdir, rename, the new name of a link, symbolic link or directory, a
// create): that name is never followed, even with trailing slashes, which
// the kernel's walk to the parent (LOOKUP_PARENT) reads as "must be a
// directory", each call in its own way; *slashed says whether p had any.
Status ResolveName(PoolNamespace& ns, const PoolPath& p, Resolved* r, bool* slashed, int which = 0) {
  const std::string_view path = NameWithoutSlashes(p.inner);
  *slashed = path.size() != p.inner.size();
  std::string escape;
  Status st = ns.ResolveHeld(path, false, r, nullptr, nullptr, &escape, p.start);
  if (*slashed && !escape.empty()) escape += '/';  // where the path goes on, as the caller gave it
  return Noting(st, p, escape, which);
}

// Resolves, and again while the namespace changes under the call (ESTALE).
template <typename Fn>
int WithRetry(Fn fn) {
  for (int i = 0;; ++i) {
    Status st = fn();
    if (st.err() == ESTALE && i < 100) continue;
    return st.ok() ? 0 : Fail(st);
  }
}

// fn(ns, resolved, slashed) at p's last name (ResolveName), again while
// the namespace changes under it.
template <typename Fn>
int AtName(PoolNamespace& ns, const PoolPath& p, Fn fn) {
  return WithRetry([&]() -> Status {
    Resolved r;
    bool slashed;
    UPFS_RETURN_IF_ERROR(ResolveName(ns, p, &r, &slashed));
    return fn(ns, r, slashed);
  });
}

// A change at p's last name: AtName with the caller's credentials.
template <typename Fn>
int ChangeAt(const PoolPath& p, Fn fn) {
  OpGuard g(DescriptorUse::None());
  PoolNamespace ns = Ns(p);
  ns.KeepParents();  // a name removed where names were made, most often
  return AtName(ns, p, fn);
}

// A call that makes a new name at p (mkdir, symlink): fn(ns, resolved,
// slashed) at the directory this thread's parent cache has for p (no
// walk, no shared lock; never for a path with a trailing slash), else as
// ChangeAt, its walk keeping the directory.
template <typename Fn>
int NewNameAt(const PoolPath& p, Fn fn) {
  OpGuard g(DescriptorUse::None());
  PoolNamespace ns = Ns(p);
  if (p.start == 0) {
    Resolved at;
    if (ns.CachedParent(p.inner, &at)) {
      Status st = fn(ns, at, false);
      if (ns.CacheAnswered(p.inner, st)) return st.ok() ? 0 : Fail(st);
    }
    ns.KeepParents();
  }
  return AtName(ns, p, fn);
}

}  // namespace

PoolNode::~PoolNode() {
  PoolNamespace(pool, who).DropHold(ino, gen);
  pool->AddUser(-1);
}

bool IsPoolDescriptor(const OpenFile* of) { return of->d->pool != nullptr; }
bool IsPoolDirectory(const OpenFile* of) {
  return of->d->pool && of->d->pool->type == FileType::kDirectory;
}

Status EnsureEngine(OpenFile* of) {
  Description* d = of->d.get();
  if (d->engine_ready.load(std::memory_order_acquire)) return Status::OK();
  PoolNode* n = d->pool;
  if (n->type == FileType::kDirectory) return Status::Error(EISDIR, "is a directory");
  std::lock_guard<std::mutex> g(d->engine_mu);
  if (!d->file) UPFS_RETURN_IF_ERROR(n->pool->FileOf(n->ino, &d->file, /*for_use=*/true));
  d->engine_ready.store(true, std::memory_order_release);
  return Status::OK();
}

Status ClearPoolPrivileges(OpenFile* of) {
  PoolNode* n = of->d->pool;
  format::pool::Inode* in;
  UPFS_RETURN_IF_ERROR(n->pool->InodeAt(n->ino, &in));
  const uint64_t mode = in->mode.load(std::memory_order_relaxed);
  if (!(mode & (S_ISUID | S_ISGID))) return Status::OK();  // every write asks: one load
  return PoolNamespace(n->pool, n->who).DropSetIdForWrite(n->ino);
}

int PoolClose(int fd, OpenFile* of) {
  RetireDescriptor(fd, [of, fd] {
    delete of;
    GivePoolFdNumber(fd);
  });
  return 0;
}

int PoolFstat(OpenFile* of, struct stat* out) {
  PoolNode* n = of->d->pool;
  Status st = PoolNamespace(n->pool, n->who).Stat(n->ino, out, /*held=*/true);
  return st.ok() ? 0 : Fail(st);
}

int PoolSync(OpenFile* of) {
  // Namespace changes and attributes are durable when their call returns
  // on PM; on a page-cache medium this is where they reach the disk.
  Status st = of->d->pool->pool->medium()->SyncAll();
  return st.ok() ? 0 : Fail(st);
}

namespace {

// One use of a pool's descriptors counted (Pool::AddUser) for an open
// from before it changes anything, so that an unmount either sees it or
// the open sees the mount leaving; the descriptor's node takes it over.
class CountedUse {
 public:
  explicit CountedUse(Pool* pool) : pool_(pool) { pool_->AddUser(1); }
  ~CountedUse() {
    if (pool_) pool_->AddUser(-1);
  }
  CountedUse(const CountedUse&) = delete;
  CountedUse& operator=(const CountedUse&) = delete;
  void HandOver() { pool_ = nullptr; }

 private:
  Pool* pool_;
};

// Makes a descriptor for inode r.ino (the caller's hold taken: gen; the
// use counted: handed over to the descriptor).
int NewDescriptor(const PoolPath& p, const Resolved& r, uint32_t gen, int flags, CountedUse* use) {
  // The description and its node in one allocation, the node destroyed
  // last: the description's engine File goes before the node's hold.
  struct PoolDescription {
    PoolNode node;
    Description d;
  };
  auto both = std::make_shared<PoolDescription>();
  PoolNode* node = &both->node;
  node->pool = p.mount->pool.get();
  node->who = &p.mount->effective;
  node->ino = r.ino;
  node->gen = gen;
  node->type = r.type;
  use->HandOver();  // ~PoolNode gives it back
  const int fd = TakePoolFdNumber();
  if (fd < 0) return FailErrno(EMFILE, "too many pool descriptors");  // freed with both: the hold dropped
  auto* of = new OpenFile();
  of->fd = fd;
  Description* d = &both->d;
  of->d = std::shared_ptr<Description>(std::move(both), d);
  of->d->flags = flags & (O_ACCMODE | O_APPEND | O_PATH);
  of->d->engine_ready.store(false, std::memory_order_relaxed);
  of->d->pool = node;
  std::atomic<OpenFile*>* slot = FdSlot(fd, true);
  slot->store(of, std::memory_order_release);
  return fd;
}

Status OpenExisting(PoolNamespace& ns, const Resolved& r, int flags) {
  const int acc = flags & O_ACCMODE;
  if (r.type == FileType::kSymlink) return Status::Error(ELOOP, "a symbolic link (O_NOFOLLOW)");
  if (r.type == FileType::kDirectory) {
    if (acc != O_RDONLY || (flags & (O_TRUNC | O_CREAT))) return Status::Error(EISDIR, "is a directory");
  } else if (flags & O_DIRECTORY) {
    return Status::Error(ENOTDIR, "not a directory");
  }
  // The kernel's order: the sticky directory's protection before the
  // permission check.
  if ((flags & O_CREAT) && r.type == FileType::kRegular) UPFS_RETURN_IF_ERROR(ns.MayCreateOver(r.dir, r.ino));
  return ns.MayOpen(r.ino, acc, (flags & O_TRUNC) != 0, (flags & O_NOATIME) != 0);
}

// An open with O_PATH: a descriptor that only names the file (LookupForUse
// refuses it to every call but fstat, close, dup and the *at calls). As
// the kernel's, it checks no permission on the file itself (search on the
// way only) and opens a symbolic link itself under O_NOFOLLOW.
int PathOpen(PoolNamespace& ns, const PoolPath& p, int flags, CountedUse* use) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    Resolved r;
    uint32_t gen = 0;
    bool held = false;
    if (Status st = ResolveIn(ns, p, !(flags & O_NOFOLLOW), &r, 0, &gen, &held); !st.ok()) return Fail(st);
    if (r.ino == 0) return FailErrno(ENOENT, "no such file or directory");
    if (!held) {
      Status st = ns.TakeHold(r.ino, &gen, &r);
      if (st.err() == ENOENT) continue;  // removed meanwhile: resolve again
      if (!st.ok()) return Fail(st);
    }
    if ((flags & O_DIRECTORY) && r.type != FileType::kDirectory) {
      ns.DropHold(r.ino, gen);
      return FailErrno(ENOTDIR, "not a directory");
    }
    return NewDescriptor(p, r, gen, O_PATH, use);
  }
  return FailErrno(EAGAIN, "the name kept changing under open");
}

// An open with O_TRUNC of existing regular file `ino`, now descriptor
// `fd`: truncated with O_RDONLY too, as Linux does (OpenExisting asked for
// write permission). A file that has no log has nothing to cut (and is not
// given a log for it), but its times and set-ID bits change as a
// truncate's.
Status TruncateAtOpen(PoolNamespace& ns, Pool& pool, uint64_t ino, int fd) {
  format::pool::Inode* in;
  if (!pool.InodeAt(ino, &in).ok()) return Status::OK();  // as before: the open stands
  if (in->log_head.load() == 0) return ns.TruncateEmpty(ino);
  OpGuard used(DescriptorUse::Only(fd));  // as ftruncate's: another thread may close it
  OpenFile* of = Lookup(fd);
  return of ? TruncateOpenFile(of, 0) : Status::Error(EBADF, "descriptor closed during open");
}

}  // namespace

int PoolOpen(const PoolPath& p, int flags, mode_t mode, format::Consistency c) {
  OpGuard g(DescriptorUse::None());
  if (flags & O_PATH) flags &= kOPathFlags;
  if ((flags & O_ACCMODE) == O_ACCMODE) return FailErrno(EINVAL, "bad access mode");
  // Linux 6.4 on: a create cannot make a directory, and once did make a file.
  if ((flags & (O_CREAT | O_DIRECTORY)) == (O_CREAT | O_DIRECTORY))
    return FailErrno(EINVAL, "O_CREAT with O_DIRECTORY");
  // An unnamed file (one that a later linkat may name) is not built for
  // pools: said plainly, as a file system without it says it.
  if ((flags & O_TMPFILE) == O_TMPFILE) return FailErrno(EOPNOTSUPP, "O_TMPFILE in a pool");
  // Counted first, then the look at the mount (docs/design.md,
  // "Unmounting"). Gone: the open comes after the unmount, and the path
  // names what the kernel has there (an escape to the same path).
  CountedUse use(p.mount->pool.get());
  if (MountLeft(*p.mount)) {
    UPFS_ASSERT(p.start == 0);  // a pool directory descriptor would have kept the mount
    NoteEscape(*p.mount, p.mount->dir + std::string(p.inner), 0);
    return FailErrno(EXDEV, "the pool was unmounted");
  }
  PoolNamespace ns = Ns(p);
  if (flags & O_PATH) return PathOpen(ns, p, flags, &use);
  const bool creat = flags & O_CREAT, excl = creat && (flags & O_EXCL);
  if (creat) ns.ForCreate();  // a name followed by a slash: EISDIR
  // A new file in a directory this thread created in before: no walk to
  // it, no lookup under the index lock held shared (ParentCache). O_EXCL
  // only: without it an existing name is opened, which the walk does.
  if (excl && p.start == 0 && !(flags & O_DIRECTORY)) {
    Resolved r;
    if (ns.CachedParent(p.inner, &r)) {
      uint32_t gen = 0;
      bool created = false;
      Status st = ns.Create(r, mode, c, &r.ino, &created, &gen);
      if (ns.CacheAnswered(p.inner, st)) {
        if (!st.ok()) return Fail(st);
        r.type = FileType::kRegular;
        return NewDescriptor(p, r, gen, flags, &use);
      }
    }
    ns.KeepParents();
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    Resolved r;
    bool created = false, held = false;
    uint32_t gen = 0;
    const bool follow = !(flags & O_NOFOLLOW) && !excl;
    Status st = ResolveIn(ns, p, follow, &r, 0, excl ? nullptr : &gen, excl ? nullptr : &held);
    if (!st.ok()) return Fail(st);
    if (r.ino == 0) {
      if (!creat) return FailErrno(ENOENT, "no such file or directory");
      st = ns.Create(r, mode, c, &r.ino, &created, &gen);
      if (st.err() == EEXIST && !excl) continue;  // another creator won: open theirs
      if (!st.ok()) return Fail(st);
      r.type = FileType::kRegular;
    } else if (excl) {
      return FailErrno(EEXIST, "file exists");
    }
    if (!created) {
      if (!held) st = ns.TakeHold(r.ino, &gen, &r);
      if (st.err() == ENOENT) continue;  // removed meanwhile: resolve again
      if (!st.ok()) return Fail(st);
      // Type and permissions checked under the hold, on the file the name
      // leads to now: before it the inode could change hands (a file made
      // again on it, of another owner, mode or type).
      if (Status o = OpenExisting(ns, r, flags); !o.ok()) {
        ns.DropHold(r.ino, gen);
        return Fail(o);
      }
    }
    const int fd = NewDescriptor(p, r, gen, flags, &use);
    if (fd < 0) return -1;
    if ((flags & O_TRUNC) && !created && r.type == FileType::kRegular) {
      if (Status t = TruncateAtOpen(ns, *p.mount->pool, r.ino, fd); !t.ok()) {
        upfs_close(fd);
        return Fail(t);
      }
    }
    return fd;
  }
  return FailErrno(EAGAIN, "the name kept changing under open");
}

int PoolStat(const PoolPath& p, struct stat* st, bool follow) {
  OpGuard g(DescriptorUse::None());
  PoolNamespace ns = Ns(p);
  std::string escape;
  Status s = Noting(ns.StatPath(p.inner, follow, st, &escape, p.start), p, escape, 0);
  return s.ok() ? 0 : Fail(s);
}

int PoolUnlink(const PoolPath& p, bool dir) {
  if (dir) {
    // rmdir of "." and of ".." as the kernel answers them, once the walk
    // to the directory they are in succeeds (its errors come first).
    const std::string_view in = NameWithoutSlashes(p.inner);
    const bool dot = in == "." || in.ends_with("/."), dotdot = in == ".." || in.ends_with("/..");
    if (dot || dotdot) {
      OpGuard g(DescriptorUse::None());
      PoolNamespace ns = Ns(p);
      Resolved r;
      if (Status st = ResolveIn(ns, p, true, &r); !st.ok()) return Fail(st);
      return dot ? FailErrno(EINVAL, "cannot remove .") : FailErrno(ENOTEMPTY, "cannot remove ..");
    }
  }
  return ChangeAt(p, [&](PoolNamespace& ns, const Resolved& r, bool slashed) {
    // unlink of "name/": what the name is decides (a symbolic link is not
    // followed); rmdir's answer is Remove's.
    if (!dir && slashed && r.ino != 0)
      return Status::Error(r.type == FileType::kDirectory ? EISDIR : ENOTDIR, "trailing slash");
    return ns.Remove(r, dir);
  });
}

int PoolRename(const PoolPath& from, const PoolPath& to, unsigned flags) {
  OpGuard g(DescriptorUse::None());
  if (from.mount != to.mount) return FailErrno(EXDEV, "rename between pools");
  PoolNamespace ns = Ns(from);
  ns.KeepParents();  // a file written under a new name renamed over its target, most often
  return WithRetry([&]() -> Status {
    Resolved a, b;
    std::string escape_a, escape_b;
    // Both last names themselves, trailing slashes or not (ResolveName).
    const std::string_view pa = NameWithoutSlashes(from.inner), pb = NameWithoutSlashes(to.inner);
    const RenameSlashes slashes{pa.size() != from.inner.size(), pb.size() != to.inner.size()};
    Status resolved = ns.ResolveTwo(pa, from.start, &a, &escape_a, pb, to.start, &b, &escape_b);
    if (slashes.from && !escape_a.empty()) escape_a += '/';
    if (slashes.to && !escape_b.empty()) escape_b += '/';
    UPFS_RETURN_IF_ERROR(Noting(Noting(resolved, from, escape_a, 0), to, escape_b, 1));
    return ns.Rename(a, b, flags, slashes);
  });
}

namespace {
template <typename Fn>
int UnderHold(PoolNamespace& ns, const PoolPath& p, bool follow, Fn fn) {
  // Under a hold taken through the name: between the resolution and the
  // call the inode may have been freed and made again for another file,
  // which must not get this change, or give this answer
  // (PoolNamespace::TakeHold).
  for (int attempt = 0; attempt < 100; ++attempt) {
    Resolved r;
    uint32_t gen = 0;
    bool held = false;
    if (Status s = ResolveIn(ns, p, follow, &r, 0, &gen, &held); !s.ok()) return Fail(s);
    if (r.ino == 0) return FailErrno(ENOENT, "no such file or directory");
    Status s = held ? Status::OK() : ns.TakeHold(r.ino, &gen, &r);
    if (s.err() == ENOENT) continue;  // the name moved on: resolve again
    if (!s.ok()) return Fail(s);
    s = fn(ns, r);
    ns.DropHold(r.ino, gen);
    return s.ok() ? 0 : Fail(s);
  }
  return FailErrno(EAGAIN, "the name kept changing under the call");
}

// fn(ns, resolved) on the file `p` names, with the caller's effective
// credentials, under a hold: 0, or -1 and errno.
template <typename Fn>
int OnInode(const PoolPath& p, bool follow, Fn fn) {
  OpGuard g(DescriptorUse::None());
  PoolNamespace ns = Ns(p);
  return UnderHold(ns, p, follow, fn);
}

template <typename Fn>
int OnDescriptor(int fd, Fn fn) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = LookupForUse(fd);
  if (!of || !of->d->pool) return -2;
  PoolNode* n = of->d->pool;
  PoolNamespace ns(n->pool, n->who);
  Status s = fn(ns, n->ino);
  return s.ok() ? 0 : Fail(s);
}
}  // namespace

int PoolChmod(const PoolPath& p, mode_t mode, bool follow) {
  return OnInode(p, follow, [&](PoolNamespace& ns, const Resolved& r) {
    if (r.type == FileType::kSymlink) return Status::Error(EOPNOTSUPP, "chmod of a symbolic link");
    return ns.Chmod(r.ino, mode);
  });
}

int PoolChown(const PoolPath& p, uid_t uid, gid_t gid, bool follow) {
  return OnInode(p, follow, [&](PoolNamespace& ns, const Resolved& r) { return ns.Chown(r.ino, uid, gid); });
}

int PoolUtimens(const PoolPath& p, const struct timespec ts[2], bool follow) {
  return OnInode(p, follow, [&](PoolNamespace& ns, const Resolved& r) { return ns.Utimens(r.ino, ts, /*held=*/true); });
}

int PoolTruncate(const PoolPath& p, off_t length) {
  if (length < 0) return FailErrno(EINVAL, "negative length");
  const int fd = PoolOpen(p, O_WRONLY, 0, format::Consistency::kStrict);
  if (fd < 0) return -1;
  const int r = upfs_ftruncate(fd, length);
  const int e = errno;
  upfs_close(fd);
  errno = e;
  return r;
}

int PoolFstatFd(int fd, struct stat* st) {
  OpGuard g(DescriptorUse::Only(fd));
  OpenFile* of = Lookup(fd);
  if (!of || !of->d->pool) return -2;
  return PoolFstat(of, st);
}

int PoolFchmod(int fd, mode_t mode) {
  return OnDescriptor(fd, [&](PoolNamespace& ns, uint64_t ino) { return ns.Chmod(ino, mode); });
}
int PoolFchown(int fd, uid_t uid, gid_t gid) {
  return OnDescriptor(fd, [&](PoolNamespace& ns, uint64_t ino) { return ns.Chown(ino, uid, gid); });
}
int PoolFutimens(int fd, const struct timespec ts[2]) {
  return OnDescriptor(fd, [&](PoolNamespace& ns, uint64_t ino) { return ns.Utimens(ino, ts, /*held=*/true); });
}

}  // namespace upfs

using namespace upfs;

extern "C" {

int upfs_mkfs(const char* pool, uint64_t size_hint) {
  if (!pool) return FailErrno(EFAULT, "null path");
  Status st = Pool::Create(pool, size_hint);
  return st.ok() ? 0 : Fail(st);
}

int upfs_mount(const char* pool, const char* dir) {
  if (!pool || !dir) return FailErrno(EFAULT, "null path");
  Status st = MountPool(pool, dir);
  return st.ok() ? 0 : Fail(st);
}

int upfs_umount(const char* dir) {
  if (!dir) return FailErrno(EFAULT, "null path");
  Status st = UnmountPool(dir);
  return st.ok() ? 0 : Fail(st);
}

int upfs_openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = mode_t(va_arg(ap, unsigned));
    va_end(ap);
  }
  if (!path) return FailErrno(EFAULT, "null path");
  PoolPath p;
  if (InPool(dirfd, path, &p))
    return FollowEscape({&p}, [&] { return PoolOpen(p, flags, mode, format::Consistency::kStrict); },
                        [&](const std::string& to, int) { return upfs_open(to.c_str(), flags, mode); });
  std::string abs;
  if (!AbsolutePath(dirfd, path, &abs)) return FailErrno(errno ? errno : EBADF, "bad directory descriptor");
  return upfs_open(abs.c_str(), flags, mode);
}

int upfs_mkdirat(int dirfd, const char* path, mode_t mode) {
  if (!path) return FailErrno(EFAULT, "null path");
  PoolPath p;
  if (!InPool(dirfd, path, &p)) return mkdirat(dirfd, path, mode) == 0 ? 0 : FailErrno(errno, "mkdir failed");
  auto in_pool = [&] {
    return NewNameAt(p, [&](PoolNamespace& ns, const Resolved& r, bool) {
      return r.ino != 0 ? Status::Error(EEXIST, "file exists") : ns.Mkdir(r, mode);
    });
  };
  return FollowEscape({&p}, in_pool, [&](const std::string& to, int) { return upfs_mkdirat(AT_FDCWD, to.c_str(), mode); });
}

int upfs_mkdir(const char* path, mode_t mode) { return upfs_mkdirat(AT_FDCWD, path, mode); }

int upfs_rmdir(const char* path) { return upfs_unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }

int upfs_rename(const char* oldpath, const char* newpath) {
  return upfs_renameat2(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

int upfs_link(const char* oldpath, const char* newpath) {
  if (!oldpath || !newpath) return FailErrno(EFAULT, "null path");
  PoolPath a, b;
  const bool ia = InPool(AT_FDCWD, oldpath, &a), ib = InPool(AT_FDCWD, newpath, &b);
  if (!ia && !ib) return link(oldpath, newpath) == 0 ? 0 : FailErrno(errno, "link failed");
  if (ia != ib && (PathTooLong(oldpath) || PathTooLong(newpath))) return FailErrno(ENAMETOOLONG, "path too long");
  if (ia != ib || a.mount != b.mount) return FailErrno(EXDEV, "link across pools");
  auto in_pool = [&] {
    OpGuard g(DescriptorUse::None());
    PoolNamespace ns = Ns(a);
    return WithRetry([&]() -> Status {
      Resolved from, to;
      UPFS_RETURN_IF_ERROR(ResolveIn(ns, a, false, &from, 0));
      if (from.ino == 0) return Status::Error(ENOENT, "no such file or directory");
      bool slashed;
      UPFS_RETURN_IF_ERROR(ResolveName(ns, b, &to, &slashed, 1));
      // "name/" asks for a directory, which a hard link is not.
      if (slashed && to.ino == 0) return Status::Error(ENOENT, "trailing slash on a new link");
      return ns.Link(from, to);
    });
  };
  return FollowEscape({&a, &b}, in_pool, [&](const std::string& to, int which) {
    return which == 0 ? upfs_link(to.c_str(), newpath) : upfs_link(oldpath, to.c_str());
  });
}

int upfs_symlink(const char* target, const char* linkpath) {
  if (!target || !linkpath) return FailErrno(EFAULT, "null path");
  PoolPath p;
  if (!InPool(AT_FDCWD, linkpath, &p))
    return symlink(target, linkpath) == 0 ? 0 : FailErrno(errno, "symlink failed");
  auto in_pool = [&] {
    return NewNameAt(p, [&](PoolNamespace& ns, const Resolved& r, bool slashed) {
      // "name/" asks for a directory, which a symbolic link is not.
      if (slashed && r.ino == 0) return Status::Error(ENOENT, "trailing slash on a new symbolic link");
      return ns.Symlink(r, target);
    });
  };
  return FollowEscape({&p}, in_pool, [&](const std::string& to, int) { return upfs_symlink(target, to.c_str()); });
}

ssize_t upfs_readlink(const char* path, char* buf, size_t bufsiz) {
  // First, as the kernel's, which takes the size as an int.
  if (static_cast<int>(bufsiz) <= 0) return FailErrno(EINVAL, "buffer size must be positive");
  if (!path || !buf) return FailErrno(EFAULT, "null path");
  PoolPath p;
  if (!InPool(AT_FDCWD, path, &p)) {
    ssize_t n = readlink(path, buf, bufsiz);
    return n >= 0 ? n : FailErrno(errno, "readlink failed");
  }
  auto in_pool = [&]() -> ssize_t {
    std::string t;
    if (OnInode(p, false, [&](PoolNamespace& ns, const Resolved& r) { return ns.Readlink(r.ino, &t); }) != 0)
      return ssize_t(-1);
    const size_t n = std::min(bufsiz, t.size());
    std::memcpy(buf, t.data(), n);
    return ssize_t(n);
  };
  return FollowEscape({&p}, in_pool, [&](const std::string& to, int) { return upfs_readlink(to.c_str(), buf, bufsiz); });
}

int upfs_access(const char* path, int mode) {
  if (!path) return FailErrno(EFAULT, "null path");
  if (mode & ~(R_OK | W_OK | X_OK)) return FailErrno(EINVAL, "bad access mode");
  PoolPath p;
  if (!InPool(AT_FDCWD, path, &p)) return access(path, mode) == 0 ? 0 : FailErrno(errno, "access failed");
  auto in_pool = [&] {
    OpGuard g(DescriptorUse::None());
    PoolNamespace ns(p.mount->pool.get(), &p.mount->real);  // access(2) checks the real ids
    return UnderHold(ns, p, true, [&](PoolNamespace& n, const Resolved& r) { return n.Access(r.ino, mode); });
  };
  return FollowEscape({&p}, in_pool, [&](const std::string& to, int) { return upfs_access(to.c_str(), mode); });
}

int upfs_statvfs(const char* path, struct statvfs* buf) {
  if (!path || !buf) return FailErrno(EFAULT, "null path");
  PoolPath p;
  if (!InPool(AT_FDCWD, path, &p)) return statvfs(path, buf) == 0 ? 0 : FailErrno(errno, "statvfs failed");
  return FollowEscape({&p}, [&] { return PoolStatvfs(p, buf); },
                      [&](const std::string& to, int) { return upfs_statvfs(to.c_str(), buf); });
}

}  // extern "C"

namespace upfs {

int PoolStatvfs(const PoolPath& p, struct statvfs* buf) {
  OpGuard g(DescriptorUse::None());
  {
    // The path must name something, as for the kernel's statvfs.
    PoolNamespace ns = Ns(p);
    Resolved r;
    if (Status s = ResolveIn(ns, p, true, &r); !s.ok()) return Fail(s);
    if (r.ino == 0) return FailErrno(ENOENT, "no such file or directory");
  }
  Pool* pool = p.mount->pool.get();
  struct statvfs host;
  if (fstatvfs(pool->medium()->fd(), &host) != 0) return FailErrno(errno, "statvfs of the pool's file system");
  // The pool's own blocks (taken or free), plus what the file system under
  // it can still give the pool as it grows: the pool's size as the host
  // file has it now, not as this process last saw it (another may have
  // grown it since: its blocks were neither the pool's nor the host's).
  if (Status s = pool->medium()->RefreshCapacity(); !s.ok()) return Fail(s);
  const uint64_t cap = std::min<uint64_t>(pool->medium()->capacity() / format::kBlockSize,
                                          format::pool::kMaxPoolBlocks);
  uint64_t taken = 0;
  const auto* bits = pool->source()->bitmap()->bits();
  for (uint64_t w = 0; w < (cap + 63) / 64; ++w) taken += uint64_t(std::popcount(bits[w].load()));
  const uint64_t host_free = uint64_t(host.f_bavail) * host.f_frsize / format::kBlockSize;
  std::memset(buf, 0, sizeof(*buf));
  buf->f_bsize = buf->f_frsize = format::kBlockSize;
  // Extents given back to the host are taken in the bitmap, and their
  // memory is in host_free: counted there, once.
  buf->f_blocks = cap - std::min(cap, pool->GivenBackBlocks()) + host_free;
  buf->f_bfree = buf->f_bavail = cap - std::min(cap, taken) + host_free;
  // Inodes: the slots of the inode blocks made so far (in use or free),
  // plus what the free blocks could hold.
  uint64_t inode_blocks = 0;
  (void)pool->inodes()->ForEachBlock([&](uint32_t) {
    ++inode_blocks;
    return Status::OK();
  });
  buf->f_ffree = buf->f_favail = buf->f_bfree * (format::pool::kInodesPerBlock - 1);
  buf->f_files = inode_blocks * (format::pool::kInodesPerBlock - 1) + buf->f_ffree;
  buf->f_fsid = pool->dev();
  buf->f_namemax = format::pool::kMaxNameLen;
  return 0;
}

}  // namespace upfs

