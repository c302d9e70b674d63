// Writing a checkpoint of a pool's namespace (checkpoint.h has the image),
// and retiring the log it makes unnecessary.
//
// One process at a time writes one (PoolWords::checkpoint_owner, taken by
// CAS; a dead owner's claim is taken over). It freezes its own index at a
// position P of the log (NsIndex::Freeze, under the index lock for a
// moment), serializes the frozen layer without the lock while the process
// goes on committing and looking up, writes the image into new blocks, and
// publishes it by one CAS of Superblock::checkpoint, under the lock again
// with the swap of the frozen layer for the image (NsIndex::Publish). The log is kept from the
// previous checkpoint's P on, so that a process a little behind the tail
// keeps reading the log; blocks before that, and the previous image, are
// retired under the pool's epochs and freed when no reader can be in them.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "container/pool/checkpoint.h"
#include "container/pool/fresh_inode.h"
#include "container/pool/pool.h"
#include "engine/epoch_pin.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {
PoolWords* Words(const BlockAccess& ba) {
  return reinterpret_cast<PoolWords*>(ba.AddrUnchecked(kWordsBlock));
}
}  // namespace

bool Pool::CheckpointDue() const {
  if (index_.frozen()) return false;  // one is being written
  const BaseImage* b = index_.base();
  const uint64_t since = b ? b->header().cont_seq : 1;
  return log_.pos().seq >= since + CheckpointIntervalBlocks(b ? b->image_words() : 0) &&
         log_.pos().seq >= checkpoint_retry_seq_.load(std::memory_order_relaxed);
}

void Pool::MaybeCheckpoint(bool due) {
  if (!due) return;
  // A failure leaves the log longer, nothing else; the next try waits for
  // a little more of it, so that a checkpoint that cannot be written (no
  // room for its image) costs an image build per kCheckpointRetryBlocks,
  // not one per commit.
  Status st = Checkpoint();
  if (!st.ok() && st.err() != EBUSY)
    checkpoint_retry_seq_.store(log_.PosHint().seq + kCheckpointRetryBlocks, std::memory_order_relaxed);
  // A process that runs for long gives back what its removals freed as it
  // goes, not only when it detaches (at most once a checkpoint interval).
  if (st.ok()) GiveBackFreeSpace();
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
  checkpoints_begun_.fetch_add(1, std::memory_order_relaxed);
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
  std::shared_ptr<const NsIndex> frozen;
  std::vector<NotedCreation>& noted = noted_buf_;  // as image_buf_
  {
    std::unique_lock<SpinSharedMutex> g(index_mu_);
    UPFS_RETURN_IF_ERROR(CatchUpLocked());
    if (index_.frozen()) return Status::Error(EBUSY, "a checkpoint is being written");
    at = log_.pos();
    frozen = index_.Freeze();
    noted = creations_;
  }
  // The new files the image holds: a creator that died between its commit
  // and its fence left an image that only its record, which recovery will
  // no longer read, could make again. Fenced with the header, below.
  WriteBackFreshImages(noted, noted.size());
  // Whatever happens from here on, the index is whole again at the end:
  // the image replaces the frozen layer, or the index is reloaded.
  Status st = WriteImageOf(*frozen, at, noted.size(), &h, &image);
  if (!st.ok()) {
    std::unique_lock<SpinSharedMutex> g(index_mu_);
    if (index_.frozen() == frozen.get()) {
      // Reloaded from the newest checkpoint and the log after it (if that
      // fails, the index is lost to this attachment: it would stay frozen,
      // and no checkpoint would be written here again).
      (void)ReloadIndexLocked();
    }
  }
  return st;
}

Status Pool::PlaceImage(const std::vector<uint64_t>& image, std::vector<Run>* runs, uint32_t* header_block,
                        std::vector<Run>* image_runs) {
  // Blocks: the header, then the image.
  const uint64_t image_blocks = CeilBlocks(image.size() * 8);
  Status st = AllocImageBlocks(1 + image_blocks, runs, header_block, image_runs);
  // Runs only where the pool could not grow for one (a full file system),
  // and then as many as the free pieces make.
  if (st.ok() && image_runs->size() > kMaxCheckpointRuns)
    st = Status::Error(ENOSPC, "free space too fragmented for a checkpoint");
  // The blocks may lie in space another process grew that this one has not
  // mapped yet (a free run is looked for below the shared capacity): the
  // copies below, and the header's, would fault there (they did, in
  // PoolConcurrencyTest.ProcessesMoveTokensWhileOthersList).
  for (const Run& r : *runs)
    if (st.ok()) st = access_.CheckRange(r.lblock, r.count, "checkpoint image");
  if (!st.ok()) {
    for (const Run& r : *runs)
      for (uint32_t i = 0; i < r.count; ++i) FreeBlock(r.lblock + i);
    runs->clear();
    image_runs->clear();
    return st;
  }
  uint64_t done = 0;
  const auto* bytes = reinterpret_cast<const char*>(image.data());
  for (const Run& r : *image_runs) {
    for (uint32_t i = 0; i < r.count && done < image.size() * 8; ++i) {
      const uint64_t n = std::min<uint64_t>(kBlockSize, image.size() * 8 - done);
      pm::CopyNT(medium_->base() + (uint64_t(r.lblock + i) << kBlockShift), bytes + done, n);
      done += n;
    }
  }
  return Status::OK();
}

Status Pool::AllocImageBlocks(uint64_t n, std::vector<Run>* runs, uint32_t* header_block,
                              std::vector<Run>* image_runs) {
  ThreadBlocks t;
  // One run, from space grown past the pool's end when the free space has
  // none that long (claims leave it in chunk-sized pieces: a 1,282-block
  // image of a 100,000-name directory came in 21-23 runs; single inode and
  // log blocks freed among live ones, as a directory of 150,000 new files
  // leaves it, made more runs than a header holds, and every later commit
  // built a whole image only to fail again). An image in one piece is read
  // with one load a word (BaseImage's flat view) where runs cost every
  // lookup a load of the block's address first. The space grown for it is
  // ordinary free space once a later image replaces it. Runs only if even
  // growing fails (a full file system).
  Run one;
  Status st = source_->AllocContiguous(&t, n, &one);
  if (st.ok()) runs->push_back(one);
  else st = source_->Alloc(&t, n, runs);
  source_->ReturnAll(&t);
  *header_block = 0;
  for (const Run& r : *runs) {
    if (*header_block == 0) {
      *header_block = r.lblock;
      if (r.count > 1) image_runs->push_back(Run{r.lblock + 1, r.count - 1});
    } else {
      image_runs->push_back(r);
    }
  }
  // A test that refuses blocks (RefuseBlocksForTest) or images refuses
  // the image once its blocks are taken: what a failed placement gives
  // back is then tested with it.
  if (st.ok() && (refuse_blocks_for_test_.load(std::memory_order_relaxed) ||
                  refuse_images_for_test_.load(std::memory_order_relaxed)))
    st = Status::Error(ENOSPC, "no room for the checkpoint image (refused for a test)");
  return st;
}

void Pool::WriteBackFreshImages(const std::vector<NotedCreation>& noted, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Inode* in;
    if (!InodeAt(noted[i].ino, &in).ok()) continue;
    const uint64_t id = in->ident.load(std::memory_order_acquire);
    // Another life of the inode, or one known durable: nothing to do.
    if (noted[i].creation.present && IdentGen(id) == noted[i].creation.gen && (id & kIdentFresh))
      WriteBackFreshImage(in, access_);
  }
}

Status Pool::WriteImageOf(const NsIndex& frozen, NsPos at, size_t sealed, CheckpointHeader* hp,
                          std::vector<uint64_t>* imagep) {
  CheckpointHeader& h = *hp;
  std::vector<uint64_t>& image = *imagep;
  // The frozen layer does not change: no lock (lookups and commits go on).
  frozen.BuildImage(&image, &h, super()->version >= kFirstTaggedPoolVersion);
  const uint64_t old_block = super()->checkpoint.load(std::memory_order_acquire);
  const CheckpointHeader* old = nullptr;
  if (old_block != 0) UPFS_RETURN_IF_ERROR(ReadCheckpointHeader(access_, old_block, super()->version, &old));
  std::vector<Run> runs, image_runs;
  uint32_t header_block = 0;
  UPFS_RETURN_IF_ERROR(PlaceImage(image, &runs, &header_block, &image_runs));
  auto give_back = [&] {
    for (const Run& r : runs)
      for (uint32_t i = 0; i < r.count; ++i) FreeBlock(r.lblock + i);
  };
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
  // Opened before the lock is taken (its words are the buffer the checksum
  // was just computed over: not read again).
  const CheckpointHeader* written;
  auto image_base = std::make_unique<BaseImage>();
  Status st = ReadCheckpointHeader(access_, header_block, super()->version, &written);
  if (st.ok()) st = image_base->Open(access_, *written, header_block, /*verify=*/false);
  if (!st.ok()) {
    give_back();
    return st;
  }
  {
    // Published and swapped in at once: no thread of this process sees the
    // new checkpoint before its index has the image (it would reload).
    std::unique_lock<SpinSharedMutex> g(index_mu_);
    if (index_.frozen() != &frozen) {
      give_back();
      return Status::Error(EBUSY, "the index was reloaded meanwhile");
    }
    uint64_t expected = old_block;
    if (!pm::Cas64(&mutable_super()->checkpoint, expected, header_block)) {
      give_back();
      return Status::Error(EBUSY, "another checkpoint was published first");
    }
    pm::PersistWord(&mutable_super()->checkpoint);
    index_.Publish(std::move(image_base));
    UPFS_ASSERT(sealed <= creations_.size());
    creations_.erase(creations_.begin(), creations_.begin() + ptrdiff_t(sealed));
    seen_checkpoint_.store(header_block, std::memory_order_release);
  }
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
