// The process's table of upfs descriptors: descriptor number -> OpenFile
// -> Description (what dup shares) -> engine File. Lookups take no lock: two
// levels of atomic pointers, and entries freed only after the calls that may
// hold them are done (op_guard.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include <fcntl.h>

#include "engine/file.h"

namespace upfs {

// What a description of a pool file or directory holds (pool_api.cc):
// the pool, the inode and the hold that keeps it alive.
struct PoolNode;

// An open file description: what descriptors made by dup share, as in the
// kernel (offset, access mode and O_APPEND, flock locks).
struct Description {
  std::atomic<int> flags;  // O_ACCMODE | O_APPEND (F_SETFL may change it)
  std::shared_ptr<File> file;
  std::mutex pos_mu;  // serializes offset-dependent calls, like f_pos_lock
  uint64_t pos = 0;
  dev_t dev = 0;  // the host inode
  ino_t ino = 0;
  std::mutex flock_mu;
  int flock_fd = -1;  // our own description of the file's lock object (flock)
  std::mutex ofd_mu;
  int ofd_fd = -1;  // our own description of the host file, for its OFD locks
  // The shared state's attribute sequence when this description last
  // checked the host file for S_ISUID/S_ISGID (ClearPrivileges).
  std::atomic<uint64_t> privileges_seen{~uint64_t{0}};
  // Pool descriptions only: their node, made in one allocation with the
  // description and destroyed after it (pool_api.cc, NewDescriptor). The
  // engine File is opened on first data call (EnsureEngine), so that
  // create and open cost no log block.
  PoolNode* pool = nullptr;
  std::atomic<bool> engine_ready{true};
  std::mutex engine_mu;
  ~Description();  // releases its flock lock object and its OFD descriptor
  // In a fork child: its locks made anew, unheld. Another thread of the
  // parent may have held one at the fork (a blocking flock holds flock_mu
  // while it waits, a read pos_mu), and the child has no such thread.
  void RenewLocksInChild();
};

struct OpenFile {
  int fd;  // the host file's kernel descriptor: this descriptor's number
  std::shared_ptr<Description> d;
};

// The slot of descriptor fd (made if `create`); null if fd is out of range
// (or has no page and !create).
std::atomic<OpenFile*>* FdSlot(int fd, bool create);

// For a fork's handlers: the lock FdSlot makes a page of slots under.
void LockDescriptorPagesForFork();
void UnlockDescriptorPagesAfterFork();

// Looks up a descriptor inside an OpGuard (which keeps it alive).
OpenFile* Lookup(int fd);
// As Lookup, but null for a descriptor opened O_PATH (a pool's), which
// only names its file: every call that reads, writes, seeks, syncs, locks
// or changes it through the descriptor answers EBADF, as the kernel's
// fdget refuses such a file. fstat, close, dup, F_GETFL and the *at
// calls' directory use Lookup.
inline OpenFile* LookupForUse(int fd) {
  OpenFile* of = Lookup(fd);
  return of && !(of->d->flags & O_PATH) ? of : nullptr;
}

inline bool CanRead(const OpenFile* of) { return (of->d->flags & O_ACCMODE) != O_WRONLY; }
inline bool CanWrite(const OpenFile* of) { return (of->d->flags & O_ACCMODE) != O_RDONLY; }

// fn(slot, open file) for every descriptor, in a fork child (no other
// thread runs): the child's one pass over the table.
template <typename Fn>
void ForEachDescriptorInChild(Fn fn);

namespace internal {
constexpr int kFdPageBits = 10;
constexpr int kFdPages = 1024;  // descriptors up to 2^20
struct FdPage {
  std::atomic<OpenFile*> e[1 << kFdPageBits];
};
extern std::atomic<FdPage*> g_fd_pages[kFdPages];
}  // namespace internal

template <typename Fn>
void ForEachDescriptorInChild(Fn fn) {
  using namespace internal;
  for (int p = 0; p < kFdPages; ++p) {
    FdPage* pg = g_fd_pages[p].load(std::memory_order_relaxed);
    if (!pg) continue;
    for (int i = 0; i < (1 << kFdPageBits); ++i) {
      OpenFile* of = pg->e[i].load(std::memory_order_relaxed);
      if (of) fn(pg->e[i], of);
    }
  }
}

}  // namespace upfs
