// PoolNamespace's holds: what keeps an open file's inode alive after its
// last name is gone, and who frees it then (the last of the remover and
// the closers). Name changes are in namespace.cc, attributes in
// namespace_attrs.cc.
#include <optional>

#include "container/pool/namespace.h"
#include "container/pool/namespace_internal.h"
#include "engine/epoch_pin.h"
#include "medium/pm.h"
#include "util/test_hook.h"

namespace upfs {

using namespace format;
using namespace format::pool;
using namespace ns_internal;

Status PoolNamespace::TakeHold(uint64_t ino, uint32_t* gen, const Resolved* named) {
  std::optional<EpochPin> pin;
  UPFS_RETURN_IF_ERROR(pool_->Pin(&pin));
  Inode* in;
  UPFS_RETURN_IF_ERROR(pool_->InodeAt(ino, &in));
  in->open_count.fetch_add(1, std::memory_order_seq_cst);
  // Whoever frees the inode committed its last unlink before looking at
  // the count: either it saw this hold, or the index shows the unlink.
  bool linked = false;
  uint64_t id = 0;
  Status st;
  {
    std::shared_lock<SpinSharedMutex> g;
    st = pool_->LockLatest(&g);
    if (st.ok()) linked = LinkedLocked(ino, in);
    if (linked && named && !named->name.empty() && !SameView(*named)) {
      NsEntry e;
      linked = pool_->index()->Find(named->dir, named->name, &e) && e.ino == ino;
    }
    // The file the name leads to now: the hold, taken before, is on it.
    id = in->ident.load(std::memory_order_seq_cst);
    // Made again as something else (a directory where a file was): the
    // resolution's type no longer holds either.
    if (named && IdentKind(id) != named->type) linked = false;
  }
  if (!st.ok() || IdentKind(id) == FileType::kFree || !linked) {
    // Perhaps the last name went while this hold was there, and its
    // remover left the freeing to the last holder: this one.
    if (in->open_count.fetch_sub(1, std::memory_order_seq_cst) == 1) MaybeRelease(ino);
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

namespace {
TestHook g_before_release_cas;
}  // namespace

void PoolNamespace::BeforeReleaseCasForTest(void (*fn)(void*), void* arg) { g_before_release_cas.Set(fn, arg); }

void PoolNamespace::MaybeRelease(uint64_t ino) {
  Inode* in;
  if (!pool_->InodeAt(ino, &in).ok()) return;
  // The remover of the last name sets the unlinked bit, then reads the
  // count; a last closer drops the count, then reads the bit: one of them
  // sees the other (both sequentially consistent), so no index is needed.
  uint64_t id = in->ident.load(std::memory_order_seq_cst);
  // Exactly one releaser wins the CAS (a remover and a last closer may
  // both get here). One that lost it decides again on the word it lost to:
  // another releaser's bit sends it away, any other change (a creator
  // clearing its fresh bit) leaves the inode as releasable as before.
  for (;;) {
    if (!(id & kIdentUnlinked) || (id & kIdentReleasing) || IdentKind(id) == FileType::kFree) return;
    if (in->open_count.load(std::memory_order_seq_cst) != 0) return;
    g_before_release_cas.Run();
    if (pm::Cas64(&in->ident, id, id | kIdentReleasing)) break;
  }
  pool_->ReleaseInode(ino);
}

}  // namespace upfs
