// Pool: free space given back to the host (docs/design.md, "Giving free
// space back"). A pool on tmpfs holds the memory of every block it ever
// used: a tree of 5 GiB created and removed left 5 GiB of memory in
// /dev/shm for as long as the pool file lived. Wholly free 2 MiB extents
// are punched out of the file instead, recorded in the volatile area
// where every attached process sees them (engine/punched_extents.h), and
// taken back (given memory again) by whichever process needs the space
// before the pool grows.
#include "container/pool/pool.h"

namespace upfs {

using namespace format;
using namespace format::pool;

Status Pool::SharePunchedExtents(PoolWords* words) {
  if (super()->version < kFirstGiveBackPoolVersion) return Status::OK();
  // Memory before stores (medium/provide.h): an older attach or a reset
  // may have left these blocks a hole.
  UPFS_RETURN_IF_ERROR(medium_->Provide(uint64_t(kPunchedBlock) * kBlockSize,
                                        uint64_t(kPunchedBlock + kPunchedBlocks) * kBlockSize));
  char* p;
  UPFS_RETURN_IF_ERROR(access_.Addr(kPunchedBlock, &p));
  punched_ = std::make_unique<SharedPunchedExtents>(reinterpret_cast<std::atomic<uint64_t>*>(p),
                                                    kMaxPoolBlocks / kPartitionBlocks, &words->punched_blocks);
  source_->SharePunched(punched_.get());
  return Status::OK();
}

uint64_t Pool::GiveBackFreeSpace(uint64_t keep_blocks) {
  if (!punched_) return 0;
  released_since_give_back_.store(0, std::memory_order_relaxed);
  return source_->PunchFreeExtents(keep_blocks);
}

void Pool::NoteReleased(uint64_t blocks) {
  if (!punched_) return;
  if (released_since_give_back_.fetch_add(blocks, std::memory_order_relaxed) + blocks < kGiveBackAfterFreedBlocks)
    return;
  if (giving_back_.exchange(true, std::memory_order_acquire)) return;  // another thread is at it
  GiveBackFreeSpace();
  giving_back_.store(false, std::memory_order_release);
}

Status Pool::GiveBackAfterRebuild(uint64_t from, uint64_t to) {
  source_->PunchFreeExtents(kKeepFreeBlocks);
  // What is kept free may be holes given back before the crash, and above
  // the blocks in use the space may be holes too (given back, or a growth
  // a crash cut short): every wholly free extent not recorded as punched
  // gets memory (a file system that cannot punch recorded none), and so
  // does the rest of [from, to) (a partial last extent).
  const auto* bits = bitmap_->bits();
  for (uint64_t e = (kDataStart + kPartitionBlocks - 1) / kPartitionBlocks; (e + 1) * kPartitionBlocks <= to; ++e) {
    if (punched_->Test(e)) continue;
    const uint64_t first = e * kPartitionBlocks;
    bool free = true;
    for (uint64_t w = first / 64; free && w < (first + kPartitionBlocks) / 64; ++w)
      free = bits[w].load(std::memory_order_relaxed) == 0;
    if (free) UPFS_RETURN_IF_ERROR(medium_->Provide(first * kBlockSize, (first + kPartitionBlocks) * kBlockSize));
  }
  const uint64_t tail = std::max(from, to / kPartitionBlocks * kPartitionBlocks);
  return medium_->Provide(tail * kBlockSize, to * kBlockSize);
}

}  // namespace upfs
