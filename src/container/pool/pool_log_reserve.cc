// The namespace log's reserve: a few free blocks set aside so that
// removals still commit in a full pool (docs/design.md, "The namespace
// log": "A full pool can be emptied").
#include <cerrno>

#include "container/pool/pool.h"
#include "medium/pm.h"

namespace upfs {

using namespace format::pool;

bool Pool::KeepsLogReserve() const { return super()->version >= kFirstLogReservePoolVersion; }

Status Pool::CheckReserveBlock(uint64_t l) const {
  if (l < kDataStart)
    return Status::Corrupt("superblock",
                           "namespace log reserve block " + std::to_string(l) + " in the pool's header");
  return access_.CheckRange(l, 1, "namespace log reserve block");
}

Status Pool::AllocLogBlock(uint32_t* l, bool removal) {
  Status st = AllocBlock(l);
  if (st.ok()) {
    // The log's own block first; what is left refills the reserve.
    RefillLogReserve();
    return st;
  }
  if (!removal || st.err() != ENOSPC || !KeepsLogReserve()) return st;
  for (auto& w : mutable_super()->nslog_reserve) {
    uint64_t b = w.load(std::memory_order_acquire);
    while (b != 0) {
      // Checked before it is taken: a damaged word stays for fsck to see.
      UPFS_RETURN_IF_ERROR(CheckReserveBlock(b));
      if (!pm::Cas64(&w, b, 0)) continue;  // b reloaded: taken or replaced meanwhile
      // Out of the reserve durably before the block can become the log's:
      // recovery must never find it in both (a block referenced twice is
      // damage).
      pm::PersistWord(&w);
      *l = uint32_t(b);
      return Status::OK();
    }
  }
  return Status::Error(ENOSPC, st.message() + " (the namespace log's reserve is used up too)");
}

void Pool::RefillLogReserve() {
  if (!KeepsLogReserve()) return;
  for (auto& w : mutable_super()->nslog_reserve) {
    if (w.load(std::memory_order_acquire) != 0) continue;
    uint32_t b;
    // Nothing free: the reserve waits for the next block the log gets.
    if (!AllocBlock(&b).ok()) return;
    uint64_t expected = 0;
    if (!pm::Cas64(&w, expected, b)) {  // another thread or process refilled it
      FreeBlock(b);
      continue;
    }
    // A crash before this leaves the block unreferenced, and recovery,
    // which rebuilds the bitmap from what is referenced, frees it.
    pm::PersistWord(&w);
  }
}

Status Pool::MarkLogReserve(BlockMarker* m) const {
  if (!KeepsLogReserve()) return Status::OK();
  for (const auto& w : super()->nslog_reserve) {
    const uint64_t l = w.load(std::memory_order_acquire);
    if (l == 0) continue;
    UPFS_RETURN_IF_ERROR(CheckReserveBlock(l));
    m->Mark(l, "namespace log reserve");
  }
  return m->status();
}

}  // namespace upfs
