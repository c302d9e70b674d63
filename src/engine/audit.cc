// File::AuditAllocation: the allocation bitmap against what the log and
// this process's threads hold, for tests and inspection.
#include <vector>

#include "engine/epoch_pin.h"
#include "engine/file.h"
#include "engine/gc_worker.h"

namespace upfs {

using namespace format;

Status File::AuditAllocation(uint64_t* leaked, uint64_t* unmarked) {
  *leaked = *unmarked = 0;
  if (read_only()) return Status::Error(EBADF, "a read-only File has no allocation state");
  // The process's GC worker is a thread inside a call too: a read that met
  // a pair's shadow may have asked it for a GC, and a GC that retired
  // blocks has it retry their release every millisecond with its own
  // context of this File, which the walk below reads: held off until the
  // audit is done (TSan caught the race in Fold's tests, 2026-12-03).
  const std::unique_lock<std::mutex> worker_idle = GcWorker::Get().Quiesce(this);
  ThreadCtx* c;
  UPFS_RETURN_IF_ERROR(Ctx(&c));
  EpochPin pin(epochs(), c->slot);
  BlockTable table;
  ReplayResult res;
  UPFS_RETURN_IF_ERROR(ReplayHead(&table, &res, TailRule::kLive));
  const uint64_t cap = source_->bitmap()->capacity();
  std::vector<bool> referenced(cap, false), held(cap, false);
  auto ref = [&](uint64_t b) {
    if (b < cap) referenced[b] = true;
  };
  for (uint64_t b = 0; b < source_->reserved_blocks(); ++b) ref(b);  // the container's
  for (uint32_t l : res.log_blocks) ref(l);
  for (const Run& r : res.overflow)
    for (uint32_t i = 0; i < r.count; ++i) ref(uint64_t(r.lblock) + i);
  table.ForEachHeld([&](uint32_t l) { ref(l); });
  ctx_.ForEach([&](const ThreadCtx* t) {
    for (uint32_t l : t->blocks.free)
      if (l < cap) held[l] = true;
    for (uint64_t l = t->blocks.chunk_next; l < t->blocks.chunk_end && l < cap; ++l) held[l] = true;
    for (const ThreadBlocks::Retired& r : t->blocks.limbo)
      for (uint32_t i = 0; i < r.count && uint64_t(r.lblock) + i < cap; ++i) held[r.lblock + i] = true;
  });
  // Given back to the host (BlockSource::PunchFreeExtents): taken until
  // provided again.
  source_->ForEachPunched([&](uint64_t first) {
    for (uint64_t b = first; b < first + kPartitionBlocks && b < cap; ++b) held[b] = true;
  });
  for (uint64_t b = 0; b < cap; ++b) {
    const bool taken = source_->bitmap()->Test(b);
    if (taken && !referenced[b] && !held[b]) ++*leaked;
    if (!taken && referenced[b]) ++*unmarked;
  }
  return Status::OK();
}

}  // namespace upfs
