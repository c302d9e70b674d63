// A directory table's first allocation and its growth (shared_dir_table.h).
#include <algorithm>
#include <thread>

#include "container/pool/shared_dir_table.h"
#include "container/pool/shared_dir_table_internal.h"
#include "util/assert.h"
#include "util/test_hook.h"

namespace upfs {

using namespace dir_slot;
namespace layout = shared_dir_table_layout;

namespace {

TestHook g_before_switch;

uint64_t StripesHere() {
  const uint64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  return std::min<uint64_t>(cpus, layout::kMaxStripes);
}

// The smallest table that holds `names` at a quarter of its slots.
uint64_t Log2SlotsFor(uint64_t names) {
  uint64_t log2 = layout::kMinLog2Slots;
  while (log2 < layout::kMaxLog2Slots && (uint64_t{1} << log2) < 4 * names) ++log2;
  return log2;
}

}  // namespace

void SharedDirTable::BeforeSwitchForTest(void (*fn)(void*), void* arg) { g_before_switch.Set(fn, arg); }

Status SharedDirTable::Ensure(uint64_t* handle, Table** t) {
  *t = Current(handle);
  if (*t) return Status::OK();
  uint64_t mine;
  Table* fresh;
  UPFS_RETURN_IF_ERROR(AllocateTable(mem_, layout::kMinLog2Slots, &mine, &fresh));
  uint64_t expect = 0;
  if (anchor_->compare_exchange_strong(expect, mine, std::memory_order_acq_rel)) {
    *handle = mine;
    *t = fresh;
    return Status::OK();
  }
  mem_->Retire(mine);  // another thread made the directory's first table
  *handle = expect;
  *t = reinterpret_cast<Table*>(mem_->At(expect));
  return Status::OK();
}

Status SharedDirTable::AllocateTable(TableMemory* mem, uint64_t log2_slots, uint64_t* handle, Table** out) {
  const uint64_t stripes = StripesHere();
  UPFS_RETURN_IF_ERROR(mem->Allocate(layout::Bytes(log2_slots, stripes), handle));
  auto* t = reinterpret_cast<Table*>(mem->At(*handle));
  t->h.log2_slots = log2_slots;
  t->h.stripes = stripes;
  *out = t;
  return Status::OK();
}

Status SharedDirTable::GrowOrWait(uint64_t handle, Table* t, bool start) {
  const uint32_t self = mem_->Self();
  for (uint32_t round = 0;; ++round) {
    if (anchor_->load(std::memory_order_acquire) != handle) return Status::OK();
    const uint64_t g = t->h.grow.load(std::memory_order_acquire);
    if (g == 0) {
      // Frozen words without a grower: its growth ended (the anchor moved
      // on, seen above next round). Nothing to wait for unless asked.
      if (!start) return Status::OK();
      uint64_t expect = 0;
      if (t->h.grow.compare_exchange_strong(expect, layout::kGrowing | self, std::memory_order_acq_rel))
        return Grow(handle, t);
      continue;
    }
    const uint32_t owner = uint32_t(g);
    UPFS_ASSERT(owner != self);
    if (round % shared_dir_table_internal::kLivenessEvery == shared_dir_table_internal::kLivenessEvery - 1 &&
        !mem_->Alive(owner)) {
      uint64_t expect = g;
      if (t->h.grow.compare_exchange_strong(expect, layout::kGrowing | self, std::memory_order_acq_rel))
        return Grow(handle, t);  // the dead grower's work, from the start
    }
    shared_dir_table_internal::Pause(round);
  }
}

// Under the table's grow word: freezes every slot (no claim, publish or
// removal changes it after), copies what is named into a table for four
// times the names, and switches the anchor. A table given up (no memory)
// is thawed: its writers go on in it.
Status SharedDirTable::Grow(uint64_t handle, Table* t) {
  const uint64_t self_word = layout::kGrowing | mem_->Self();
  // A dead grower's half-filled successor goes back first.
  if (const uint64_t half = t->h.successor.exchange(0, std::memory_order_acq_rel)) mem_->Retire(half);
  const uint64_t n = t->slots();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w = t->slot(i).load(std::memory_order_acquire);
    while (!(w & kFrozen) &&
           !t->slot(i).compare_exchange_weak(w, w | kFrozen, std::memory_order_acq_rel)) {
    }
  }
  // What the successor keeps: live names, and claims whose claimer lives.
  uint64_t names = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t w = t->slot(i).load(std::memory_order_relaxed) & ~kFrozen;
    if (!Free(w)) ++names;
  }
  uint64_t next;
  Table* s;
  Status st = AllocateTable(mem_, Log2SlotsFor(names), &next, &s);
  if (!st.ok()) {
    for (uint64_t i = 0; i < n; ++i) t->slot(i).fetch_and(~kFrozen, std::memory_order_acq_rel);
    t->h.grow.store(0, std::memory_order_release);
    return st;
  }
  t->h.successor.store(next, std::memory_order_release);
  int64_t live = 0, used = 0;
  const uint64_t mask = s->mask();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t w = t->slot(i).load(std::memory_order_relaxed) & ~kFrozen;
    if (Free(w)) continue;
    if (StateOf(w) == kPending && !mem_->Alive(view_->OwnerOf(RefOf(w)))) continue;
    const uint64_t hash = view_->HashOf(RefOf(w));
    UPFS_ASSERT(TagOf(w) == Tag(hash));
    uint64_t j = s->Home(hash);
    while (s->slot(j).load(std::memory_order_relaxed) != 0) j = (j + 1) & mask;
    s->slot(j).store(w, std::memory_order_relaxed);
    live += StateOf(w) == kLive;
    ++used;
  }
  s->stripe(0)->live.store(live, std::memory_order_relaxed);
  s->stripe(0)->used.store(used, std::memory_order_relaxed);
  g_before_switch.Run();
  if (t->h.grow.load(std::memory_order_acquire) != self_word) return Status::OK();  // taken over
  uint64_t expect = handle;
  if (anchor_->compare_exchange_strong(expect, next, std::memory_order_acq_rel)) {
    t->h.successor.store(0, std::memory_order_relaxed);
    mem_->Retire(handle);
  }
  return Status::OK();
}

}  // namespace upfs
