// Pool::Recover: the attach of a pool that no other process has attached
// and that was not left clean (a crash, a process killed while attached)
// or whose shared words are not this pool's (InitVolatile).
// The words processes share are reset; every block in use is marked from
// what the namespace and its files reference, all of it checked before
// anything durable is written (a pool refused for damage found half way
// is left as it was); then orphans are freed, commits a crash cut short
// cleared, and the allocator rebuilt from the marks.
#include <fcntl.h>

#include <unordered_set>
#include <vector>

#include "container/pool/checkpoint.h"
#include "container/pool/fresh_inode.h"
#include "container/pool/pool.h"
#include "engine/log.h"
#include "medium/pm.h"

namespace upfs {

using namespace format;
using namespace format::pool;

Status Pool::MarkFileBlocks(Inode* in, BlockMarker* m, std::vector<uint32_t>* cut) {
  if (const uint64_t t = in->target_block.load(std::memory_order_acquire); t != 0) {
    UPFS_RETURN_IF_ERROR(access_.CheckRange(t, 1, "symbolic link target"));
    m->Mark(t, "symbolic link target");
  }
  const uint64_t head = in->log_head.load(std::memory_order_acquire);
  if (head == 0) return Status::OK();
  if (head >= kMaxPoolBlocks) return Status::Corrupt("inode", "log head out of range");
  BlockTable table;
  ReplayResult res;
  UPFS_RETURN_IF_ERROR(ReplayChain(access_, uint32_t(head), &table, &res, TailRule::kCrashed));
  if (res.cut_short_words) cut->push_back(uint32_t(head));
  for (uint32_t l : res.log_blocks) m->Mark(l, "log");
  for (const Run& r : res.overflow)
    for (uint32_t i = 0; i < r.count; ++i) m->Mark(r.lblock + i, "overflow");
  table.ForEachHeld([&](uint32_t l) { m->Mark(l, "data"); });
  return m->status();
}

Status Pool::ResetSharedWords(uint64_t capacity, PoolWords** words) {
  // Memory first (medium/provide.h) for the header's fixed part, which this
  // writes; the data region's free space at the end, below.
  UPFS_RETURN_IF_ERROR(medium_->Provide(0, uint64_t(kBitmapBlock) * kBlockSize));
  char* p;
  UPFS_RETURN_IF_ERROR(access_.Addr(kWordsBlock, &p));
  PoolWords* const w = reinterpret_cast<PoolWords*>(p);
  w->magic = 0;
  w->epochs.Reset();
  w->bitmap.Reset(capacity);
  w->free_inodes.store(0);
  w->punched_blocks.store(0);
  *words = w;
  UPFS_RETURN_IF_ERROR(access_.Addr(kSlotsBlock, &p));
  pm::ZeroNT(p, uint64_t(kSlotBlocks) * kBlockSize);
  // The bitmap and its summaries: dropped (they read back as zero, and
  // cost nothing until used again), or zeroed where the file system cannot
  // punch holes.
  if (fallocate(lock_fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(kBitmapBlock) * kBlockSize,
                off_t(kBitmapBlocks + kSummaryBlocks) * kBlockSize) != 0) {
    UPFS_RETURN_IF_ERROR(
        medium_->Provide(uint64_t(kBitmapBlock) * kBlockSize, uint64_t(kDataStart) * kBlockSize));
    UPFS_RETURN_IF_ERROR(access_.Addr(kBitmapBlock, &p));
    pm::ZeroNT(p, (capacity + 7) / 8);
    UPFS_RETURN_IF_ERROR(access_.Addr(kSummaryBlock, &p));
    pm::ZeroNT(p, uint64_t(kSummaryBlocks) * kBlockSize);
  }
  if (punched_) {  // nothing punched (memory given by SharePunchedExtents)
    UPFS_RETURN_IF_ERROR(access_.Addr(kPunchedBlock, &p));
    pm::ZeroNT(p, uint64_t(kPunchedBlocks) * kBlockSize);
  }
  pm::Fence();
  return Status::OK();
}

Status Pool::MarkNamespaceBlocks(BlockMarker* marker) {
  if (const uint64_t ck = super()->checkpoint.load(); ck != 0) {
    const CheckpointHeader* h;
    UPFS_RETURN_IF_ERROR(ReadCheckpointHeader(access_, ck, super()->version, &h));
    ForEachCheckpointBlock(ck, *h, [&](uint32_t l) { marker->Mark(l, "checkpoint"); });
  }
  // The whole kept chain, also the blocks before the checkpoint's
  // continuation that replay did not read: each one checked before its
  // link is followed (a damaged link must not lead outside the pool).
  for (uint64_t l = super()->nslog_head.load(); l != 0;) {
    if (l < kDataStart) return Status::Corrupt("namespace log", "block link " + std::to_string(l) + " out of range");
    UPFS_RETURN_IF_ERROR(access_.CheckRange(l, 1, "namespace log block"));
    const uint64_t next = reinterpret_cast<LogBlock*>(access_.AddrUnchecked(l))->next.load();
    if (!NsNextWordValid(next))
      return Status::Corrupt("namespace log", "block " + std::to_string(l) + " has no log magic");
    marker->Mark(l, "namespace log");  // a loop is a block referenced twice
    UPFS_RETURN_IF_ERROR(marker->status());
    l = NextBlock(next);
  }
  UPFS_RETURN_IF_ERROR(MarkLogReserve(marker));
  return Status::OK();
}

std::unordered_map<uint64_t, NsCreation> Pool::ImagesFromRecords(const std::unordered_set<uint64_t>& linked) {
  std::unordered_map<uint64_t, NsCreation> latest;
  for (const NotedCreation& n : creations_) latest[n.ino] = n.creation;  // in log order: the last life wins
  std::erase_if(latest, [&](const auto& e) {
    Inode* in;
    return !e.second.present || !linked.count(e.first) || !inodes_.At(e.first, &in).ok() ||
           ImageSealedFor(*in, e.second);
  });
  return latest;
}

Status Pool::MarkInodeBlocks(const std::unordered_set<uint64_t>& linked, BlockMarker* marker,
                             std::vector<uint32_t>* cut,
                             const std::unordered_map<uint64_t, NsCreation>& from_records) {
  InodeImage made;
  return inodes_.ForEachBlock([&](uint32_t l) -> Status {
    marker->Mark(l, "inode");
    UPFS_RETURN_IF_ERROR(marker->status());
    for (uint32_t s = 1; s < kInodesPerBlock; ++s) {
      const uint64_t ino = InodeNumber(l, s);
      Inode* in;
      UPFS_RETURN_IF_ERROR(inodes_.At(ino, &in));
      // An image to be made again from its record is judged as made.
      if (auto it = from_records.find(ino); it != from_records.end()) {
        ImageFromCreation(it->second, made.get());
        in = made.get();
      }
      const FileType k = IdentKind(in->ident.load(std::memory_order_acquire));
      if (k > FileType::kSymlink) return Status::Corrupt("inode", std::to_string(ino) + " has an unknown kind");
      if (k == FileType::kFree || !linked.count(ino)) continue;  // free, or an orphan to free
      if (Status st = MarkFileBlocks(in, marker, cut); !st.ok())
        return Status::Error(st.err(), "file " + std::to_string(ino) + ": " + st.message());
    }
    return Status::OK();
  });
}

Status Pool::Recover() {
  const uint64_t capacity = std::min<uint64_t>(medium_->capacity() >> kBlockShift, kMaxPoolBlocks);
  PoolWords* words;
  UPFS_RETURN_IF_ERROR(ResetSharedWords(capacity, &words));
  // What the rebuild below and the allocators then store to.
  UPFS_RETURN_IF_ERROR(BlockSource::ProvideBitmap(*bitmap_, 0, capacity));
  BlockMarker marker(bitmap_.get());
  for (uint32_t b = 0; b < kDataStart; ++b) marker.Mark(b, "pool header");
  {
    // A crash may have cut the last commit short (NsLog::TornCommit): the
    // log ends before it, and DiscardPastTail below clears it.
    std::unique_lock<SpinSharedMutex> g(index_mu_);
    log_.AcceptTornTail(true);
    UPFS_RETURN_IF_ERROR(LoadNamespace());
    UPFS_RETURN_IF_ERROR(CatchUpLocked());
  }
  UPFS_RETURN_IF_ERROR(MarkNamespaceBlocks(&marker));
  std::unordered_set<uint64_t> linked;
  std::vector<uint32_t> cut;  // file logs whose last commit a crash cut short
  index_.ForEachDir([&](uint64_t dir, const NsDirInfo&) {
    linked.insert(dir);
    index_.List(dir, [&](std::string_view, const NsEntry& e) { linked.insert(e.ino); });
  });
  // Everything is checked before anything durable is written (orphans
  // freed, soft words reset, free inodes relinked): a pool refused for
  // damage found half way must be left as it was, not half recovered.
  // New files whose image a crash may have lost (a version 9 pool's one
  // wait a create): made again from their records, below.
  const std::unordered_map<uint64_t, NsCreation> from_records = ImagesFromRecords(linked);
  UPFS_RETURN_IF_ERROR(MarkInodeBlocks(linked, &marker, &cut, from_records));
  // Uncommitted words past the log's tail (a payload whose reservation word
  // a crash lost) go before anyone reserves there again.
  UPFS_RETURN_IF_ERROR(log_.DiscardPastTail());
  log_.AcceptTornTail(false);
  for (uint32_t head : cut) {  // and of the files' logs
    BlockTable table;
    ReplayResult res;
    UPFS_RETURN_IF_ERROR(ReplayChain(access_, head, &table, &res, TailRule::kRecover));
  }
  for (const auto& [ino, c] : from_records) {
    Inode* in;
    UPFS_RETURN_IF_ERROR(inodes_.At(ino, &in));
    RewriteImage(in, c);  // fenced below, before the pool is marked recovered
  }
  UPFS_RETURN_IF_ERROR(inodes_.Rebuild([&](uint64_t ino, Inode* in) -> Status {
    pm::Store64(&in->open_count, 0);  // the holds of processes now gone (Take adds to it)
    if (!linked.count(ino)) return inodes_.Free(ino);  // an orphan
    constexpr uint64_t kSoft = kIdentUnlinked | kIdentReleasing;
    if (const uint64_t id = in->ident.load(); id & kSoft) pm::Store64(&in->ident, id & ~kSoft);
    if (IdentKind(in->ident.load()) == FileType::kRegular) in->words.Reset();
    return Status::OK();
  }));
  // A growth that failed or died half-way may have left holes, and only
  // above every block in use: below, all was provided before it was handed
  // out (BlockSource::PublishCapacity). Provided there, and only there, so
  // that recovery walks no pages in use (SEEK_HOLE over 1 GiB of small
  // pages costs 11-24 ms here). A full file system is then an error of
  // this attach, not a SIGBUS of a later store.
  // A version 10 pool provides only up to the next extent boundary: its
  // holes may be anywhere (extents given back before the crash), and
  // GiveBackAfterRebuild gives back what a detach would and provides the
  // rest.
  const uint64_t in_use_end = std::max<uint64_t>(marker.end(), kDataStart);
  const uint64_t provide_end =
      punched_ ? std::min(capacity, (in_use_end + kPartitionBlocks - 1) / kPartitionBlocks * kPartitionBlocks)
               : capacity;
  UPFS_RETURN_IF_ERROR(medium_->Provide(in_use_end * kBlockSize, provide_end * kBlockSize));
  bitmap_->RebuildSummaries(words->bitmap.capacity_blocks.load());
  if (punched_) UPFS_RETURN_IF_ERROR(GiveBackAfterRebuild(provide_end, capacity));
  words->pool_id = super()->pool_id;
  pm::Fence();
  words->magic = kVolatileMagic;
  return Status::OK();
}

}  // namespace upfs
