// PoolNamespace: the name changes of a pool (create, mkdir, symlink, link,
// remove, rename), their commits, and listings. Path resolution and the
// permission check are in namespace_resolve.cc, the attribute calls
// (readlink, stat, chmod, chown, utimens, access, the open check) in
// namespace_attrs.cc, the holds that keep open files alive in
// namespace_holds.cc.
#include "container/pool/namespace.h"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "container/pool/fresh_inode.h"
#include "container/pool/namespace_internal.h"
#include "engine/epoch_pin.h"
#include "medium/pm.h"

namespace upfs {

using namespace format;
using namespace format::pool;
using namespace ns_internal;

namespace {

// A new inode's bytes, built in DRAM and copied to the pool whole.
// A change that lost a race with another: the caller resolves again.
Status Stale() { return Status::Error(ESTALE, "the namespace changed under the call"); }

}  // namespace

Status PoolNamespace::Commit(const NsRecord& rec, FunctionRef<Status()> validate,
                             FunctionRef<void(CommitFlushes*)> with_payload, bool* committed_out,
                             FunctionRef<void(CommitFlushes*)> touch) {
  if (committed_out) *committed_out = false;
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(pool_->NamespaceSlot(&slot));
  EpochPin pin(pool_->epochs(), slot);  // the log's blocks stay while it is read
  NsLog* log = pool_->log();
  CommitFlushes later;
  CommitFlushes* const defer = log->one_wait() ? &later : nullptr;
  const auto payload = [&] { with_payload(defer); };
  FunctionRef<void()> with_reservation;
  if (with_payload) with_reservation = payload;
  NsLog::Reservation r;
  bool reserved = false;
  bool caught_up = false;
  for (;;) {
    if (!reserved) {
      // Where to reserve: the position this process last published, read
      // without the index lock. Behind a checkpoint it has not seen, that
      // position's block may have been freed before the pin above: the
      // index is brought up to date first (Reserve also refuses a block
      // that is no longer that block of the log).
      if (caught_up || pool_->CheckpointUnseen()) {
        std::unique_lock<SpinSharedMutex> g(pool_->index_mu());
        UPFS_RETURN_IF_ERROR(pool_->CatchUpLocked());
      }
      Status rs = log->Reserve(rec, log->PosHint(), &r, with_reservation);
      if (rs.err() == ESTALE && !caught_up) {
        caught_up = true;
        continue;
      }
      UPFS_RETURN_IF_ERROR(rs);
      with_reservation = {};  // run once: its lines are written back by then, or in `later`
    }
    reserved = true;
    // A fence the commit would make under the lock is made before it when
    // it can be known to be needed: before, and again if the lock is
    // taken (another commit in progress may fill the record's open line).
    log->SettleFilledOpenLine(&r);
    std::unique_lock<SpinSharedMutex> g(pool_->index_mu(), std::try_to_lock);
    if (!g.owns_lock()) {
      log->SettleFilledOpenLine(&r);
      g.lock();
    }
    UPFS_RETURN_IF_ERROR(pool_->CatchUpLocked());
    UPFS_RETURN_IF_ERROR(validate());
    bool committed, lost;
    NsLog::Pending pending;
    UPFS_RETURN_IF_ERROR(log->TryCommit(r, &committed, &lost, &pending));
    if (committed) {
      if (committed_out) *committed_out = true;
      Status applied = pool_->ApplyLocked(rec, /*validated=*/true);
      // Only damage or a bug gets here: the record is in the log and not in
      // the index, whose position is past it (a checkpoint written from it
      // would drop the record). Made again from the log, the index has the
      // record, or stops before it as every other process's does.
      if (!applied.ok()) (void)pool_->ReloadIndexLocked();
      const bool due = pool_->CheckpointDue();
      g.unlock();
      // After the lock (a store that misses would lengthen every other
      // commit's wait), so a directory removed meanwhile may get a stale
      // touch: harmless, as TouchCtime says.
      if (touch) touch(defer);
      later.FlushAll();
      log->MakeDurable(pending);
      pool_->MaybeCheckpoint(due);
      return applied;
    }
    if (lost) reserved = false;
  }
}

Status PoolNamespace::NewInode(FileType kind, uint64_t dir, mode_t mode, uint64_t* ino, Inode* image,
                               Inode** in) {
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
  return pool_->inodes()->Take(kind, image, ino, in);
}

void PoolNamespace::TouchDir(uint64_t dir, CommitFlushes* later) {
  Inode* in;
  if (!pool_->InodeAt(dir, &in).ok()) return;
  const uint64_t now = Now();
  // Within one tick of the coarse clock the times stay what they are:
  // nothing to store or flush (a flush evicts the lines on this CPU, and
  // the next call in this directory reads them, its mode first).
  if (in->times.mtime_ns.load(std::memory_order_relaxed) == now &&
      in->ctime_ns.load(std::memory_order_relaxed) == now)
    return;
  // Persisted by the commit's fence that follows, line 0 with a clear
  // fresh bit (a directory made a moment ago: fresh_inode.h).
  SealIfFresh(in, pool_->access());
  pm::Store64(&in->times.mtime_ns, now);
  pm::Store64(&in->ctime_ns, now);
  FlushLine(&in->ctime_ns, later);
  FlushLine(&in->times.mtime_ns, later);
}

// Called once the record that changed the inode's names is committed: a
// durable touch from the commit's `touch` (after the index lock, before
// the fence that makes the record durable), any other after the commit.
// By then another thread may have removed the inode's last name and
// released it, and a create may have taken it: the store then lands on a
// free inode (whose fields nobody reads) or on a new one, whose ctime it
// moves forward by the moment between that create and this store, still
// a change time the new file could have. So a stale touch is harmless, and no hold is taken for it
// (a hold would cost every unlink two more atomic operations).
void PoolNamespace::TouchCtime(uint64_t ino, bool durable, CommitFlushes* later) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  const uint64_t now = Now();
  if (in->ctime_ns.load(std::memory_order_relaxed) == now) return;  // as TouchDir
  // A durable change: a fresh image is sealed first, and the flush of
  // line 0 below takes a clear fresh bit along.
  if (durable) SealIfFresh(in, pool_->access());
  pm::Store64(&in->ctime_ns, now);
  if (durable) FlushLine(&in->ctime_ns, later);
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

bool PoolNamespace::StillDir(uint64_t dir, uint64_t ident) const {
  Inode* in;
  return pool_->index()->IsDir(dir) && pool_->InodeAt(dir, &in).ok() &&
         in->ident.load(std::memory_order_acquire) == ident;
}

// A create's check at the log's tail (index lock held): the name Resolve
// saw absent is absent still, in a directory that still exists.
Status PoolNamespace::NameStillFree(const Resolved& at) const {
  // A directory from the parent cache: still where its path leads, unless
  // a directory moved since its walk or this one is no longer the one it
  // found (then walk again).
  if (at.shape != 0 && (at.shape != pool_->index()->shape() || !StillDir(at.dir, at.dir_ident)))
    return Stale();
  NsEntry e;
  if (SameView(at)) return Status::OK();  // nothing committed since Resolve
  if (!pool_->index()->IsDir(at.dir)) return Status::Error(ENOENT, "directory removed");
  if (pool_->index()->Find(at.dir, at.name, &e)) return Status::Error(EEXIST, "file exists");
  return Status::OK();
}

Status PoolNamespace::CommitNewInode(RecordType type, FileType kind, const Resolved& at, mode_t mode,
                                     Inode* image, uint64_t* ino, bool* committed, uint32_t kept_lines) {
  *ino = 0;
  *committed = false;
  Inode* in;
  UPFS_RETURN_IF_ERROR(NewInode(kind, at.dir, mode, ino, image, &in));
  NsRecord rec{type, kind, *ino, at.dir, 0, 0, at.name, {}, {}};
  // A version 9 pool's new regular file or directory: its record carries
  // what the image holds, and the image its fresh bit until the commit's
  // fence has made it durable (fresh_inode.h). A kept log given at birth
  // is not in the record (made again from it, the file is empty and the
  // block free): its rewritten lines (`kept_lines` of them, stored by
  // Pool::TakeRecycledLog) are durable with the image, by the commit's
  // fence or a seal's.
  const bool fresh = CarriesCreation(type, kind, pool_->log()->creations());
  if (fresh) {
    image->ident.store(image->ident.load(std::memory_order_relaxed) | kIdentFresh, std::memory_order_relaxed);
    rec.creation = CreationOf(*image);
  }
  UPFS_ASSERT(fresh || kept_lines == 0);
  const auto with_record = [&](CommitFlushes* later) {
    if (fresh) {
      UPFS_ASSERT(later);
      // Stored, and written back with the commit's other lines after the
      // index lock (a locked instruction waits for write-backs in flight,
      // as a fence does): the commit's one fence persists both.
      InodeAllocator::WriteImage(in, *image, /*write_back=*/false);
      later->Add(in);
      later->Add(&in->log_head);
      if (kept_lines != 0) {
        char* p = pool_->access().AddrUnchecked(image->log_head.load(std::memory_order_relaxed));
        for (uint32_t i = 0; i < kept_lines; ++i) later->Add(p + i * kCacheLine);
      }
      return;
    }
    // Else the new inode (and what it names: a symbolic link's target, a
    // kept log's lines) is durable before the record can be: a power
    // failure persists any word of a line on its own, and no word of an
    // image can tell that it was lost (a later chmod or write changes what
    // a check could compare). A version 8 pool's payload is not in this
    // fence, and its one fence follows the kApply (docs/design.md, "One
    // wait a commit").
    InodeAllocator::WriteImage(in, *image);
    if (later) pm::Fence();
  };
  Status st = Commit(rec, [&]() { return NameStillFree(at); }, with_record, committed,
                     [&](CommitFlushes* later) { TouchDir(at.dir, later); });
  // Durable now (the commit's fence): whoever changes the inode next need
  // not seal it.
  if (st.ok() && fresh) ClearFresh(in);
  // Failed, the image is written (again, if the reservation wrote it: the
  // same bytes) before the caller gives the inode back: Free and
  // ReleaseInode read its fields, and until written the inode holds its
  // previous life's (a free inode's log_head is the free stack's link).
  if (!st.ok()) InodeAllocator::WriteImage(in, *image);
  return st;
}

Status PoolNamespace::Create(const Resolved& at, mode_t mode, Consistency c, uint64_t* ino,
                             bool* created, uint32_t* held_gen) {
  *created = false;
  if (at.ino != 0) return Status::Error(EEXIST, "file exists");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  InodeImage img;
  Inode& image = *img.get();
  image.consistency = uint32_t(c);
  // A creator that keeps the file open holds it from birth: no window in
  // which another process could remove and free it first.
  if (held_gen) image.open_count.store(1, std::memory_order_relaxed);
  // A released file's log this process kept is the new file's from birth:
  // its lines are persisted by the fence that persists the inode (the
  // record's reservation fence, or CommitNewInode's; in a version 9 pool
  // the commit's one fence, or a seal's, with the fresh image), before the
  // inode naming it can be reached, and the file's first write neither
  // makes a log nor swaps one in (Pool::FileOf: a fence, and the CAS that
  // missed on the inode's line the create had written back).
  uint32_t log = 0, kept_lines = 0;
  const bool with_image = pool_->log()->creations();  // version 9: written back with the fresh image
  if (pool_->TakeRecycledLog(&log, nullptr, with_image ? &kept_lines : nullptr))
    image.log_head.store(log, std::memory_order_relaxed);
  uint64_t n;
  bool committed;
  if (Status st = CommitNewInode(RecordType::kCreate, FileType::kRegular, at, mode & ~who_->umask, &image, &n,
                                 &committed, kept_lines);
      !st.ok()) {
    // The creator's hold goes (Take added it to the count, which outlives
    // the inode's life), and the inode with it unless its record is in
    // the log (the index failed to apply it: the file is the log's).
    Inode* in;
    if (n && held_gen && pool_->InodeAt(n, &in).ok()) in->open_count.fetch_sub(1, std::memory_order_seq_cst);
    if (!committed) {
      if (n) pool_->inodes()->Free(n);
      if (log) pool_->FreeBlock(log);
    }
    return st;
  }
  *ino = n;
  *created = true;
  if (held_gen) *held_gen = IdentGen(image.ident.load(std::memory_order_relaxed));
  return Status::OK();
}

bool PoolNamespace::CachedParent(std::string_view path, Resolved* at) {
  std::string_view dir, name;
  if (!SplitCreatePath(path, &dir, &name)) return false;
  const ParentCache::Entry* e = ParentCache::Find(pool_->instance(), dir);
  // A shape already changed would only make the commit fail: walk now.
  if (!e || e->walk.shape != pool_->index()->shape()) return false;
  for (uint32_t i = 0; i < e->walk.n; ++i) {
    Inode* d;
    if (!pool_->InodeAt(e->walk.dirs[i], &d).ok() || !Permit(d, kWantExec).ok()) return false;
  }
  at->dir = e->walk.dirs[e->walk.n - 1];
  at->name.assign(name);
  at->ino = 0;
  at->type = FileType::kFree;
  at->seen = 0;  // never the index's view: the commit looks the name up
  at->shape = e->walk.shape;
  at->dir_ident = e->walk.ident;
  return true;
}

bool PoolNamespace::CacheAnswered(std::string_view path, const Status& st) {
  switch (st.err()) {
    case ESTALE: {
      std::string_view dir, name;
      if (SplitCreatePath(path, &dir, &name)) ParentCache::Forget(pool_->instance(), dir);
      return false;
    }
    case EACCES:
    case ENOENT:
    case ENOTDIR:
      return false;
    default:
      ParentCache::CountUse();
      return true;
  }
}

Status PoolNamespace::Mkdir(const Resolved& at, mode_t mode) {
  if (at.ino != 0) return Status::Error(EEXIST, "file exists");
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(at.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  InodeImage img;
  Inode& image = *img.get();
  uint64_t n;
  bool committed;
  // As the kernel's vfs_mkdir: the permission bits and the sticky bit of
  // the mode asked for; S_ISGID only from a set-group-ID parent (NewInode).
  const mode_t asked = mode & (S_IRWXU | S_IRWXG | S_IRWXO | S_ISVTX) & ~who_->umask;
  Status st = CommitNewInode(RecordType::kMkdir, FileType::kDirectory, at, asked, &image, &n, &committed);
  if (!st.ok() && n && !committed) pool_->inodes()->Free(n);
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
    pm::CopyNT(p, target.data(), target.size());  // fenced with the inode (CommitNewInode)
    image.target_block.store(block, std::memory_order_relaxed);
  }
  uint64_t n;
  bool committed;
  Status st = CommitNewInode(RecordType::kCreate, FileType::kSymlink, at, 0777, &image, &n, &committed);
  if (!st.ok() && !committed) {
    if (n)
      pool_->ReleaseInode(n);  // and the target block its image names
    else if (block)
      pool_->FreeBlock(block);
  }
  return st;
}

Status PoolNamespace::Link(const Resolved& from, const Resolved& to) {
  if (from.ino == 0) return Status::Error(ENOENT, "no such file");
  if (to.ino != 0) return Status::Error(EEXIST, "file exists");  // checked first, as the kernel's
  // Then, in the kernel's order: the link protection (may_linkat), the
  // directory's permission (may_create), the kind.
  UPFS_RETURN_IF_ERROR(MayLink(from.ino, from.type));
  Inode* din;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(to.dir, &din));
  UPFS_RETURN_IF_ERROR(Permit(din, kWantWrite | kWantExec));
  if (from.type == FileType::kDirectory) return Status::Error(EPERM, "hard link to a directory");
  NsRecord rec{RecordType::kLink, from.type, from.ino, to.dir, 0, 0, to.name, {}, {}};
  const auto touch = [&](CommitFlushes* later) {
    TouchDir(to.dir, later);
    TouchCtime(from.ino, /*durable=*/true, later);
  };
  return Commit(rec, [&]() -> Status {
    if (SameView(from) && SameView(to)) return Status::OK();  // both as Resolve found them
    const NsIndex* idx = pool_->index();
    NsEntry e;
    if (!idx->Find(from.dir, from.name, &e) || e.ino != from.ino) return Stale();
    if (!idx->IsDir(to.dir)) return Status::Error(ENOENT, "directory removed");
    if (idx->Find(to.dir, to.name, &e)) return Status::Error(EEXIST, "file exists");
    return Status::OK();
  }, {}, nullptr, touch);
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
  NsRecord rec{RecordType::kUnlink, at.type, at.ino, at.dir, 0, 0, at.name, {}, {}};
  bool last = false;  // the name going is the inode's last (set by the check at the tail)
  // A file that keeps a name has its ctime made durable with the record,
  // by the commit's fence, as the directory's times are.
  const auto touch = [&](CommitFlushes* later) {
    TouchDir(at.dir, later);
    if (!dir && !last) TouchCtime(at.ino, /*durable=*/true, later);
  };
  UPFS_RETURN_IF_ERROR(Commit(rec, [&]() -> Status {
    const NsIndex* idx = pool_->index();
    NsEntry e;
    if (!SameView(at)) {
      if (!idx->Find(at.dir, at.name, &e) || e.ino != at.ino) return Stale();
    }
    NsDirInfo info;
    if (dir && idx->Dir(at.ino, &info) && info.entries != 0)
      return Status::Error(ENOTEMPTY, "directory not empty");
    // Exact: this record commits at the tail, right after what was read.
    last = dir || idx->Nlink(at.ino, at.type) == 1;
    return Status::OK();
  }, {}, nullptr, touch));
  if (!dir && last) TouchCtime(at.ino, /*durable=*/false, nullptr);  // for its open descriptors' fstat
  if (last) SetUnlinked(at.ino);
  MaybeRelease(at.ino);
  return Status::OK();
}

Status PoolNamespace::CheckRename(const Resolved& from, const Resolved& to, unsigned flags,
                                  RenameSlashes slashes) const {
  if (flags & ~unsigned(RENAME_NOREPLACE | RENAME_EXCHANGE))
    return Status::Error(EINVAL, "unknown rename flags");
  const bool exchange = flags & RENAME_EXCHANGE;
  if (exchange && (flags & RENAME_NOREPLACE)) return Status::Error(EINVAL, "contradicting flags");
  // The kernel's do_renameat2 order: a path that ends in the root, "." or
  // ".." (no name: EBUSY, or EEXIST for the target of RENAME_NOREPLACE,
  // which no name may be), then the source's existence, the target's for
  // the flags, then the trailing slashes.
  if (from.name.empty() || from.ino == pool_->root_ino())
    return Status::Error(EBUSY, "cannot rename the root or a dot entry");
  if (to.name.empty() || to.ino == pool_->root_ino())
    return Status::Error((flags & RENAME_NOREPLACE) ? EEXIST : EBUSY, "cannot rename onto the root or a dot entry");
  if (from.ino == 0) return Status::Error(ENOENT, "no such file or directory");
  if (!exchange && to.ino != 0 && (flags & RENAME_NOREPLACE)) return Status::Error(EEXIST, "file exists");
  if (exchange) {
    if (to.ino == 0) return Status::Error(ENOENT, "no such file or directory");
    if (slashes.to && to.type != FileType::kDirectory) return Status::Error(ENOTDIR, "trailing slash");
  }
  if (from.type != FileType::kDirectory && (slashes.from || (!exchange && slashes.to)))
    return Status::Error(ENOTDIR, "trailing slash");
  if (from.dir != to.dir) {
    // The kernel's checks of lock_rename's trap, before any other: the
    // source may not be an ancestor of the target's directory, nor the
    // target an ancestor of the source's.
    const NsIndex* idx = pool_->index();
    std::shared_lock<SpinSharedMutex> g(pool_->index_mu());
    if (idx->IsAncestorOrSelf(from.ino, to.dir))
      return Status::Error(EINVAL, "a directory cannot move below itself");
    if (to.ino != 0 && idx->IsAncestorOrSelf(to.ino, from.dir))
      return Status::Error(exchange ? EINVAL : ENOTEMPTY, "the target holds the source");
  }
  if (from.ino == to.ino || exchange || to.ino == 0) return Status::OK();
  if (from.type == FileType::kDirectory && to.type != FileType::kDirectory)
    return Status::Error(ENOTDIR, "not a directory");
  if (from.type != FileType::kDirectory && to.type == FileType::kDirectory)
    return Status::Error(EISDIR, "is a directory");
  return Status::OK();
}

Status PoolNamespace::PermitRename(const Resolved& from, const Resolved& to, bool exchange) const {
  Inode *d1, *d2;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(from.dir, &d1));
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(to.dir, &d2));
  UPFS_RETURN_IF_ERROR(Permit(d1, kWantWrite | kWantExec));
  UPFS_RETURN_IF_ERROR(Permit(d2, kWantWrite | kWantExec));
  UPFS_RETURN_IF_ERROR(CheckSticky(from.dir, from.ino));
  if (to.ino != 0) UPFS_RETURN_IF_ERROR(CheckSticky(to.dir, to.ino));
  if (from.dir == to.dir) return Status::OK();
  // A directory that changes parent has its ".." rewritten.
  for (const Resolved* r : {&from, exchange ? &to : nullptr}) {
    if (!r || r->type != FileType::kDirectory) continue;
    Inode* in;
    UPFS_RETURN_IF_ERROR(pool_->InodeAt(r->ino, &in));
    UPFS_RETURN_IF_ERROR(Permit(in, kWantWrite));
  }
  return Status::OK();
}

Status PoolNamespace::Rename(const Resolved& from, const Resolved& to, unsigned flags, RenameSlashes slashes) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  UPFS_RETURN_IF_ERROR(CheckRename(from, to, flags, slashes));
  if (from.ino == to.ino) return Status::OK();  // two names of one file: nothing to do
  const bool exchange = flags & RENAME_EXCHANGE;
  UPFS_RETURN_IF_ERROR(PermitRename(from, to, exchange));
  const NsIndex* idx = pool_->index();
  NsRecord rec{exchange ? RecordType::kExchange : RecordType::kRename, from.type, from.ino,
               from.dir, to.dir, to.ino, from.name, to.name, {}};
  bool victim_last = false;  // the name replaced was its inode's last (set by the check at the tail)
  // Durable with the record (the commit's fence): both directories' times,
  // the ctime of what moved, and of what was exchanged with it or lost a
  // name to it and keeps another.
  const auto touch = [&](CommitFlushes* later) {
    TouchDir(from.dir, later);
    if (to.dir != from.dir) TouchDir(to.dir, later);
    TouchCtime(from.ino, /*durable=*/true, later);
    if (to.ino != 0 && (exchange || !victim_last)) TouchCtime(to.ino, /*durable=*/true, later);
  };
  UPFS_RETURN_IF_ERROR(Commit(rec, [&]() -> Status {
    // Both names as Resolve found them while nothing was committed since
    // (both lookups in this view): no need to look again.
    NsEntry b{to.ino, to.type};
    if (!SameView(from) || !SameView(to)) {
      NsEntry a;
      const bool has_a = idx->Find(from.dir, from.name, &a), has_b = idx->Find(to.dir, to.name, &b);
      if (!idx->IsDir(from.dir) || !idx->IsDir(to.dir) || !has_a || a.ino != from.ino ||
          (has_b ? b.ino : 0) != to.ino)
        return Stale();
    }
    const NsEntry* eb = to.ino != 0 ? &b : nullptr;
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
  }, {}, nullptr, touch));
  if (!exchange && to.ino != 0) {
    if (victim_last) {
      TouchCtime(to.ino, /*durable=*/false, nullptr);  // for its open descriptors' fstat
      SetUnlinked(to.ino);
    }
    MaybeRelease(to.ino);
  }
  return Status::OK();
}

Status PoolNamespace::List(uint64_t dir, Listing* out) {
  std::optional<EpochPin> pin;
  std::shared_lock<SpinSharedMutex> g;
  UPFS_RETURN_IF_ERROR(pool_->PinAndLockLatest(&pin, &g));
  NsDirInfo d;
  if (!pool_->index()->Dir(dir, &d)) return Status::Error(ENOENT, "directory removed");
  out->clear();
  out->reserve(d.entries + 2);
  out->Add(".", dir, FileType::kDirectory);
  out->Add("..", d.parent, FileType::kDirectory);
  pool_->index()->List(dir, [&](std::string_view name, const NsEntry& e) { out->Add(name, e.ino, e.type); });
  return Status::OK();
}

}  // namespace upfs
