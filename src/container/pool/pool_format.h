// On-media format of a upfs pool, version kPoolVersion (8; versions 1 to
// 7 are read and written too, see below), the pool container's own (it
// embeds the engine's log root words): one host file holding a whole
// namespace. docs/format.md ("Pools") is the prose version of this header;
// keep them in step.
//
// A pool is an array of 4 KiB logical blocks (32-bit numbers, as in a
// per-file upfs file, so the file engine's logs and runs work unchanged):
//   block 0                  superblock
//   blocks [1, kDataStart)   the volatile area: coordination words, thread
//                            slots and the allocation bitmap, soft state
//                            that the first process to attach after a crash
//                            rebuilds from the durable structures
//   blocks [kDataStart, ...) namespace log blocks, inode blocks, and the
//                            log, data and overflow blocks of every file,
//                            allocated from the bitmap
// Logical block 0 doubles as "none" in every pointer.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "engine/alloc_bitmap.h"
#include "engine/log_root.h"
#include "engine/reclamation.h"
#include "format/format.h"
#include "util/crc32c.h"

namespace upfs::format::pool {

// Version 2 added sub-block patches in files' logs (format.h, kPatch); a
// version 1 pool is read and written as before, without them. Version 3
// added the tagged checkpoint image (below, kCheckpointMagic); a version 1
// or 2 pool keeps getting images of its own format (kCheckpointMagicV2), so
// that the builds that made it can still read it. Version 4 added checked
// appends in files' logs (format.h, kGrowTailChecked); older pools never
// get one. Version 5 added granule flips in files' logs (format.h): their
// files' small writes never become patches. Version 6 added anywhere
// shadows in files' logs (format.h, granule flips): a block's first flip
// takes one shadow block from anywhere instead of copying the block into
// an adjacent pair; older pools keep pairs. Version 7 added the namespace
// log's reserve blocks (Superblock::nslog_reserve): an older pool has none,
// since a build that did not know them would free them at its recovery and
// a later build would then find them in use twice. Version 8 commits a
// namespace record that makes no inode with one persistence wait, not two
// (docs/design.md, "One wait a commit"): its payload words are all nonzero
// (words 3 and 4 carry kRecordWordTag), so that recovery tells a word a
// crash lost, in any line of the payload, from damage; an older pool keeps
// the two-wait protocol its builds recover. Version 9 commits the create
// of a regular file and a mkdir with one persistence wait too: its record carries the
// new inode's creation values (four words after the name), and the inode's
// ident its fresh bit until the image is known durable (kIdentFresh;
// docs/design.md, "One wait a create"); an older pool's creates keep
// fencing the image before the record.
inline constexpr uint32_t kPoolVersion = 10;
inline constexpr uint32_t kOldestPoolVersion = 1;
inline constexpr uint32_t kFirstPatchPoolVersion = 2;
inline constexpr uint32_t kFirstTaggedPoolVersion = 3;
inline constexpr uint32_t kFirstCheckedAppendPoolVersion = 4;
inline constexpr uint32_t kFirstGranulePoolVersion = 5;
inline constexpr uint32_t kFirstAnywhereShadowPoolVersion = 6;
inline constexpr uint32_t kFirstLogReservePoolVersion = 7;
inline constexpr uint32_t kFirstOneWaitPoolVersion = 8;
inline constexpr uint32_t kFirstFreshCreatePoolVersion = 9;
// Free 2 MiB extents given back to the host (holes), recorded in the
// volatile area (kPunchedBlock); a build before it would hand them out
// without memory.
inline constexpr uint32_t kFirstGiveBackPoolVersion = 10;
// The per-file magic with family byte 0x02: a pool is never taken for a
// per-file upfs file, nor the other way round.
inline constexpr unsigned char kPoolMagic[8] = {'U', 'P', 'F', 'S', 0x02, '\r', '\n', 0x1a};

// Largest pool: 2^28 blocks (1 TiB); its bitmap is 32 MiB, sparse until used.
inline constexpr uint64_t kMaxPoolBlocks = uint64_t{1} << 28;
inline constexpr uint32_t kWordsBlock = 1;
inline constexpr uint32_t kSlotsBlock = 2;
inline constexpr uint32_t kSlotBlocks = 64;  // kMaxSlots (4096) slots of 64 bytes
inline constexpr uint32_t kBitmapBlock = kSlotsBlock + kSlotBlocks;
inline constexpr uint32_t kBitmapBlocks = uint32_t(kMaxPoolBlocks / 8 / kBlockSize);  // 8192
// The bitmap's summaries (engine/alloc_bitmap.h): three saturation trees,
// 277 blocks, in the room before the data's 2 MiB boundary.
inline constexpr uint32_t kSummaryBlock = kBitmapBlock + kBitmapBlocks;
inline constexpr uint32_t kSummaryBlocks =
    uint32_t((BitmapSummaryLayout::TotalWords(kMaxPoolBlocks) * 8 + kBlockSize - 1) / kBlockSize);
// Data starts on a 2 MiB boundary (huge pages): block 8704 (34 MiB).
inline constexpr uint32_t kDataStart = (kBitmapBlock + kBitmapBlocks + 511) / 512 * 512;
static_assert(kSummaryBlocks == 277);
// The extents given back to the host (engine/punched_extents.h): one bit
// per 2 MiB extent of the largest pool, after the summaries (version 10).
inline constexpr uint32_t kPunchedBlock = kSummaryBlock + kSummaryBlocks;
inline constexpr uint32_t kPunchedBlocks = uint32_t(kMaxPoolBlocks / kPartitionBlocks / 8 / kBlockSize);
static_assert(kPunchedBlocks == 16);
static_assert(kPunchedBlock + kPunchedBlocks <= kDataStart);
static_assert(kDataStart == 8704);

// Blocks the namespace log keeps in reserve for removals in a full pool.
inline constexpr uint32_t kLogReserveBlocks = 4;

// Liveness: OFD lock bytes of the pool file, far past any pool's data
// (docs/format.md, "The volatile area").
inline constexpr off_t kAttachLockByte = off_t{1} << 50;   // serializes joining and leaving
inline constexpr off_t kUsersLockByte = kAttachLockByte + 1;  // a shared lock per attached process
inline constexpr off_t kSlotLockByteBase = kAttachLockByte + 64;  // + s: slot s's owner
static_assert(uint64_t(kMaxPoolBlocks) * kBlockSize < uint64_t(kAttachLockByte));

// ---------------------------------------------------------------------------
// Superblock: logical block 0.
// Cache line 0 is immutable after mkfs; sb_crc covers bytes [0, 56).
// Cache line 1 holds the durable mutable words, each changed by CAS.
struct Superblock {
  unsigned char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t pool_id;      // random
  uint64_t created_ns;   // CLOCK_REALTIME at mkfs
  uint64_t max_blocks;   // kMaxPoolBlocks
  uint32_t data_start;   // kDataStart
  uint32_t flags;        // 0 in v1
  uint64_t root_ino;     // the root directory
  uint32_t sb_crc;       // CRC-32C of bytes [0, offsetof(sb_crc))
  uint32_t reserved0;

  std::atomic<uint64_t> nslog_head;   // first block of the namespace log
  std::atomic<uint64_t> inode_chain;  // newest inode block (chain through InodeBlockHeader::next)
  std::atomic<uint64_t> checkpoint;   // the newest checkpoint's header block, 0 = none
  // Free blocks set aside for the namespace log's next blocks when nothing
  // else is free, taken only by removals (unlink, rmdir), so that a full
  // pool can be emptied (docs/design.md, "The namespace log"); 0 = none.
  std::atomic<uint64_t> nslog_reserve[kLogReserveBlocks];
  unsigned char pad1[kCacheLine - 24 - 8 * kLogReserveBlocks];

  // Cache line 2: 1 when the volatile area was left consistent by the last
  // process to detach; 0 while processes are attached, and after a crash.
  std::atomic<uint64_t> clean;
  unsigned char pad2[kBlockSize - 2 * kCacheLine - 8];
};
static_assert(sizeof(Superblock) == kBlockSize);
static_assert(offsetof(Superblock, version) == 8);
static_assert(offsetof(Superblock, pool_id) == 16);
static_assert(offsetof(Superblock, max_blocks) == 32);
static_assert(offsetof(Superblock, root_ino) == 48);
static_assert(offsetof(Superblock, sb_crc) == 56);
static_assert(offsetof(Superblock, nslog_head) == kCacheLine);
static_assert(offsetof(Superblock, nslog_reserve) == kCacheLine + 24);
static_assert(offsetof(Superblock, clean) == 2 * kCacheLine);
// The checksum a superblock's sb_crc must hold (mkfs writes it, attach,
// fsck and the tools that label pools check or rewrite it).
inline uint32_t SuperblockCrc(const Superblock& sb) { return Crc32c(&sb, offsetof(Superblock, sb_crc)); }

// ---------------------------------------------------------------------------
// Namespace log: a chain of log blocks with the layout of a file's log
// (format::LogBlock: next word, seq, 510 slots), the next word carrying
// kNsLogMagic. Its only entries are kReserve + payload + kApply (format.h):
// every namespace change is one record, committed by the CAS of its kApply
// into the first empty slot at the tail.
inline constexpr uint32_t kNsLogMagic = 0x47534e55;  // "UNSG" little-endian
inline constexpr uint64_t NsNextWord(uint32_t lblock) { return (uint64_t(kNsLogMagic) << 32) | lblock; }
inline bool NsNextWordValid(uint64_t w) { return uint32_t(w >> 32) == kNsLogMagic; }

enum class RecordType : uint8_t {
  kCreate = 1,  // name1 in dir1 -> ino (a new regular file or symbolic link)
  kMkdir = 2,   // name1 in dir1 -> ino (a new directory)
  kLink = 3,    // name1 in dir1 -> ino (an existing file)
  kUnlink = 4,  // remove name1 from dir1 (it named ino; a directory for rmdir)
  kRename = 5,  // name1 in dir1 -> name2 in dir2, replacing victim (0: none)
  kExchange = 6,  // swap name1 in dir1 and name2 in dir2
};

// Payload words of a record:
//   word 0: type:8 | ftype:8 | name1_len:16 | name2_len:16 | zero:16
//   word 1: ino       (the inode the record is about)
//   word 2: dir1
//   word 3: dir2      (kRename, kExchange; else 0)
//   word 4: victim    (kRename: the inode name2 named, 0 = none;
//                      kExchange: the inode name2 named)
//   words 5..: name1 then name2, each padded with zeros to 8 bytes
//   then, in a version 9 pool's kCreate of a regular file and kMkdir, the
//   creation words (kCreationWords), each with kRecordWordTag over its value:
//     c0: gen:32 | mode:12 | consistency:4 | zero:15 | tag
//     c1: uid:32 | zero:31 | tag
//     c2: gid:32 | zero:31 | tag
//     c3: created_ns:63 | tag
// In version 8 pools words 3 and 4 carry kRecordWordTag over their value,
// so that no payload word of a valid record is zero.
inline constexpr uint32_t kRecordHeaderWords = 5;
inline constexpr uint32_t kMaxNameLen = 255;
inline constexpr uint32_t kMaxRecordWords = kRecordHeaderWords + 2 * ((kMaxNameLen + 7) / 8);
static_assert(kMaxRecordWords + 2 <= kSlotsPerLogBlock);

inline constexpr uint64_t kRecordWordTag = uint64_t{1} << 63;
inline constexpr uint32_t kCreationWords = 4;
// A create has one name: its creation words fit where a second name would.
static_assert(kCreationWords <= (kMaxNameLen + 7) / 8);

// Whether payload word `i` of a valid record whose word 0 is `w0` is never
// zero: word 0, ino and dir1 always; dir2 in a rename or an exchange; the
// victim in an exchange; every name word (it holds a byte of a name, and
// names hold no NUL). Recovery tells a commit a crash cut short by a zero
// where such a word belongs (docs/format.md, "The namespace log").
inline bool PayloadWordNeverZero(uint64_t w0, uint32_t i) {
  const uint64_t type = w0 & 0xff;
  if (i < 3 || i >= kRecordHeaderWords) return true;
  if (i == 3) return type == uint64_t(RecordType::kRename) || type == uint64_t(RecordType::kExchange);
  return type == uint64_t(RecordType::kExchange);
}

// File types as the namespace keeps them (also the inode's kind).
enum class FileType : uint8_t { kFree = 0, kRegular = 1, kDirectory = 2, kSymlink = 3 };

inline uint64_t EncodeRecordWord0(RecordType t, FileType f, uint32_t len1, uint32_t len2) {
  return uint64_t(t) | (uint64_t(f) << 8) | (uint64_t(len1) << 16) | (uint64_t(len2) << 32);
}

// ---------------------------------------------------------------------------
// Inode blocks: 16 slots of 256 bytes; slot 0 is the block header, slots
// 1-15 are inodes. An inode's number is its block * 16 + slot, so that
// finding it is arithmetic. Inode blocks form a chain from
// Superblock::inode_chain (newest first), which recovery and fsck walk.
inline constexpr uint32_t kInodeSize = 256;
inline constexpr uint32_t kInodesPerBlock = kBlockSize / kInodeSize;  // 16, slot 0 the header
inline constexpr uint32_t kInodeBlockMagic = 0x42444e49;               // "INDB"

struct InodeBlockHeader {
  uint32_t magic;
  uint32_t zero;
  uint64_t next;  // the previous inode block of the chain, 0 = none
  unsigned char pad[kInodeSize - 16];
};
static_assert(sizeof(InodeBlockHeader) == kInodeSize);

inline constexpr uint64_t InodeNumber(uint32_t lblock, uint32_t slot) {
  return uint64_t(lblock) * kInodesPerBlock + slot;
}
inline constexpr uint32_t InodeBlockOf(uint64_t ino) { return uint32_t(ino / kInodesPerBlock); }
inline constexpr uint32_t InodeSlotOf(uint64_t ino) { return uint32_t(ino % kInodesPerBlock); }
// Where inode `ino` lies in the pool: slot s of block b is b * 16 + s, and
// 16 inodes fill a block, so its byte offset is the number times the size.
static_assert(kInodesPerBlock * kInodeSize == kBlockSize);
inline constexpr uint64_t InodeOffset(uint64_t ino) { return ino * kInodeSize; }
// Whether ino can name an inode at all: slot 1-15 of a block in the data
// region (0, in particular, never does; tables keyed by inode use it as
// "empty").
inline constexpr bool InodeNumberInRange(uint64_t ino) {
  return InodeSlotOf(ino) != 0 && ino / kInodesPerBlock >= kDataStart &&
         ino / kInodesPerBlock < kMaxPoolBlocks;
}

// The identity word: kind:8 | zero:5 | fresh:1 | unlinked:1 | releasing:1 | gen:32 | zero:16.
// kind kFree = free (gen kept, bumped by each allocation, so that a stale
// reference is told apart). The releasing bit is set by the one CAS that
// decides who frees an inode that lost its last name and holder.
inline constexpr uint64_t EncodeIdent(FileType kind, uint32_t gen) {
  return uint64_t(kind) | (uint64_t(gen) << 16);
}
inline constexpr uint64_t kIdentReleasing = uint64_t{1} << 15;
// Set once the inode's last name is gone (soft: recovery frees such inodes).
inline constexpr uint64_t kIdentUnlinked = uint64_t{1} << 14;
// Version 9: a regular file's or directory's image may not be durable
// yet; its create record can make it again (container/pool/fresh_inode.h).
// Always zero in older pools and on symbolic links.
inline constexpr uint64_t kIdentFresh = uint64_t{1} << 13;
// The bits a valid ident holds zero: bits 8-12 always, the fresh bit in
// pools before version 9, the top 16.
inline constexpr uint64_t IdentZeroBits(uint32_t pool_version) {
  return 0x1f00 | (pool_version >= kFirstFreshCreatePoolVersion ? 0 : kIdentFresh) |
         (uint64_t{0xffff} << 48);
}
inline FileType IdentKind(uint64_t w) { return FileType(w & 0xff); }
inline uint32_t IdentGen(uint64_t w) { return uint32_t(w >> 16); }

inline constexpr uint32_t kInlineTargetMax = 128;  // symbolic link targets kept in the inode

struct Inode {
  // Line 0: identity and attributes. Each word is stored whole (8-byte
  // atomic) and persisted before the call that changed it returns.
  std::atomic<uint64_t> ident;  // EncodeIdent
  std::atomic<uint64_t> mode;   // the permission bits and S_ISUID/S_ISGID/S_ISVTX
  std::atomic<uint64_t> owner;  // uid:32 | gid:32
  std::atomic<uint64_t> ctime_ns;
  std::atomic<uint64_t> atime_ns;
  uint64_t created_ns;
  uint32_t consistency;  // Consistency of a regular file
  uint32_t target_len;   // a symbolic link's target length
  std::atomic<uint64_t> target_block;  // a long target's block, 0 = inline

  // Line 1: the file's log root (regular files), and a directory's times.
  std::atomic<uint64_t> log_head;  // first log block; 0 = empty file, no log yet
  FileTimes times;                 // mtime and data ctime (FileTimes)
  // Soft: descriptors open on this inode in all processes (a killed
  // process leaves it high: the inode is then freed at the next recovery).
  std::atomic<uint64_t> open_count;
  unsigned char pad1[kCacheLine - 32];

  // Lines 2-3: the log's coordination words (regular files; soft, reset at
  // recovery), or a symbolic link's target up to kInlineTargetMax bytes.
  union {
    LogWords words;
    char target[kInlineTargetMax];
  };
};
static_assert(sizeof(Inode) == kInodeSize);
static_assert(offsetof(Inode, log_head) == kCacheLine);
static_assert(offsetof(Inode, times) == kCacheLine + 8);
static_assert(offsetof(Inode, open_count) == kCacheLine + 24);
static_assert(offsetof(Inode, words) == 2 * kCacheLine);
static_assert(offsetof(Inode, target) == 2 * kCacheLine);

// ---------------------------------------------------------------------------
// Checkpoint: the whole namespace as of one position of the namespace log,
// read in place by every process (it is never loaded into DRAM), so that
// the log before it can be freed and a process attaching reads only the
// log after it. A header block, then the image in `nruns` runs of blocks.
// Published by the CAS of Superblock::checkpoint.
//
// The image, in 8-byte words (word w lives in image block w / 512; nothing
// crosses a block boundary: a name that would starts in the next block):
//   the directory table: `dirs` rows of 8 words, sorted by ino:
//     ino, parent, subdirectories, entries, table (first word), slots, 0, 0
//   each directory's table (4-word aligned), filled by linear probing from
//   crc % slots, where crc is the CRC-32C of the name:
//     tagged (kCheckpointMagic): `slots` (a power of two, at least 4, and
//     at least 5/4 of the entries) tags, crc:32 | ino:32 (0: empty), then
//     `slots` slots of 4 words: ino, crc:32 | type:8 | name_len:8 | zero:16,
//     then the name itself in words 2-3 if it is at most 16 bytes (zero
//     padded), else the name's first word and 0. A lookup walks the tags
//     (8 to a cache line, a few MiB for a million names) and reaches the
//     inode and the slot in parallel: one memory miss, not three in a row;
//     untagged (kCheckpointMagicV2, pools of version 1 and 2): `slots` (a
//     power of two, at least twice the entries) slots of 4 words: ino (0:
//     empty slot), crc:32 | type:8 | name_len:8 | zero:16, name (first
//     word), 0;
//   the names not held in their slot, padded with zeros to 8 bytes;
//   at `multi_words`: `multi` pairs (ino, links), sorted by ino, of the
//   non-directories with more than one name (the others have one).
inline constexpr uint64_t kCheckpointMagic = 0x33504b4353465055ull;    // "UPFSCKP3"
inline constexpr uint64_t kCheckpointMagicV2 = 0x32504b4353465055ull;  // "UPFSCKP2"
inline constexpr uint64_t CheckpointMagicFor(uint32_t pool_version) {
  return pool_version >= kFirstTaggedPoolVersion ? kCheckpointMagic : kCheckpointMagicV2;
}
inline constexpr uint32_t kInlineNameMax = 16;
// A tag holds the inode number in 32 bits.
static_assert(kMaxPoolBlocks * kInodesPerBlock <= (uint64_t{1} << 32));
inline constexpr uint32_t kMaxCheckpointRuns = 480;
inline constexpr uint32_t kDirRowWords = 8;
inline constexpr uint32_t kNameSlotWords = 4;

struct CheckpointHeader {
  uint64_t magic;
  uint64_t number;        // 1, 2, ... (one more than the checkpoint it replaces)
  // Reading continues at this position of the log (the first record the
  // image does not hold).
  uint64_t cont_seq;
  uint32_t cont_lblock;
  uint32_t cont_slot;
  // The log is kept from this block on (the previous checkpoint's
  // continuation): a process whose position is older reloads the image.
  uint64_t keep_seq;
  uint32_t keep_lblock;
  uint32_t nruns;
  uint64_t dirs;
  uint64_t entries;
  uint64_t image_words;
  uint32_t image_crc;     // CRC-32C of the image's words
  uint32_t header_crc;    // CRC-32C of bytes [0, offsetof(header_crc)), then of the runs
  uint64_t multi;         // rows of the multi-link table
  uint64_t multi_words;   // where it starts
  Run runs[kMaxCheckpointRuns];
  unsigned char pad[kBlockSize - 96 - kMaxCheckpointRuns * sizeof(Run)];
};
static_assert(sizeof(CheckpointHeader) == kBlockSize);
static_assert(offsetof(CheckpointHeader, header_crc) == 76);
static_assert(offsetof(CheckpointHeader, multi) == 80);
static_assert(offsetof(CheckpointHeader, runs) == 96);

// ---------------------------------------------------------------------------
// The volatile area's words: logical block kWordsBlock. Soft: valid while
// Superblock::clean says so or processes are attached; rebuilt otherwise.
// Version 2 added the bitmap's summaries: an area of version 1 is rebuilt.
inline constexpr uint64_t kVolatileMagic = 0x32544c4f56534655ull;  // "UFSVOLT2"

struct PoolWords {
  uint64_t magic;    // kVolatileMagic once initialized
  uint64_t pool_id;  // the superblock's: a copied pool's area is rebuilt
  unsigned char pad0[kCacheLine - 16];
  EpochWords epochs;    // 64 bytes (engine/reclamation.h)
  BitmapWords bitmap;   // 64 bytes (engine/alloc_bitmap.h)
  // Free inodes: a stack through each free inode's log_head word, head =
  // tag:28 | ino:36 (tag against ABA).
  alignas(kCacheLine) std::atomic<uint64_t> free_inodes;
  // The process slot + 1 of the process writing a checkpoint, 0 = none.
  alignas(kCacheLine) std::atomic<uint64_t> checkpoint_owner;
  // Blocks in the extents kPunchedBlock's bits name (version 10; zero in
  // an older area, whose bits are zero too).
  alignas(kCacheLine) std::atomic<uint64_t> punched_blocks;
};
static_assert(sizeof(PoolWords) <= kBlockSize);

}  // namespace upfs::format::pool
