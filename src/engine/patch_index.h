// PatchIndex: the per-process DRAM index of a file's live sub-block
// patches (docs/design.md, "Sub-block writes"): for each patched virtual
// block, where its patches lie in the log, in log order.
//
// Like the BlockTable that owns it, it has one writer at a time (the thread
// applying the log) and lock-free readers. A reader may see a record in the
// middle of a change; the change belongs to an entry committed after the
// reader's snapshot, which touches the block, so the reader's validation
// retries (File::Read). Records are never freed while the table lives.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "format/format.h"

namespace upfs {

// Where one patch's bytes are: log block, slot of its first data word,
// offset in the data block and length.
struct PatchRef {
  uint32_t lblock = 0;
  uint32_t slot = 0;
  uint32_t offset = 0;
  uint32_t length = 0;

  // lblock:32 | slot:9 | offset:12 | (length - 1):11
  uint64_t Encode() const {
    return uint64_t(lblock) | (uint64_t(slot) << 32) | (uint64_t(offset) << 41) |
           (uint64_t(length - 1) << 53);
  }
  static PatchRef Decode(uint64_t w) {
    return PatchRef{uint32_t(w), uint32_t((w >> 32) & 511), uint32_t((w >> 41) & 4095),
                    uint32_t(w >> 53) + 1};
  }
  // Byte offset of the patch's first byte from the start of its log block.
  uint64_t LogByte() const {
    return offsetof(format::LogBlock, slots) + uint64_t(slot) * 8 + (offset & 7);
  }
};
static_assert(format::kSlotsPerLogBlock <= 512 && format::kPatchMaxBytes <= 2048);

class PatchIndex {
 public:
  PatchIndex();
  ~PatchIndex();
  PatchIndex(const PatchIndex&) = delete;
  PatchIndex& operator=(const PatchIndex&) = delete;

  // Whether any block was ever patched (the read path's only cost for a
  // file without patches).
  bool any() const { return any_.load(std::memory_order_acquire); }

  // Copies the patches of block v (encoded PatchRefs, log order) to out;
  // returns how many (at most kMaxPatchesPerBlock).
  uint32_t Get(uint64_t v, uint64_t* out) const;
  // How many patches block v has.
  uint32_t Count(uint64_t v) const;
  // Bytes the patches of block v cover together (with overlaps counted twice).
  uint32_t Bytes(uint64_t v) const;

  // Writer side. Adds a patch to block v; false if the block already has
  // kMaxPatchesPerBlock patches or kPatchMaxBytes patched bytes with it.
  // Adding the ref that is already the last one changes nothing (a
  // re-applied entry).
  bool Add(uint64_t v, const PatchRef& r);
  // Drops the patches of blocks [v0, v1) (mapped anew, or unmapped).
  void Clear(uint64_t v0, uint64_t v1);
  // fn(v, refs, n) for each patched block, in block order.
  template <typename Fn>
  void ForEach(Fn fn) const;

 private:
  static constexpr uint32_t kLeafBits = 8, kMidBits = 12, kRootBits = 12;
  static_assert(kLeafBits + kMidBits + kRootBits == 32);
  struct Record {
    std::atomic<uint32_t> count{0};
    std::atomic<uint64_t> refs[format::kMaxPatchesPerBlock];
  };
  struct Leaf {
    Record r[1u << kLeafBits];
  };
  struct Mid {
    std::atomic<Leaf*> leaf[1u << kMidBits];
  };
  // The records live in leaves the index owns through pointers, not in
  // the index itself: a const lookup may hand the writer a mutable one.
  Record* Find(uint64_t v) const;
  Record* FindOrMake(uint64_t v);

  std::atomic<bool> any_{false};
  std::unique_ptr<std::atomic<Mid*>[]> root_;  // made by the first Add
  std::vector<uint32_t> leaves_;  // indices (v >> kLeafBits) of made leaves, sorted
  std::vector<std::unique_ptr<Mid>> mids_;
  std::vector<std::unique_ptr<Leaf>> owned_;
};

template <typename Fn>
void PatchIndex::ForEach(Fn fn) const {
  uint64_t refs[format::kMaxPatchesPerBlock];
  for (uint32_t li : leaves_) {
    for (uint64_t i = 0; i < (1u << kLeafBits); ++i) {
      uint64_t v = (uint64_t(li) << kLeafBits) | i;
      uint32_t n = Get(v, refs);
      if (n) fn(v, refs, n);
    }
  }
}

}  // namespace upfs
