// PoolNamespace's attribute and permission calls: readlink, stat in its
// forms, chmod, chown, utimens, access and the open check. The name
// changes are in namespace.cc, the holds in namespace_holds.cc.
#include <emmintrin.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "container/pool/fresh_inode.h"
#include "container/pool/namespace.h"
#include "container/pool/namespace_internal.h"
#include "engine/epoch_pin.h"
#include "medium/pm.h"
#include "util/time_ns.h"

namespace upfs {

namespace {
// A stat whose name keeps changing under it gives up (ENOENT) after this
// many looks, as open does with EAGAIN.
constexpr int kMaxStatRetries = 100;

// Zeroes *st with nine 16-byte stores. GCC makes a memset of this size a
// `rep stosq`, whose start-up was 44% of StatLocked's samples in a stat
// loop (a small directory); it turns a loop of stores back into one.
void ZeroStat(struct stat* st) {
  static_assert(sizeof(struct stat) % 16 == 0 && sizeof(struct stat) / 16 == 9);
  char* p = reinterpret_cast<char*>(st);
  const __m128i z = _mm_setzero_si128();
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 32), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 48), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 64), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 80), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 96), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 112), z);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 128), z);
}
}  // namespace

using namespace format;
using namespace format::pool;
using namespace ns_internal;

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

Status PoolNamespace::StatLocked(uint64_t ino, struct stat* st, bool* needs_file, uint64_t* ident) const {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t id = in->ident.load(std::memory_order_acquire);
  if (ident) *ident = id;
  const FileType kind = IdentKind(id);
  if (kind == FileType::kFree || kind > FileType::kSymlink) return Status::Error(ENOENT, "file removed");
  ZeroStat(st);
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
    if (kind == FileType::kSymlink) {
      st->st_size = off_t(in->target_len);
      // A target too long for the inode has a block of its own (tmpfs
      // keeps the same 128 bytes in its inode, longer ones in a page).
      if (in->target_len > kInlineTargetMax) st->st_blocks = blkcnt_t(kBlockSize / 512);
    }
  }
  *needs_file = kind == FileType::kRegular && in->log_head.load(std::memory_order_acquire) != 0;
  st->st_atim = NsTimespec(in->atime_ns.load());
  st->st_mtim = NsTimespec(uint64_t(ReportedMtime(in->times, in->created_ns)));
  st->st_ctim = NsTimespec(in->ctime_ns.load());
  return Status::OK();
}

Status PoolNamespace::StatFile(uint64_t ino, struct stat* st, bool held, const Resolved* named,
                               uint64_t ident) {
  FileStat fs;
  // The hint answers for the inode StatLocked read (same ident before and
  // after): no hold, no engine File, no replay of the log. Else the File
  // (made for this stat when nobody holds one) computes the size and
  // leaves a hint for the next stat.
  if (ident == 0 || !pool_->StatFromHint(ino, ident, &fs)) {
    uint32_t gen = 0;
    if (!held) UPFS_RETURN_IF_ERROR(TakeHold(ino, &gen, named));
    std::shared_ptr<File> f;
    Status s = pool_->FileOf(ino, &f);
    if (s.ok()) s = f->Stat(&fs);
    f.reset();
    if (!held) DropHold(ino, gen);
    UPFS_RETURN_IF_ERROR(s);
  }
  st->st_size = off_t(fs.size);
  st->st_blocks = blkcnt_t(fs.blocks * (kBlockSize / 512));
  // The file's mtime is ReportedMtime's; a data change moves its ctime.
  const uint64_t ctime = TimespecNs(st->st_ctim);
  st->st_ctim = NsTimespec(uint64_t(std::max<int64_t>(fs.data_ctime_ns, int64_t(ctime))));
  return Status::OK();
}

Status PoolNamespace::Stat(uint64_t ino, struct stat* st, bool held) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  bool needs_file;
  uint64_t ident = 0;
  {
    std::shared_lock<SpinSharedMutex> g(pool_->index_mu());
    UPFS_RETURN_IF_ERROR(StatLocked(ino, st, &needs_file, &ident));
  }
  return needs_file ? StatFile(ino, st, held, nullptr, ident) : Status::OK();
}

Status PoolNamespace::StatPath(std::string_view path, bool follow, struct stat* st, std::string* escape,
                               uint64_t start) {
  pool_->index()->PrefetchLikely(LastComponent(path));
  std::optional<EpochPin> pin;
  // One pin and one hold of the index lock for the lookup and the
  // attributes, entered with one fence: stat is the call programs make most.
  std::shared_lock<SpinSharedMutex> g;
  UPFS_RETURN_IF_ERROR(pool_->PinAndLockLatest(&pin, &g));
  for (int attempt = 0;; ++attempt) {
    Resolved r;
    bool needs_file;
    uint64_t ident = 0;
    if (!g.owns_lock()) UPFS_RETURN_IF_ERROR(pool_->LockLatest(&g));
    UPFS_RETURN_IF_ERROR(ResolveLocked(path, follow, &r, escape, start));
    if (r.ino == 0) return Status::Error(ENOENT, "no such file or directory");
    UPFS_RETURN_IF_ERROR(StatLocked(r.ino, st, &needs_file, &ident));
    g.unlock();
    if (!needs_file) return Status::OK();
    // The size comes from the file's engine, under a hold taken after the
    // lock: if the name has moved on meanwhile (removed, or its inode
    // freed and made again for another file), look again, as open does.
    Status s = StatFile(r.ino, st, false, &r, ident);
    if (s.err() != ENOENT || attempt >= kMaxStatRetries) return s;
  }
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
  SealIfFresh(in, pool_->access());  // and line 0, ident's, is written back below
  pm::Store64(&in->mode, mode);
  pm::Store64(&in->ctime_ns, Now());
  pm::Flush(&in->mode, 32);
  pm::Fence();
  return Status::OK();
}

Status PoolNamespace::DropSetIdForWrite(uint64_t ino) {
  if (who_->uid == 0) return Status::OK();  // CAP_FSETID
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  // S_ISGID without group execute goes too when the writer is not in the
  // file's group (Linux 6's setattr_should_drop_sgid).
  const bool in_group = who_->InGroup(OwnerGid(in->owner.load(std::memory_order_acquire)));
  uint64_t mode = in->mode.load(std::memory_order_acquire);
  for (;;) {
    uint64_t m = mode & ~uint64_t(S_ISUID);
    if ((mode & S_IXGRP) || !in_group) m &= ~uint64_t(S_ISGID);
    if (m == mode) return Status::OK();
    SealIfFresh(in, pool_->access());  // line 0, the ident's, is written back below
    if (pm::Cas64(&in->mode, mode, m)) break;
  }
  pm::Store64(&in->ctime_ns, Now());
  pm::Flush(&in->mode, 32);
  pm::Fence();
  return Status::OK();
}

Status PoolNamespace::TruncateEmpty(uint64_t ino) {
  UPFS_RETURN_IF_ERROR(DropSetIdForWrite(ino));
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t now = Now();
  SealIfFresh(in, pool_->access());  // line 0, the ident's, is written back below
  pm::Store64(&in->times.mtime_ns, now);
  pm::Flush(&in->times.mtime_ns, 8);
  pm::Store64(&in->ctime_ns, now);
  pm::Flush(&in->ctime_ns, 8);
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
  SealIfFresh(in, pool_->access());
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
  // Bad nanoseconds first, whoever asks: the kernel's do_utimes checks
  // them before any permission (a non-owner gets EINVAL, not EPERM).
  for (int i = 0; ts && i < 2; ++i)
    if (ts[i].tv_nsec != UTIME_NOW && ts[i].tv_nsec != UTIME_OMIT &&
        (ts[i].tv_nsec < 0 || ts[i].tv_nsec >= 1000000000))
      return Status::Error(EINVAL, "bad nanoseconds");
  const bool nothing = ts && ts[0].tv_nsec == UTIME_OMIT && ts[1].tv_nsec == UTIME_OMIT;
  if (nothing) return Status::OK();
  if (!owner) {
    if (!both_now) return Status::Error(EPERM, "not the owner");
    UPFS_RETURN_IF_ERROR(Permit(in, kWantWrite));
  }
  const uint64_t now = Now();
  auto value = [&](const struct timespec& t) {
    if (t.tv_nsec == UTIME_NOW) return now;
    return TimespecNs(t);
  };
  SealIfFresh(in, pool_->access());
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

Status PoolNamespace::MayOpen(uint64_t ino, int acc, bool trunc, bool noatime) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  int want = 0;
  if (acc != O_WRONLY) want |= kWantRead;
  if (acc != O_RDONLY || trunc) want |= kWantWrite;
  UPFS_RETURN_IF_ERROR(Permit(in, want));
  // Then, as the kernel's may_open: O_NOATIME only by the owner or root.
  if (noatime && who_->uid != 0 && OwnerUid(in->owner.load(std::memory_order_acquire)) != who_->uid)
    return Status::Error(EPERM, "O_NOATIME on a file the caller does not own");
  return Status::OK();
}

}  // namespace upfs
