#include "container/pool/inode_alloc.h"

#include <cstring>
#include <unordered_set>

#include "medium/pm.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {
constexpr uint64_t kInoMask = (uint64_t{1} << 36) - 1;
}  // namespace

Status InodeAllocator::AtSlow(uint64_t ino, Inode** out) const {
  if (!InodeNumberInRange(ino))
    return Status::Corrupt("inode", "number " + std::to_string(ino) + " names no inode");
  char* p;
  UPFS_RETURN_IF_ERROR(ba_->Addr(ino / kInodesPerBlock, &p));
  *out = reinterpret_cast<Inode*>(p + InodeSlotOf(ino) * kInodeSize);
  return Status::OK();
}

bool InodeAllocator::Pop(uint64_t* ino) {
  uint64_t h = words_->free_inodes.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t top = h & kInoMask;
    if (top == 0) return false;
    Inode* in;
    if (!At(top, &in).ok()) return false;  // damaged stack: make new inodes instead
    // May read a link another process is rewriting: the tag makes the CAS fail then.
    const uint64_t next = in->log_head.load(std::memory_order_acquire) & kInoMask;
    const uint64_t tag = (h >> 36) + 1;
    if (words_->free_inodes.compare_exchange_weak(h, (tag << 36) | next, std::memory_order_acq_rel)) {
      *ino = top;
      return true;
    }
  }
}

void InodeAllocator::Push(uint64_t ino) {
  Inode* in;
  if (!At(ino, &in).ok()) return;
  uint64_t h = words_->free_inodes.load(std::memory_order_acquire);
  for (;;) {
    // Soft link word of a free inode: recovery rebuilds the stack anyway.
    pm::Store64(&in->log_head, h & kInoMask);
    const uint64_t tag = (h >> 36) + 1;
    if (words_->free_inodes.compare_exchange_weak(h, (tag << 36) | ino, std::memory_order_acq_rel))
      return;
  }
}

Status InodeAllocator::NewBlock(uint64_t* first_ino) {
  uint32_t l;
  UPFS_RETURN_IF_ERROR(alloc_(&l));
  char* p;
  UPFS_RETURN_IF_ERROR(ba_->Addr(l, &p));
  alignas(64) static thread_local unsigned char img[kBlockSize];
  std::memset(img, 0, sizeof(img));
  auto* h = reinterpret_cast<InodeBlockHeader*>(img);
  h->magic = kInodeBlockMagic;
  uint64_t old = sb_->inode_chain.load(std::memory_order_acquire);
  for (;;) {
    h->next = old;
    pm::CopyNT(p, img, kBlockSize);
    pm::Fence();
    if (pm::Cas64(&sb_->inode_chain, old, l)) break;
  }
  pm::PersistWord(&sb_->inode_chain);
  for (uint32_t s = 2; s < kInodesPerBlock; ++s) Push(InodeNumber(l, s));
  *first_ino = InodeNumber(l, 1);
  return Status::OK();
}

Status InodeAllocator::Take(FileType kind, Inode* image, uint64_t* ino, Inode** out) {
  uint64_t n;
  if (!Pop(&n)) UPFS_RETURN_IF_ERROR(NewBlock(&n));
  Inode* in;
  UPFS_RETURN_IF_ERROR(At(n, &in));
  const uint64_t was = in->ident.load(std::memory_order_acquire);
  if (IdentKind(was) != FileType::kFree)
    return Status::Corrupt("inode", "free list names inode " + std::to_string(n) + " in use");
  image->ident.store(EncodeIdent(kind, IdentGen(was) + 1), std::memory_order_relaxed);
  // The creator's own hold is added to the count now, while the line is
  // often still cached from the Free that pushed it; WriteImage never
  // copies over the count (see there).
  if (const uint64_t held = image->open_count.load(std::memory_order_relaxed); held != 0)
    in->open_count.fetch_add(held, std::memory_order_seq_cst);
  *ino = n;
  *out = in;
  return Status::OK();
}

void InodeAllocator::WriteImage(Inode* in, const Inode& image, bool write_back) {
  // No fence of its own: the inode is only reachable once a record naming
  // it commits, and the create fences first (PoolNamespace::CommitNewInode).
  // Every byte but the open count: an open that resolved a name of the
  // inode's previous life may be adding and taking back a hold on it right
  // now (PoolNamespace::TakeHold), and a copy over the count would lose
  // that hold or the take-back.
  // Ordinary stores and a flush per line, not non-temporal ones: for a few
  // lines, and a partial one, they cost less here (docs/design.md, "The
  // namespace log").
  static_assert(offsetof(Inode, open_count) == offsetof(Inode, times) + sizeof(FileTimes));
  static_assert(offsetof(Inode, words) == offsetof(Inode, pad1) + sizeof(Inode::pad1));
  std::memcpy(&in->pad1, &image.pad1, sizeof(Inode::pad1));  // before its line's flush
  if (write_back) pm::CopyFlush(in, &image, offsetof(Inode, open_count));
  else pm::StoreCopy(in, &image, offsetof(Inode, open_count));
  // Lines 2-3 are durable only as a symbolic link's inline target. A
  // regular file's log words there are soft (recovery resets them) and a
  // directory has nothing there: stored, for this run's readers, but not
  // written back (two lines fewer to wait for in every create and mkdir).
  // Word by word, as atomics: a stat of the inode's previous life may be
  // reading its stat hint there right now (it then finds the ident changed
  // and looks no further; engine/stat_hint.h).
  constexpr size_t kWords = (kInodeSize - offsetof(Inode, words)) / 8;
  auto* to = reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(in) + offsetof(Inode, words));
  uint64_t from[kWords];
  std::memcpy(from, reinterpret_cast<const char*>(&image) + offsetof(Inode, words), sizeof(from));
  if (IdentKind(image.ident.load(std::memory_order_relaxed)) == FileType::kSymlink) {
    pm::StoreWords(to, from, kWords);  // seen by the crash explorer's recorder
    pm::Flush(to, sizeof(from));
  } else {
    for (size_t i = 0; i < kWords; ++i) to[i].store(from[i], std::memory_order_relaxed);
  }
}

Status InodeAllocator::Free(uint64_t ino) {
  Inode* in;
  UPFS_RETURN_IF_ERROR(At(ino, &in));
  const uint64_t was = in->ident.load(std::memory_order_acquire);
  // Neither fenced nor flushed: an inode no name leads to is an orphan,
  // freed by recovery if a crash comes first, so this word need never be
  // durable. (A flush would also evict the line on this CPU, and the next
  // Take, often of this very inode, reads it.)
  pm::Store64(&in->ident, EncodeIdent(FileType::kFree, IdentGen(was)));
  Push(ino);
  return Status::OK();
}

Status InodeAllocator::ForEachBlock(const std::function<Status(uint32_t)>& fn) const {
  uint64_t l = sb_->inode_chain.load(std::memory_order_acquire);
  // A link back into the chain would make the walk endless (fsck spun on
  // one): every block is visited once.
  std::unordered_set<uint64_t> seen;
  while (l != 0) {
    if (l < kDataStart || l >= kMaxPoolBlocks)
      return Status::Corrupt("inode block chain", "link " + std::to_string(l) + " out of range");
    if (!seen.insert(l).second)
      return Status::Corrupt("inode block chain", "loops back to block " + std::to_string(l));
    UPFS_RETURN_IF_ERROR(ba_->CheckRange(l, 1, "inode block"));
    char* p;
    UPFS_RETURN_IF_ERROR(ba_->Addr(l, &p));
    const auto* h = reinterpret_cast<const InodeBlockHeader*>(p);
    if (h->magic != kInodeBlockMagic)
      return Status::Corrupt("inode block", "block " + std::to_string(l) + " has no inode magic");
    UPFS_RETURN_IF_ERROR(fn(uint32_t(l)));
    l = h->next;
  }
  return Status::OK();
}

Status InodeAllocator::Rebuild(const std::function<Status(uint64_t, Inode*)>& fn) {
  words_->free_inodes.store(0, std::memory_order_relaxed);
  return ForEachBlock([&](uint32_t l) -> Status {
    for (uint32_t s = 1; s < kInodesPerBlock; ++s) {
      const uint64_t ino = InodeNumber(l, s);
      Inode* in;
      UPFS_RETURN_IF_ERROR(At(ino, &in));
      const FileType k = IdentKind(in->ident.load(std::memory_order_acquire));
      if (k == FileType::kFree) {
        // A process killed between taking and giving back a hold on a free
        // inode left its count high; Take adds to the count.
        pm::Store64(&in->open_count, 0);
        Push(ino);
      } else if (k > FileType::kSymlink) {
        return Status::Corrupt("inode", std::to_string(ino) + " has an unknown kind");
      } else {
        UPFS_RETURN_IF_ERROR(fn(ino, in));
      }
    }
    return Status::OK();
  });
}

}  // namespace upfs
