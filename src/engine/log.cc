#include "engine/log.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

// ---------------------------------------------------------------------------
// BlockTable

// Small arrays (every file starts with one) come from the heap: a fresh
// anonymous mapping costs a page fault and an munmap, several microseconds
// of every open. Large ones are mapped, so untouched parts take no memory.
constexpr uint64_t kHeapArrayMaxBytes = 64 * 1024;

BlockTable::Array* BlockTable::NewArray(uint64_t cap) {
  const uint64_t bytes = ArrayBytes(cap);
  void* p;
  if (bytes <= kHeapArrayMaxBytes) {
    p = calloc(1, bytes);
    if (!p) throw std::bad_alloc();
  } else {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
  }
  auto* a = static_cast<Array*>(p);
  a->cap = cap;
  a->bytes = bytes;
  a->groups_offset = EntriesBytes(cap);
  return a;
}

void BlockTable::FreeArray(Array* a) {
  if (a->bytes <= kHeapArrayMaxBytes)
    free(a);
  else
    munmap(a, a->bytes);
}

BlockTable::Array* BlockTable::FirstArray() {
  static_assert(ArrayBytes(kFirstCap) == kFirstArrayBytes);
  std::memset(first_array_, 0, sizeof(first_array_));
  auto* a = reinterpret_cast<Array*>(first_array_);
  a->cap = kFirstCap;
  a->bytes = kFirstArrayBytes;
  a->groups_offset = EntriesBytes(kFirstCap);
  return a;
}

// Small to start with (a table per open file, and one per replay of a
// released file), and inside the table: it doubles, on the heap, as blocks
// are mapped.
BlockTable::BlockTable() : arr_(FirstArray()) {}

BlockTable::~BlockTable() {
  auto free_unless_first = [this](Array* a) {
    if (reinterpret_cast<unsigned char*>(a) != first_array_) FreeArray(a);
  };
  free_unless_first(arr_.load());
  for (Array* a : retired_) free_unless_first(a);
}

void BlockTable::EnsureCapacity(uint64_t n) {
  Array* a = arr_.load(std::memory_order_relaxed);
  if (n <= a->cap) return;
  uint64_t cap = a->cap;
  while (cap < n) cap *= 2;
  Array* b = NewArray(cap);
  uint64_t limit = std::min(a->cap, high_water());
  for (uint64_t g = 0; g * kGroup < limit; ++g) {
    if (!(a->groups()[g / 64].load(std::memory_order_relaxed) >> (g % 64) & 1)) continue;
    b->groups()[g / 64].fetch_or(uint64_t{1} << (g % 64), std::memory_order_relaxed);
    for (uint64_t i = g * kGroup; i < std::min(limit, (g + 1) * kGroup); ++i)
      b->e[i].store(a->e[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  arr_.store(b, std::memory_order_release);
  retired_.push_back(a);
}

// The counters have one writer at a time: a load and a store, not a
// locked add.
void BlockTable::Set(uint64_t v, uint32_t l) {
  if (l) return MapRun(v, l, 1);
  Array* a = arr_.load(std::memory_order_relaxed);
  if (v >= a->cap) return;  // unmapping beyond the table: already a hole
  if (a->e[v].load(std::memory_order_relaxed) == 0) return;
  a->e[v].store(0, std::memory_order_release);
  patches_.Clear(v, v + 1);
  shadows_.Clear(v, v + 1);
  mapped_.store(mapped_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

// Maps a run with the capacity, the group bits and the counters handled
// once per run rather than per block: a replay of a 1 GiB file maps
// 262,144 blocks, and doing that block by block (a locked add among it)
// made its open take 3.5-5.1 ms.
void BlockTable::MapRun(uint64_t v, uint32_t l, uint64_t count) {
  if (count == 0) return;
  UPFS_ASSERT(l != 0 && l != format::kKeepBlock);
  EnsureCapacity(v + count);
  Array* a = arr_.load(std::memory_order_relaxed);
  const uint64_t end = v + count;
  for (uint64_t g = v / kGroup; g <= (end - 1) / kGroup; ++g) {
    std::atomic<uint64_t>& w = a->groups()[g / 64];
    if (!(w.load(std::memory_order_relaxed) >> (g % 64) & 1))
      w.fetch_or(uint64_t{1} << (g % 64), std::memory_order_release);
  }
  uint64_t added = 0;
  for (uint64_t i = 0; i < count; ++i) {
    added += a->e[v + i].load(std::memory_order_relaxed) == 0;
    a->e[v + i].store(l + uint32_t(i), std::memory_order_release);
  }
  if (added) mapped_.store(mapped_.load(std::memory_order_relaxed) + added, std::memory_order_relaxed);
  if (end > high_water()) high_.store(end, std::memory_order_release);
  // Patches applied to the blocks mapped before, and their pairings; the
  // new ones have none.
  patches_.Clear(v, end);
  shadows_.Clear(v, end);
}

Status BlockTable::Apply(const Effect& e) {
  if (e.patch) return ApplyPatch(e);
  if (e.flip) return ApplyFlip(e);
  // Only runs that map blocks need room in the table; holes and keeps cost
  // nothing past what is mapped (a hole run may legally cover 2^32 blocks).
  uint64_t v = e.vblock, map_end = 0;
  for (const Run& r : e.runs) {
    if (r.lblock != 0 && r.lblock != kKeepBlock) map_end = v + r.count;
    v += r.count;
  }
  if (map_end) EnsureCapacity(map_end);
  v = e.vblock;
  for (const Run& r : e.runs) {
    if (r.lblock == 0) {
      std::vector<uint64_t> drop;
      uint64_t end = v + r.count;
      ForEachMapped(
          [&](uint64_t b, uint32_t) {
            if (b < end) drop.push_back(b);
          },
          v, end);
      for (uint64_t b : drop) Set(b, 0);
    } else if (r.lblock != kKeepBlock) {
      MapRun(v, r.lblock, r.count);
    }
    v += r.count;
  }
  if (e.size_op == Effect::kMax) {
    RaiseSize(e.new_size);
  } else if (e.size_op == Effect::kSet) {
    uint64_t keep = CeilBlocks(e.new_size);
    std::vector<uint64_t> drop;
    ForEachMapped([&](uint64_t b, uint32_t) { drop.push_back(b); }, keep);
    for (uint64_t b : drop) Set(b, 0);
    SetSize(e.new_size);
  }
  return Status::OK();
}

// A patch is written only over bytes below the size of a mapped block,
// with nothing touching that block committed since (File::PatchOnce): a log
// where that does not hold was not written by upfs.
Status BlockTable::ApplyPatch(const Effect& e) {
  const PatchRef r = PatchRef::Decode(e.patch);
  auto bad = [&](const std::string& why) {
    return Status::Corrupt("patch of block " + std::to_string(e.vblock) + " in log block " +
                               std::to_string(r.lblock),
                           why);
  };
  if (Get(e.vblock) == 0) return bad("the block is not mapped");
  if ((uint64_t(e.vblock) << kBlockShift) + r.offset + r.length > size())
    return bad("it reaches past the size " + std::to_string(size()));
  if (!patches_.Add(e.vblock, r))
    return bad("the block has more than " + std::to_string(kMaxPatchesPerBlock) + " patches or " +
               std::to_string(kPatchMaxBytes) + " patched bytes");
  return Status::OK();
}

// A flip is written only over bytes below the size of a mapped block
// without patches, an anywhere shadow only to a block not paired, and a
// toggle or an unpairing (with the block's whole mask) only to a block
// paired and mapped to the block it names, with
// nothing touching the block committed since (File::FlipOnce).
// Not idempotent: a toggle applied twice undoes itself, so a table whose
// catch-up failed is never used again before a rebuild (its operations
// fail at the same entry).
Status BlockTable::ApplyFlip(const Effect& e) {
  const uint32_t named = e.runs[0].lblock;
  auto bad = [&](const std::string& why) {
    return Status::Corrupt("granule flip of block " + std::to_string(e.vblock) +
                               (!e.flip_anywhere ? " to pair "
                                : e.flip_set     ? " to shadow "
                                                 : " (unpairing) at home ") +
                               std::to_string(named),
                           why);
  };
  const uint32_t l = Get(e.vblock);
  // A pair's set may map a hole (the compacted state maps such pairs by
  // their flips alone); a version 4 write's first flip maps over a mapped
  // block; an anywhere shadow pairs the block where it is.
  if (l == 0 && !(e.flip_set && !e.flip_anywhere)) return bad("the block is not mapped");
  if ((uint64_t(e.vblock) << kBlockShift) >= size())
    return bad("the block lies past the size " + std::to_string(size()));
  if (patches_.Count(e.vblock)) return bad("the block has patches");
  // One walk of the index for both the mask and the shadow (a toggle
  // needs the shadow again for its Set).
  uint32_t mask = 0, shadow = 0;
  const bool paired = shadows_.Get(e.vblock, &mask, &shadow);
  if (e.flip_set && e.flip_anywhere) {
    if (named == l) return bad("the shadow is the block itself");
    if (paired) return bad("the block is paired already");
    shadows_.Set(e.vblock, named, e.flip_mask, flip_stamp_);
    return Status::OK();
  }
  if (e.flip_set) {
    if (l != named) MapRun(e.vblock, named, 1);
    shadows_.Set(e.vblock, named + 1, e.flip_mask, flip_stamp_);
    return Status::OK();
  }
  if (l != named || !paired) return bad("the block is not paired with it");
  if (e.flip_anywhere) {
    if (mask != e.flip_mask) return bad("the unpairing does not bring every granule home");
    shadows_.Clear(e.vblock, e.vblock + 1);
    return Status::OK();
  }
  shadows_.Set(e.vblock, shadow, mask ^ e.flip_mask, flip_stamp_);
  return Status::OK();
}

void BlockTable::InheritFlipStamps(const BlockTable& old) {
  if (!shadows_.any()) return;
  shadows_.ForEachStamped([&](uint64_t v, uint32_t mask, uint32_t) {
    uint32_t old_mask = 0;
    const uint32_t shadow = shadows_.Shadow(v);
    const bool same = old.Get(v) == Get(v) && old.shadows().Get(v, &old_mask) && old_mask == mask &&
                      old.shadows().Shadow(v) == shadow;
    shadows_.Set(v, shadow, mask, same ? old.shadows().Stamp(v) : old.caught_up_at_);
  });
}

uint64_t BlockTable::NextMapped(uint64_t from, uint64_t limit, bool mapped) const {
  Array* a = arr_.load(std::memory_order_acquire);
  uint64_t n = std::min<uint64_t>(std::min<uint64_t>(a->cap, high_water()), limit);
  uint64_t v = from;
  while (v < n) {
    uint64_t g = v / kGroup;
    bool touched = a->groups()[g / 64].load(std::memory_order_acquire) >> (g % 64) & 1;
    if (!touched) {
      if (!mapped) return v;  // a whole group of holes
      v = (g + 1) * kGroup;
      continue;
    }
    for (uint64_t end = std::min(n, (g + 1) * kGroup); v < end; ++v)
      if ((a->e[v].load(std::memory_order_relaxed) != 0) == mapped) return v;
  }
  // Past everything ever mapped: all holes.
  return mapped ? limit : std::min(std::max(v, from), limit);
}

// ---------------------------------------------------------------------------
// Decoding

Status BlockAccess::CheckRange(uint64_t l, uint64_t count, const char* what) const {
  // Without overflow: a damaged block number near 2^64 must not wrap past
  // the check (it did, and the address computed from it overflowed).
  if (l == 0 || count == 0 || l >= kMaxBlocks || count > kMaxBlocks - l)
    return Status::Corrupt(what, "block run " + std::to_string(l) + "+" + std::to_string(count) +
                                     " is invalid");
  uint64_t end = (l + count) << kBlockShift;
  if (end > m_->mapped_bytes()) {
    Status st = m_->EnsureMapped(end);
    if (!st.ok())
      return Status::Corrupt(what, "block run " + std::to_string(l) + "+" +
                                       std::to_string(count) + " lies past the end of the file");
  }
  return Status::OK();
}

Status CheckLogBlock(const BlockAccess& ba, uint32_t lblock, uint64_t seq, LogBlock** out) {
  auto name = [&] { return "log block " + std::to_string(lblock); };
  if (lblock == 0) return Status::Corrupt(name(), "points at the file header");
  Status st = ba.CheckRange(lblock, 1, "log chain");
  if (!st.ok()) return Status::Corrupt(name(), "lies past the end of the file");
  char* a;
  UPFS_RETURN_IF_ERROR(ba.Addr(lblock, &a));
  auto* b = reinterpret_cast<LogBlock*>(a);
  uint64_t w = b->next.load(std::memory_order_acquire);
  if (!NextWordValid(w)) return Status::Corrupt(name(), "bad magic");
  if (b->seq != seq)
    return Status::Corrupt(name(), "sequence number " + std::to_string(b->seq) + ", expected " +
                                     std::to_string(seq));
  *out = b;
  return Status::OK();
}

namespace {

// In the decoders, `where` names the entry in error messages; it is only
// called on error (decoding is on every reader's and writer's path).

// The effect of a patch payload (`words`, checksummed) whose first word is
// at slot rs + 1 of log block b_lblock.
template <typename Where>
Status DecodePatch(const Where& where, uint32_t b_lblock, uint32_t rs, const uint64_t* words,
                   uint32_t count, Effect* eff) {
  if (words[0] != 0 || uint16_t(words[1] >> 48) != kPatch || ((words[1] >> 32) & 0xffff) != 0)
    return Status::Corrupt(where(), "patch with a size change or runs");
  if (!PatchWord2WellFormed(words[2])) return Status::Corrupt(where(), "malformed patch extent");
  const uint32_t off = PatchOffset(words[2]), len = PatchLength(words[2]);
  if (count != kPatchHeaderWords + PatchDataWords(off, len))
    return Status::Corrupt(where(), "patch length does not match its payload");
  eff->vblock = uint32_t(words[1]);
  eff->nblocks = 1;
  eff->runs.push_back(Run{kKeepBlock, 1});
  eff->patch = PatchRef{b_lblock, rs + 1 + kPatchHeaderWords, off, len}.Encode();
  return Status::OK();
}

template <typename Where>
Status DecodePayload(const BlockAccess& ba, const LogBlock* b, uint32_t b_lblock, const Where& where,
                     uint32_t rs, uint32_t count, uint32_t crc, Effect* eff) {
  const std::atomic<uint64_t>* w = &b->slots[rs + 1];
  uint64_t words[kMaxPayloadWords];
  if (count < kPayloadHeaderWords || count > kMaxPayloadWords)
    return Status::Corrupt(where(), "payload of " + std::to_string(count) + " words");
  for (uint32_t i = 0; i < count; ++i) words[i] = w[i].load(std::memory_order_relaxed);
  if (Crc32c(words, count * 8) != crc) return Status::Corrupt(where(), "payload checksum mismatch");
  eff->Clear();
  uint64_t new_size = words[0];
  uint32_t vblock = uint32_t(words[1]);
  uint32_t nruns = uint32_t((words[1] >> 32) & 0xffff);
  uint16_t flags = uint16_t(words[1] >> 48);
  if (flags & ~kKnownPayloadFlags) return Status::Corrupt(where(), "unknown payload flags");
  if (flags & kPatch) return DecodePatch(where, b_lblock, rs, words, count, eff);
  if ((flags & kSizeMax) && (flags & kSizeSet))
    return Status::Corrupt(where(), "payload sets size two ways");
  if (new_size > kMaxFileSize) return Status::Corrupt(where(), "size beyond the upfs limit");
  eff->vblock = vblock;
  eff->new_size = new_size;
  eff->size_op = (flags & kSizeSet) ? Effect::kSet : (flags & kSizeMax) ? Effect::kMax : Effect::kNone;
  const uint64_t* runw = nullptr;
  std::vector<uint64_t> overflow;
  if (flags & kPayloadOverflow) {
    if (count != kPayloadHeaderWords + 2) return Status::Corrupt(where(), "bad overflow payload");
    Run ov = DecodeRun(words[2]);
    UPFS_RETURN_IF_ERROR(ba.CheckRange(ov.lblock, ov.count, "overflow block run"));
    if (uint64_t(nruns) * 8 > uint64_t(ov.count) * kBlockSize)
      return Status::Corrupt(where(), "overflow runs exceed their blocks");
    overflow.resize(nruns);
    if (nruns) std::memcpy(overflow.data(), ba.AddrUnchecked(ov.lblock), nruns * 8);
    if (Crc32c(overflow.data(), nruns * 8) != uint32_t(words[3]))
      return Status::Corrupt(where(), "overflow checksum mismatch");
    runw = overflow.data();
  } else {
    if (count != kPayloadHeaderWords + nruns || nruns > kMaxInlineRuns)
      return Status::Corrupt(where(), "payload length");
    runw = &words[kPayloadHeaderWords];
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < nruns; ++i) {
    Run r = DecodeRun(runw[i]);
    if (r.count == 0) return Status::Corrupt(where(), "empty run");
    if (r.lblock != 0 && r.lblock != kKeepBlock)
      UPFS_RETURN_IF_ERROR(ba.CheckRange(r.lblock, r.count, "payload run"));
    total += r.count;
    eff->runs.push_back(r);
  }
  if (uint64_t(vblock) + total > kMaxBlocks) return Status::Corrupt(where(), "runs beyond upfs limit");
  eff->nblocks = total;
  return Status::OK();
}

template <typename Where>
Status DecodeGranuleFlip(const BlockAccess& ba, const LogBlock* b, uint32_t slot, uint64_t e,
                         const Where& where, Effect* eff) {
  if (slot % 2 != 0) return Status::Corrupt(where(), "granule flip at an odd slot");
  const uint64_t w1 = b->slots[slot + 1].load(std::memory_order_acquire);
  if (!GranuleFlipWellFormed(e, w1)) return Status::Corrupt(where(), "malformed granule flip");
  const uint32_t named = GranuleFlipBlock(e);
  const bool anywhere = GranuleFlipAnywhere(w1);
  // A pair's set names both its blocks; an anywhere shadow names one; a
  // toggle and an unpairing name the home, whose shadow was checked when
  // it was paired.
  const bool pair = GranuleFlipSet(w1) && !anywhere;
  const char* what = anywhere && GranuleFlipSet(w1) ? "granule flip's shadow"
                     : pair                           ? "granule flip's pair"
                                                      : "granule flip's home";
  if (!ba.CheckRange(named, pair ? 2 : 1, what).ok())
    return Status::Corrupt(where(), std::string(what) + " " + std::to_string(named) +
                                        " lies past the end of the file");
  eff->SetFlip(GranuleFlipVblock(e), named, GranuleFlipMask(w1), GranuleFlipSet(w1), anywhere);
  return Status::OK();
}

}  // namespace

Status DecodeEntry(const BlockAccess& ba, const LogBlock* b, uint32_t b_lblock, uint32_t slot,
                   uint64_t e, Effect* eff, bool* has_effect, uint32_t* next_slot) {
  auto where = [&] {
    return "log entry " + std::to_string(slot) + " of log block " + std::to_string(b_lblock);
  };
  *has_effect = false;
  switch (KindOf(e)) {
    case EntryKind::kMap:
    case EntryKind::kMapExtend: {
      UPFS_RETURN_IF_ERROR(DecodeInlineEffect(ba, e, eff));
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kTouch: {
      if (!TouchWellFormed(e)) return Status::Corrupt(where(), "malformed touch entry");
      InlineMap m = DecodeInline(e);
      eff->Clear();
      eff->vblock = m.vblock;
      eff->nblocks = m.count;
      eff->runs.push_back(Run{kKeepBlock, m.count});
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kGrowTail: {
      if (!GrowTailWellFormed(e)) return Status::Corrupt(where(), "malformed grow-tail entry");
      eff->SetGrowTail(GrowTailSize(e), 0, 0);
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    case EntryKind::kGrowTailChecked: {
      if (IsGranuleFlip(e)) {
        UPFS_RETURN_IF_ERROR(DecodeGranuleFlip(ba, b, slot, e, where, eff));
        *has_effect = true;
        *next_slot = slot + kGranuleFlipSlots;
        return Status::OK();
      }
      if (slot % 2 != 0) return Status::Corrupt(where(), "checked append at an odd slot");
      const uint64_t w1 = b->slots[slot + 1].load(std::memory_order_acquire);
      if (!GrowTailCheckedWellFormed(e, w1))
        return Status::Corrupt(where(), "malformed checked-append entry");
      const uint32_t l = GrowTailCheckedBlock(w1);
      if (!ba.CheckRange(l, 1, "checked append's block").ok())
        return Status::Corrupt(where(), "checked append's block " + std::to_string(l) +
                                            " lies past the end of the file");
      eff->SetGrowTail(GrowTailCheckedSize(e), l, GrowTailCheckedFrom(e));
      *has_effect = true;
      *next_slot = slot + kGrowTailCheckedSlots;
      return Status::OK();
    }
    case EntryKind::kReserve: {
      if (!ReserveWellFormed(e)) return Status::Corrupt(where(), "malformed reservation");
      uint32_t n = ReserveCount(e);
      if (slot + 1 + n > kSlotsPerLogBlock)
        return Status::Corrupt(where(), "reservation runs past the log block");
      *next_slot = slot + 1 + n;
      return Status::OK();
    }
    case EntryKind::kApply: {
      if (!ApplyWellFormed(e)) return Status::Corrupt(where(), "malformed apply entry");
      uint32_t rs = ApplySlot(e);
      if (rs >= slot) return Status::Corrupt(where(), "applies a later reservation");
      uint64_t r = b->slots[rs].load(std::memory_order_acquire);
      if (KindOf(r) != EntryKind::kReserve || !ReserveWellFormed(r))
        return Status::Corrupt(where(), "applies a slot that is not a reservation");
      uint32_t n = ReserveCount(r);
      if (rs + 1 + n > slot) return Status::Corrupt(where(), "reservation overlaps its apply");
      UPFS_RETURN_IF_ERROR(DecodePayload(ba, b, b_lblock, where, rs, n, ApplyCrc(e), eff));
      *has_effect = true;
      *next_slot = slot + 1;
      return Status::OK();
    }
    default:
      return Status::Corrupt(where(), "unknown entry kind " + std::to_string(int(KindOf(e))));
  }
}

uint32_t LastEntryBefore(const LogBlock* b, uint32_t end) {
  uint32_t last = LogPos::kNoSlot;
  for (uint32_t s = 0; s < end && s < kSlotsPerLogBlock;) {
    const uint64_t e = b->slots[s].load(std::memory_order_acquire);
    if (e == 0) break;
    last = s;
    s += EntrySlots(e);
  }
  return last;
}

uint32_t EntrySlots(uint64_t e) {
  switch (KindOf(e)) {
    case EntryKind::kReserve: return 1 + ReserveCount(e);
    case EntryKind::kGrowTailChecked: return kGrowTailCheckedSlots;
    default: return 1;
  }
}

Status CheckGrowTail(const BlockTable& table, const Effect& eff, uint32_t lblock, uint32_t slot) {
  // Written only by an append that found this exact size and a mapped tail
  // block, with nothing committed in between (File::AppendInPlace); a
  // checked one also names that block and where the size was in it.
  const uint64_t size = table.size(), vt = size >> kBlockShift;
  if ((size & (kBlockSize - 1)) == 0 || eff.new_size <= size ||
      ((eff.new_size - 1) >> kBlockShift) != vt || table.Get(vt) == 0 ||
      (eff.tail_lblock != 0 &&
       (table.Get(vt) != eff.tail_lblock || (size & (kBlockSize - 1)) != eff.tail_from)))
    return Status::Corrupt(
        "log entry " + std::to_string(slot) + " of log block " + std::to_string(lblock),
        "in-place append to " + std::to_string(eff.new_size) +
            " does not continue the tail block at size " + std::to_string(size));
  return Status::OK();
}

Status ApplyLogBlock(const BlockAccess& ba, const LogBlock* b, uint32_t lblock, BlockTable* table,
                     std::vector<Run>* overflow, uint32_t* end_slot, uint64_t* entries,
                     uint32_t start_slot, uint32_t* cut_short) {
  Effect eff;
  uint32_t slot = start_slot;
  while (slot < kSlotsPerLogBlock) {
    uint64_t e = b->slots[slot].load(std::memory_order_acquire);
    if (e == 0) break;
    bool has = false;
    uint32_t next = 0;
    if (Status st = DecodeEntry(ba, b, lblock, slot, e, &eff, &has, &next); !st.ok()) {
      if (cut_short && (CutShortApply(b, slot, e) || CutShortGrowTail(ba, b, slot, e))) {
        *cut_short = slot;
        break;
      }
      return st;
    }
    // A checked append's bytes are checked where a crash may have cut it
    // short, and only as the chain's last entry: nothing after it made them
    // durable (rule 3).
    if (cut_short && KindOf(e) == EntryKind::kGrowTailChecked && CutShortGrowTail(ba, b, slot, e)) {
      *cut_short = slot;
      break;
    }
    if (KindOf(e) == EntryKind::kApply) {
      // DecodeEntry validated the payload, so its words are in bounds.
      uint32_t rs = ApplySlot(e);
      uint64_t w1 = b->slots[rs + 2].load(std::memory_order_relaxed);
      if (uint16_t(w1 >> 48) & kPayloadOverflow)
        overflow->push_back(DecodeRun(b->slots[rs + 3].load(std::memory_order_relaxed)));
    }
    if (has && eff.grow_tail) UPFS_RETURN_IF_ERROR(CheckGrowTail(*table, eff, lblock, slot));
    if (has) {
      UPFS_RETURN_IF_ERROR(table->Apply(eff));
      ++*entries;
    }
    slot = next;
  }
  *end_slot = slot;
  return Status::OK();
}

namespace {

// The end of a chain replayed by a rule that allows for a crash: block `b`
// (`lblock`) holds the last entry, and `slot` is the first slot past it.
// Words after it can be what a crash left of one commit cut short, its
// reservation word lost: its payload and apply, no further than that
// commit could reach; anything further is damage. The apply a replay
// stopped at (`cut`, if not kNoSlot) is such a commit's too. kRecover
// clears them, and unlinks an empty successor a committer linked after
// the cut-short apply filled the block (it is free space then).
Status EndAfterCrash(const BlockAccess& ba, LogBlock* b, uint32_t lblock, uint32_t slot, uint32_t cut,
                     TailRule rule, ReplayResult* res) {
  auto where = [&] { return "log block " + std::to_string(lblock); };
  const uint32_t reach = slot + 2 + kMaxPayloadWords;  // reservation, payload, apply
  // A cut-short apply is one word; a checked append two (its second may
  // be zero).
  const uint32_t cut_end =
      cut == LogPos::kNoSlot ? cut
                             : cut + EntrySlots(b->slots[cut].load(std::memory_order_relaxed));
  uint32_t words = cut != LogPos::kNoSlot ? 1 : 0;
  for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s) {
    if (s == cut || b->slots[s].load(std::memory_order_relaxed) == 0) continue;
    if (cut != LogPos::kNoSlot && s < cut_end) {
      ++words;
      continue;
    }
    if (cut != LogPos::kNoSlot || s >= reach)
      return Status::Corrupt(where(), "entry " + std::to_string(s) + " follows the end of the log");
    ++words;
  }
  const uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
  if (n != 0) {
    LogBlock* nb;
    UPFS_RETURN_IF_ERROR(CheckLogBlock(ba, n, b->seq + 1, &nb));
    // Only a commit that filled the block can have made someone link one.
    if (b->slots[kSlotsPerLogBlock - 1].load(std::memory_order_relaxed) == 0)
      return Status::Corrupt(where(), "has a successor but is not full");
    for (uint32_t s = 0; s < kSlotsPerLogBlock; ++s)
      if (nb->slots[s].load(std::memory_order_relaxed) != 0)
        return Status::Corrupt(where(), "a commit cut short by a crash has entries after it");
  }
  res->cut_short_words = words;
  if (rule != TailRule::kRecover || (words == 0 && n == 0)) return Status::OK();
  for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s)
    if (b->slots[s].load(std::memory_order_relaxed) != 0) pm::Store64(&b->slots[s], 0);
  if (n != 0) pm::Store64(&b->next, NextWord(0));
  pm::Flush(&b->slots[slot], size_t(kSlotsPerLogBlock - slot) * 8);
  pm::Flush(&b->next, 8);
  pm::Fence();
  return Status::OK();
}

}  // namespace

Status ReplayChain(const BlockAccess& ba, uint32_t head, BlockTable* table, ReplayResult* res,
                   TailRule rule) {
  const bool live = rule == TailRule::kLive || rule == TailRule::kReadOnly;
  const bool after_crash = rule == TailRule::kCrashed || rule == TailRule::kRecover;
  std::string hname = "file header";
  if (head == 0) return Status::Corrupt(hname, "log head is zero");
  {
    Status st = ba.CheckRange(head, 1, "log head");
    if (!st.ok()) return Status::Corrupt(hname, "log head lies past the end of the file");
  }
  char* a;
  UPFS_RETURN_IF_ERROR(ba.Addr(head, &a));
  LogBlock* b = reinterpret_cast<LogBlock*>(a);
  if (!NextWordValid(b->next.load(std::memory_order_acquire)))
    return Status::Corrupt("log block " + std::to_string(head), "bad magic");
  uint64_t seq = b->seq;
  res->head_seq = seq;
  res->log_blocks.clear();
  res->overflow.clear();
  res->entries = 0;
  res->cut_short_words = 0;
  uint64_t max_blocks = ba.space()->capacity() >> kBlockShift;
  uint32_t lblock = head, prev = 0;
  for (;;) {
    res->log_blocks.push_back(lblock);
    if (res->log_blocks.size() > max_blocks) {
      // Live writers may have grown the file (and the chain) meanwhile.
      UPFS_RETURN_IF_ERROR(ba.space()->RefreshCapacity());
      max_blocks = ba.space()->capacity() >> kBlockShift;
      if (res->log_blocks.size() > max_blocks)
        return Status::Corrupt("log chain", "longer than the file (a cycle?)");
    }
    uint32_t slot = 0, cut = LogPos::kNoSlot;
    uint32_t* cut_ptr = rule == TailRule::kLive || rule == TailRule::kStrict ? nullptr : &cut;
    UPFS_RETURN_IF_ERROR(
        ApplyLogBlock(ba, b, lblock, table, &res->overflow, &slot, &res->entries, 0, cut_ptr));
    uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
    if (slot < kSlotsPerLogBlock && n != 0 && live && cut == LogPos::kNoSlot) {
      // Live replay: other processes filled this block and linked the next
      // one after we found its tail. A block is linked only when full, so
      // finish it from where we stopped.
      UPFS_RETURN_IF_ERROR(
          ApplyLogBlock(ba, b, lblock, table, &res->overflow, &slot, &res->entries, slot, cut_ptr));
    }
    if (cut != LogPos::kNoSlot) res->cut_short_words = 1;
    if (slot < kSlotsPerLogBlock || n == 0) {
      if (after_crash) {
        UPFS_RETURN_IF_ERROR(EndAfterCrash(ba, b, lblock, slot, cut, rule, res));
      } else if (cut == LogPos::kNoSlot) {
        if (slot < kSlotsPerLogBlock && rule == TailRule::kStrict) {
          for (uint32_t s = slot; s < kSlotsPerLogBlock; ++s)
            if (b->slots[s].load(std::memory_order_relaxed) != 0)
              return Status::Corrupt("log block " + std::to_string(lblock),
                                     "entry " + std::to_string(s) + " follows the end of the log");
        }
        if (slot < kSlotsPerLogBlock && n != 0)
          return Status::Corrupt("log block " + std::to_string(lblock),
                                 "has a successor but is not full");
      }
      res->tail = LogPos{lblock, slot, seq, prev, LastEntryBefore(b, slot)};
      table->set_cursor(res->tail);
      return Status::OK();
    }
    UPFS_RETURN_IF_ERROR(CheckLogBlock(ba, n, seq + 1, &b));
    prev = lblock;
    lblock = n;
    seq += 1;
  }
}

}  // namespace upfs
