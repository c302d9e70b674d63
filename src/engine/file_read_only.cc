// File: what a read-only File does instead of pinning an epoch. It has no
// slot, so nothing keeps a GC in another process from reusing the blocks it
// reads: a replay or catch-up counts only if the log head (block and
// sequence number) did not move meanwhile (docs/design.md, "Read-only
// opens").
#include "engine/file.h"

#include <immintrin.h>
#include <sched.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cstring>

#include "engine/epoch_pin.h"
#include "engine/file_internal.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

Status File::ChainHeadNow(uint32_t* head, uint64_t* seq) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t h = root_.head->load(std::memory_order_acquire);
  if (h == 0 || h >= kMaxBlocks) return Status::Corrupt("file header", "log head out of range");
  char* addr;
  UPFS_RETURN_IF_ERROR(access_.Addr(h, &addr));
  *head = uint32_t(h);
  *seq = reinterpret_cast<const LogBlock*>(addr)->seq;
  return Status::OK();
}

bool File::HeadMoved(const BlockTable* t) const {
  // The same block as head again is a later chain only if its sequence
  // number moved on (GC starts a new chain past the old one's numbers).
  uint32_t head;
  uint64_t seq;
  if (!ChainHeadNow(&head, &seq).ok()) return true;  // the replay will say what is wrong
  return head != t->chain_head() || seq != t->chain_seq();
}

Status File::ReplayValidated(std::unique_ptr<BlockTable>* table, ReplayResult* res) {
  // Each try walks a chain that a GC may retire and reuse under the walk;
  // a walk is trusted only if the head did not move during it (and one
  // that failed, only then reports damage). A GC runs once the log has
  // grown by dozens of blocks, so a few tries suffice.
  constexpr int kTries = 64;
  for (int i = 0;; ++i) {
    uint32_t head;
    uint64_t seq;
    UPFS_RETURN_IF_ERROR(ChainHeadNow(&head, &seq));
    auto fresh = std::make_unique<BlockTable>();
    ReplayResult r;
    Status st = ReplayChain(access_, head, fresh.get(), &r,
                            may_have_crashed_ ? TailRule::kReadOnly : TailRule::kLive);
    fresh->set_chain(head, seq);
    if (!HeadMoved(fresh.get())) {
      UPFS_RETURN_IF_ERROR(st);
      *table = std::move(fresh);
      *res = std::move(r);
      return Status::OK();
    }
    if (i == kTries) return Status::Error(EAGAIN, "log compacted during every replay");
  }
}

Status File::CatchUpReadOnly(ThreadCtx* c, BlockTable** out) {
  // Without a pin, the blocks past the cursor may be reused by the time
  // they are read: what a scan finds is applied only if the head did not
  // move meanwhile (then nothing of the chain was retired).
  struct Found {
    Effect effect;
    uint32_t lblock, slot;  // where its entry is, for messages
  };
  std::vector<Found> found;
  for (int tries = 0;; ++tries) {
    SpinGuard g(apply_lock_);
    BlockTable* t = table_.load(std::memory_order_acquire);
    if (HeadMoved(t)) {
      if (tries == 64) return Status::Error(EAGAIN, "log compacted during every catch-up");
      UPFS_RETURN_IF_ERROR(RebuildTableLocked());
      continue;
    }
    LogPos p = t->cursor();
    found.clear();
    Status st = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
      found.push_back(Found{e, p.lblock, p.last});  // the scan is past the entry
      return true;
    }, /*cut_short_ends=*/may_have_crashed_);
    if (HeadMoved(t)) continue;
    UPFS_RETURN_IF_ERROR(st);
    // As in CatchUp: a damaged entry is refused with the cursor before it.
    for (const Found& f : found) {
      if (f.effect.grow_tail) UPFS_RETURN_IF_ERROR(CheckGrowTail(*t, f.effect, f.lblock, f.slot));
      UPFS_RETURN_IF_ERROR(t->Apply(f.effect));
    }
    t->set_cursor(p);
    *out = t;
    return Status::OK();
  }
}

}  // namespace upfs
