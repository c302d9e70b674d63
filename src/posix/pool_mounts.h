// The pools this process has mounted, and which of them a path lies in.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "posix/op_guard.h"

namespace upfs {

struct Mount {
  std::string dir;  // absolute, without a trailing slash
  std::string pool_file;  // as given to upfs_mount (a fork child attaches it again)
  // Null in a fork child until its first path call attaches the pool
  // again (ReattachAfterFork): the parent's attachment is not the child's.
  std::unique_ptr<Pool> pool;
  Credentials effective;  // read at mount (docs/design.md, "Pools": credentials)
  Credentials real;       // for access()
  // Set by an unmount from before it counts the pool's descriptors until
  // it knows the answer; left set when the mount goes (MountLeft).
  std::atomic<bool> leaving{false};
};

// A path's place in a pool: the mount and the path inside it ("/..." ).
// While InPool's answer is true it holds the call's guard, taken before
// the mount was looked up: an upfs_umount meanwhile frees the mount only
// after the call ends. Not copyable (the guard is the calling thread's).
struct PoolPath {
  std::optional<OpGuard> guard;
  Mount* mount = nullptr;
  // The path inside the pool: a view of the caller's path where that holds
  // it as it is (a plain absolute path, the common case: a copy of it was
  // an allocation per call once it outgrew the small-string buffer), else
  // of `owned`.
  std::string_view inner;
  std::string owned;
  // The directory a relative path given with a pool directory descriptor
  // starts from (its inode); 0: `inner` is from the pool's root.
  uint64_t start = 0;

  PoolPath() = default;
  PoolPath(const PoolPath&) = delete;  // `inner` may view `owned`
  PoolPath& operator=(const PoolPath&) = delete;
};

// Whether dirfd/path lies in a mounted pool (dirfd may be a pool
// directory's descriptor, AT_FDCWD, or a kernel directory descriptor).
// Costs one load when nothing is mounted. Takes no lock: the mount table
// is an immutable snapshot, replaced on mount and umount and freed
// through the op guard. `out` must be fresh (no guard yet). A path of
// PATH_MAX bytes or more is in no pool (the kernel refuses it).
bool InPool(int dirfd, const char* path, PoolPath* out);
// Whether the kernel refuses `path` for its length (ENAMETOOLONG): a call
// on two paths, one in a pool, asks it before it says EXDEV.
bool PathTooLong(const char* path);
Status MountPool(const std::string& pool, const std::string& dir);
Status UnmountPool(const std::string& dir);
// Whether m has been unmounted, asked by a call that will leave something
// of its pool open past its end (a descriptor) after it counted that in the
// pool's users: then that count either stopped the unmount (EBUSY) or the
// call sees the mount leaving here, and must not hand out what it made
// (docs/design.md, "Unmounting"). Waits for an unmount in progress to
// decide. Inside the call's OpGuard (m lives until it ends).
bool MountLeft(const Mount& m);

// The mount a pool descriptor's pool belongs to (for dirfd-relative
// paths), or null. Inside an OpGuard (the mount lives until it ends).
Mount* MountOfPool(const Pool* pool);

// In a fork child (its only thread, from the pthread_atfork handler): lets
// go of the parent's pool attachments and descriptors without touching
// them (see docs/design.md, "Pools across fork"); the child's first path
// call attaches each mounted pool again.
void PoolsAfterForkInChild();
// The fork's prepare and parent handlers: no other thread changes or walks
// the mount table while the process forks (PoolsAfterForkInChild makes
// the child's copy of the lock anew).
void LockMountsForFork();
void UnlockMountsInParent();

}  // namespace upfs
