// File: reads. A read copies the blocks of a snapshot and is linearized at
// it if nothing committed since touched them (docs/design.md, "Read"); a
// sequential reader has its next block requested ("Read-ahead").
#include "engine/file.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/file_internal.h"

namespace upfs {

using namespace format;

Status File::Read(void* buf, size_t n, uint64_t off, size_t* done) {
  *done = 0;
  if (n == 0) return Status::OK();
  Operation op;
  UPFS_RETURN_IF_ERROR(Begin(&op));
  ThreadCtx* c = op.c;
  BlockTable* t = op.t;
  for (;;) {
    LogPos p = t->cursor();
    uint64_t size = t->size();
    if (off >= size) return Status::OK();
    uint64_t len = std::min<uint64_t>(n, size - off);
    uint64_t end = off + len;
    uint64_t vb0 = off >> kBlockShift, vb1 = CeilBlocks(end);
    char* out = static_cast<char*>(buf);
    bool shadowed = false;
    for (uint64_t v = vb0; v < vb1; ++v) {
      uint64_t bs = v << kBlockShift;
      uint64_t lo = std::max(bs, off), hi = std::min(bs + kBlockSize, end);
      uint32_t l = t->Get(v);
      if (l)
        shadowed |= CopyBlockBytes(*t, v, l, lo - bs, hi - bs, out + (lo - off));
      else
        std::memset(out + (lo - off), 0, hi - lo);
    }
    // A sequential reader's next block: its lines requested now, while
    // this read validates and returns (docs/design.md, "Read-ahead").
    if (const uint64_t nv = c->read_ahead.After(off, end, CeilBlocks(size)); nv != ReadAhead::kNone) {
      if (const uint32_t nl = t->Get(nv)) {
        const char* next = access_.AddrUnchecked(nl);
        for (uint64_t x = 0; x < kBlockSize; x += kCacheLine) __builtin_prefetch(next + x);
      }
    }
    // Validate: nothing committed since the snapshot may touch what we read.
    bool stale = false;
    std::atomic_thread_fence(std::memory_order_acquire);
    Status scan = ScanCommitted(access_, &p, &c->scratch, [&](const Effect& e) {
      if (e.TouchesBlocks(vb0, vb1)) {
        stale = true;
        return false;
      }
      return true;
    });
    // Read-only: the blocks read (log and data) were live only if no GC
    // retired them; if one did, what the scan found does not count either.
    if (read_only() && HeadMoved(t)) {
      stale = true;
    } else {
      UPFS_RETURN_IF_ERROR(scan);
    }
    if (!stale) {
      *done = len;
      // Granules from a shadow cost a second copy from a second cold
      // block: cold pairs are worth folding.
      if (shadowed) NoteShadowRead();
      return Status::OK();
    }
    UPFS_RETURN_IF_ERROR(CatchUp(c, &t));
  }
}

}  // namespace upfs
