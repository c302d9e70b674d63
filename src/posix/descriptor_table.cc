#include "posix/descriptor_table.h"

#include <pthread.h>
#include <unistd.h>

#include "container/container.h"
#include "posix/op_guard.h"
#include "util/assert.h"

namespace upfs {

namespace internal {
std::atomic<FdPage*> g_fd_pages[kFdPages];
}  // namespace internal

namespace {
std::mutex g_fd_mu;
}  // namespace

using internal::FdPage;
using internal::g_fd_pages;
using internal::kFdPageBits;
using internal::kFdPages;

Description::~Description() {
  file.reset();  // before the pool's hold on the inode goes (its node is destroyed after this)
  if (flock_fd < 0 && ofd_fd < 0) return;
  HostFileContainer().ReleaseFlock(HostIdentity{dev, ino}, flock_fd);
  if (ofd_fd >= 0) close(ofd_fd);
}

void Description::RenewLocksInChild() {
  // pthread_mutex_init over the copy (the holder's thread does not exist
  // here to unlock it; glibc's own fork handlers renew their locks so).
  // Through the call, not a placement new, so that lock checkers
  // (ThreadSanitizer) forget the parent thread's hold as well.
  for (std::mutex* m : {&pos_mu, &flock_mu, &ofd_mu, &engine_mu})
    pthread_mutex_init(m->native_handle(), nullptr);
}

std::atomic<OpenFile*>* FdSlot(int fd, bool create) {
  if (fd < 0 || fd >= (kFdPages << kFdPageBits)) return nullptr;
  std::atomic<FdPage*>& pg = g_fd_pages[fd >> kFdPageBits];
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
  return &p->e[fd & ((1 << kFdPageBits) - 1)];
}

void LockDescriptorPagesForFork() { g_fd_mu.lock(); }
void UnlockDescriptorPagesAfterFork() { g_fd_mu.unlock(); }

static_assert((internal::kFdPages << internal::kFdPageBits) <= DescriptorUse::kMaxFd,
              "every slot has a descriptor use of its own (op_guard.h)");

OpenFile* Lookup(int fd) {
  // The call declared that it may look this slot up: else a close of fd
  // in another thread could free what this returns while it is used.
  UPFS_ASSERT(OpGuardCovers(fd));
  std::atomic<OpenFile*>* s = FdSlot(fd, false);
  return s ? s->load(std::memory_order_acquire) : nullptr;
}

}  // namespace upfs
