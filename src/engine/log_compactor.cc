#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/log_compactor.h"

#include "engine/epoch_pin.h"
#include "engine/log_writer.h"
#include "util/assert.h"
#include "medium/pm.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;

// The compacted log: entries that recreate a state, packed into blocks.
class CompactWriter {
 public:
  void AddInline(uint64_t e) {
    if (slot_ + 1 > kSlotsPerLogBlock) NewBlock();
    Cur()[slot_++] = e;
  }
  // A two-word entry (a granule flip) at an even slot.
  void AddPair(uint64_t w0, uint64_t w1) {
    if (slot_ % 2) AddInline(EncodeReserve(0));  // inert padding
    if (slot_ + 2 > kSlotsPerLogBlock) {
      if (slot_ < kSlotsPerLogBlock) Cur()[slot_] = EncodeReserve(kSlotsPerLogBlock - slot_ - 1);
      NewBlock();
    }
    uint64_t* s = Cur();
    s[slot_] = w0;
    s[slot_ + 1] = w1;
    slot_ += 2;
  }
  void AddPayload(const std::vector<uint64_t>& words) {
    uint32_t k = uint32_t(words.size());
    UPFS_ASSERT(k + 2 <= kSlotsPerLogBlock);
    if (slot_ + 2 + k > kSlotsPerLogBlock) {
      // Pad out the rest of the block (nothing to pad if it is full).
      if (slot_ < kSlotsPerLogBlock) Cur()[slot_] = EncodeReserve(kSlotsPerLogBlock - slot_ - 1);
      NewBlock();
    }
    uint64_t* s = Cur();
    uint32_t rs = slot_;
    s[rs] = EncodeReserve(k);
    std::memcpy(&s[rs + 1], words.data(), size_t(k) * 8);
    s[rs + 1 + k] = EncodeApply(rs, Crc32cWords(words));
    slot_ = rs + 2 + k;
  }
  // Every block but the last of a chain is full: pad the last one too, as
  // it will link to the active block.
  void Finish() {
    if (!imgs_.empty() && slot_ < kSlotsPerLogBlock)
      Cur()[slot_] = EncodeReserve(kSlotsPerLogBlock - slot_ - 1);
    slot_ = kSlotsPerLogBlock;
  }
  size_t blocks() const { return imgs_.size(); }
  std::vector<std::vector<uint64_t>>& images() { return imgs_; }

 private:
  static uint32_t Crc32cWords(const std::vector<uint64_t>& w) {
    return Crc32c(w.data(), w.size() * 8);
  }
  uint64_t* Cur() {
    if (imgs_.empty()) NewBlock();
    return imgs_.back().data();
  }
  void NewBlock() {
    imgs_.emplace_back(kSlotsPerLogBlock, 0);
    slot_ = 0;
  }
  std::vector<std::vector<uint64_t>> imgs_;
  uint32_t slot_ = 0;
};

Status LogCompactor::Collect(ThreadBlocks* t, uint32_t slot, bool force) {
  EpochDomain* epochs = source_->epochs();
  UPFS_ASSERT(slot < kMaxSlots && EpochPin::Pinned(epochs, slot));
  LogWords* w = root_.words;
  uint64_t me = uint64_t(slot) + 1, cur = 0;
  if (!w->gc_owner.compare_exchange_strong(cur, me)) {
    // Another GC is running, unless its owner died.
    if (cur == 0 || cur > kMaxSlots || epochs->SlotOwnerAlive(uint32_t(cur - 1)))
      return Status::OK();
    if (!w->gc_owner.compare_exchange_strong(cur, me)) return Status::OK();
  }
  Status st = Compact(t, force);
  w->gc_owner.store(0, std::memory_order_release);
  source_->DrainLimbo(t, false);
  return st;
}

// The full blocks before the active one, replayed into a state.
struct LogCompactor::FullBlocks {
  uint32_t head = 0;
  BlockTable state;
  std::vector<uint32_t> blocks;    // chain order
  std::vector<Run> overflow;       // overflow runs their entries own
  uint32_t active = 0;             // the first block with no successor yet
  uint64_t active_seq = 0;
};

Status LogCompactor::ReplayFullBlocks(FullBlocks* f) {
  uint64_t head64 = root_.head->load(std::memory_order_acquire);
  if (head64 == 0 || head64 >= kMaxBlocks) return Status::Corrupt("file header", "bad log head");
  f->head = uint32_t(head64);
  UPFS_RETURN_IF_ERROR(access_.CheckRange(f->head, 1, "log head"));
  LogBlock* b;
  const uint64_t head_seq = reinterpret_cast<LogBlock*>(access_.AddrUnchecked(f->head))->seq;
  UPFS_RETURN_IF_ERROR(CheckLogBlock(access_, f->head, head_seq, &b));
  uint64_t entries = 0;
  uint32_t l = f->head;
  uint64_t seq = b->seq;
  for (;;) {
    uint32_t n = NextBlock(b->next.load(std::memory_order_acquire));
    if (n == 0) break;
    uint32_t end_slot = 0;
    UPFS_RETURN_IF_ERROR(ApplyLogBlock(access_, b, l, &f->state, &f->overflow, &end_slot, &entries));
    f->blocks.push_back(l);
    UPFS_RETURN_IF_ERROR(CheckChainLength(access_, f->blocks.size(), "cycle"));
    UPFS_RETURN_IF_ERROR(CheckLogBlock(access_, n, seq + 1, &b));
    l = n;
    seq += 1;
  }
  f->active = l;
  f->active_seq = seq;
  // Every entry of the full blocks was made durable by whoever committed
  // after it (rules 3 and 4), except perhaps the last one's, if nobody has
  // committed into the active block yet: a checked append whose bytes are
  // not durable yet. The compacted chain will say they are (Publish fences
  // before it is linked).
  if (!f->blocks.empty()) {
    const auto* lb = reinterpret_cast<const LogBlock*>(access_.AddrUnchecked(f->blocks.back()));
    const uint32_t last = LastEntryBefore(lb, kSlotsPerLogBlock);
    if (last != LogPos::kNoSlot) FlushCheckedAppend(access_, lb, last);
  }
  return Status::OK();
}

// The state as entries: size first (SIZE_SET unmaps nothing in an empty
// table), then the block map as maximal runs of contiguous mappings, at
// most kInlineMaxCount long, then the live patches of each block in their
// order (after the maps they apply to; superseded ones are gone from the
// state). Patches are copied, never folded here: a fold maps a new block
// and frees the old one, which a concurrent copy-on-write writer that
// still maps it would free as well. The GC folds before it compacts, by
// commits that follow the writers' conflict rules (File::FoldBlocks;
// docs/design.md, "Sub-block writes").
void LogCompactor::EncodeState(const BlockTable& state, CompactWriter* w) const {
  w->AddPayload({state.size(), EncodePayloadWord1(0, 0, kSizeSet)});
  uint64_t run_v = 0, run_count = 0;
  uint32_t run_l = 0;
  auto emit = [&] {
    if (!run_count) return;
    if (FitsInline(run_v, run_l, run_count))
      w->AddInline(EncodeInline({uint32_t(run_v), run_l, uint32_t(run_count), false}));
    else
      w->AddPayload({0, EncodePayloadWord1(uint32_t(run_v), 1, 0),
                     EncodeRun(Run{run_l, uint32_t(run_count)})});
    run_count = 0;
  };
  // A pair whose shadow is its home's neighbour is mapped by its flip
  // below (the only kind a version 4 log has); an anywhere shadow's block
  // is mapped here, its flip below names the shadow.
  auto by_pair = [&](uint64_t v, uint32_t l) { return state.ShadowOf(v, l) == l + 1; };
  state.ForEachMapped([&](uint64_t v, uint32_t l) {
    if (by_pair(v, l)) return;
    if (run_count && v == run_v + run_count && l == run_l + run_count &&
        run_count < kInlineMaxCount) {
      ++run_count;
      return;
    }
    emit();
    run_v = v;
    run_l = l;
    run_count = 1;
  });
  emit();
  // Each pairing as a flip that sets its mask.
  state.shadows().ForEach([&](uint64_t v, uint32_t mask) {
    const uint32_t l = state.Get(v);
    if (by_pair(v, l))
      w->AddPair(EncodeGranuleFlip0(uint32_t(v), l), EncodeGranuleFlip1(mask, true));
    else
      w->AddPair(EncodeGranuleFlip0(uint32_t(v), state.shadows().Shadow(v)),
                 EncodeGranuleFlip1(mask, true, true));
  });
  std::vector<uint64_t> words;
  state.patches().ForEach([&](uint64_t v, const uint64_t* refs, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      const PatchRef r = PatchRef::Decode(refs[i]);
      // The ref was applied from one of the full blocks, which we replayed
      // and which stay live until we retire them.
      const auto* b = reinterpret_cast<const LogBlock*>(access_.AddrUnchecked(r.lblock));
      const uint32_t data = PatchDataWords(r.offset, r.length);
      words.assign({0, EncodePayloadWord1(uint32_t(v), 0, kPatch), EncodePatchWord2(r.offset, r.length)});
      for (uint32_t k = 0; k < data; ++k) words.push_back(b->slots[r.slot + k].load(std::memory_order_relaxed));
      w->AddPayload(words);
    }
  });
  w->Finish();
}

// Writes the compacted chain into fresh blocks linked to the active block
// and swaps it in at the head; then marks the old blocks compacted and
// retires them. Nothing happens if the head moved meanwhile.
Status LogCompactor::Publish(ThreadBlocks* t, const FullBlocks& f, CompactWriter* w) {
  const uint64_t n_new = w->blocks();
  std::vector<Run> fresh;
  PendingBlocks taken(source_, t, &fresh);
  UPFS_RETURN_IF_ERROR(source_->Alloc(t, n_new, &fresh));
  std::vector<uint32_t> nb;
  for (const Run& r : fresh)
    for (uint32_t i = 0; i < r.count; ++i) nb.push_back(r.lblock + i);
  alignas(64) static thread_local unsigned char img[kBlockSize];
  for (size_t i = 0; i < n_new; ++i) {
    std::memset(img, 0, sizeof(img));
    auto* ib = reinterpret_cast<LogBlock*>(img);
    ib->next.store(NextWord(i + 1 < n_new ? nb[i + 1] : f.active), std::memory_order_relaxed);
    ib->seq = f.active_seq - n_new + i;
    std::memcpy(reinterpret_cast<char*>(img) + offsetof(LogBlock, slots), w->images()[i].data(),
                kSlotsPerLogBlock * 8);
    char* dst = nullptr;
    UPFS_RETURN_IF_ERROR(access_.Addr(nb[i], &dst));
    pm::CopyNT(dst, img, kBlockSize);
  }
  pm::Fence();
  uint64_t expected = f.head;
  if (!pm::Cas64(root_.head, expected, nb[0])) return Status::OK();
  taken.Keep();  // the log's now
  root_.FlushHead();
  pm::Fence();
  // Publish the boundary before retiring: anyone who pins after this sees
  // that a cursor below it is stale.
  std::atomic<uint64_t>& cs = root_.words->compact_seq;
  uint64_t prev = cs.load();
  while (prev < f.active_seq && !cs.compare_exchange_weak(prev, f.active_seq)) {
  }
  root_.words->gc_last_blocks.store(n_new + 1, std::memory_order_relaxed);
  for (uint32_t ob : f.blocks) source_->Retire(t, ob, 1);
  for (const Run& r : f.overflow) source_->Retire(t, r.lblock, r.count);
  return Status::OK();
}

namespace {
std::atomic<uint64_t> g_states_encoded{0};
}  // namespace

uint64_t LogCompactor::StatesEncodedForTest() { return g_states_encoded.load(std::memory_order_relaxed); }

Status LogCompactor::Compact(ThreadBlocks* t, bool force) {
  UPFS_ASSERT(root_.words->gc_owner.load(std::memory_order_relaxed) != 0);
  FullBlocks f;
  UPFS_RETURN_IF_ERROR(ReplayFullBlocks(&f));
  if (f.blocks.empty()) return Status::OK();
  // Unless forced, only past the trigger length (see docs/design.md, GC).
  uint64_t last = root_.words->gc_last_blocks.load(std::memory_order_relaxed);
  if (!force && f.blocks.size() + 1 <= GcTriggerBlocks(last)) return Status::OK();
  CompactWriter w;
  EncodeState(f.state, &w);
  g_states_encoded.fetch_add(1, std::memory_order_relaxed);
  root_.words->gc_last_blocks.store(w.blocks(), std::memory_order_relaxed);
  // Only worth it if the chain gets shorter (also keeps seq numbers positive).
  if (w.blocks() >= f.blocks.size()) return Status::OK();
  return Publish(t, f, &w);
}

}  // namespace upfs
