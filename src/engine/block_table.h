// Block table: the per-process DRAM view of a file's block map and size,
// built by replaying the log and caught up by applying entries past its
// cursor. One thread applies at a time; any thread may read at any time (a
// read may see a half-applied entry, which the OCC validation catches).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/patch_index.h"
#include "engine/shadow_index.h"
#include "format/format.h"
#include "util/assert.h"
#include "util/status.h"

namespace upfs {

// The decoded meaning of one committed log entry.
struct Effect {
  enum SizeOp : uint8_t { kNone = 0, kMax = 1, kSet = 2 };
  uint32_t vblock = 0;           // first virtual block of the runs
  uint64_t nblocks = 0;          // virtual blocks covered by the runs
  std::vector<format::Run> runs; // lblock 0 = hole, kKeepBlock = unchanged
  SizeOp size_op = kNone;
  uint64_t new_size = 0;
  bool grow_tail = false;  // from a kGrowTail entry: valid only at one size
  // From a kGrowTailChecked entry: the tail block its bytes went to and
  // where they start in it (0, 0 for a kGrowTail).
  uint32_t tail_lblock = 0;
  uint32_t tail_from = 0;
  // From a kPatch payload: where its bytes are (an encoded PatchRef; its
  // lblock is never 0), for the block `vblock` (runs: one kKeepBlock).
  uint64_t patch = 0;
  // From a granule flip naming block runs[0].lblock (format.h): with
  // flip_set, the block's mask becomes flip_mask and its shadow that block
  // (flip_anywhere) or, for a pair, the block after it, which the virtual
  // block is mapped to; else the granules in flip_mask change homes (with
  // flip_anywhere, an unpairing: they all come home, the pairing ends).
  bool flip = false;
  bool flip_set = false;
  bool flip_anywhere = false;
  uint32_t flip_mask = 0;

  void Clear() {
    vblock = 0;
    nblocks = 0;
    runs.clear();
    size_op = kNone;
    new_size = 0;
    grow_tail = false;
    tail_lblock = 0;
    tail_from = 0;
    patch = 0;
    flip = false;
    flip_set = false;
    flip_anywhere = false;
    flip_mask = 0;
  }
  // Becomes the in-place append that raises the size to `end` inside its
  // tail block (a grow-tail entry; a checked one also names that block,
  // `lblock`, and where the size was in it, `from`: else both 0).
  void SetGrowTail(uint64_t end, uint32_t lblock, uint32_t from) {
    Clear();
    new_size = end;
    size_op = kMax;
    grow_tail = true;
    tail_lblock = lblock;
    tail_from = from;
    vblock = uint32_t((end - 1) >> format::kBlockShift);
    nblocks = 1;
    runs.push_back(format::Run{format::kKeepBlock, 1});
  }
  // Becomes the granule flip of block v naming block `block` (set: its mask
  // is `mask`, anywhere: `block` is its shadow; else the granules in `mask`
  // change homes).
  void SetFlip(uint32_t v, uint32_t block, uint32_t mask, bool set, bool anywhere) {
    Clear();
    vblock = v;
    nblocks = 1;
    runs.push_back(format::Run{block, 1});
    flip = true;
    flip_set = set;
    flip_anywhere = anywhere;
    flip_mask = mask;
  }
  // The blocks a flip effect makes block vblock's home and shadow (0, 0 for
  // a toggle, which changes neither; `home` for an anywhere shadow, which
  // keeps the block where it is, and for an unpairing, which leaves it
  // with no shadow).
  void FlipBlocks(uint32_t home, uint32_t* new_home, uint32_t* new_shadow) const {
    const uint32_t b = runs[0].lblock;
    if (!flip_set) {
      *new_home = flip_anywhere ? home : 0;
      *new_shadow = 0;
      return;
    }
    *new_home = flip_anywhere ? home : b;
    *new_shadow = flip_anywhere ? b : b + 1;
  }
  // True if the effect can change the mapping of any block in [v0, v1).
  bool TouchesBlocks(uint64_t v0, uint64_t v1) const {
    if (size_op == kSet) return true;  // unmaps everything past new_size
    return nblocks && vblock < v1 && vblock + nblocks > v0;
  }
  bool ChangesSize() const { return size_op != kNone; }
  // True if the effect may leave the size above `s` (a truncate sets it,
  // which may raise it).
  bool MayRaiseSizeAbove(uint64_t s) const {
    return size_op == kSet || (size_op == kMax && new_size > s);
  }
};

// A position in the log: slot `slot` of log block `lblock`, whose chain
// sequence number is `seq`. slot == kSlotsPerLogBlock means "past the end".
struct LogPos {
  uint32_t lblock = 0;
  uint32_t slot = 0;
  uint64_t seq = 0;
  uint32_t prev = 0;  // the block before `lblock` in the chain, 0 if unknown
  // Slot of the last entry (of any kind, reservations included) before
  // `slot` in this block, kNoSlot if none: its line must be durable before
  // anything is committed in a later line.
  static constexpr uint32_t kNoSlot = 0xffff;
  uint32_t last = kNoSlot;
};

class BlockTable {
 public:
  BlockTable();
  ~BlockTable();
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  uint32_t Get(uint64_t vblock) const {
    Array* a = arr_.load(std::memory_order_acquire);
    return vblock < a->cap ? a->e[vblock].load(std::memory_order_relaxed) : 0;
  }
  uint64_t size() const { return size_.load(std::memory_order_acquire); }
  uint64_t mapped_blocks() const { return mapped_.load(std::memory_order_relaxed); }
  // One past the highest virtual block ever mapped (bounds truncation work).
  uint64_t high_water() const { return high_.load(std::memory_order_acquire); }
  // The live sub-block patches of the mapped blocks.
  const PatchIndex& patches() const { return patches_; }
  // The paired blocks (granule flips) and their shadows.
  const ShadowIndex& shadows() const { return shadows_; }
  // The shadow block of virtual block v mapped to l, 0 if it has none.
  // Two loads: against a concurrent applier it may say 0 for a block that
  // was paired a moment ago, so it serves the table's writer and lists
  // checked by a commit (blocks a write displaces), never a block to
  // write into (ShadowIndex::Get(v, &mask, &shadow) gives that).
  uint32_t ShadowOf(uint64_t v, uint32_t l) const {
    return l && shadows_.Paired(v) ? shadows_.Shadow(v) : 0;
  }

  // The first virtual block in [from, limit) that is mapped (mapped=true)
  // or a hole (mapped=false); limit if none. Skips never-mapped groups.
  uint64_t NextMapped(uint64_t from, uint64_t limit, bool mapped) const;

  // Writer side (one thread at a time).
  Status Apply(const Effect& e);
  // Maps one block (lblock != 0) or unmaps it (lblock == 0).
  void Set(uint64_t vblock, uint32_t lblock);
  // Maps [vblock, vblock + count) to [lblock, lblock + count) (lblock is
  // neither 0 nor kKeepBlock).
  void MapRun(uint64_t vblock, uint32_t lblock, uint64_t count);
  void SetSize(uint64_t s) { size_.store(s, std::memory_order_release); }
  // size = max(size, s): an append's effect (Effect::SetGrowTail).
  void RaiseSize(uint64_t s) {
    if (s > size()) SetSize(s);
  }
  // Before the applier applies what a catch-up found (at `now`): the flips
  // among it are stamped with the time of the catch-up before, which they
  // were committed after (they would have been applied then otherwise).
  // The earliest their commit can have been: a flip found by the GC's own
  // catch-up is as old as the writes before it, not as new as the GC
  // ("Folding pairs back" in docs/design.md).
  void BeginCatchUp(uint32_t now) {
    flip_stamp_ = caught_up_at_;
    caught_up_at_ = now;
  }
  // Before a committer applies its own entry, committed just before `now`
  // (File::BeginOwnApply, for a flip): a flip stamped with `now`, and entries committed
  // after it, which the next catch-up finds, were committed after it.
  void BeginOwnApply(uint32_t now) { flip_stamp_ = caught_up_at_ = now; }
  // A flip its committer applies (File::FlipOnce): block v, mapped to
  // `home` and paired (`was_paired`, a toggle) or not (an anywhere
  // shadow's first flip), now lives with `shadow` under `mask`. What
  // ApplyFlip would do, without its checks: the committer saw the block
  // so at its snapshot and nothing touching it was committed since.
  void ApplyOwnFlip(uint64_t v, uint32_t home, bool was_paired, uint32_t shadow, uint32_t mask) {
    UPFS_ASSERT(Get(v) == home && home != shadow && shadows_.Paired(v) == was_paired);
    UPFS_ASSERT(!was_paired || shadows_.Shadow(v) == shadow);
    UPFS_ASSERT(!patches_.Count(v) && (v << format::kBlockShift) < size());
    (void)home;
    (void)was_paired;
    shadows_.Set(v, shadow, mask, flip_stamp_);
  }
  // For a table replayed afresh to replace `old` (after a compaction),
  // before it is published: a pair `old` knew as it is keeps old's stamp;
  // one that changed since was flipped after old's last catch-up. (Every
  // pair stamped with the replay's time made a file compacted more often
  // than once a second never fold a pair.)
  void InheritFlipStamps(const BlockTable& old);

  // The cursor: everything before it has been applied. Read with a seqlock
  // so that (lblock, slot, seq) is always a consistent triple.
  LogPos cursor() const {
    for (;;) {
      uint64_t v1 = cver_.load(std::memory_order_acquire);
      if (v1 & 1) continue;
      uint64_t a = cpos_.load(std::memory_order_relaxed);
      uint64_t s = cseq_.load(std::memory_order_relaxed);
      // Inside the check, as the others: loaded after it, the previous
      // block could belong to a later cursor.
      uint32_t prev = cprev_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (cver_.load(std::memory_order_relaxed) == v1)
        return LogPos{uint32_t(a), uint32_t((a >> 32) & 0xffff), s, prev, uint32_t(a >> 48)};
    }
  }
  // One writer at a time (under the File's apply_lock_, or before the
  // table is published), so plain stores, not locked adds (two locked
  // instructions in every small write): the odd version, a release fence
  // that orders it before the fields, the even one after them.
  void set_cursor(const LogPos& p) {
    const uint64_t v = cver_.load(std::memory_order_relaxed);
    UPFS_ASSERT(v % 2 == 0);
    cver_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    cpos_.store(uint64_t(p.lblock) | (uint64_t(p.slot) << 32) | (uint64_t(p.last) << 48),
                std::memory_order_relaxed);
    cprev_.store(p.prev, std::memory_order_relaxed);
    cseq_.store(p.seq, std::memory_order_relaxed);
    cver_.store(v + 2, std::memory_order_release);
  }

  // The chain this table was replayed from: its head block and that
  // block's sequence number (set before the table is published). A
  // read-only File compares them with the file header's to notice a GC.
  uint32_t chain_head() const { return chain_head_; }
  uint64_t chain_seq() const { return chain_seq_; }
  void set_chain(uint32_t head, uint64_t seq) {
    chain_head_ = head;
    chain_seq_ = seq;
  }
  // LogWords::compact_seq when the replay that built this table began
  // (set before the table is published).
  uint64_t compact_seen() const { return compact_seen_; }
  void set_compact_seen(uint64_t s) { compact_seen_ = s; }

  // Calls fn(lblock) for every block the mapping holds in [from, to): each
  // mapped block, and the shadow of each paired one (what a rebuild
  // marks, and what unmapping them displaces).
  template <typename Fn>
  void ForEachHeld(Fn fn, uint64_t from = 0, uint64_t to = UINT64_MAX) const {
    ForEachMapped(
        [&](uint64_t v, uint32_t l) {
          fn(l);
          if (const uint32_t s = ShadowOf(v, l)) fn(s);
        },
        from, to);
  }

  // Calls fn(vblock, lblock) for every mapped block at or after `from`, in
  // order. Stretches of kGroup entries that were never mapped are skipped,
  // so a sparse file with a block at a huge offset costs little.
  template <typename Fn>
  void ForEachMapped(Fn fn, uint64_t from = 0, uint64_t to = UINT64_MAX) const {
    Array* a = arr_.load(std::memory_order_acquire);
    uint64_t n = std::min<uint64_t>(std::min<uint64_t>(a->cap, high_water()), to);
    for (uint64_t g = from / kGroup; g * kGroup < n; ++g) {
      if (!(a->groups()[g / 64].load(std::memory_order_acquire) >> (g % 64) & 1)) continue;
      for (uint64_t v = std::max(from, g * kGroup); v < std::min(n, (g + 1) * kGroup); ++v) {
        uint32_t l = a->e[v].load(std::memory_order_relaxed);
        if (l) fn(v, l);
      }
    }
  }

 private:
  static constexpr uint64_t kGroup = 1024;  // entries per "ever mapped" bit
  struct Array {
    uint64_t cap;
    uint64_t bytes;
    uint64_t groups_offset;  // bytes from the array start to the group bits
    std::atomic<uint64_t>* groups() {
      return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(this) + groups_offset);
    }
    std::atomic<uint32_t> e[1];
  };
  Status ApplyPatch(const Effect& e);
  Status ApplyFlip(const Effect& e);
  // Where an array of `cap` entries has its group bits, and its bytes.
  static constexpr uint64_t EntriesBytes(uint64_t cap) { return (sizeof(Array) + cap * sizeof(uint32_t) + 7) / 8 * 8; }
  static constexpr uint64_t ArrayBytes(uint64_t cap) { return EntriesBytes(cap) + (cap / kGroup + 64) / 64 * 8; }
  static Array* NewArray(uint64_t cap);
  static void FreeArray(Array* a);
  // The table's first array, in first_array_ (zeroed).
  Array* FirstArray();
  void EnsureCapacity(uint64_t n);

  // Every table starts with kFirstCap entries inside itself: most tables
  // are a small file's (a pool file's life made two, each with its array
  // on the heap, two of the 22 allocations of creating, writing and
  // removing a small file). Its bytes: the header and 64 entries, and one
  // word of group bits.
  static constexpr uint64_t kFirstCap = 64;
  static constexpr uint64_t kFirstArrayBytes = 296;
  alignas(8) unsigned char first_array_[kFirstArrayBytes];
  std::atomic<Array*> arr_;
  std::vector<Array*> retired_;  // older arrays may still be read; freed at destruction
  PatchIndex patches_;
  ShadowIndex shadows_;
  // BeginCatchUp's times (ShadowIndex stamps); a table replayed afresh
  // stamps its flips with the time it was made.
  uint32_t caught_up_at_ = ShadowIndex::Now();
  uint32_t flip_stamp_ = caught_up_at_;
  std::atomic<uint64_t> size_{0};
  std::atomic<uint64_t> mapped_{0};
  std::atomic<uint64_t> high_{0};
  std::atomic<uint64_t> cver_{0};
  std::atomic<uint64_t> cpos_{0};
  std::atomic<uint64_t> cseq_{0};
  std::atomic<uint64_t> cprev_{0};
  uint32_t chain_head_ = 0;
  uint64_t chain_seq_ = 0;
  uint64_t compact_seen_ = 0;
};

}  // namespace upfs
