#include "engine/patch_index.h"

#include <algorithm>

#include "util/assert.h"

namespace upfs {

using namespace format;

PatchIndex::PatchIndex() = default;
PatchIndex::~PatchIndex() = default;

PatchIndex::Record* PatchIndex::Find(uint64_t v) const {
  if (!any() || v >> 32) return nullptr;
  Mid* m = root_[v >> (kLeafBits + kMidBits)].load(std::memory_order_acquire);
  if (!m) return nullptr;
  Leaf* l = m->leaf[(v >> kLeafBits) & ((1u << kMidBits) - 1)].load(std::memory_order_acquire);
  return l ? &l->r[v & ((1u << kLeafBits) - 1)] : nullptr;
}

PatchIndex::Record* PatchIndex::FindOrMake(uint64_t v) {
  UPFS_ASSERT(v >> 32 == 0);
  if (!root_) {
    root_.reset(new std::atomic<Mid*>[1u << kRootBits]());
    // Published by any_ (release) after the first record exists.
  }
  std::atomic<Mid*>& ms = root_[v >> (kLeafBits + kMidBits)];
  Mid* m = ms.load(std::memory_order_relaxed);
  if (!m) {
    mids_.push_back(std::make_unique<Mid>());
    m = mids_.back().get();
    for (auto& l : m->leaf) l.store(nullptr, std::memory_order_relaxed);
    ms.store(m, std::memory_order_release);
  }
  std::atomic<Leaf*>& ls = m->leaf[(v >> kLeafBits) & ((1u << kMidBits) - 1)];
  Leaf* l = ls.load(std::memory_order_relaxed);
  if (!l) {
    owned_.push_back(std::make_unique<Leaf>());
    l = owned_.back().get();
    ls.store(l, std::memory_order_release);
    uint32_t li = uint32_t(v >> kLeafBits);
    leaves_.insert(std::upper_bound(leaves_.begin(), leaves_.end(), li), li);
  }
  return &l->r[v & ((1u << kLeafBits) - 1)];
}

uint32_t PatchIndex::Get(uint64_t v, uint64_t* out) const {
  const Record* r = Find(v);
  if (!r) return 0;
  uint32_t n = std::min(r->count.load(std::memory_order_acquire), kMaxPatchesPerBlock);
  for (uint32_t i = 0; i < n; ++i) out[i] = r->refs[i].load(std::memory_order_relaxed);
  return n;
}

uint32_t PatchIndex::Count(uint64_t v) const {
  const Record* r = Find(v);
  return r ? std::min(r->count.load(std::memory_order_acquire), kMaxPatchesPerBlock) : 0;
}

uint32_t PatchIndex::Bytes(uint64_t v) const {
  uint64_t refs[kMaxPatchesPerBlock];
  uint32_t n = Get(v, refs), bytes = 0;
  for (uint32_t i = 0; i < n; ++i) bytes += PatchRef::Decode(refs[i]).length;
  return bytes;
}

bool PatchIndex::Add(uint64_t v, const PatchRef& ref) {
  UPFS_ASSERT(ref.length >= 1 && ref.length <= kPatchMaxBytes &&
              ref.offset + ref.length <= kBlockSize);
  Record* r = FindOrMake(v);
  const uint64_t w = ref.Encode();
  uint32_t n = r->count.load(std::memory_order_relaxed);
  if (n && r->refs[n - 1].load(std::memory_order_relaxed) == w) return true;
  if (n >= kMaxPatchesPerBlock) return false;
  uint32_t bytes = ref.length;  // from the record in hand, not a second lookup
  for (uint32_t i = 0; i < n; ++i) bytes += PatchRef::Decode(r->refs[i].load(std::memory_order_relaxed)).length;
  if (bytes > kPatchMaxBytes) return false;
  r->refs[n].store(w, std::memory_order_relaxed);
  r->count.store(n + 1, std::memory_order_release);
  any_.store(true, std::memory_order_release);
  return true;
}

void PatchIndex::Clear(uint64_t v0, uint64_t v1) {
  if (!any() || v0 >= v1) return;
  // Few blocks: look each up. Many (a truncate, a big run): walk the leaves.
  if (v1 - v0 <= (1u << kLeafBits)) {
    for (uint64_t v = v0; v < v1; ++v)
      if (Record* r = Find(v))
        if (r->count.load(std::memory_order_relaxed)) r->count.store(0, std::memory_order_release);
    return;
  }
  auto it = std::lower_bound(leaves_.begin(), leaves_.end(), uint32_t(v0 >> kLeafBits));
  for (; it != leaves_.end() && (uint64_t(*it) << kLeafBits) < v1; ++it) {
    uint64_t base = uint64_t(*it) << kLeafBits;
    for (uint64_t v = std::max(base, v0); v < std::min(base + (1u << kLeafBits), v1); ++v) {
      Record* r = Find(v);
      if (r->count.load(std::memory_order_relaxed)) r->count.store(0, std::memory_order_release);
    }
  }
}

}  // namespace upfs
