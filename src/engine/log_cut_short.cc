// The end of a file's log after a crash (docs/format.md, "A commit cut
// short"): what a commit persisted in one round can leave there when the
// crash came between its CAS and its write-back (a payload failing its
// checksum, a checked append's lost word or bytes), and the write-back of a
// checked append's bytes that whoever commits after it owes (rules 3 and 4
// of "Persistence ordering").
#include "engine/log.h"
#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

namespace {

// Where the bytes of a well-formed checked append lie (*len of them), or
// null if its block lies past the end of the file.
const char* CheckedAppendBytes(const BlockAccess& ba, uint64_t w0, uint64_t w1, uint32_t* len) {
  const uint32_t l = GrowTailCheckedBlock(w1);
  if (!ba.CheckRange(l, 1, "checked append's block").ok()) return nullptr;
  const uint32_t from = GrowTailCheckedFrom(w0);
  *len = GrowTailCheckedEnd(w0) - from;
  return ba.AddrUnchecked(l) + from;
}

}  // namespace

bool CheckedAppendBytesMatch(const BlockAccess& ba, uint64_t w0, uint64_t w1) {
  uint32_t len = 0;
  const char* at = CheckedAppendBytes(ba, w0, w1, &len);
  return at && Crc32c(at, len) == GrowTailCheckedCrc(w1);
}

void FlushCheckedAppend(const BlockAccess& ba, const LogBlock* b, uint32_t entry) {
  const uint64_t w0 = b->slots[entry].load(std::memory_order_relaxed);
  if (KindOf(w0) != EntryKind::kGrowTailChecked || entry + 1 >= kSlotsPerLogBlock) return;
  const uint64_t w1 = b->slots[entry + 1].load(std::memory_order_relaxed);
  // A malformed one is damage, which a scan reports.
  if (!GrowTailCheckedWellFormed(w0, w1)) return;
  uint32_t len = 0;
  if (const char* at = CheckedAppendBytes(ba, w0, w1, &len)) pm::Flush(at, len);
}

bool CutShortGrowTail(const BlockAccess& ba, const LogBlock* b, uint32_t slot, uint64_t e) {
  if (KindOf(e) != EntryKind::kGrowTailChecked || slot % 2 != 0) return false;
  for (uint32_t s = slot + kGrowTailCheckedSlots; s < kSlotsPerLogBlock; ++s)
    if (b->slots[s].load(std::memory_order_relaxed) != 0) return false;
  // Last in its block, it may still be followed in the next one (it ends
  // a full block): then its bytes may have changed since, legitimately (a
  // truncate, then an append over them). A successor with nothing in it
  // is what a committer links before its commit.
  const uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
  if (n != 0) {
    if (!ba.CheckRange(n, 1, "log block").ok()) return false;
    const auto* nb = reinterpret_cast<const LogBlock*>(ba.AddrUnchecked(n));
    if (nb->slots[0].load(std::memory_order_acquire) != 0) return false;
  }
  // Its second word did not reach media (it reads zero, as a slot not yet
  // written does: media promise 8-byte failure atomicity only), or its
  // bytes did not all: a well-formed entry whose bytes fail the checksum.
  const uint64_t w1 = b->slots[slot + 1].load(std::memory_order_relaxed);
  if (w1 == 0) return true;
  // A granule flip's granules were durable before its CAS: only its second
  // word can be lost.
  if (IsGranuleFlip(e)) return false;
  if (!GrowTailCheckedWellFormed(e, w1)) return false;
  return !CheckedAppendBytesMatch(ba, e, w1);
}

bool CutShortApply(const LogBlock* b, uint32_t slot, uint64_t e) {
  if (KindOf(e) != EntryKind::kApply || !ApplyWellFormed(e)) return false;
  const uint32_t rs = ApplySlot(e);
  if (rs >= slot || slot >= kSlotsPerLogBlock) return false;
  const uint64_t r = b->slots[rs].load(std::memory_order_acquire);
  if (KindOf(r) != EntryKind::kReserve || !ReserveWellFormed(r)) return false;
  const uint32_t n = ReserveCount(r);
  if (n > kMaxPayloadWords || rs + 1 + n > slot) return false;
  uint64_t words[kMaxPayloadWords];
  for (uint32_t i = 0; i < n; ++i) words[i] = b->slots[rs + 1 + i].load(std::memory_order_relaxed);
  if (Crc32c(words, n * 8) == ApplyCrc(e)) return false;  // the damage is not a torn payload
  for (uint32_t s = slot + 1; s < kSlotsPerLogBlock; ++s)
    if (b->slots[s].load(std::memory_order_relaxed) != 0) return false;
  // A payload word that did not reach media holds what its slot held
  // before the commit: zero (log slots are written once, from zero). So a
  // torn payload has a zero word where the format does not require one (a
  // patch's first word is always zero); a payload that fails its checksum
  // without one is damage, not a crash. (Whole lines are not required:
  // media promise 8-byte failure atomicity only, and the pool's crash
  // explorer tears lines word by word.)
  const bool patch = n > 1 && (uint16_t(words[1] >> 48) & kPatch) != 0;
  for (uint32_t i = patch ? 1 : 0; i < n; ++i)
    if (words[i] == 0) return true;
  return false;
}

}  // namespace upfs
