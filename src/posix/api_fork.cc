// After fork: the child re-opens every inherited upfs file (api.cc's
// descriptors stay, their engine Files are replaced).
#include <pthread.h>

#include <map>
#include <memory>
#include <string>

#include "container/container.h"
#include "engine/file.h"
#include "posix/api_internal.h"
#include "posix/descriptor_table.h"
#include "posix/file_registry.h"
#include "posix/op_guard.h"
#include "posix/pool_api.h"
#include "posix/pool_mounts.h"
#include "util/leak.h"
#include "util/spin_shared_mutex.h"

namespace upfs {

// Each is held for the making of a page of descriptor slots or a short
// change of a list, and nothing else is taken under it. A child that
// copied one held (another thread in it at the fork) would wait for ever
// at its first use: for the pool descriptor numbers' lock (a list then,
// a bitmap changed by atomic operations since), 5 runs in 6 of
// pool_fork_test's 100 forks did. The forking thread takes them all, so
// that parent and child can simply let them go.
void LockLeafLocksForFork() {
  LockDescriptorPagesForFork();
  LockThreadIndicesForFork();
  spin_lock_internal::SlotNumbers::LockForFork();
}
void UnlockLeafLocksAfterFork() {
  spin_lock_internal::SlotNumbers::UnlockAfterFork();
  UnlockThreadIndicesAfterFork();
  UnlockDescriptorPagesAfterFork();
}

// After fork the child must not use the parent's engine state: its
// per-thread free lists and reclamation slots belong to the parent, and
// using them from two processes would hand out the same blocks twice. The
// child re-opens every inherited upfs file and leaks the inherited objects
// (destroying them would return the parent's blocks to the shared bitmap).
void ReopenAfterFork() {
  UnlockLeafLocksAfterFork();  // taken by PrepareFork in this same thread
  OpGuardsAfterForkInChild();  // before anything here retires a descriptor
  PoolsAfterForkInChild();     // then: the loop below knows per-file descriptors only
  ForgetRegistryInChild();
  std::map<const File*, std::shared_ptr<File>> fresh;
  std::map<const Description*, bool> done;  // dup'ed descriptors share one
  ForEachDescriptorInChild([&](std::atomic<OpenFile*>& slot, OpenFile* of) {
      if (auto seen = done.find(of->d.get()); seen != done.end()) {
        if (!seen->second) slot.store(nullptr, std::memory_order_relaxed);
        return;
      }
      of->d->RenewLocksInChild();
      const File* old = of->d->file.get();
      auto it = fresh.find(old);
      if (it == fresh.end()) {
        std::unique_ptr<File> f;
        std::string self = "/proc/self/fd/" + std::to_string(of->fd);
        const Container::OpenOptions options{!of->d->file->read_only(), false,
                                             of->d->file->consistency(), nullptr};
        Status st = HostFileContainer().Open(of->fd, self, options, &f);
        std::shared_ptr<File> nf = f ? AdoptFileInChild(std::move(f)) : nullptr;
        it = fresh.emplace(old, nf).first;
      }
      HostFileContainer().ForkedAway(*of->d->file);
      IntentionallyLeaked(new std::shared_ptr<File>(of->d->file));  // see above
      of->d->file = it->second;
      done[of->d.get()] = of->d->file != nullptr;
      if (!of->d->file) {
        // Could not re-open (e.g. the file was damaged): the descriptor
        // stays valid for close but fails every call with EIO.
        slot.store(nullptr, std::memory_order_relaxed);
      }
  });
}


}  // namespace upfs
