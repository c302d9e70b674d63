#include "container/pool/namespace.h"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "engine/epoch_pin.h"
#include "medium/pm.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

constexpr int kMaxSymlinkDepth = 40;  // as the kernel's MAXSYMLINKS
constexpr int kWantRead = 4, kWantWrite = 2, kWantExec = 1;

uint64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct timespec ToTimespec(uint64_t ns) {
  struct timespec ts;
  ts.tv_sec = time_t(int64_t(ns) / 1000000000);
  ts.tv_nsec = long(int64_t(ns) % 1000000000);
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

mode_t TypeBits(FileType t) {
  switch (t) {
    case FileType::kDirectory: return S_IFDIR;
    case FileType::kSymlink: return S_IFLNK;
    default: return S_IFREG;
  }
}

uid_t OwnerUid(uint64_t w) { return uid_t(uint32_t(w)); }
gid_t OwnerGid(uint64_t w) { return gid_t(uint32_t(w >> 32)); }

// A new inode's bytes, built in DRAM and copied to the pool whole.
struct InodeImage {
  alignas(64) unsigned char bytes[kInodeSize] = {};
  Inode* get() { return reinterpret_cast<Inode*>(bytes); }
};

uint64_t ParentOf(const NsIndex& idx, uint64_t dir) {
  NsDirInfo i;
  return idx.Dir(dir, &i) ? i.parent : dir;
}

// A change that lost a race with another: the caller resolves again.
Status Stale() { return Status::Error(ESTALE, "the namespace changed under the call"); }

}  // namespace

bool Credentials::InGroup(gid_t g) const {
  return g == gid || std::find(groups.begin(), groups.end(), g) != groups.end();
}

Credentials Credentials::Current(bool real) {
  Credentials c;
  c.uid = real ? getuid() : geteuid();
  c.gid = real ? getgid() : getegid();
  int n = getgroups(0, nullptr);
  if (n > 0) {
    c.groups.resize(size_t(n));
    n = getgroups(n, c.groups.data());
    c.groups.resize(n > 0 ? size_t(n) : 0);
  }
  c.umask = ::umask(0);
  ::umask(c.umask);
  return c;
}

Status PoolNamespace::Permit(const Inode* in, int want) const {
  const uint64_t mode = in->mode.load(std::memory_order_acquire);
  if (who_->uid == 0) {
    // Root passes every check but execution of a file nobody may execute.
    if (!(want & kWantExec) || IdentKind(in->ident.load()) == FileType::kDirectory ||
        (mode & 0111))
      return Status::OK();
    return Status::Error(EACCES, "permission denied");
  }
  const uint64_t owner = in->owner.load(std::memory_order_acquire);
  uint64_t bits;
  if (OwnerUid(owner) == who_->uid) bits = (mode >> 6) & 7;
  else if (who_->InGroup(OwnerGid(owner))) bits = (mode >> 3) & 7;
  else bits = mode & 7;
  if ((bits & uint64_t(want)) == uint64_t(want)) return Status::OK();
  return Status::Error(EACCES, "permission denied");
}

namespace {

// The components of a path still to resolve, as views into the caller's
// path until a symbolic link is followed, and into `owned` after that.
class PathCursor {
 public:
  explicit PathCursor(std::string_view path) : rest_(path) {}
  // The next component, or false at the end.
  bool Next(std::string_view* c) {
    size_t i = rest_.find_first_not_of('/');
    if (i == std::string_view::npos) return false;
    rest_.remove_prefix(i);
    size_t j = rest_.find('/');
    if (j == std::string_view::npos) j = rest_.size();
    *c = rest_.substr(0, j);
    rest_.remove_prefix(j);
    return true;
  }
  bool AtEnd() const { return rest_.find_first_not_of('/') == std::string_view::npos; }
  // What is left, after a link's target.
  void Prepend(std::string_view target) {
    std::string joined;
    joined.reserve(target.size() + 1 + rest_.size());
    joined.append(target).append("/").append(rest_);
    owned_ = std::move(joined);
    rest_ = owned_;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
  std::string owned_;
};

}  // namespace

Status PoolNamespace::Resolve(std::string_view path, bool follow, Resolved* out, std::string* escape) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  std::shared_lock<SpinSharedMutex> g;
  UPFS_RETURN_IF_ERROR(pool_->LockLatest(&g));
  return ResolveLocked(path, follow, out, escape);
}

Status PoolNamespace::ResolveLocked(std::string_view path, bool follow, Resolved* out, std::string* escape) {
  const NsIndex& idx = *pool_->index();
  const bool trailing_slash = !path.empty() && path.back() == '/';
  PathCursor parts(path);
  uint64_t cur = pool_->root_ino();
  int links = 0;
  out->dir = cur;
  out->name.clear();
  out->ino = cur;
  out->type = FileType::kDirectory;
  std::string target;
  for (std::string_view c; parts.Next(&c);) {
    if (c.size() > kMaxNameLen) return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
    NsDirInfo d;
    if (!idx.Dir(cur, &d)) return Status::Error(ENOTDIR, "not a directory");
    Inode* din;
    UPFS_RETURN_IF_ERROR(pool_->InodeAt(cur, &din));
    UPFS_RETURN_IF_ERROR(Permit(din, kWantExec));
    const bool last = parts.AtEnd();
    if (c == ".") {
      if (last) *out = Resolved{d.parent, "", cur, FileType::kDirectory};
      continue;
    }
    if (c == "..") {
      if (cur == pool_->root_ino()) {
        if (escape) *escape = std::string("..") + std::string(parts.rest());
        return Status::Error(EXDEV, "path leaves the pool");
      }
      cur = d.parent;
      if (last) *out = Resolved{ParentOf(idx, cur), "", cur, FileType::kDirectory};
      continue;
    }
    NsEntry found;
    if (!idx.Find(cur, c, &found)) {
      if (!last) return Status::Error(ENOENT, "no such file or directory");
      *out = Resolved{cur, std::string(c), 0, FileType::kFree};
      return Status::OK();
    }
    if (found.type == FileType::kSymlink && (!last || follow || trailing_slash)) {
      if (++links > kMaxSymlinkDepth) return Status::Error(ELOOP, "too many symbolic links");
      UPFS_RETURN_IF_ERROR(Readlink(found.ino, &target));
      if (!target.empty() && target[0] == '/') {
        if (escape) *escape = target + std::string(parts.rest());
        return Status::Error(EXDEV, "symbolic link leaves the pool");
      }
      parts.Prepend(target);
      if (parts.AtEnd()) *out = Resolved{ParentOf(idx, cur), "", cur, FileType::kDirectory};
      continue;
    }
    if (last) {
      *out = Resolved{cur, std::string(c), found.ino, found.type};
      break;
    }
    if (found.type != FileType::kDirectory) return Status::Error(ENOTDIR, "not a directory");
    cur = found.ino;
  }
  if (trailing_slash && out->ino != 0 && out->type != FileType::kDirectory)
    return Status::Error(ENOTDIR, "not a directory");
  return Status::OK();
}

Status PoolNamespace::Commit(const NsRecord& rec, const std::function<Status()>& validate) {
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(pool_->NamespaceSlot(&slot));
  EpochPin pin(pool_->epochs(), slot);  // the log's blocks stay while it is read
  NsLog* log = pool_->log();
  NsLog::Reservation r;
  bool reserved = false;
  for (;;) {
    if (!reserved) {
      NsPos from;
      {
        std::shared_lock<SpinSharedMutex> s(pool_->index_mu());
        from = log->pos();
      }
      UPFS_RETURN_IF_ERROR(log->Reserve(rec, from, &r));
    }
    reserved = true;
    std::unique_lock<SpinSharedMutex> g(pool_->index_mu());
    UPFS_RETURN_IF_ERROR(pool_->CatchUpLocked());
    UPFS_RETURN_IF_ERROR(validate());
    bool committed, lost;
    NsLog::Pending pending;
    UPFS_RETURN_IF_ERROR(log->TryCommit(r, &committed, &lost, &pending));
    if (committed) {
      Status applied = pool_->index()->Apply(rec);
      const bool due = pool_->CheckpointDue();
      g.unlock();
      log->MakeDurable(pending);
      pool_->MaybeCheckpoint(due);
      return applied;
    }
    if (lost) reserved = false;
  }
}

Status PoolNamespace::NewInode(FileType kind, uint64_t dir, mode_t mode, uint64_t* ino, Inode* image) {
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(dir, &din));
  const uint64_t dmode = din->mode.load(std::memory_order_acquire);
  gid_t gid = who_->gid;
  if (dmode & S_ISGID) {
    // BSD group semantics of a set-group-ID directory, as the kernel's.
    gid = OwnerGid(din->owner.load(std::memory_order_acquire));
    if (kind == FileType::kDirectory) mode |= S_ISGID;
  }
  if (kind == FileType::kRegular && (mode & S_ISGID) && !who_->InGroup(gid) && who_->uid != 0)
    mode &= ~S_ISGID;
  const uint64_t now = Now();
  image->mode.store(mode & 07777, std::memory_order_relaxed);
  image->owner.store(uint64_t(who_->uid) | (uint64_t(gid) << 32), std::memory_order_relaxed);
  image->ctime_ns.store(now, std::memory_order_relaxed);
  image->atime_ns.store(now, std::memory_order_relaxed);
  image->created_ns = now;
  image->times.mtime_ns.store(now, std::memory_order_relaxed);
  image->times.data_ctime_ns.store(now, std::memory_order_relaxed);
  return pool_->inodes()->Allocate(kind, image, ino);
}

void PoolNamespace::TouchDir(uint64_t dir) {
  Inode* in;
  if (!pool_->InodeAt(dir, &in).ok()) return;
  const uint64_t now = Now();
  // Within one tick of the coarse clock the times stay what they are:
  // nothing to store or flush (a flush evicts the lines on this CPU, and
  // the next call in this directory reads them, its mode first).
  if (in->times.mtime_ns.load(std::memory_order_relaxed) == now &&
      in->ctime_ns.load(std::memory_order_relaxed) == now)
    return;
  // Persisted by the commit's fence that follows.
  pm::Store64(&in->times.mtime_ns, now);
  pm::Store64(&in->ctime_ns, now);
  pm::Flush(&in->ctime_ns, 8);
  pm::Flush(&in->times.mtime_ns, 8);
}

void PoolNamespace::TouchCtime(uint64_t ino, bool durable) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  const uint64_t now = Now();
  if (in->ctime_ns.load(std::memory_order_relaxed) == now) return;  // as TouchDir
  pm::Store64(&in->ctime_ns, now);
  if (durable) pm::Flush(&in->ctime_ns, 8);
}

Status PoolNamespace::CheckSticky(uint64_t dir, uint64_t ino) const {
  if (who_->uid == 0) return Status::OK();
  Inode *din, *in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(dir, &din));
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  if (!(din->mode.load() & S_ISVTX)) return Status::OK();
  if (OwnerUid(in->owner.load()) == who_->uid || OwnerUid(din->owner.load()) == who_->uid)
    return Status::OK();
  return Status::Error(EPERM, "sticky directory: not the owner");
}

Status PoolNamespace::Create(const Resolved& at, mode_t mode, Consistency c, uint64_t* ino,
                             bool* created, uint32_t* held_gen) {
  *created = false;
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  InodeImage img;
  Inode& image = *img.get();
  image.consistency = uint32_t(c);
  // A creator that keeps the file open holds it from birth: no window in
  // which another process could remove and free it first.
  if (held_gen) image.open_count.store(1, std::memory_order_relaxed);
  uint64_t n;
  UPFS_RETURN_IF_ERROR(NewInode(FileType::kRegular, at.dir, mode & ~who_->umask, &n, &image));
  NsRecord rec{RecordType::kCreate, FileType::kRegular, n, at.dir, 0, 0, at.name, {}};
  TouchDir(at.dir);
  Status st = Commit(rec, [&]() -> Status {
    NsEntry e;
    if (!pool_->index()->IsDir(at.dir)) return Status::Error(ENOENT, "directory removed");
    if (pool_->index()->Find(at.dir, at.name, &e)) return Status::Error(EEXIST, "file exists");
    return Status::OK();
  });
  if (!st.ok()) {
    pool_->inodes()->Free(n);
    return st;
  }
  *ino = n;
  *created = true;
  if (held_gen) *held_gen = IdentGen(image.ident.load(std::memory_order_relaxed));
  return Status::OK();
}

Status PoolNamespace::Mkdir(const Resolved& at, mode_t mode) {
  if (at.ino != 0) return Status::Error(EEXIST, "file exists");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  InodeImage img;
  Inode& image = *img.get();
  uint64_t n;
  UPFS_RETURN_IF_ERROR(NewInode(FileType::kDirectory, at.dir, mode & 07777 & ~who_->umask, &n, &image));
  NsRecord rec{RecordType::kMkdir, FileType::kDirectory, n, at.dir, 0, 0, at.name, {}};
  TouchDir(at.dir);
  Status st = Commit(rec, [&]() -> Status {
    NsEntry e;
    if (!pool_->index()->IsDir(at.dir)) return Status::Error(ENOENT, "directory removed");
    if (pool_->index()->Find(at.dir, at.name, &e)) return Status::Error(EEXIST, "file exists");
    return Status::OK();
  });
  if (!st.ok()) pool_->inodes()->Free(n);
  return st;
}

Status PoolNamespace::Symlink(const Resolved& at, std::string_view target) {
  if (at.ino != 0) return Status::Error(EEXIST, "file exists");
  if (target.empty()) return Status::Error(ENOENT, "empty symbolic link target");
  if (target.size() >= kBlockSize) return Status::Error(ENAMETOOLONG, "symbolic link target too long");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  InodeImage img;
  Inode& image = *img.get();
  image.target_len = uint32_t(target.size());
  uint32_t block = 0;
  if (target.size() <= kInlineTargetMax) {
    std::memcpy(image.target, target.data(), target.size());
  } else {
    UPFS_RETURN_IF_ERROR(pool_->AllocBlock(&block));
    char* p = pool_->medium()->base() + (uint64_t(block) << kBlockShift);
    pm::CopyNT(p, target.data(), target.size());  // fenced by the reservation, as the inode
    image.target_block.store(block, std::memory_order_relaxed);
  }
  uint64_t n;
  if (Status st = NewInode(FileType::kSymlink, at.dir, 0777, &n, &image); !st.ok()) {
    if (block) pool_->FreeBlock(block);
    return st;
  }
  NsRecord rec{RecordType::kCreate, FileType::kSymlink, n, at.dir, 0, 0, at.name, {}};
  TouchDir(at.dir);
  Status st = Commit(rec, [&]() -> Status {
    NsEntry e;
    if (!pool_->index()->IsDir(at.dir)) return Status::Error(ENOENT, "directory removed");
    if (pool_->index()->Find(at.dir, at.name, &e)) return Status::Error(EEXIST, "file exists");
    return Status::OK();
  });
  if (!st.ok()) pool_->ReleaseInode(n);
  return st;
}

Status PoolNamespace::Link(const Resolved& from, const Resolved& to) {
  if (from.ino == 0) return Status::Error(ENOENT, "no such file");
  if (to.ino != 0) return Status::Error(EEXIST, "file exists");  // checked first, as the kernel's
  if (from.type == FileType::kDirectory) return Status::Error(EPERM, "hard link to a directory");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(to.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  NsRecord rec{RecordType::kLink, from.type, from.ino, to.dir, 0, 0, to.name, {}};
  TouchDir(to.dir);
  TouchCtime(from.ino);
  return Commit(rec, [&]() -> Status {
    const NsIndex* idx = pool_->index();
    NsEntry e;
    if (!idx->Find(from.dir, from.name, &e) || e.ino != from.ino) return Stale();
    if (!idx->IsDir(to.dir)) return Status::Error(ENOENT, "directory removed");
    if (idx->Find(to.dir, to.name, &e)) return Status::Error(EEXIST, "file exists");
    return Status::OK();
  });
}

Status PoolNamespace::Remove(const Resolved& at, bool dir) {
  if (at.ino == 0) return Status::Error(ENOENT, "no such file or directory");
  if (at.ino == pool_->root_ino()) return Status::Error(dir ? EBUSY : EISDIR, "the pool's root");
  if (at.name.empty()) return Status::Error(dir ? EINVAL : EISDIR, "not a name");
  if (dir && at.type != FileType::kDirectory) return Status::Error(ENOTDIR, "not a directory");
  if (!dir && at.type == FileType::kDirectory) return Status::Error(EISDIR, "is a directory");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  UPFS_RETURN_IF_ERROR(CheckSticky(at.dir, at.ino));
  NsRecord rec{RecordType::kUnlink, at.type, at.ino, at.dir, 0, 0, at.name, {}};
  TouchDir(at.dir);
  bool last = false;  // the name going is the inode's last
  UPFS_RETURN_IF_ERROR(Commit(rec, [&]() -> Status {
    const NsIndex* idx = pool_->index();
    NsEntry e;
    if (!idx->Find(at.dir, at.name, &e) || e.ino != at.ino) return Stale();
    NsDirInfo info;
    if (dir && idx->Dir(at.ino, &info) && info.entries != 0)
      return Status::Error(ENOTEMPTY, "directory not empty");
    // Exact: this record commits at the tail, right after what was read.
    last = dir || idx->Nlink(at.ino, at.type) == 1;
    return Status::OK();
  }));
  if (!dir) TouchCtime(at.ino, /*durable=*/!last);
  if (last) SetUnlinked(at.ino);
  MaybeRelease(at.ino);
  return Status::OK();
}

Status PoolNamespace::Rename(const Resolved& from, const Resolved& to, unsigned flags) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  if (flags & ~unsigned(RENAME_NOREPLACE | RENAME_EXCHANGE))
    return Status::Error(EINVAL, "unknown rename flags");
  const bool exchange = flags & RENAME_EXCHANGE;
  if (exchange && (flags & RENAME_NOREPLACE)) return Status::Error(EINVAL, "contradicting flags");
  if (from.ino == 0) return Status::Error(ENOENT, "no such file or directory");
  if (from.name.empty() || to.name.empty() || from.ino == pool_->root_ino() ||
      to.ino == pool_->root_ino())
    return Status::Error(EBUSY, "cannot rename the root or a dot entry");
  if (exchange && to.ino == 0) return Status::Error(ENOENT, "no such file or directory");
  if (!exchange && to.ino != 0 && (flags & RENAME_NOREPLACE)) return Status::Error(EEXIST, "file exists");
  const NsIndex* idx = pool_->index();
  if (from.dir != to.dir) {
    // The kernel's checks of lock_rename's trap, before any other: the
    // source may not be an ancestor of the target's directory, nor the
    // target an ancestor of the source's.
    std::shared_lock<SpinSharedMutex> g(pool_->index_mu());
    if (idx->IsAncestorOrSelf(from.ino, to.dir))
      return Status::Error(EINVAL, "a directory cannot move below itself");
    if (to.ino != 0 && idx->IsAncestorOrSelf(to.ino, from.dir))
      return Status::Error(exchange ? EINVAL : ENOTEMPTY, "the target holds the source");
  }
  if (from.ino == to.ino) return Status::OK();  // two names of one file: nothing to do
  if (!exchange && to.ino != 0) {
    if (from.type == FileType::kDirectory && to.type != FileType::kDirectory)
      return Status::Error(ENOTDIR, "not a directory");
    if (from.type != FileType::kDirectory && to.type == FileType::kDirectory)
      return Status::Error(EISDIR, "is a directory");
  }
  Inode *d1, *d2;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(from.dir, &d1));
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(to.dir, &d2));
  UPFS_RETURN_IF_ERROR(Permit(d1, kWantWrite | kWantExec));
  UPFS_RETURN_IF_ERROR(Permit(d2, kWantWrite | kWantExec));
  UPFS_RETURN_IF_ERROR(CheckSticky(from.dir, from.ino));
  if (to.ino != 0) UPFS_RETURN_IF_ERROR(CheckSticky(to.dir, to.ino));
  if (from.dir != to.dir) {
    // A directory that changes parent has its ".." rewritten.
    for (const Resolved* r : {&from, exchange ? &to : nullptr}) {
      if (!r || r->type != FileType::kDirectory) continue;
      Inode* in;
      UPFS_RETURN_IF_ERROR(pool_->InodeAt(r->ino, &in));
      UPFS_RETURN_IF_ERROR(Permit(in, kWantWrite));
    }
  }
  NsRecord rec{exchange ? RecordType::kExchange : RecordType::kRename, from.type, from.ino,
               from.dir, to.dir, to.ino, from.name, to.name};
  TouchDir(from.dir);
  if (to.dir != from.dir) TouchDir(to.dir);
  TouchCtime(from.ino);
  bool victim_last = false;  // the name replaced was its inode's last
  UPFS_RETURN_IF_ERROR(Commit(rec, [&]() -> Status {
    NsEntry a, b;
    const bool has_a = idx->Find(from.dir, from.name, &a), has_b = idx->Find(to.dir, to.name, &b);
    const NsEntry* ea = has_a ? &a : nullptr;
    const NsEntry* eb = has_b ? &b : nullptr;
    if (!idx->IsDir(from.dir) || !idx->IsDir(to.dir) || !ea || ea->ino != from.ino ||
        (eb ? eb->ino : 0) != to.ino)
      return Stale();
    if (from.type == FileType::kDirectory && idx->IsAncestorOrSelf(from.ino, to.dir))
      return Status::Error(EINVAL, "a directory cannot move below itself");
    if (exchange && to.type == FileType::kDirectory && idx->IsAncestorOrSelf(to.ino, from.dir))
      return Status::Error(EINVAL, "a directory cannot move below itself");
    NsDirInfo vi;
    if (!exchange && eb && eb->type == FileType::kDirectory && idx->Dir(eb->ino, &vi) && vi.entries != 0)
      return Status::Error(ENOTEMPTY, "directory not empty");
    // Exact: this record commits at the tail, right after what was read.
    victim_last = !exchange && eb && (eb->type == FileType::kDirectory || idx->Nlink(eb->ino, eb->type) == 1);
    return Status::OK();
  }));
  if (!exchange && to.ino != 0) {
    TouchCtime(to.ino, /*durable=*/!victim_last);
    if (victim_last) SetUnlinked(to.ino);
    MaybeRelease(to.ino);
  }
  return Status::OK();
}

Status PoolNamespace::TakeHold(uint64_t ino, uint32_t* gen) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  in->open_count.fetch_add(1, std::memory_order_seq_cst);
  const uint64_t id = in->ident.load(std::memory_order_seq_cst);
  // Whoever frees the inode committed its last unlink before looking at
  // the count: either it saw this hold, or the index shows the unlink.
  bool linked = false;
  Status st;
  {
    std::shared_lock<SpinSharedMutex> g;
    st = pool_->LockLatest(&g);
    if (st.ok()) linked = LinkedLocked(ino, in);
  }
  if (!st.ok() || IdentKind(id) == FileType::kFree || !linked) {
    in->open_count.fetch_sub(1, std::memory_order_seq_cst);
    return st.ok() ? Status::Error(ENOENT, "file removed") : st;
  }
  *gen = IdentGen(id);
  return Status::OK();
}

bool PoolNamespace::LinkedLocked(uint64_t ino, const Inode* in) const {
  const uint64_t id = in->ident.load(std::memory_order_acquire);
  if (id & kIdentUnlinked) return false;
  if (ino == pool_->root_ino()) return true;
  return pool_->index()->Nlink(ino, IdentKind(id)) > 0;
}

void PoolNamespace::SetUnlinked(uint64_t ino) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  // The last name is gone (committed): say so in the inode, for the
  // processes whose index no longer holds that record after a checkpoint.
  uint64_t id = in->ident.load(std::memory_order_acquire);
  while (!(id & kIdentUnlinked) && IdentKind(id) != FileType::kFree &&
         !pm::Cas64(&in->ident, id, id | kIdentUnlinked)) {
  }
}

void PoolNamespace::DropHold(uint64_t ino, uint32_t gen) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  if (in->open_count.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  if (IdentGen(in->ident.load()) != gen) return;
  MaybeRelease(ino);
}

void PoolNamespace::MaybeRelease(uint64_t ino) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  // The remover of the last name sets the unlinked bit, then reads the
  // count; a last closer drops the count, then reads the bit: one of them
  // sees the other (both sequentially consistent), so no index is needed.
  uint64_t id = in->ident.load(std::memory_order_seq_cst);
  if (!(id & kIdentUnlinked) || (id & kIdentReleasing) || IdentKind(id) == FileType::kFree) return;
  if (in->open_count.load(std::memory_order_seq_cst) != 0) return;
  // Exactly one releaser wins this CAS (a remover and a last closer may
  // both get here).
  if (!pm::Cas64(&in->ident, id, id | kIdentReleasing)) return;
  pool_->ReleaseInode(ino);
}

Status PoolNamespace::Readlink(uint64_t ino, std::string* target) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  if (IdentKind(in->ident.load()) != FileType::kSymlink) return Status::Error(EINVAL, "not a symbolic link");
  const uint32_t len = in->target_len;
  if (len == 0 || len >= kBlockSize) return Status::Corrupt("inode", "symbolic link target length");
  if (len <= kInlineTargetMax) {
    target->assign(in->target, len);
    return Status::OK();
  }
  char* p;
  BlockAccess ba(pool_->medium());
  UPFS_RETURN_IF_ERROR(ba.CheckRange(in->target_block.load(), 1, "symbolic link target"));
  UPFS_RETURN_IF_ERROR(ba.Addr(in->target_block.load(), &p));
  target->assign(p, len);
  return Status::OK();
}

Status PoolNamespace::StatLocked(uint64_t ino, struct stat* st, bool* needs_file) const {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t id = in->ident.load(std::memory_order_acquire);
  const FileType kind = IdentKind(id);
  if (kind == FileType::kFree || kind > FileType::kSymlink) return Status::Error(ENOENT, "file removed");
  std::memset(st, 0, sizeof(*st));
  st->st_dev = dev_t(pool_->dev());
  st->st_ino = ino_t(ino);
  st->st_mode = TypeBits(kind) | mode_t(in->mode.load(std::memory_order_acquire) & 07777);
  const uint64_t owner = in->owner.load(std::memory_order_acquire);
  st->st_uid = OwnerUid(owner);
  st->st_gid = OwnerGid(owner);
  st->st_blksize = kBlockSize;
  // One lookup for the link count (and a directory's size): an unlinked
  // inode has none, the root is linked whatever the index says.
  NsDirInfo info;
  if (kind == FileType::kDirectory) {
    if (pool_->index()->Dir(ino, &info) && !(id & kIdentUnlinked)) st->st_nlink = nlink_t(2 + info.subdirs);
    st->st_size = off_t(40 + 20 * info.entries);  // as tmpfs counts a directory
  } else {
    if (!(id & kIdentUnlinked)) st->st_nlink = nlink_t(pool_->index()->Nlink(ino, kind));
    if (kind == FileType::kSymlink) st->st_size = off_t(in->target_len);
  }
  *needs_file = kind == FileType::kRegular && in->log_head.load(std::memory_order_acquire) != 0;
  st->st_atim = ToTimespec(in->atime_ns.load());
  st->st_mtim = ToTimespec(uint64_t(ReportedMtime(in->times, in->created_ns)));
  st->st_ctim = ToTimespec(in->ctime_ns.load());
  return Status::OK();
}

Status PoolNamespace::StatFile(uint64_t ino, struct stat* st, bool held) {
  uint32_t gen = 0;
  if (!held) UPFS_RETURN_IF_ERROR(TakeHold(ino, &gen));
  std::shared_ptr<File> f;
  Status s = pool_->FileOf(ino, &f);
  FileStat fs;
  if (s.ok()) s = f->Stat(&fs);
  f.reset();
  if (!held) DropHold(ino, gen);
  UPFS_RETURN_IF_ERROR(s);
  st->st_size = off_t(fs.size);
  st->st_blocks = blkcnt_t(fs.blocks * (kBlockSize / 512));
  // The file's mtime is ReportedMtime's; a data change moves its ctime.
  const uint64_t ctime = uint64_t(st->st_ctim.tv_sec) * 1000000000 + uint64_t(st->st_ctim.tv_nsec);
  st->st_ctim = ToTimespec(uint64_t(std::max<int64_t>(fs.data_ctime_ns, int64_t(ctime))));
  return Status::OK();
}

Status PoolNamespace::Stat(uint64_t ino, struct stat* st, bool held) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  bool needs_file;
  {
    std::shared_lock<SpinSharedMutex> g(pool_->index_mu());
    UPFS_RETURN_IF_ERROR(StatLocked(ino, st, &needs_file));
  }
  return needs_file ? StatFile(ino, st, held) : Status::OK();
}

Status PoolNamespace::StatPath(std::string_view path, bool follow, struct stat* st) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  Resolved r;
  bool needs_file;
  {
    // One pin and one hold of the index lock for the lookup and the
    // attributes: stat is the call programs make most.
    std::shared_lock<SpinSharedMutex> g;
    UPFS_RETURN_IF_ERROR(pool_->LockLatest(&g));
    UPFS_RETURN_IF_ERROR(ResolveLocked(path, follow, &r));
    if (r.ino == 0) return Status::Error(ENOENT, "no such file or directory");
    UPFS_RETURN_IF_ERROR(StatLocked(r.ino, st, &needs_file));
  }
  return needs_file ? StatFile(r.ino, st, false) : Status::OK();
}

Status PoolNamespace::Chmod(uint64_t ino, mode_t mode) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t owner = in->owner.load();
  if (who_->uid != 0 && OwnerUid(owner) != who_->uid)
    return Status::Error(EPERM, "not the owner");
  mode &= 07777;
  if (who_->uid != 0 && IdentKind(in->ident.load()) != FileType::kDirectory &&
      !who_->InGroup(OwnerGid(owner)))
    mode &= ~S_ISGID;
  pm::Store64(&in->mode, mode);
  pm::Store64(&in->ctime_ns, Now());
  pm::Flush(&in->mode, 32);
  pm::Fence();
  return Status::OK();
}

Status PoolNamespace::Chown(uint64_t ino, uid_t uid, gid_t gid) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t owner = in->owner.load();
  const uid_t new_uid = uid == uid_t(-1) ? OwnerUid(owner) : uid;
  const gid_t new_gid = gid == gid_t(-1) ? OwnerGid(owner) : gid;
  if (who_->uid != 0) {
    // The kernel's chown_ok and chgrp_ok: only the owner, to itself, and
    // to a group it belongs to (or the group the file has).
    const bool is_owner = OwnerUid(owner) == who_->uid;
    if (uid != uid_t(-1) && !(is_owner && uid == OwnerUid(owner)))
      return Status::Error(EPERM, "not permitted to change the owner");
    if (gid != gid_t(-1) && !(is_owner && (who_->InGroup(gid) || gid == OwnerGid(owner))))
      return Status::Error(EPERM, "not permitted to change the group");
  }
  uint64_t mode = in->mode.load();
  if (IdentKind(in->ident.load()) != FileType::kDirectory) {
    // As the kernel: a chown drops the set-user-ID bit, and the
    // set-group-ID bit of a group-executable file.
    mode &= ~uint64_t(S_ISUID);
    if (mode & S_IXGRP) mode &= ~uint64_t(S_ISGID);
  }
  pm::Store64(&in->owner, uint64_t(new_uid) | (uint64_t(new_gid) << 32));
  pm::Store64(&in->mode, mode);
  pm::Store64(&in->ctime_ns, Now());
  pm::Flush(&in->mode, 32);
  pm::Fence();
  return Status::OK();
}

Status PoolNamespace::Utimens(uint64_t ino, const struct timespec ts[2], bool held) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const bool owner = who_->uid == 0 || OwnerUid(in->owner.load()) == who_->uid;
  const bool both_now = !ts || (ts[0].tv_nsec == UTIME_NOW && ts[1].tv_nsec == UTIME_NOW);
  const bool nothing = ts && ts[0].tv_nsec == UTIME_OMIT && ts[1].tv_nsec == UTIME_OMIT;
  if (nothing) return Status::OK();
  if (!owner) {
    if (!both_now) return Status::Error(EPERM, "not the owner");
    UPFS_RETURN_IF_ERROR(Permit(in, kWantWrite));
  }
  const uint64_t now = Now();
  auto value = [&](const struct timespec& t) {
    if (t.tv_nsec == UTIME_NOW) return now;
    return uint64_t(int64_t(t.tv_sec) * 1000000000 + t.tv_nsec);
  };
  for (int i = 0; ts && i < 2; ++i)
    if (ts[i].tv_nsec != UTIME_NOW && ts[i].tv_nsec != UTIME_OMIT &&
        (ts[i].tv_nsec < 0 || ts[i].tv_nsec >= 1000000000))
      return Status::Error(EINVAL, "bad nanoseconds");
  if (!ts || ts[0].tv_nsec != UTIME_OMIT) pm::Store64(&in->atime_ns, ts ? value(ts[0]) : now);
  if (!ts || ts[1].tv_nsec != UTIME_OMIT) {
    std::shared_ptr<File> f;
    if (IdentKind(in->ident.load()) == FileType::kRegular && in->log_head.load() != 0) {
      uint32_t gen = 0;
      if (!held) UPFS_RETURN_IF_ERROR(TakeHold(ino, &gen));
      Status s = pool_->FileOf(ino, &f);
      if (s.ok()) s = f->SetMtime(int64_t(ts ? value(ts[1]) : now));
      f.reset();
      if (!held) DropHold(ino, gen);
      UPFS_RETURN_IF_ERROR(s);
    } else {
      pm::Store64(&in->times.mtime_ns, ts ? value(ts[1]) : now);
      pm::Flush(&in->times.mtime_ns, 8);
    }
  }
  pm::Store64(&in->ctime_ns, now);
  pm::Flush(&in->ctime_ns, 32);
  pm::Fence();
  return Status::OK();
}

Status PoolNamespace::Access(uint64_t ino, int mode) {
  if (mode == F_OK) return Status::OK();
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  int want = 0;
  if (mode & R_OK) want |= kWantRead;
  if (mode & W_OK) want |= kWantWrite;
  if (mode & X_OK) want |= kWantExec;
  return Permit(in, want);
}

Status PoolNamespace::MayOpen(uint64_t ino, int acc, bool trunc) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  int want = 0;
  if (acc != O_WRONLY) want |= kWantRead;
  if (acc != O_RDONLY || trunc) want |= kWantWrite;
  return Permit(in, want);
}

Status PoolNamespace::List(uint64_t dir, std::vector<Listed>* out) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  std::shared_lock<SpinSharedMutex> g;
  UPFS_RETURN_IF_ERROR(pool_->LockLatest(&g));
  NsDirInfo d;
  if (!pool_->index()->Dir(dir, &d)) return Status::Error(ENOENT, "directory removed");
  out->clear();
  out->reserve(d.entries + 2);
  out->push_back(Listed{".", dir, FileType::kDirectory});
  out->push_back(Listed{"..", d.parent, FileType::kDirectory});
  pool_->index()->List(dir, [&](std::string_view name, const NsEntry& e) {
    out->push_back(Listed{std::string(name), e.ino, e.type});
  });
  return Status::OK();
}

}  // namespace upfs
