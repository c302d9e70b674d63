#include "container/pool/fresh_inode.h"

#include <cstring>

#include "medium/pm.h"
#include "util/assert.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {
// The durable words of an image: lines 0 and 1 up to the open count (soft).
constexpr size_t kDurableBytes = offsetof(Inode, open_count);
static_assert(kDurableBytes <= 2 * kCacheLine);
}  // namespace

NsCreation CreationOf(const Inode& image) {
  NsCreation c;
  c.present = true;
  const uint64_t id = image.ident.load(std::memory_order_relaxed);
  c.kind = IdentKind(id);
  UPFS_ASSERT(c.kind == FileType::kRegular || c.kind == FileType::kDirectory);
  c.gen = IdentGen(id);
  c.mode = uint32_t(image.mode.load(std::memory_order_relaxed) & 07777);
  c.consistency = image.consistency;
  c.owner = image.owner.load(std::memory_order_relaxed);
  c.created_ns = image.created_ns;
  // Every time of a new file is its creation time (PoolNamespace::NewInode):
  // the record keeps one.
  UPFS_ASSERT(image.ctime_ns.load(std::memory_order_relaxed) == c.created_ns &&
              image.times.mtime_ns.load(std::memory_order_relaxed) == c.created_ns);
  return c;
}

bool ImageSealedFor(const Inode& in, const NsCreation& c) {
  const uint64_t id = in.ident.load(std::memory_order_acquire);
  return IdentKind(id) == c.kind && IdentGen(id) == c.gen && !(id & kIdentFresh);
}

void ImageFromCreation(const NsCreation& c, Inode* out) {
  std::memset(static_cast<void*>(out), 0, sizeof(Inode));
  out->ident.store(EncodeIdent(c.kind, c.gen) | kIdentFresh, std::memory_order_relaxed);
  out->mode.store(c.mode, std::memory_order_relaxed);
  out->owner.store(c.owner, std::memory_order_relaxed);
  out->ctime_ns.store(c.created_ns, std::memory_order_relaxed);
  out->atime_ns.store(c.created_ns, std::memory_order_relaxed);
  out->created_ns = c.created_ns;
  out->consistency = c.consistency;
  out->times.mtime_ns.store(c.created_ns, std::memory_order_relaxed);
  out->times.data_ctime_ns.store(c.created_ns, std::memory_order_relaxed);
}

void RewriteImage(Inode* in, const NsCreation& c) {
  InodeImage image;
  ImageFromCreation(c, image.get());
  pm::StoreCopy(in, image.get(), kDurableBytes);
  pm::Flush(in, kDurableBytes);
}

void WriteBackFreshImage(Inode* in, const BlockAccess& ba) {
  pm::Flush(in, kDurableBytes);
  // A kept log's block is in the pool (its create mapped it); a damaged
  // word naming none is left to the checks that read it.
  char* p;
  if (const uint64_t l = in->log_head.load(std::memory_order_acquire); l != 0 && l < kMaxPoolBlocks &&
                                                                        ba.Addr(l, &p).ok())
    pm::Flush(p, kKeptLogLinesMax * kCacheLine);
}

void SealImage(Inode* in, const BlockAccess& ba) {
  WriteBackFreshImage(in, ba);
  pm::Fence();
  ClearFresh(in);
  pm::Flush(&in->ident, 8);
  pm::Fence();
}

void ClearFresh(Inode* in) {
  uint64_t id = in->ident.load(std::memory_order_acquire);
  while ((id & kIdentFresh) && !pm::Cas64(&in->ident, id, id & ~kIdentFresh)) {
  }
}

}  // namespace upfs
