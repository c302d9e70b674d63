#include "engine/stat_hint.h"

#include <atomic>

#include "format/format.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

namespace {

thread_local uint64_t t_hints_taken = 0;

// The words live in the pool file too (a clean pool keeps its soft state):
// a damaged hint must fail its check, not give a wrong size.
uint32_t HintCrc(uint64_t size, uint64_t blocks, uint64_t at, uint64_t seq, uint64_t head) {
  const uint64_t words[5] = {size, blocks, at, seq, head};
  return Crc32c(words, sizeof(words));
}

}  // namespace

uint64_t StatHintsTakenInThisThread() { return t_hints_taken; }

void PublishStatHint(LogWords* w, uint64_t head, const LogPos& at, uint64_t size, uint64_t blocks) {
  const uint64_t pos = uint64_t(at.lblock) | (uint64_t(at.slot) << 32);
  const uint32_t crc = HintCrc(size, blocks, pos, at.seq, head);
  uint64_t v = w->hint_ver.load(std::memory_order_acquire);
  // Repeated stats of an unchanged file leave the line alone: the hint
  // says this already.
  if (v != 0 && !(v & 1) && w->hint_at.load(std::memory_order_relaxed) == pos &&
      w->hint_seq.load(std::memory_order_relaxed) == at.seq &&
      w->hint_size.load(std::memory_order_relaxed) == size &&
      w->hint_blocks.load(std::memory_order_relaxed) == blocks &&
      w->hint_head.load(std::memory_order_relaxed) == head &&
      w->hint_crc.load(std::memory_order_relaxed) == crc)
    return;
  // One writer at a time; one that finds another at work leaves it the hint.
  if ((v & 1) || !w->hint_ver.compare_exchange_strong(v, v + 1, std::memory_order_acquire))
    return;
  w->hint_size.store(size, std::memory_order_relaxed);
  w->hint_blocks.store(blocks, std::memory_order_relaxed);
  w->hint_at.store(pos, std::memory_order_relaxed);
  w->hint_seq.store(at.seq, std::memory_order_relaxed);
  w->hint_head.store(head, std::memory_order_relaxed);
  w->hint_crc.store(crc, std::memory_order_relaxed);
  w->hint_ver.store(v + 2, std::memory_order_release);
}

bool ReadStatHint(const LogWords& w, const BlockAccess& access, uint64_t head, uint64_t* size,
                  uint64_t* blocks) {
  const uint64_t v = w.hint_ver.load(std::memory_order_acquire);
  if (v == 0 || (v & 1)) return false;
  const uint64_t s = w.hint_size.load(std::memory_order_relaxed);
  const uint64_t n = w.hint_blocks.load(std::memory_order_relaxed);
  const uint64_t at = w.hint_at.load(std::memory_order_relaxed);
  const uint64_t seq = w.hint_seq.load(std::memory_order_relaxed);
  const uint64_t h = w.hint_head.load(std::memory_order_relaxed);
  const uint64_t crc = w.hint_crc.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (w.hint_ver.load(std::memory_order_relaxed) != v || h != head || head == 0) return false;
  if (crc != HintCrc(s, n, at, seq, h)) return false;
  const uint32_t lblock = uint32_t(at);
  const uint64_t slot = at >> 32;
  // The words are soft and shared: nothing in them is trusted to point
  // into the space before it is checked.
  // (CheckRange also refuses block 0 and maps the block if another
  // process grew the space.)
  if (slot > kSlotsPerLogBlock || !access.CheckRange(lblock, 1, "stat hint").ok()) return false;
  const LogBlock* b = reinterpret_cast<const LogBlock*>(access.AddrUnchecked(lblock));
  // A compaction replaces the chain with blocks of higher seq and raises
  // compact_seq past the old ones: a hint into a replaced chain fails here,
  // whatever its old blocks hold now.
  if (seq < w.compact_seq.load(std::memory_order_acquire)) return false;
  if (__atomic_load_n(&b->seq, __ATOMIC_ACQUIRE) != seq) return false;
  if (!NothingCommittedAt(b, uint32_t(slot))) return false;
  *size = s;
  *blocks = n;
  ++t_hints_taken;
  return true;
}

}  // namespace upfs
