#include "container/pool/dentry.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format::pool;

namespace {

constexpr uint64_t kWordsPerLine = 8;
constexpr uint64_t kIdentLinesShift = 2, kIdentKindShift = 5, kIdentFlagsShift = 7, kIdentNameShift = 10;
// The state's complement (bits 18-19): a flipped state bit is damage, not
// another state.
constexpr uint64_t kIdentStateCopyShift = 18;
// The thread slot that wrote the dentry (bits 20-31): whose liveness
// decides a pending claim's fate in a directory's table.
constexpr uint64_t kIdentOwnerShift = 20;
constexpr uint64_t kIdentOwnerMask = 0xfff;
constexpr uint64_t kFreshTag = uint64_t{1} << 63;
constexpr uint64_t kOwnerMask = ~uint64_t{0};  // the owner word is stored inverted
// Padding of name words past the name's end: never a zero word.
constexpr unsigned char kPad = 0xff;

uint32_t LinesOf(uint64_t ident) { return uint32_t(ident >> kIdentLinesShift & 7); }
uint32_t KindOf(uint64_t ident) { return uint32_t(ident >> kIdentKindShift & 3); }
uint32_t FlagsOf(uint64_t ident) { return uint32_t(ident >> kIdentFlagsShift & 7); }
size_t NameLenOf(uint64_t ident) { return size_t(ident >> kIdentNameShift & 0xff); }
uint32_t GenOf(uint64_t ident) { return uint32_t(ident >> 32); }

// The checksum of an encoded dentry of `lines` lines: every word, the
// state taken as zero and the checksum's own half as zero.
uint32_t Checksum(const uint64_t* w, uint32_t lines) {
  uint64_t head[kWordsPerLine];
  std::memcpy(head, w, sizeof head);
  head[0] &= ~(kDentryStateMask | kDentryStateMask << kIdentStateCopyShift);
  head[3] &= 0xffffffff;
  uint32_t crc = Crc32c(head, sizeof head);
  if (lines > 1) crc = Crc32c(w + kWordsPerLine, (lines - 1) * 64, crc);
  return crc;
}

// Where name byte i lies: the head's last word, then 56 bytes a line.
unsigned char* NameByte(uint64_t* w, size_t i) {
  auto* lines = reinterpret_cast<unsigned char*>(w);
  if (i < kDentryHeadName) return lines + offsetof(DentryHead, name0) + i;
  i -= kDentryHeadName;
  return lines + 64 * (1 + i / kDentryTailName) + offsetof(DentryTail, name) + i % kDentryTailName;
}

}  // namespace

uint32_t DentryLines(size_t name_len) {
  if (name_len <= kDentryHeadName) return 1;
  return 1 + uint32_t((name_len - kDentryHeadName + kDentryTailName - 1) / kDentryTailName);
}

uint32_t DentryChecksum(const uint64_t* words, uint32_t lines) { return Checksum(words, lines); }

std::string_view PeekDentryName(const uint64_t* w, uint32_t lines_left, std::string* buf) {
  const size_t len = NameLenOf(w[0]);
  const uint32_t n = std::min(LinesOf(w[0]), lines_left);
  const size_t room = n == 0 ? 0 : kDentryHeadName + (n - 1) * kDentryTailName;
  buf->resize(std::min(len, room));
  for (size_t i = 0; i < buf->size(); ++i)
    (*buf)[i] = *reinterpret_cast<const char*>(NameByte(const_cast<uint64_t*>(w), i));
  return *buf;
}

bool DentryNameIs(const uint64_t* w, uint32_t lines_left, std::string_view name) {
  const size_t len = NameLenOf(w[0]);
  if (len != name.size() || len == 0) return false;
  const uint32_t n = LinesOf(w[0]);
  if (n != DentryLines(len) || n > lines_left) return false;
  // The head's bytes, then each continuation's, compared where they lie.
  const auto* lines = reinterpret_cast<const unsigned char*>(w);
  const size_t head = std::min(len, kDentryHeadName);
  if (std::memcmp(lines + offsetof(DentryHead, name0), name.data(), head) != 0) return false;
  for (size_t at = head, l = 1; at < len; at += kDentryTailName, ++l) {
    const size_t k = std::min(kDentryTailName, len - at);
    if (std::memcmp(lines + 64 * l + offsetof(DentryTail, name), name.data() + at, k) != 0) return false;
  }
  return true;
}

uint32_t DentryOwner(uint64_t ident) { return uint32_t(ident >> kIdentOwnerShift & kIdentOwnerMask); }

uint64_t DentryNameHash(std::string_view name, uint64_t key) {
  const uint64_t hi = Crc32c(name.data(), name.size(), uint32_t(key));
  const uint64_t lo = Crc32c(name.data(), name.size(), uint32_t(key >> 32) ^ 0x9e3779b9u);
  return hi << 32 | lo;
}

uint64_t FreedDentryLine(uint32_t gen) { return uint64_t(gen) << 32; }

uint32_t DentryLineGen(uint64_t first_word) { return uint32_t(first_word >> 32); }

uint64_t WithDentryState(uint64_t ident, uint64_t state) {
  const uint64_t both = kDentryStateMask | kDentryStateMask << kIdentStateCopyShift;
  return (ident & ~both) | state | (~state & kDentryStateMask) << kIdentStateCopyShift;
}

void EncodeDentry(const Dentry& d, uint64_t* out) {
  const size_t len = d.name.size();
  UPFS_ASSERT(len >= 1 && len <= kDentryMaxName);
  UPFS_ASSERT(d.name.find('/') == std::string_view::npos && d.name.find('\0') == std::string_view::npos);
  UPFS_ASSERT(d.kind >= 1 && d.kind <= 3 && d.parent != 0 && d.ino != 0 && d.gen != 0);
  UPFS_ASSERT(d.state >= kDentryStatePending && d.state <= kDentryStateDead && d.flags < 8);
  const uint32_t lines = DentryLines(len);
  std::memset(out, kPad, size_t(lines) * 64);
  UPFS_ASSERT(d.owner <= kIdentOwnerMask);
  out[0] = (~d.state & kDentryStateMask) << kIdentStateCopyShift | uint64_t(d.owner) << kIdentOwnerShift |
           d.state | uint64_t(lines) << kIdentLinesShift | uint64_t(d.kind) << kIdentKindShift |
           uint64_t(d.flags) << kIdentFlagsShift | uint64_t(len) << kIdentNameShift | uint64_t(d.gen) << 32;
  out[1] = d.parent;
  out[2] = d.ino;
  if (d.flags & kDentryFresh) {
    UPFS_ASSERT(d.ctime_ns != 0 && !(d.uid == 0xffffffffu && d.gid == 0xffffffffu));
    out[4] = kFreshTag | uint64_t(d.mode & 0xffff) | uint64_t(d.consistency & 0xff) << 16;
    out[5] = ~(uint64_t(d.uid) << 32 | d.gid) & kOwnerMask;
    out[6] = d.ctime_ns;
  } else if (d.flags & kDentryRename) {
    UPFS_ASSERT(d.source != 0 && d.replaced != 0 && d.partner != 0);
    out[4] = d.source;
    out[5] = d.replaced;
    out[6] = d.partner;
  } else {
    out[4] = out[5] = out[6] = kDentryNone;
  }
  for (size_t i = 0; i < len; ++i) *NameByte(out, i) = static_cast<unsigned char>(d.name[i]);
  for (uint32_t l = 1; l < lines; ++l) out[l * kWordsPerLine] = kDentryTailMagic | uint64_t(d.gen) << 32;
  out[3] = (uint64_t(d.ino_gen) & 0x7fffffff) << 1 | 1;
  out[3] |= uint64_t(Checksum(out, lines)) << 32;
}

DentryRead ReadDentry(const uint64_t* w, uint32_t lines_left, Dentry* d, uint32_t* lines, std::string* why) {
  *lines = 1;
  const uint64_t ident = w[0];
  if (uint32_t(ident) == 0) return DentryRead::kEmpty;  // zero, or a freed line's generation
  if ((ident & kDentryStateMask) == 0) {
    // Not a head. A continuation, or the head of nothing a build wrote.
    if (uint32_t(ident) == kDentryTailMagic) return DentryRead::kContinuation;
    *why = "a line that is neither a dentry nor a continuation";
    return DentryRead::kDamaged;
  }
  const uint32_t n = LinesOf(ident);
  const size_t len = NameLenOf(ident);
  auto damaged = [&](const std::string& what) {
    *why = what;
    return DentryRead::kDamaged;
  };
  if (n < 1 || n > kDentryMaxLines || len < 1 || n != DentryLines(len))
    return damaged("lines " + std::to_string(n) + " for a name of " + std::to_string(len) + " bytes");
  if (n > lines_left) return damaged("runs past its block's end");
  *lines = n;
  // A word a crash lost reads as the free line held it: zero, and a
  // line's first word as a freed line's generation (low half zero).
  for (uint32_t i = 1; i < n * kWordsPerLine; ++i)
    if (i % kWordsPerLine == 0 ? uint32_t(w[i]) == 0 : w[i] == 0) return DentryRead::kTorn;
  if (Checksum(w, n) != uint32_t(w[3] >> 32)) return damaged("checksum");
  if ((ident >> kIdentStateCopyShift & kDentryStateMask) != (~ident & kDentryStateMask))
    return damaged("state and its complement differ");
  const uint32_t kind = KindOf(ident), flags = FlagsOf(ident);
  if (kind == 0) return damaged("kind 0");
  if (GenOf(ident) == 0) return damaged("generation 0");
  if (!(w[3] & 1)) return damaged("inode generation word");
  if ((flags & kDentryFresh) && (flags & kDentryRename)) return damaged("both a create and a rename");
  if ((flags & kDentryExchange) && !(flags & kDentryRename)) return damaged("an exchange that is not a rename");
  for (uint32_t l = 1; l < n; ++l)
    if (w[l * kWordsPerLine] != (kDentryTailMagic | uint64_t(GenOf(ident)) << 32))
      return damaged("continuation line " + std::to_string(l));
  const char* name = reinterpret_cast<const char*>(NameByte(const_cast<uint64_t*>(w), 0));
  for (size_t i = 0; i < len; ++i) {
    const char c = *reinterpret_cast<const char*>(NameByte(const_cast<uint64_t*>(w), i));
    if (c == '\0' || c == '/') return damaged("a name with a NUL or a slash");
  }
  d->state = ident & kDentryStateMask;
  d->kind = kind;
  d->flags = flags;
  d->gen = GenOf(ident);
  d->owner = uint32_t(ident >> kIdentOwnerShift & kIdentOwnerMask);
  d->parent = w[1];
  d->ino = w[2];
  d->ino_gen = uint32_t(w[3] >> 1 & 0x7fffffff);
  if (flags & kDentryFresh) {
    if (!(w[4] & kFreshTag) || (w[4] & ~(kFreshTag | 0xffffff))) return damaged("creation values");
    d->mode = uint32_t(w[4] & 0xffff);
    d->consistency = uint32_t(w[4] >> 16 & 0xff);
    const uint64_t owner = ~w[5];
    d->uid = uint32_t(owner >> 32);
    d->gid = uint32_t(owner);
    d->ctime_ns = w[6];
  } else {
    d->source = w[4];
    d->replaced = w[5];
    d->partner = w[6];
    if (!(flags & kDentryRename) && (w[4] != kDentryNone || w[5] != kDentryNone || w[6] != kDentryNone))
      return damaged("a link's words");
  }
  // Past the name's end, to its last line's end: padding, as written.
  for (size_t i = len; i < kDentryHeadName + (n - 1) * kDentryTailName; ++i)
    if (*NameByte(const_cast<uint64_t*>(w), i) != kPad) return damaged("name padding");
  // The name: the head's 8 bytes, then each continuation's 56. Contiguous
  // only for names of up to 8 bytes; longer ones are gathered.
  if (len <= kDentryHeadName) {
    d->name = std::string_view(name, len);
  } else {
    thread_local std::string gathered;
    gathered.resize(len);
    for (size_t i = 0; i < len; ++i)
      gathered[i] = *reinterpret_cast<const char*>(NameByte(const_cast<uint64_t*>(w), i));
    d->name = gathered;
  }
  return DentryRead::kValid;
}

}  // namespace upfs
