// PoolNamespace's path resolution, in the caller's thread under the index
// lock held shared (every lookup, stat and open starts here), and the
// permission check it and the other parts use; the credentials it checks.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/namespace_internal.h"
#include "container/pool/parent_cache.h"
#include "engine/epoch_pin.h"
#include "util/test_hook.h"

namespace upfs {

using namespace format;
using namespace format::pool;
using namespace ns_internal;

namespace {

constexpr int kMaxSymlinkDepth = 40;  // as the kernel's MAXSYMLINKS

uint64_t ParentOf(const NsIndex& idx, uint64_t dir) {
  NsDirInfo i;
  return idx.Dir(dir, &i) ? i.parent : dir;
}

}  // namespace

bool Credentials::InGroup(gid_t g) const {
  return g == gid || std::find(groups.begin(), groups.end(), g) != groups.end();
}

namespace {

// A /proc/sys switch's level, 0 to 9 (absent or unreadable: 0, as a
// kernel without it behaves).
int SysctlLevel(const char* path) {
  char c = '0';
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const bool read = ::pread(fd, &c, 1, 0) == 1;  // pread: the preload build renames it to libc's
  ::close(fd);
  return read && c >= '0' && c <= '9' ? c - '0' : 0;
}

}  // namespace

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
  c.protected_hardlinks = SysctlLevel("/proc/sys/fs/protected_hardlinks") != 0;
  c.protected_symlinks = SysctlLevel("/proc/sys/fs/protected_symlinks") != 0;
  c.protected_regular = SysctlLevel("/proc/sys/fs/protected_regular");
  return c;
}

Status PoolNamespace::MayFollow(const Inode* din, uint64_t link) const {
  // The kernel's may_follow_link, for root too (no capability passes it).
  if (!who_->protected_symlinks) return Status::OK();
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(link, &in));
  const uid_t owner = OwnerUid(in->owner.load(std::memory_order_acquire));
  if (owner == who_->uid) return Status::OK();
  const uint64_t dmode = din->mode.load(std::memory_order_acquire);
  if ((dmode & (S_ISVTX | S_IWOTH)) != (S_ISVTX | S_IWOTH)) return Status::OK();  // not sticky and world-writable
  if (OwnerUid(din->owner.load(std::memory_order_acquire)) == owner) return Status::OK();
  return Status::Error(EACCES, "another user's symbolic link in a sticky world-writable directory "
                               "(protected_symlinks)");
}

Status PoolNamespace::MayLink(uint64_t ino, FileType type) const {
  // The kernel's may_linkat: the owner (or root) may; anyone else only to
  // a safe source (safe_hardlink_source: a regular file, not set-user-ID
  // nor executable set-group-ID, that the caller may read and write).
  if (!who_->protected_hardlinks || who_->uid == 0) return Status::OK();
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  if (OwnerUid(in->owner.load(std::memory_order_acquire)) == who_->uid) return Status::OK();
  const uint64_t mode = in->mode.load(std::memory_order_acquire);
  const bool safe = type == FileType::kRegular && !(mode & S_ISUID) &&
                    (mode & (S_ISGID | S_IXGRP)) != (S_ISGID | S_IXGRP) &&
                    Permit(in, kWantRead | kWantWrite).ok();
  if (safe) return Status::OK();
  return Status::Error(EPERM, "hard link to a file the caller neither owns nor may read and write "
                              "(protected_hardlinks)");
}

Status PoolNamespace::MayCreateOver(uint64_t dir, uint64_t ino) const {
  // The kernel's may_create_in_sticky for a regular file (a pool has no
  // FIFOs), root included.
  if (who_->protected_regular == 0) return Status::OK();
  Inode *din, *in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(dir, &din));
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  const uint64_t dmode = din->mode.load(std::memory_order_acquire);
  if (!(dmode & S_ISVTX)) return Status::OK();
  const uid_t owner = OwnerUid(in->owner.load(std::memory_order_acquire));
  const uid_t dir_owner = OwnerUid(din->owner.load(std::memory_order_acquire));
  if (owner == dir_owner || owner == who_->uid) return Status::OK();
  if ((dmode & S_IWOTH) || ((dmode & S_IWGRP) && who_->protected_regular >= 2))
    return Status::Error(EACCES, "another user's file in a sticky directory opened with O_CREAT "
                                 "(protected_regular)");
  return Status::OK();
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
  // Byte loops, not find/memchr: components are short, and a library call
  // per component was 8% of a stat's samples.
  bool Next(std::string_view* c) {
    const char* p = rest_.data();
    const char* const end = p + rest_.size();
    while (p < end && *p == '/') ++p;
    if (p == end) {
      rest_ = {};
      return false;
    }
    const char* q = p;
    while (q < end && *q != '/') ++q;
    *c = std::string_view(p, size_t(q - p));
    rest_ = std::string_view(q, size_t(end - q));
    return true;
  }
  bool AtEnd() const {
    for (char ch : rest_)
      if (ch != '/') return false;
    return true;
  }
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

// *out = Resolved{dir, name, ino, type}, without a temporary Resolved
// (its name's bytes copied twice).
void SetResolved(Resolved* out, uint64_t dir, std::string_view name, uint64_t ino, FileType type) {
  out->dir = dir;
  out->name.assign(name);
  out->ino = ino;
  out->type = type;
}

// *out as a walk whose last component is `name` in directory `dir` finds
// it, when the directory's search permission is already checked (index
// lock held). False: `dir` is no directory of the index, or `name` is a
// symbolic link to follow (the walk answers both).
bool LastNameIn(const NsIndex& idx, uint64_t dir, std::string_view name, bool follow, Resolved* out) {
  NsDirInfo info;
  NsEntry found;
  bool exists = false;
  if (!idx.DirAndFind(dir, name, &info, &found, &exists)) return false;
  if (!exists) {
    SetResolved(out, dir, name, 0, FileType::kFree);
    return true;
  }
  if (found.type == FileType::kSymlink && follow) return false;
  SetResolved(out, dir, name, found.ino, found.type);
  return true;
}

}  // namespace

namespace {
TestHook g_before_hold;
}  // namespace

void PoolNamespace::BetweenLookupAndHoldForTest(void (*fn)(void*), void* arg) { g_before_hold.Set(fn, arg); }

Status PoolNamespace::Resolve(std::string_view path, bool follow, Resolved* out, std::string* escape,
                              uint64_t start) {
  return ResolveHeld(path, follow, out, nullptr, nullptr, escape, start);
}

Status PoolNamespace::ResolveHeld(std::string_view path, bool follow, Resolved* out, uint32_t* held_gen,
                                  bool* held, std::string* escape, uint64_t start) {
  if (held) *held = false;
  pool_->index()->PrefetchLikely(LastComponent(path));
  std::optional<EpochPin> pin;
  Inode* counted = nullptr;
  {
    std::shared_lock<SpinSharedMutex> g;
    UPFS_RETURN_IF_ERROR(pool_->PinAndLockLatest(&pin, &g));
    UPFS_RETURN_IF_ERROR(ResolveLocked(path, follow, out, escape, start));
    out->seen = pool_->log()->view();
    if (!held || out->ino == 0 || !pool_->InodeAt(out->ino, &counted).ok()) return Status::OK();
    g_before_hold.Run();
    // TakeHold's protocol, its second look made by this one: the count
    // first (sequentially consistent, as a remover's commit, its unlinked
    // bit and its read of the count are), then nothing committed since the
    // lookup, so that the name led to this inode after the hold was there
    // (no remover can free it unseen, nor free it and make it again for
    // another file); then the inode's unlinked bit and type, as TakeHold.
    counted->open_count.fetch_add(1, std::memory_order_seq_cst);
    if (pool_->IndexCurrent()) {
      const uint64_t id = counted->ident.load(std::memory_order_seq_cst);
      if (!(id & kIdentUnlinked) && IdentKind(id) == out->type) {
        *held_gen = IdentGen(id);
        *held = true;
        return Status::OK();
      }
    }
  }
  // Something moved meanwhile: the count given back (the last holder of a
  // file whose last name went releases it) outside the lock; the caller
  // takes the hold the long way, or finds the name gone.
  if (counted->open_count.fetch_sub(1, std::memory_order_seq_cst) == 1) MaybeRelease(out->ino);
  return Status::OK();
}

Status PoolNamespace::ResolveTwo(std::string_view path_a, uint64_t start_a, Resolved* a, std::string* escape_a,
                                 std::string_view path_b, uint64_t start_b, Resolved* b, std::string* escape_b) {
  pool_->index()->PrefetchLikely(LastComponent(path_a));
  std::optional<EpochPin> pin;
  std::shared_lock<SpinSharedMutex> g;
  UPFS_RETURN_IF_ERROR(pool_->PinAndLockLatest(&pin, &g));
  UPFS_RETURN_IF_ERROR(ResolveLocked(path_a, /*follow=*/false, a, escape_a, start_a));
  if (!ResolveSibling(path_a, start_a, *a, path_b, start_b, b))
    UPFS_RETURN_IF_ERROR(ResolveLocked(path_b, /*follow=*/false, b, escape_b, start_b));
  a->seen = b->seen = pool_->log()->view();
  return Status::OK();
}

bool PoolNamespace::FromKeptParent(std::string_view dir, std::string_view name, bool follow,
                                   Resolved* out) const {
  const ParentCache::Entry* e = ParentCache::Find(pool_->instance(), dir);
  const NsIndex& idx = *pool_->index();
  // The same shape: no directory moved since the walk, so the path still
  // leads through the same directories, unless the last was removed (and
  // its inode perhaps made a directory again elsewhere): its ident says.
  if (!e || e->walk.shape != idx.shape()) return false;
  const uint32_t n = e->walk.n;
  UPFS_ASSERT(n != 0 && e->walk.plain);
  for (uint32_t i = 0; i < n; ++i) {
    Inode* d;
    if (!pool_->InodeAt(e->walk.dirs[i], &d).ok() || !Permit(d, kWantExec).ok()) return false;
    if (i == n - 1 && d->ident.load(std::memory_order_acquire) != e->walk.ident) return false;
  }
  if (!LastNameIn(idx, e->walk.dirs[n - 1], name, follow, out)) return false;
  ParentCache::CountLookup();
  return true;
}

bool PoolNamespace::ResolveSibling(std::string_view path_a, uint64_t start_a, const Resolved& a,
                                   std::string_view path_b, uint64_t start_b, Resolved* b) const {
  // A walk is a function of the index's view, the path and the start: in
  // one hold of the lock, the same directory bytes lead to the same
  // directory. a's last component is a plain name without a trailing
  // slash (SplitCreatePath), so its walk ended in that directory, never
  // in a link's target or a dot entry's.
  std::string_view dir_a, name_a, dir_b, name_b;
  if (start_a != start_b || !SplitCreatePath(path_a, &dir_a, &name_a) ||
      !SplitCreatePath(path_b, &dir_b, &name_b) || dir_a != dir_b)
    return false;
  return LastNameIn(*pool_->index(), a.dir, name_b, /*follow=*/false, b);
}

bool PoolNamespace::SameView(const Resolved& r) const {
  // The index is a function of the records it has applied: the same view
  // means no record applied since and no reload, so the same names. (The
  // log position said so too, but the caller's own reservation, stepped
  // over by the catch-up before the check, moved it: every commit then
  // looked its names up again, under the exclusive lock.) Index lock held.
  return r.seen == pool_->log()->view();
}

Status PoolNamespace::ResolveLocked(std::string_view path, bool follow, Resolved* out, std::string* escape,
                                    uint64_t start) {
  // An empty path names nothing (the kernel's ENOENT; calls that take ""
  // for a descriptor, AT_EMPTY_PATH, never get here).
  if (path.empty()) return Status::Error(ENOENT, "empty path");
  std::string_view dir, name;
  const bool split = keep_parents_ && start == 0 && SplitCreatePath(path, &dir, &name);
  if (split && FromKeptParent(dir, name, follow, out)) return Status::OK();
  WalkTrace trace;
  WalkTrace* const traced = split ? &trace : nullptr;
  if (traced) trace.shape = pool_->index()->shape();
  UPFS_RETURN_IF_ERROR(Walk(path, follow, out, escape, start, traced));
  if (!traced) return Status::OK();
  // A plain walk that reached the last component's directory: kept, so
  // that the next new name there needs no walk (ParentCache).
  if (trace.plain && trace.n != 0 && trace.dirs[trace.n - 1] == out->dir && out->name.view() == name)
    ParentCache::Remember(pool_->instance(), dir, trace);
  return Status::OK();
}

Status PoolNamespace::WalkStart(uint64_t start, uint64_t* cur) const {
  *cur = pool_->root_ino();
  if (start == 0 || start == *cur) return Status::OK();
  // A directory descriptor's directory: removed since it was opened,
  // nothing can be found or made in it (ENOENT, as in the kernel).
  if (!pool_->index()->IsDir(start)) {
    Inode* in;
    UPFS_RETURN_IF_ERROR(pool_->InodeAt(start, &in));
    const bool dir = IdentKind(in->ident.load(std::memory_order_acquire)) == FileType::kDirectory;
    return Status::Error(dir ? ENOENT : ENOTDIR, dir ? "directory removed" : "not a directory");
  }
  *cur = start;
  return Status::OK();
}

Status PoolNamespace::Walk(std::string_view path, bool follow, Resolved* out, std::string* escape,
                           uint64_t start, WalkTrace* trace) {
  const NsIndex& idx = *pool_->index();
  // A slash after the last name, which a symbolic link's body followed
  // as the last name may add (and the path's own still applies after it).
  bool trailing_slash = !path.empty() && path.back() == '/';
  PathCursor parts(path);
  uint64_t cur;
  UPFS_RETURN_IF_ERROR(WalkStart(start, &cur));
  int links = 0;
  out->dir = cur;
  out->name.clear();
  out->ino = cur;
  out->type = FileType::kDirectory;
  std::string target;
  for (std::string_view c; parts.Next(&c);) {
    if (c.size() > kMaxNameLen) return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
    const bool dot = c == "." || c == "..";
    NsDirInfo d;
    NsEntry found;
    bool exists = false;
    // The name is looked up with its directory, and used only once the
    // directory's search permission is checked.
    if (!(dot ? idx.Dir(cur, &d) : idx.DirAndFind(cur, c, &d, &found, &exists)))
      return Status::Error(ENOTDIR, "not a directory");
    Inode* din;
    UPFS_RETURN_IF_ERROR(pool_->InodeAt(cur, &din));
    UPFS_RETURN_IF_ERROR(Permit(din, kWantExec));
    if (trace) {
      trace->Add(cur, din->ident.load(std::memory_order_acquire));
      if (dot) trace->plain = false;
    }
    const bool last = parts.AtEnd();
    if (last && trailing_slash && for_create_ && !dot)
      return Status::Error(EISDIR, "O_CREAT of a name followed by a slash");
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
    if (!exists) {
      if (!last) return Status::Error(ENOENT, "no such file or directory");
      SetResolved(out, cur, c, 0, FileType::kFree);
      return Status::OK();
    }
    if (found.type == FileType::kSymlink && (!last || follow || trailing_slash)) {
      if (++links > kMaxSymlinkDepth) return Status::Error(ELOOP, "too many symbolic links");
      UPFS_RETURN_IF_ERROR(MayFollow(din, found.ino));
      if (trace) trace->plain = false;
      UPFS_RETURN_IF_ERROR(Readlink(found.ino, &target));
      if (last && !target.empty() && target.back() == '/') trailing_slash = true;
      if (!target.empty() && target[0] == '/') {
        if (escape) *escape = target + std::string(parts.rest());
        return Status::Error(EXDEV, "symbolic link leaves the pool");
      }
      parts.Prepend(target);
      if (parts.AtEnd()) *out = Resolved{ParentOf(idx, cur), "", cur, FileType::kDirectory};
      continue;
    }
    if (last) {
      SetResolved(out, cur, c, found.ino, found.type);
      break;
    }
    if (found.type != FileType::kDirectory) return Status::Error(ENOTDIR, "not a directory");
    cur = found.ino;
  }
  if (trailing_slash && out->ino != 0 && out->type != FileType::kDirectory)
    return Status::Error(ENOTDIR, "not a directory");
  return Status::OK();
}

}  // namespace upfs
