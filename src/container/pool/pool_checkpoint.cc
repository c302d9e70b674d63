// Writing a checkpoint of a pool's namespace (checkpoint.h has the image),
// and retiring the log it makes unnecessary.
//
// One process at a time writes one (PoolWords::checkpoint_owner, taken by
// CAS; a dead owner's claim is taken over). It serializes its own index at
// a position P of the log, writes the image into new blocks, and publishes
// it by one CAS of Superblock::checkpoint. The log is kept from the
// previous checkpoint's P on, so that a process a little behind the tail
// keeps reading the log; blocks before that, and the previous image, are
// retired under the pool's epochs and freed when no reader can be in them.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "container/pool/checkpoint.h"
#include "container/pool/pool.h"
#include "engine/epoch_pin.h"
#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {
PoolWords* Words(const BlockAccess& ba) {
  return reinterpret_cast<PoolWords*>(ba.AddrUnchecked(kWordsBlock));
}

// The image of the index's whole view (its base and its delta).
void BuildImage(const NsIndex& idx, std::vector<uint64_t>* image, CheckpointHeader* h) {
  std::vector<std::pair<uint64_t, NsDirInfo>> dirs;
  idx.ForEachDir([&](uint64_t ino, const NsDirInfo& i) { dirs.emplace_back(ino, i); });
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Reserved up front: tables, and names of up to 16 bytes (longer ones
  // grow the vector).
  uint64_t words = 0;
  for (const auto& [ino, info] : dirs)
    words += ImageWriter::TableSlots(info.entries) * kNameSlotWords + 2 * info.entries + kNameSlotWords;
  ImageWriter w(image, dirs.size(), words + words / 8);
  std::vector<std::pair<std::string_view, NsEntry>> names;
  for (const auto& [ino, info] : dirs) {
    names.clear();
    idx.List(ino, [&](std::string_view n, const NsEntry& e) { names.emplace_back(n, e); });
    w.AddDir(ino, info.parent, info.subdirs, names);
  }
  std::unordered_map<uint64_t, uint32_t> multi;
  if (idx.base()) idx.base()->ForEachMultiLink([&](uint64_t ino, uint32_t links) { multi[ino] = links; });
  idx.ForEachTouchedFile([&](uint64_t ino, uint32_t links) {
    if (links > 1) multi[ino] = links;
    else multi.erase(ino);
  });
  for (const auto& [ino, links] : multi) w.AddMultiLink(ino, links);
  w.Finish(h);
}
}  // namespace

bool Pool::CheckpointDue() const {
  const uint64_t base = index_.base() ? index_.base()->header().cont_seq : 1;
  return log_.pos().seq >= base + kCheckpointEveryBlocks;
}

void Pool::MaybeCheckpoint(bool due) {
  if (due) (void)Checkpoint();  // a failure leaves the log longer, nothing else
}

Status Pool::Checkpoint() {
  PoolWords* w = Words(access_);
  const uint64_t me = uint64_t(process_slot_) + 1;
  uint64_t owner = 0;
  if (!w->checkpoint_owner.compare_exchange_strong(owner, me)) {
    // A claim whose process died is void.
    const uint32_t s = uint32_t(owner - 1);
    if (owner == me || (s < kMaxSlots && epochs_->SlotOwnerAlive(s)) ||
        !w->checkpoint_owner.compare_exchange_strong(owner, me))
      return Status::Error(EBUSY, "another process is writing a checkpoint");
  }
  Status st = WriteCheckpoint();
  uint64_t mine = me;
  w->checkpoint_owner.compare_exchange_strong(mine, 0);
  return st;
}

Status Pool::WriteCheckpoint() {
  uint32_t slot;
  UPFS_RETURN_IF_ERROR(NamespaceSlot(&slot));
  EpochPin pin(epochs_.get(), slot);
  alignas(64) static thread_local CheckpointHeader h;
  std::memset(&h, 0, sizeof(h));
  std::vector<uint64_t>& image = image_buf_;  // only the checkpoint owner's thread is here
  NsPos at;
  {
    std::unique_lock<SpinSharedMutex> g(index_mu_);
    UPFS_RETURN_IF_ERROR(CatchUpLocked());
  }
  {
    // Built under the shared lock (the index and the position do not move
    // under it), so that this process's lookups go on meanwhile: a large
    // namespace takes milliseconds to serialize.
    std::shared_lock<SpinSharedMutex> g(index_mu_);
    BuildImage(index_, &image, &h);
    at = log_.pos();
  }
  const uint64_t old_block = super()->checkpoint.load(std::memory_order_acquire);
  const CheckpointHeader* old = nullptr;
  if (old_block != 0) UPFS_RETURN_IF_ERROR(ReadCheckpointHeader(access_, old_block, &old));
  // Blocks: the header, then the image.
  ThreadBlocks t;
  std::vector<Run> runs;
  const uint64_t image_blocks = CeilBlocks(image.size() * 8);
  Status st = source_->Alloc(&t, 1 + image_blocks, &runs);
  source_->ReturnAll(&t);
  std::vector<Run> image_runs;
  uint32_t header_block = 0;
  for (const Run& r : runs) {
    if (header_block == 0) {
      header_block = r.lblock;
      if (r.count > 1) image_runs.push_back(Run{r.lblock + 1, r.count - 1});
    } else {
      image_runs.push_back(r);
    }
  }
  auto give_back = [&] {
    for (const Run& r : runs)
      for (uint32_t i = 0; i < r.count; ++i) FreeBlock(r.lblock + i);
  };
  if (st.ok() && image_runs.size() > kMaxCheckpointRuns)
    st = Status::Error(ENOSPC, "free space too fragmented for a checkpoint");
  if (!st.ok()) {
    give_back();
    return st;
  }
  uint64_t done = 0;
  const auto* bytes = reinterpret_cast<const char*>(image.data());
  for (const Run& r : image_runs) {
    for (uint32_t i = 0; i < r.count && done < image.size() * 8; ++i) {
      const uint64_t n = std::min<uint64_t>(kBlockSize, image.size() * 8 - done);
      pm::CopyNT(medium_->base() + (uint64_t(r.lblock + i) << kBlockShift), bytes + done, n);
      done += n;
    }
  }
  h.magic = kCheckpointMagic;
  h.number = old ? old->number + 1 : 1;
  h.cont_seq = at.seq;
  h.cont_lblock = at.lblock;
  h.cont_slot = at.slot;
  const uint32_t head = uint32_t(super()->nslog_head.load(std::memory_order_acquire));
  h.keep_lblock = old ? old->cont_lblock : head;
  h.keep_seq = old ? old->cont_seq : reinterpret_cast<const LogBlock*>(access_.AddrUnchecked(head))->seq;
  h.nruns = uint32_t(image_runs.size());
  for (uint32_t i = 0; i < h.nruns; ++i) h.runs[i] = image_runs[i];
  h.header_crc = CheckpointHeaderCrc(h);
  pm::CopyNT(medium_->base() + (uint64_t(header_block) << kBlockShift), &h, kBlockSize);
  pm::Fence();
  uint64_t expected = old_block;
  if (!pm::Cas64(&mutable_super()->checkpoint, expected, header_block)) {
    give_back();
    return Status::Error(EBUSY, "another checkpoint was published first");
  }
  pm::PersistWord(&mutable_super()->checkpoint);
  RetireOldLog(h.keep_lblock);
  if (old) {
    std::lock_guard<std::mutex> g(retired_mu_);
    ForEachCheckpointBlock(old_block, *old, [&](uint32_t l) { source_->Retire(&retired_, l, 1); });
  }
  return Status::OK();
}

void Pool::RetireOldLog(uint32_t keep_lblock) {
  std::lock_guard<std::mutex> g(retired_mu_);
  uint64_t l = super()->nslog_head.load(std::memory_order_acquire);
  uint64_t n = 0;
  while (l != 0 && l != keep_lblock && ++n < kMaxPoolBlocks) {
    const auto* b = reinterpret_cast<const LogBlock*>(access_.AddrUnchecked(l));
    const uint64_t next = NextBlock(b->next.load(std::memory_order_acquire));
    source_->Retire(&retired_, uint32_t(l), 1);
    l = next;
  }
  pm::Store64(&mutable_super()->nslog_head, keep_lblock);
  pm::PersistWord(&mutable_super()->nslog_head);
  // What earlier checkpoints retired and no reader can still be in.
  source_->DrainLimbo(&retired_, false);
  source_->ReturnAll(&retired_);
}

}  // namespace upfs
