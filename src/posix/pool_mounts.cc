#include "posix/pool_mounts.h"

#include <cstring>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <shared_mutex>
#include <vector>

#include "posix/api_internal.h"
#include "posix/descriptor_table.h"
#include "posix/op_guard.h"
#include "posix/path_shape.h"
#include "posix/pool_api.h"
#include "posix/pool_node.h"
#include "util/assert.h"
#include "util/leak.h"

namespace upfs {
namespace {

// Writers (mount, umount, a fork child's reattachment) hold g_mounts_mu
// and publish a new snapshot of g_mounts in g_table; readers load the
// snapshot inside their call's OpGuard, and an old one is freed after the
// calls that may read it (a rwlock's two locked operations per path call
// were ~3% of a stat's samples).
struct MountTable {
  std::vector<Mount*> all;
  // Whether a mount directory lies below another's: only then can a path
  // that a mount begins as written belong to a deeper one.
  bool nested = false;
};
std::shared_mutex g_mounts_mu;
std::vector<std::unique_ptr<Mount>> g_mounts;  // mounts are never moved while mounted
std::atomic<const MountTable*> g_table{nullptr};
std::atomic<int> g_mount_count{0};

// Caller holds g_mounts_mu exclusively, after changing g_mounts.
void PublishTableLocked() {
  auto* t = new MountTable;
  for (auto& m : g_mounts) t->all.push_back(m.get());
  for (const Mount* a : t->all)
    for (const Mount* b : t->all)
      if (b->dir.size() > a->dir.size() && b->dir.starts_with(a->dir) && b->dir[a->dir.size()] == '/')
        t->nested = true;
  const MountTable* old = g_table.exchange(t, std::memory_order_acq_rel);
  g_mount_count.store(int(g_mounts.size()), std::memory_order_release);
  if (old) RetireAfterOps([old] { delete old; });
}

// The current snapshot; inside an OpGuard, and only once something was
// mounted (g_mount_count != 0 seen).
const MountTable& Table() {
  const MountTable* t = g_table.load(std::memory_order_acquire);
  UPFS_ASSERT(t != nullptr);
  return *t;
}
// Set in a fork child whose mounts have no attachment of their own yet.
std::atomic<bool> g_reattach{false};

// The child's first path call: attaches every mount's pool for this
// process. A pool that cannot be attached (gone, damaged, no free process
// slot) is unmounted in the child, so that its paths fail in the kernel's
// tree (ENOENT, unless the directory exists there) rather than reaching a
// pool through the parent's attachment.
void ReattachAfterFork() {
  std::unique_lock<std::shared_mutex> g(g_mounts_mu);
  if (!g_reattach.load(std::memory_order_acquire)) return;
  for (auto it = g_mounts.begin(); it != g_mounts.end();) {
    Mount& m = **it;
    if (!m.pool && !Pool::Attach(m.pool_file, &m.pool).ok()) {
      IntentionallyLeaked(it->release());  // calls that looked it up may still run
      it = g_mounts.erase(it);
      continue;
    }
    ++it;
  }
  PublishTableLocked();
  g_reattach.store(false, std::memory_order_release);
}

// Lexically normal absolute form: no ".", "..", or repeated slashes.
std::string Normalize(const std::string& abs) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < abs.size()) {
    size_t j = abs.find('/', i);
    if (j == std::string::npos) j = abs.size();
    std::string c = abs.substr(i, j - i);
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!c.empty() && c != ".") {
      parts.push_back(std::move(c));
    }
    i = j + 1;
  }
  std::string out;
  for (const std::string& p : parts) out += "/" + p;
  if (!abs.empty() && abs.back() == '/' && !out.empty()) out += "/";
  return out.empty() ? "/" : out;
}

}  // namespace

bool AbsolutePath(int dirfd, const char* path, std::string* out) {
  if (path[0] == '/') {
    *out = path;
    return true;
  }
  if (dirfd == AT_FDCWD) {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) return false;
    *out = std::string(cwd) + "/" + path;
    return true;
  }
  // (A pool directory's descriptor never gets here: InPool starts from its
  // inode, and it has no kernel path.)
  char link[64], target[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  *out = std::string(target) + "/" + path;
  return true;
}

namespace {
bool Absolute(int dirfd, const char* path, std::string* out) { return AbsolutePath(dirfd, path, out); }
}  // namespace

Mount* MountOfPool(const Pool* pool) {
  if (g_mount_count.load(std::memory_order_acquire) == 0) return nullptr;
  for (Mount* m : Table().all)
    if (m->pool.get() == pool) return m;
  return nullptr;
}

namespace {

// The mount whose directory is exactly `dir` (lexically normal), or null.
Mount* MountAt(const MountTable& t, std::string_view dir) {
  for (Mount* m : t.all)
    if (m->dir == dir) return m;
  return nullptr;
}

// The deepest mount whose directory begins `abs` as written, or null.
Mount* DeepestPrefix(const MountTable& t, std::string_view abs) {
  Mount* best = nullptr;
  for (Mount* m : t.all) {
    const std::string_view d = m->dir;
    if (abs.starts_with(d) && (abs.size() == d.size() || abs[d.size()] == '/') &&
        (!best || d.size() > best->dir.size()))
      best = m;
  }
  return best;
}

// `inner` must outlive the call (the caller's path).
void SetPath(PoolPath* out, Mount* m, std::string_view inner, uint64_t start = 0) {
  out->mount = m;
  out->inner = inner;
  out->start = start;
}

void SetOwnedPath(PoolPath* out, Mount* m, std::string inner, uint64_t start = 0) {
  out->owned = std::move(inner);
  SetPath(out, m, out->owned, start);
}

// Splits an absolute path with "." or ".." or "//" in it at the mount it
// enters. Only the part up to the mount directory is normalized lexically
// (it is the kernel's, and the mount directory need not exist there); the
// rest goes to the pool's resolver as written, so that ".." after a
// symbolic link and "d/." keep the kernel's meaning. A ".." that climbs
// above the pool's root is found there, step by step, and the call goes
// on from the mount directory's parent (pool_escape.h).
bool SplitAtMount(const MountTable& t, const std::string& abs, PoolPath* out) {
  std::vector<std::string_view> parts;
  std::string norm;
  size_t i = 0;
  while (i < abs.size()) {
    size_t j = abs.find('/', i);
    if (j == std::string::npos) j = abs.size();
    std::string_view c(abs.data() + i, j - i);
    i = j + 1;
    if (c.empty() || c == ".") {
      // nothing
    } else if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else {
      parts.push_back(c);
    }
    norm.clear();
    for (std::string_view p : parts) (norm += '/') += p;
    Mount* m = norm.empty() ? nullptr : MountAt(t, norm);
    if (!m) continue;
    std::string rest = i < abs.size() ? abs.substr(i) : std::string();
    SetOwnedPath(out, m, "/" + rest);
    return true;
  }
  return false;
}

// A path a mount took whose rest reaches a mount below it once "//" and
// "." are dropped ("/outer//inner/f", "/outer/./inner/f"), or as it is
// after SplitAtMount (which stops at the first mount it meets), goes to
// that mount, as the kernel's walk would enter it. Only with nested
// mounts. A ".." in the rest stays the outer pool's to resolve:
// "/outer/d/../inner/f" is the outer pool's "inner/f", where the kernel,
// whose walk meets the mount point, would be in the inner pool.
bool EnterNested(const MountTable& t, PoolPath* out) {
  if (!t.nested) return true;
  const std::string whole =
      out->mount->dir + (NeedsSplit(out->inner) ? WithoutNoOpComponents(out->inner) : std::string(out->inner));
  Mount* deeper = DeepestPrefix(t, whole);
  if (deeper == out->mount) return true;
  const size_t d = deeper->dir.size();
  SetOwnedPath(out, deeper, whole.size() == d ? std::string("/") : whole.substr(d));
  return true;
}

// InPool's search, inside the guard it took.
// A path of PATH_MAX bytes or more (the kernel counts its NUL) is no
// pool's: the kernel, which the call then goes to, refuses it
// (ENAMETOOLONG) before it looks at it.
bool FindMount(int dirfd, const char* path, bool from_fd, PoolPath* out) {
  if (path[0] != '/' && PathTooLong(path)) return false;
  if (from_fd) {
    // Relative to a pool directory's descriptor: from its inode, wherever
    // the directory has been renamed since (the path it was opened by is
    // not where it is any more).
    if (OpenFile* of = Lookup(dirfd); of && of->d->pool) {
      const PoolNode& n = *of->d->pool;
      Mount* m = MountOfPool(n.pool);
      if (!m) return false;
      // An empty path stays empty: the resolver's ENOENT, as the kernel's.
      SetOwnedPath(out, m, *path ? "/" + std::string(path) : std::string(), n.ino);
      return true;
    }
  }
  // An absolute path is looked at where it is; only a relative one is
  // copied behind its directory's path (a copy of a long path, allocated
  // and freed, was 3% of a stat's samples in the benchmark).
  std::string joined;
  std::string_view abs;
  if (path[0] == '/') {
    abs = path;
    if (abs.size() >= PATH_MAX) return false;
  } else {
    if (!Absolute(dirfd, path, &joined)) return false;
    abs = joined;
  }
  const MountTable& t = Table();
  // The common case first: a mount directory (lexically normal) that
  // begins the path as written. What follows it, "." and ".." and "//"
  // included, is the pool resolver's, as SplitAtMount would leave it; a
  // path that reaches a mount only once normalized is split. (Scanning
  // every path for "." and "//" first was 6% of a stat's instructions.)
  // The deepest mount wins, as in the kernel.
  Mount* best = DeepestPrefix(t, abs);
  if (!best) return NeedsSplit(abs) && SplitAtMount(t, std::string(abs), out) && EnterNested(t, out);
  const size_t d = best->dir.size();
  if (t.nested && NeedsSplit(abs.substr(d))) {
    SetOwnedPath(out, best, std::string(abs.substr(d)));
    return EnterNested(t, out);
  }
  if (abs.size() == d) SetPath(out, best, "/");
  else if (abs.data() == path) SetPath(out, best, abs.substr(d));
  else SetOwnedPath(out, best, std::string(abs.substr(d)));  // `joined` ends with this call
  return true;
}

}  // namespace

bool PathTooLong(const char* path) { return path && strnlen(path, PATH_MAX) == PATH_MAX; }

bool InPool(int dirfd, const char* path, PoolPath* out) {
  if (g_mount_count.load(std::memory_order_acquire) == 0 || !path) return false;
  if (g_reattach.load(std::memory_order_acquire)) ReattachAfterFork();
  UPFS_ASSERT(!out->guard && !out->mount);
  // The guard before the table: a mount this call finds is freed only
  // after the call ends, wherever an upfs_umount comes in.
  const bool from_fd = path[0] != '/' && dirfd != AT_FDCWD;
  out->guard.emplace(from_fd ? DescriptorUse::Only(dirfd) : DescriptorUse::None());
  if (FindMount(dirfd, path, from_fd, out)) return true;
  out->guard.reset();
  return false;
}

Status MountPool(const std::string& pool, const std::string& dir) {
  std::string abs;
  if (!Absolute(AT_FDCWD, dir.c_str(), &abs)) return Status::FromErrno("mount point");
  abs = Normalize(abs);
  if (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  if (abs == "/") return Status::Error(EINVAL, "a pool cannot be mounted at /");
  {
    std::shared_lock<std::shared_mutex> g(g_mounts_mu);
    for (auto& m : g_mounts)
      if (m->dir == abs) return Status::Error(EBUSY, abs + " is mounted already");
  }
  auto m = std::make_unique<Mount>();
  UPFS_RETURN_IF_ERROR(Pool::Attach(pool, &m->pool));
  m->pool_file = pool;
  m->dir = abs;
  m->effective = Credentials::Current(false);
  m->real = Credentials::Current(true);
  std::unique_lock<std::shared_mutex> g(g_mounts_mu);
  for (auto& o : g_mounts)
    if (o->dir == abs) return Status::Error(EBUSY, abs + " is mounted already");
  g_mounts.push_back(std::move(m));
  PublishTableLocked();
  return Status::OK();
}

Status UnmountPool(const std::string& dir) {
  std::string abs;
  if (!Absolute(AT_FDCWD, dir.c_str(), &abs)) return Status::FromErrno("mount point");
  abs = Normalize(abs);
  if (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  // A descriptor closed by a thread whose close had to wait for another
  // thread's call may still hold the pool, freed by the end of the next
  // call: free it now, or the count below says EBUSY though every
  // descriptor was closed (DetachWhileAnotherProcessListsLeaksNoBlocks
  // failed so once in CI, its listing threads joined before the unmount).
  ReclaimEndedCalls();
  std::unique_ptr<Mount> gone;
  {
    std::unique_lock<std::shared_mutex> g(g_mounts_mu);
    for (auto it = g_mounts.begin(); it != g_mounts.end(); ++it) {
      if ((*it)->dir != abs) continue;
      // Leaving first, then the count (both sequentially consistent, as
      // an open's count and its look at the flag are): an open counted
      // after this read of its shard sees the flag (MountLeft).
      Mount& m = **it;
      m.leaving.store(true, std::memory_order_seq_cst);
      if (m.pool && m.pool->Users() != 0) {
        m.leaving.store(false, std::memory_order_seq_cst);
        return Status::Error(EBUSY, abs + ": descriptors of the pool are open");
      }
      gone = std::move(*it);
      g_mounts.erase(it);
      PublishTableLocked();
      break;
    }
  }
  if (!gone) return Status::Error(EINVAL, abs + " is not a mount point");
  // Calls that looked the mount up before it went may still be running:
  // the pool goes when they are done.
  Mount* m = gone.release();
  RetireAfterOps([m] { delete m; });
  return Status::OK();
}

bool MountLeft(const Mount& m) {
  if (!m.leaving.load(std::memory_order_seq_cst)) return false;
  // An unmount is deciding under the table's lock, or has taken m away:
  // its answer is known once the lock is free.
  std::shared_lock<std::shared_mutex> g(g_mounts_mu);
  return m.leaving.load(std::memory_order_seq_cst);
}

void LockMountsForFork() { g_mounts_mu.lock(); }

void UnlockMountsInParent() { g_mounts_mu.unlock(); }

void PoolsAfterForkInChild() {
  // One thread, nothing else running. The table's lock, taken in the
  // prepare handler, is made anew: an unlock alone would not count as the
  // writer's (glibc knows the writer by thread id, which differs in the
  // child) and would leave it held. The unlock first is for lock checkers
  // (ThreadSanitizer), which know this thread as the holder and object to
  // destroying a held lock; destroy + init then resets glibc's state.
  auto* rw = static_cast<pthread_rwlock_t*>(g_mounts_mu.native_handle());
  pthread_rwlock_unlock(rw);
  pthread_rwlock_destroy(rw);
  pthread_rwlock_init(rw, nullptr);
  for (auto& m : g_mounts) {
    if (!m->pool) continue;
    m->pool->ForgetAfterFork();
    IntentionallyLeaked(m->pool.release());
  }
  if (!g_mounts.empty()) g_reattach.store(true, std::memory_order_release);
  // A pool descriptor's hold on its inode, its engine File and its slots
  // are the parent's: the child drops the descriptor unclosed (calls on
  // its number fail with EBADF), and leaks it.
  ForEachDescriptorInChild([](std::atomic<OpenFile*>& slot, OpenFile* of) {
    if (!of->d->pool) return;
    slot.store(nullptr, std::memory_order_relaxed);
    IntentionallyLeaked(of);
  });
}

}  // namespace upfs
