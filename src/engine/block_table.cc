// BlockTable (engine/block_table.h): the arrays of a file's block map,
// applying entries' effects to it, and walking it.
#include "engine/block_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "util/assert.h"

namespace upfs {

using namespace format;

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

}  // namespace upfs
