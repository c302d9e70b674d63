// On-media format v1 of a upfs file (per-file container). docs/format.md is
// the prose version of this header; keep them in step.
//
// A upfs file is an array of 4 KiB logical blocks. Block 0 is the file
// header. Log blocks, data blocks and overflow blocks are anywhere else.
// Logical block number 0 therefore doubles as "none" in every pointer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace upfs::format {

inline constexpr uint32_t kBlockSize = 4096;
inline constexpr uint32_t kBlockShift = 12;
inline constexpr uint32_t kCacheLine = 64;
// Version 2 added sub-block patches (kPatch payloads), version 3 checked
// appends (kGrowTailChecked entries), version 4 granule flips (two homes
// per 128-byte granule instead of patches), version 5 shadows anywhere (a
// block's first flip leaves it where it is and takes one shadow block from
// anywhere, instead of copying it into an adjacent pair). Older files are
// read and
// written as before: nothing a later version added is ever written into
// one, so the build that made it can still open it (it refuses later
// versions by their number).
inline constexpr uint32_t kFormatVersion = 5;
inline constexpr uint32_t kOldestFormatVersion = 1;
inline constexpr uint32_t kFirstPatchVersion = 2;
inline constexpr uint32_t kFirstCheckedAppendVersion = 3;
inline constexpr uint32_t kFirstGranuleVersion = 4;
inline constexpr uint32_t kFirstAnywhereShadowVersion = 5;
// "UPFS" + format family marker + CR LF SUB NUL: catches text-mode mangling,
// like PNG's signature.
inline constexpr unsigned char kMagic[8] = {'U', 'P', 'F', 'S', 0x01, '\r', '\n', 0x1a};

// Largest logical block count a file may have (16 TiB) and largest virtual
// file size; both fit the 32-bit block numbers of extended entries.
inline constexpr uint64_t kMaxBlocks = uint64_t{1} << 32;
inline constexpr uint64_t kMaxFileSize = (kMaxBlocks - 1) * kBlockSize;

enum class Consistency : uint32_t { kStrict = 1, kSync = 2 };

// The marker of a upfs host file: the S_ISVTX bit of its mode (01000),
// which Linux ignores on regular files. It tells a upfs file from a plain
// one through stat alone, for callers that may not read the file.
inline constexpr uint32_t kHostMarkerBit = 01000;

// The times upfs keeps for a file (the kernel keeps atime, and the ctime of
// changes it makes to the host inode). Both are nanoseconds since the epoch
// as a two's-complement int64, updated with plain stores and persisted by
// fsync. A log root points at them (in the per-file header today).
//  - mtime_ns: the modification time, set to the coarse clock by every
//    write and truncate, and to any value by utimensat.
//  - data_ctime_ns: when upfs last changed the data or size (ctime is the
//    later of this and the host file's ctime). Zero in files written
//    before it existed: then a zero mtime_ns means "never written" and the
//    creation time is reported.
struct FileTimes {
  std::atomic<uint64_t> mtime_ns;
  std::atomic<uint64_t> data_ctime_ns;
};
static_assert(sizeof(FileTimes) == 16);

// Blocks needed to hold `bytes` bytes.
inline constexpr uint64_t CeilBlocks(uint64_t bytes) { return (bytes + kBlockSize - 1) >> kBlockShift; }

// ---------------------------------------------------------------------------
// File header: logical block 0.
// Cache line 0 is immutable after creation; header_crc covers its bytes
// [0, 40) (magic to created_ns).
// Cache line 1 holds the only mutable word, the log head, changed by CAS.
struct FileHeader {
  unsigned char magic[8];
  uint32_t format_version;
  uint32_t block_size;
  uint32_t consistency;  // Consistency
  uint32_t flags;        // must be 0 in v1
  uint64_t file_id;      // random; names the shared allocation state
  uint64_t created_ns;   // CLOCK_REALTIME at creation
  uint32_t header_crc;   // CRC-32C of bytes [0, offsetof(header_crc))
  uint32_t reserved0;
  unsigned char pad0[kCacheLine - 48];

  std::atomic<uint64_t> log_head;  // logical block of the first log block
  // 1 from the open that rebuilt the shared state until its last user left
  // (0 then, and in a new file): a rebuild that finds 1 follows a crash or
  // a killed process, and only then may the log end in a commit a crash
  // cut short (docs/format.md, "A commit cut short").
  std::atomic<uint64_t> in_use;
  unsigned char pad1[kCacheLine - 16];

  // Cache line 2: the times upfs keeps (FileTimes).
  FileTimes times;
  unsigned char pad2[kBlockSize - 2 * kCacheLine - sizeof(FileTimes)];
};
static_assert(sizeof(FileHeader) == kBlockSize);

// The modification time to report (ns since the epoch, may be negative).
inline int64_t ReportedMtime(const FileTimes& t, uint64_t created_ns) {
  uint64_t m = t.mtime_ns.load(std::memory_order_relaxed);
  if (m == 0 && t.data_ctime_ns.load(std::memory_order_relaxed) == 0) return int64_t(created_ns);
  return int64_t(m);
}

// The time of upfs's last change to the data or size (ns since the epoch).
inline int64_t ReportedDataCtime(const FileTimes& t, uint64_t created_ns) {
  uint64_t c = t.data_ctime_ns.load(std::memory_order_relaxed);
  if (c != 0) return int64_t(c);
  uint64_t m = t.mtime_ns.load(std::memory_order_relaxed);
  return int64_t(m ? m : created_ns);
}
static_assert(offsetof(FileHeader, format_version) == 8);
static_assert(offsetof(FileHeader, consistency) == 16);
static_assert(offsetof(FileHeader, file_id) == 24);
static_assert(offsetof(FileHeader, created_ns) == 32);
static_assert(offsetof(FileHeader, header_crc) == 40);
static_assert(offsetof(FileHeader, log_head) == kCacheLine);
static_assert(offsetof(FileHeader, in_use) == kCacheLine + 8);
static_assert(offsetof(FileHeader, times) == 2 * kCacheLine);
static_assert(offsetof(FileHeader, times) + offsetof(FileTimes, data_ctime_ns) == 2 * kCacheLine + 8);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// ---------------------------------------------------------------------------
// Log block: a 16-byte header and 510 entry slots. Blocks form a chain from
// FileHeader::log_head through `next`; `seq` grows by exactly one along it.
// The `next` word carries kLogMagic in its high half, so that the magic and
// the pointer are checked together and the pointer is set by one CAS from
// (kLogMagic << 32 | 0).
inline constexpr uint32_t kLogMagic = 0x474f4c55;  // "ULOG" little-endian
inline constexpr uint32_t kSlotsPerLogBlock = (kBlockSize - 16) / 8;  // 510

struct LogBlock {
  std::atomic<uint64_t> next;  // kLogMagic:32 (high) | successor lblock:32, 0 = none
  uint64_t seq;                // position in the chain
  std::atomic<uint64_t> slots[kSlotsPerLogBlock];
};
static_assert(sizeof(LogBlock) == kBlockSize);
static_assert(offsetof(LogBlock, seq) == 8);
static_assert(offsetof(LogBlock, slots) == 16);

inline constexpr uint64_t NextWord(uint32_t lblock) {
  return (uint64_t(kLogMagic) << 32) | lblock;
}
inline bool NextWordValid(uint64_t w) { return uint32_t(w >> 32) == kLogMagic; }
inline uint32_t NextBlock(uint64_t w) { return uint32_t(w); }

// ---------------------------------------------------------------------------
// Log entries: one 64-bit word, committed by CAS into an empty (zero) slot
// (a kGrowTailChecked: two words, by one 16-byte CAS into two empty slots).
// Bits 0-2 are the kind; zero is never a valid entry.
enum class EntryKind : uint8_t {
  kEmpty = 0,
  kMap = 1,        // map virtual run -> logical run; size unchanged
  kMapExtend = 2,  // same, then size = max(size, end of run)
  kReserve = 3,    // claims the following `count` slots for a payload
  kApply = 4,      // applies the payload reserved at `slot` of this block
  kTouch = 5,      // sync mode: blocks were overwritten in place (no map change)
  kGrowTail = 6,   // bytes past the size, inside its block, were written in place;
                   // size = max(size, new_size)
  kGrowTailChecked = 7,  // the same, two words, with the bytes' checksum (version 3);
                         // with bit 3 set, a granule flip (version 4, below)
};

// kMap / kMapExtend: kind:3 | (count-1):6 | vblock:28 | lblock:27
inline constexpr uint32_t kInlineMaxCount = 64;
inline constexpr uint64_t kInlineMaxVblock = (uint64_t{1} << 28) - 1;
inline constexpr uint64_t kInlineMaxLblock = (uint64_t{1} << 27) - 1;

struct InlineMap {
  uint32_t vblock;
  uint32_t lblock;
  uint32_t count;
  bool extend;
};

inline EntryKind KindOf(uint64_t e) { return static_cast<EntryKind>(e & 7); }

inline bool FitsInline(uint64_t vblock, uint64_t lblock, uint64_t count) {
  return count >= 1 && count <= kInlineMaxCount && vblock <= kInlineMaxVblock &&
         lblock <= kInlineMaxLblock && lblock != 0;
}

inline uint64_t EncodeInline(const InlineMap& m) {
  uint64_t kind = m.extend ? uint64_t(EntryKind::kMapExtend) : uint64_t(EntryKind::kMap);
  return kind | (uint64_t(m.count - 1) << 3) | (uint64_t(m.vblock) << 9) |
         (uint64_t(m.lblock) << 37);
}

// kTouch: kind:3 | (count-1):6 | vblock:28 | zero:27
inline uint64_t EncodeTouch(uint32_t vblock, uint32_t count) {
  return uint64_t(EntryKind::kTouch) | (uint64_t(count - 1) << 3) | (uint64_t(vblock) << 9);
}
inline bool TouchWellFormed(uint64_t e) { return (e >> 37) == 0; }

inline InlineMap DecodeInline(uint64_t e) {
  InlineMap m;
  m.extend = KindOf(e) == EntryKind::kMapExtend;
  m.count = uint32_t((e >> 3) & 63) + 1;
  m.vblock = uint32_t((e >> 9) & kInlineMaxVblock);
  m.lblock = uint32_t(e >> 37);
  return m;
}

// kGrowTail: kind:3 | zero:5 | new_size:56. An append that stays inside the
// tail block (the block holding byte new_size - 1, already mapped): its
// bytes were written in place past the old size, and one entry commits
// them by raising the size. Its effect touches that block (a stale copy of
// it conflicts) and changes no mapping.
inline uint64_t EncodeGrowTail(uint64_t new_size) {
  return uint64_t(EntryKind::kGrowTail) | (new_size << 8);
}
inline uint64_t GrowTailSize(uint64_t e) { return e >> 8; }
inline bool GrowTailWellFormed(uint64_t e) {
  return ((e >> 3) & 31) == 0 && GrowTailSize(e) != 0 && GrowTailSize(e) <= kMaxFileSize;
}

// kGrowTailChecked (format version 3): two words at an even slot (16-byte
// aligned), committed together by one 16-byte CAS.
//   word 0: kind:3 | zero:1 | from:12 | new_size:48
//   word 1: lblock:32 | crc:32
// The same append as kGrowTail, made durable in one round: its bytes are
// stored in place without a flush before the CAS and written back with the
// entry after it, so a crash can keep the entry and lose some of them.
// `lblock` is the tail block they were written to and `from` where they
// start in it (the old size modulo the block size, never 0); `crc` is the
// CRC-32C of the bytes [from, end of file in the block). Only the chain's
// last entry can be cut short that way (whoever commits after it writes
// its bytes back first): recovery checks that one (docs/format.md, "A
// commit cut short"). word 1 is never zero (lblock 0 is the header).
inline constexpr uint32_t kGrowTailCheckedSlots = 2;
static_assert(kMaxFileSize < (uint64_t{1} << 48) && kBlockSize == 4096);
inline uint64_t EncodeGrowTailChecked0(uint64_t new_size, uint32_t from) {
  return uint64_t(EntryKind::kGrowTailChecked) | (uint64_t(from) << 4) | (new_size << 16);
}
inline uint64_t EncodeGrowTailChecked1(uint32_t lblock, uint32_t crc) {
  return uint64_t(lblock) | (uint64_t(crc) << 32);
}
inline uint64_t GrowTailCheckedSize(uint64_t w0) { return w0 >> 16; }
inline uint32_t GrowTailCheckedFrom(uint64_t w0) { return uint32_t((w0 >> 4) & 4095); }
inline uint32_t GrowTailCheckedBlock(uint64_t w1) { return uint32_t(w1); }
inline uint32_t GrowTailCheckedCrc(uint64_t w1) { return uint32_t(w1 >> 32); }
// The bytes [from, end) of the block: end is where new_size falls in it.
inline uint32_t GrowTailCheckedEnd(uint64_t w0) {
  return uint32_t((GrowTailCheckedSize(w0) - 1) % kBlockSize) + 1;
}
inline bool GrowTailCheckedWellFormed(uint64_t w0, uint64_t w1) {
  const uint64_t size = GrowTailCheckedSize(w0);
  return KindOf(w0) == EntryKind::kGrowTailChecked && ((w0 >> 3) & 1) == 0 && size != 0 && size <= kMaxFileSize &&
         GrowTailCheckedFrom(w0) != 0 && GrowTailCheckedFrom(w0) < GrowTailCheckedEnd(w0) &&
         GrowTailCheckedBlock(w1) != 0;
}

// Granule flip (format version 4; anywhere shadows, version 5): two words
// at an even slot, committed together by one 16-byte CAS, kind 7 with bit
// 3 set (a checked append has it clear).
//   word 0: kind 7:3 | 1:1 | vblock:28 | block:32
//   word 1: granules:32 | set:1 | anywhere:1 | zero:30
// A paired virtual block `vblock` lives in two blocks, its home (the block
// it is mapped to) and its shadow. Each of its kGranulesPerBlock granules
// of kGranuleSize bytes has two homes, the same bytes of the two blocks,
// and a bit of the block's mask says which holds it (set: the shadow). A
// sub-block write writes its granules into the homes not live, makes them
// durable, and commits the new mask (docs/design.md, "Granule flips"):
//  - set, not anywhere (a pair, version 4): vblock is mapped to `block`,
//    its shadow is `block + 1`, its mask becomes `granules`;
//  - set and anywhere (version 5): vblock stays mapped where it is (it
//    must be, and not paired), its shadow is `block`, its mask becomes
//    `granules` (a block's first flip, and the compacted state of a pair
//    whose shadow is not its home's neighbour);
//  - neither (a toggle): vblock must be paired and mapped to `block`; the
//    granules named change homes (the mask is XORed with `granules`,
//    never 0 then);
//  - anywhere, not set (an unpairing, version 5: the GC's fold in place):
//    vblock must be paired and mapped to `block`, and `granules` its mask;
//    those granules come home (their home copies were written first) and
//    the pairing ends, freeing the shadow.
// Word 1 is never zero, so a word 0 whose word 1 did not reach media is
// told by a zero there. Any other entry that maps vblock anew, or unmaps
// it, ends the pairing.
inline constexpr uint32_t kGranuleSize = 128;
inline constexpr uint32_t kGranulesPerBlock = kBlockSize / kGranuleSize;
static_assert(kGranulesPerBlock == 32 && kGranuleSize % kCacheLine == 0);
inline constexpr uint32_t kGranuleFlipSlots = 2;
inline constexpr uint64_t kGranuleMaxVblock = (uint64_t{1} << 28) - 1;
inline uint64_t EncodeGranuleFlip0(uint32_t vblock, uint32_t pair) {
  return uint64_t(EntryKind::kGrowTailChecked) | 8 | (uint64_t(vblock) << 4) | (uint64_t(pair) << 32);
}
inline uint64_t EncodeGranuleFlip1(uint32_t granules, bool set, bool anywhere = false) {
  return uint64_t(granules) | (uint64_t(set) << 32) | (uint64_t(anywhere) << 33);
}
inline bool IsGranuleFlip(uint64_t w0) {
  return KindOf(w0) == EntryKind::kGrowTailChecked && (w0 & 8) != 0;
}
inline uint32_t GranuleFlipVblock(uint64_t w0) { return uint32_t((w0 >> 4) & kGranuleMaxVblock); }
// The block the flip names: a pair's first block, a shadow, or a home.
inline uint32_t GranuleFlipBlock(uint64_t w0) { return uint32_t(w0 >> 32); }
inline uint32_t GranuleFlipMask(uint64_t w1) { return uint32_t(w1); }
inline bool GranuleFlipSet(uint64_t w1) { return (w1 >> 32) & 1; }
inline bool GranuleFlipAnywhere(uint64_t w1) { return (w1 >> 33) & 1; }
inline bool GranuleFlipWellFormed(uint64_t w0, uint64_t w1) {
  const uint32_t block = GranuleFlipBlock(w0);
  return IsGranuleFlip(w0) && block != 0 && block < kMaxBlocks - 2 && (w1 >> 34) == 0 &&
         (GranuleFlipSet(w1) || GranuleFlipAnywhere(w1) || GranuleFlipMask(w1) != 0);
}
// The mask bits of granules [lo, hi) of a block (bytes lo..hi-1, hi > lo).
inline uint32_t GranuleRange(uint32_t lo, uint32_t hi) {
  const uint32_t g0 = lo / kGranuleSize, g1 = (hi - 1) / kGranuleSize + 1;
  return uint32_t(((uint64_t{1} << g1) - 1) & ~((uint64_t{1} << g0) - 1));
}
// fn(first, end) for each maximal run of set bits of `mask`: granules
// [first, end), in order (one copy per run, not per granule).
template <typename Fn>
void ForEachGranuleRun(uint32_t mask, Fn fn) {
  while (mask) {
    const uint32_t first = uint32_t(__builtin_ctz(mask));
    uint32_t end = first;
    while (end < kGranulesPerBlock && (mask >> end & 1)) ++end;
    mask &= ~GranuleRange(first * kGranuleSize, end * kGranuleSize);
    fn(first, end);
  }
}

// kReserve: kind:3 | count:9 | zero:52. The next `count` slots hold a
// payload (ExtPayload) that means nothing until a kApply names it.
inline uint64_t EncodeReserve(uint32_t count) {
  return uint64_t(EntryKind::kReserve) | (uint64_t(count) << 3);
}
inline uint32_t ReserveCount(uint64_t e) { return uint32_t((e >> 3) & 511); }
inline bool ReserveWellFormed(uint64_t e) { return (e >> 12) == 0; }

// kApply: kind:3 | slot:9 | zero:20 | crc:32. `slot` is the kReserve slot in
// the same log block; crc is the CRC-32C of the payload words.
inline uint64_t EncodeApply(uint32_t reserve_slot, uint32_t crc) {
  return uint64_t(EntryKind::kApply) | (uint64_t(reserve_slot) << 3) | (uint64_t(crc) << 32);
}
inline uint32_t ApplySlot(uint64_t e) { return uint32_t((e >> 3) & 511); }
inline uint32_t ApplyCrc(uint64_t e) { return uint32_t(e >> 32); }
inline bool ApplyWellFormed(uint64_t e) { return ((e >> 12) & 0xfffff) == 0; }

// ---------------------------------------------------------------------------
// Extended payload, stored in reserved slots (8-byte words):
//   word 0: new_size
//   word 1: vblock:32 | nruns:16 | flags:16
//   words 2..: runs, each lblock:32 | count:32 (lblock 0 = unmap: a hole)
// With kPayloadOverflow, the runs live in `overflow` contiguous blocks
// starting at word 2's lblock, instead of inline (word 2 is then
// lblock:32 | nblocks:32 and word 3 the CRC-32C of the overflow runs).
// Runs cover the virtual blocks [vblock, vblock + sum(count)) in order.
enum PayloadFlags : uint16_t {
  kSizeMax = 1,          // size = max(size, new_size)
  kSizeSet = 2,          // size = new_size; blocks past it are unmapped
  kPayloadOverflow = 4,  // runs stored in overflow blocks
  kPatch = 8,            // a sub-block patch (below), alone: no runs, no size
};
inline constexpr uint16_t kKnownPayloadFlags = kSizeMax | kSizeSet | kPayloadOverflow | kPatch;
inline constexpr uint32_t kPayloadHeaderWords = 2;
// A payload must fit in one log block after its kReserve and before a kApply.
inline constexpr uint32_t kMaxInlineRuns = 256;

// A run whose lblock is kKeepBlock leaves the mapping of its virtual blocks
// as it is (fallocate of a range that is partly mapped).
inline constexpr uint32_t kKeepBlock = 0xffffffff;

struct Run {
  uint32_t lblock;  // 0 = hole, kKeepBlock = unchanged
  uint32_t count;
};
static_assert(sizeof(Run) == 8);

inline uint64_t EncodeRun(const Run& r) { return uint64_t(r.lblock) | (uint64_t(r.count) << 32); }
inline Run DecodeRun(uint64_t w) { return Run{uint32_t(w), uint32_t(w >> 32)}; }

inline uint64_t EncodePayloadWord1(uint32_t vblock, uint16_t nruns, uint16_t flags) {
  return uint64_t(vblock) | (uint64_t(nruns) << 32) | (uint64_t(flags) << 48);
}

// ---------------------------------------------------------------------------
// Patch payload (format version 2): new bytes for part of one mapped block,
// kept in the log instead of a copy of the whole block (docs/design.md,
// "Sub-block writes"). A patch applies on top of the block the vblock maps
// when it commits, and every later patch on top of it, in log order, until
// an entry maps that vblock anew (or unmaps it).
//   word 0: 0 (no size change)
//   word 1: vblock:32 | nruns 0:16 | flags kPatch:16
//   word 2: offset in the block:16 | length:16 | zero:32
//   words 3..: the bytes, starting at byte (offset % 8) of word 3; the
//              other bytes of the first and last word are zero.
// A patch covers bytes below the size only, and 1..kPatchMaxBytes of them.
inline constexpr uint32_t kPatchMaxBytes = 2048;
// A block carries at most this many patches, of at most kPatchMaxBytes
// bytes together; a write that would pass either copies the block whole.
inline constexpr uint32_t kMaxPatchesPerBlock = 8;
inline constexpr uint32_t kPatchHeaderWords = 3;

inline uint64_t EncodePatchWord2(uint32_t offset, uint32_t length) {
  return uint64_t(offset) | (uint64_t(length) << 16);
}
inline uint32_t PatchOffset(uint64_t w2) { return uint32_t(w2 & 0xffff); }
inline uint32_t PatchLength(uint64_t w2) { return uint32_t((w2 >> 16) & 0xffff); }
inline bool PatchWord2WellFormed(uint64_t w2) {
  return (w2 >> 32) == 0 && PatchLength(w2) >= 1 && PatchLength(w2) <= kPatchMaxBytes &&
         PatchOffset(w2) + PatchLength(w2) <= kBlockSize;
}
// Words holding the bytes of a patch at `offset` of `length` bytes.
inline constexpr uint32_t PatchDataWords(uint32_t offset, uint32_t length) {
  return ((offset & 7) + length + 7) / 8;
}
inline constexpr uint32_t kMaxPatchPayloadWords =
    kPatchHeaderWords + PatchDataWords(7, kPatchMaxBytes);
static_assert(kMaxPatchPayloadWords + 2 <= kSlotsPerLogBlock);
// The longest payload, in words: inline runs, or a patch of kPatchMaxBytes.
inline constexpr uint32_t kMaxPayloadWords = kPayloadHeaderWords + kMaxInlineRuns > kMaxPatchPayloadWords
                                                 ? kPayloadHeaderWords + kMaxInlineRuns
                                                 : kMaxPatchPayloadWords;

}  // namespace upfs::format
