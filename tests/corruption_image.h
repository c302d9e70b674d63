// The per-file corruption test's view of a upfs file image
// (corruption_test.cc): its bytes, its log chain as the test walks it, and
// which damage is certain to be detectable (MustDetect).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "format/format.h"
#include "util/crc32c.h"

namespace corruption_test {

namespace fmt = upfs::format;
using Bytes = std::vector<unsigned char>;

inline constexpr uint64_t kB = fmt::kBlockSize;
inline constexpr size_t kHeadOff = offsetof(fmt::FileHeader, log_head);
inline constexpr size_t kCrcOff = offsetof(fmt::FileHeader, header_crc);
inline constexpr size_t kSeqOff = offsetof(fmt::LogBlock, seq);

inline uint64_t Get64(const Bytes& b, uint64_t off) {
  uint64_t v = 0;
  if (off + 8 <= b.size()) std::memcpy(&v, b.data() + off, 8);
  return v;
}
inline void Put64(Bytes* b, uint64_t off, uint64_t v) { std::memcpy(b->data() + off, &v, 8); }
inline void Put32(Bytes* b, uint64_t off, uint32_t v) { std::memcpy(b->data() + off, &v, 4); }
inline void FixHeaderCrc(Bytes* b) {
  Put32(b, kCrcOff, upfs::Crc32c(b->data(), kCrcOff));
}

// ---------------------------------------------------------------------------
// A valid file and what the test knows about its structure.

struct LogInfo {
  uint32_t lblock;
  uint64_t seq;
  bool full;  // last slot used
};

struct Base {
  std::string name;
  Bytes image;
  std::vector<LogInfo> chain;
  uint64_t file_id = 0;
  std::string problem;  // why the base file itself is unusable, or ""
};

// Walks the log chain of a (valid) image.
inline std::vector<LogInfo> ParseChain(const Bytes& img) {
  std::vector<LogInfo> chain;
  uint64_t b = Get64(img, kHeadOff);
  while (b != 0 && (b + 1) * kB <= img.size() && chain.size() < 100000) {
    uint64_t w = Get64(img, b * kB);
    if (!fmt::NextWordValid(w)) break;
    bool full = Get64(img, b * kB + 16 + 8 * (fmt::kSlotsPerLogBlock - 1)) != 0;
    chain.push_back(LogInfo{static_cast<uint32_t>(b), Get64(img, b * kB + kSeqOff), full});
    b = fmt::NextBlock(w);
  }
  return chain;
}

// The used entry slots of the chain, as byte offsets in the image.
inline std::vector<uint64_t> UsedSlots(const Base& base) {
  std::vector<uint64_t> v;
  for (const LogInfo& l : base.chain)
    for (uint32_t s = 0; s < fmt::kSlotsPerLogBlock; ++s) {
      uint64_t off = l.lblock * kB + 16 + 8 * s;
      if (Get64(base.image, off) != 0) v.push_back(off);
    }
  return v;
}

inline bool LooksLikeLogBlock(const Bytes& img, uint64_t b, uint64_t* seq) {
  if (b == 0 || (b + 1) * kB > img.size()) return false;
  if (!fmt::NextWordValid(Get64(img, b * kB))) return false;
  *seq = Get64(img, b * kB + kSeqOff);
  return true;
}

// Why damage `d` of base `o` is certain to be detectable, or "" if it may
// legitimately look like a valid (if different) file.
inline std::string MustDetect(const Base& o, const Bytes& d) {
  if (d.size() < 2 * kB) return "the file is shorter than a header and a log block";
  if (std::memcmp(o.image.data(), d.data(), kCrcOff + 4) != 0) return "header bytes under the magic/CRC changed";
  uint64_t head = Get64(o.image, kHeadOff), nhead = Get64(d, kHeadOff);
  uint64_t seq;
  if (nhead != head) {
    if (nhead == 0 || nhead >= fmt::kMaxBlocks || !LooksLikeLogBlock(d, nhead, &seq))
      return "the log head no longer points at a log block";
    return "";  // points at another block that looks like a log block
  }
  for (size_t i = 0; i < o.chain.size(); ++i) {
    const LogInfo& li = o.chain[i];
    uint64_t at = li.lblock * kB;
    if (at + kB > d.size()) return "log block " + std::to_string(li.lblock) + " was cut off";
    if (std::memcmp(o.image.data() + at, d.data() + at, 16) == 0) continue;
    uint64_t w = Get64(d, at), nseq = Get64(d, at + kSeqOff);
    std::string name = "log block " + std::to_string(li.lblock);
    if (!fmt::NextWordValid(w)) return name + ": magic destroyed";
    uint32_t t = fmt::NextBlock(w), ot = fmt::NextBlock(Get64(o.image, at));
    if (nseq != li.seq && (i > 0 || t != 0)) return name + ": sequence number breaks the chain";
    if (t != ot && t != 0) {
      if (!li.full) return name + ": a block that is not full got a successor";
      uint64_t tseq;
      if (!LooksLikeLogBlock(d, t, &tseq) || tseq != nseq + 1) return name + ": successor is not the next log block";
    }
    return "";  // the chain may still be valid (e.g. cut short at this block)
  }
  return "";
}

}  // namespace corruption_test
