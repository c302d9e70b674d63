// Dentries of the next namespace (docs/design.md, "The next namespace";
// docs/format.md, "Dentries (pool version 11, in progress)"): the durable
// record of one name, a run of 1 to 6 lines of an arena block. Step 2 of
// that design: the encoding and the reading that tells a dentry a crash
// tore (some word never written: every written word is nonzero, and a line
// is zero but for a freed line's generation before a dentry is written
// into it) from a damaged one (no word lost, the checksum wrong). No pool
// writes dentries yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace upfs {

namespace format::pool {

// The head line of a dentry.
struct DentryHead {
  // state:2 | lines:3 | kind:2 | flags:3 | name_len:8 | ~state:2 |
  // owner:12 (the thread slot that wrote it) | gen:32. Only the state (and its complement) changes in place,
  // in one 8-byte store; the rest is written once, into zeroed lines, and
  // the checksum covers it with both state fields taken as zero.
  uint64_t ident;
  uint64_t parent;   // the directory's inode number
  uint64_t ino;      // the named inode's number
  uint64_t gen_crc;  // crc:32 | inode gen (low 31 bits):31 | 1
  // By flags: a create's (kDentryFresh) creation values of the new inode:
  // mode:16 | consistency:8 | zero:40 with bit 63 set; ~(uid:32 | gid:32);
  // ctime ns. A rename's (kDentryRename): the source's dentry (DentryRef),
  // the replaced dentry or kDentryNone, the exchange partner or
  // kDentryNone. Otherwise (a link): kDentryNone three times.
  uint64_t a, b, c;
  uint64_t name0;  // the name's first 8 bytes
};
static_assert(sizeof(DentryHead) == 64);

// A continuation line: the tag, then 56 more bytes of the name.
struct DentryTail {
  uint64_t tag;  // kDentryTailMagic | the head's gen << 32
  unsigned char name[56];
};
static_assert(sizeof(DentryTail) == 64);

inline constexpr uint64_t kDentryStatePending = 1;
inline constexpr uint64_t kDentryStateLive = 2;
inline constexpr uint64_t kDentryStateDead = 3;
inline constexpr uint64_t kDentryStateMask = 3;
inline constexpr uint64_t kDentryFresh = 1;     // flags: makes a new inode
inline constexpr uint64_t kDentryRename = 2;    // flags: supersedes dentries
inline constexpr uint64_t kDentryExchange = 4;  // flags: with kDentryRename, one of a pair
// A continuation's tag: its state bits are 0, which no head's are.
inline constexpr uint64_t kDentryTailMagic = 0x4c494154;  // "TAIL"
// "No dentry" in a rename's words (a zero word would read as one a crash lost).
inline constexpr uint64_t kDentryNone = ~uint64_t{0};
inline constexpr uint32_t kDentryMaxLines = 6;
inline constexpr size_t kDentryHeadName = 8;
inline constexpr size_t kDentryTailName = 56;
inline constexpr size_t kDentryMaxName = 255;
static_assert(kDentryHeadName + (kDentryMaxLines - 1) * kDentryTailName >= kDentryMaxName);

// A reference to a dentry from another: its head line (block * 64 + line,
// 34 bits) and the low 30 bits of its gen, so that a line reused since is
// told apart.
inline constexpr uint64_t DentryRef(uint64_t line, uint32_t gen) {
  return (uint64_t(gen) & ((uint64_t{1} << 30) - 1)) << 34 | line;
}
inline constexpr uint64_t DentryRefLine(uint64_t ref) { return ref & ((uint64_t{1} << 34) - 1); }
inline constexpr uint32_t DentryRefGen(uint64_t ref) { return uint32_t(ref >> 34); }

}  // namespace format::pool

// A dentry's fields, as written and as read.
struct Dentry {
  uint64_t state = format::pool::kDentryStatePending;
  uint32_t kind = 0;   // FileType: 1 regular, 2 directory, 3 symbolic link
  uint32_t flags = 0;  // kDentryFresh, kDentryRename, kDentryExchange
  uint32_t gen = 1;    // the line's generation (never 0)
  uint32_t owner = 0;  // the thread slot that wrote it (below 4096)
  uint64_t parent = 0;
  uint64_t ino = 0;
  uint32_t ino_gen = 0;  // read back: the low 31 bits
  // Fresh: the creation values.
  uint32_t mode = 0;
  uint32_t consistency = 0;
  uint32_t uid = 0, gid = 0;
  uint64_t ctime_ns = 0;
  // Rename: references (format::pool::DentryRef) or kDentryNone.
  uint64_t source = format::pool::kDentryNone;
  uint64_t replaced = format::pool::kDentryNone;
  uint64_t partner = format::pool::kDentryNone;
  std::string_view name;
};

// Lines a dentry of a name of `name_len` bytes takes (1 to 6).
uint32_t DentryLines(size_t name_len);

// Writes `d` into `lines` zeroed lines at `out` (8 words a line), its
// state as given. The name must be 1 to 255 bytes without '/' or NUL, the
// kind 1 to 3, parent and ino nonzero, ctime of a fresh dentry nonzero,
// uid and gid not both 2^32 - 1: the caller checked them.
void EncodeDentry(const Dentry& d, uint64_t* out);

// The checksum a dentry of `lines` lines at `words` carries in its high
// half of word 3 (fsck's report; the fuzzer's repair of patched dentries).
uint32_t DentryChecksum(const uint64_t* words, uint32_t lines);

// The name of the dentry headed at `words`, without the checks of
// ReadDentry (the running namespace's reads of dentries it wrote or a
// recovery read): bounded by the block's end (`lines_left`), never past it.
std::string_view PeekDentryName(const uint64_t* words, uint32_t lines_left, std::string* buf);
// Whether the dentry headed at `words` has the name `name`, compared where
// its bytes lie (a lookup's comparison: no copy), within the block's end.
bool DentryNameIs(const uint64_t* words, uint32_t lines_left, std::string_view name);
// The thread slot that wrote the dentry whose state word is `ident`.
uint32_t DentryOwner(uint64_t ident);

// The 64-bit hash of a name that orders a directory's table (its home
// slot, its listing, the listing's cookie), keyed per pool so that two
// pools place names apart. Two CRC-32Cs: not a keyed hash in the
// cryptographic sense (see docs/design.md on names chosen to collide).
uint64_t DentryNameHash(std::string_view name, uint64_t key);

// The state word of an encoded dentry with its state changed.
uint64_t WithDentryState(uint64_t ident, uint64_t state);

// A freed line keeps, in its first word, the generation of the dentry that
// covered it (its other words zero), so that the next dentry whose head
// it is takes a greater one: a rename's reference to the old dentry
// (line and generation) never names the new one. FreedDentryLine is that
// first word; DentryLineGen reads it back from a free line or a head.
uint64_t FreedDentryLine(uint32_t gen);
uint32_t DentryLineGen(uint64_t first_word);

enum class DentryRead {
  kEmpty,         // a line never written since it was zeroed
  kContinuation,  // a continuation line met alone (of a torn or dropped dentry)
  kTorn,          // a word lost in a crash: not a dentry, not damage
  kDamaged,       // all words written, but they do not make a dentry
  kValid,
};

// Reads the line at `words` (8 words a line, `lines_left` lines to the
// block's end). *lines: how many lines the answer covers (1 but for
// kTorn, kDamaged and kValid heads, whose run it is when it fits). For
// kValid, *d holds the fields (its name valid until this thread's next
// call); for kDamaged, *why says what is wrong.
DentryRead ReadDentry(const uint64_t* words, uint32_t lines_left, Dentry* d, uint32_t* lines, std::string* why);

}  // namespace upfs
