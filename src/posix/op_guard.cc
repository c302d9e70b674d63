#include "posix/op_guard.h"

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "util/leak.h"
#include "util/thread_held.h"

namespace upfs {

struct Retiree {
  uint64_t epoch;
  DescriptorUse use = DescriptorUse::Any();  // the calls it waits for (Any: every call)
  std::function<void()> fn;
};

struct alignas(64) OpThreadRecord {
  // The thread's call: Word(epoch it began in, what it may look up); 0 = none.
  std::atomic<uint64_t> active{0};
  std::atomic<bool> owned{false};
  OpThreadRecord* next = nullptr;
  // Retired during the owner's current call: freed at its end if no other
  // call that began before and may hold it is running, else handed to the
  // shared list. Only the owning thread touches it.
  std::vector<Retiree> mine;

  static uint64_t Word(uint64_t epoch, DescriptorUse u) { return epoch << DescriptorUse::kTagBits | u.tag_; }
  static uint64_t EpochOf(uint64_t w) { return w >> DescriptorUse::kTagBits; }
  static DescriptorUse UseOf(uint64_t w) {
    return DescriptorUse(uint32_t(w & ((uint64_t{1} << DescriptorUse::kTagBits) - 1)));
  }
  // Whether an outer call declared with `outer` may do what `inner` does.
  static bool Covers(DescriptorUse outer, DescriptorUse inner) {
    return outer.tag_ == DescriptorUse::kAny || inner.tag_ == DescriptorUse::kNone || outer.tag_ == inner.tag_;
  }
  // Whether the call in word w (of another thread) may still hold what `rt`
  // frees: it is running, began before the retirement, may read its slot.
  static bool Blocks(uint64_t w, const Retiree& rt) {
    return w != 0 && EpochOf(w) <= rt.epoch && UseOf(w).Overlaps(rt.use);
  }
};

namespace {

std::atomic<uint64_t> g_epoch{1};
std::atomic<OpThreadRecord*> g_records{nullptr};
std::mutex g_retire_mu;
std::vector<Retiree> g_retirees;
// g_retirees.size(), readable without the lock: the end of every call
// looks at it.
std::atomic<size_t> g_retiree_count{0};

// The active words of every thread's record but `skip`'s.
std::vector<uint64_t> ActiveCalls(const OpThreadRecord* skip) {
  std::vector<uint64_t> calls;
  for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    if (r == skip) continue;
    if (const uint64_t w = r->active.load(std::memory_order_seq_cst); w != 0) calls.push_back(w);
  }
  return calls;
}

bool Waits(const std::vector<uint64_t>& calls, const Retiree& rt) {
  for (uint64_t w : calls)
    if (OpThreadRecord::Blocks(w, rt)) return true;
  return false;
}

// Waits(ActiveCalls(skip), rt) for one retiree, without the snapshot's
// allocation: a close's common path.
bool AnyCallBlocks(const OpThreadRecord* skip, const Retiree& rt) {
  for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next)
    if (r != skip && OpThreadRecord::Blocks(r->active.load(std::memory_order_seq_cst), rt)) return true;
  return false;
}

// Runs the retirees that no running call can still use. With `add`, first
// retires it. Without, the end of a call: if another thread is reclaiming
// already, it does not wait for it (what that thread's pass could not free
// yet, the next call to end frees).
void Reclaim(Retiree* add, bool wait_for_lock = false) {
  std::vector<std::function<void()>> ready;
  {
    std::unique_lock<std::mutex> g(g_retire_mu, std::defer_lock);
    if (add || wait_for_lock) {
      g.lock();
    } else if (!g.try_lock()) {
      return;
    }
    if (add) {
      add->epoch = g_epoch.fetch_add(1, std::memory_order_seq_cst);
      g_retirees.push_back(std::move(*add));
    }
    const std::vector<uint64_t> calls = ActiveCalls(nullptr);
    size_t kept = 0;
    for (auto& rt : g_retirees) {
      if (!Waits(calls, rt))
        ready.push_back(std::move(rt.fn));
      else
        g_retirees[kept++] = std::move(rt);
    }
    g_retirees.resize(kept);
    g_retiree_count.store(kept, std::memory_order_relaxed);
  }
  for (auto& fn : ready) fn();
}

OpThreadRecord* AcquireRecord() {
  for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    bool expected = false;
    if (!r->owned.load(std::memory_order_relaxed) && r->owned.compare_exchange_strong(expected, true))
      return r;
  }
  auto* r = new OpThreadRecord();
  r->owned.store(true);
  OpThreadRecord* head = g_records.load();
  do {
    r->next = head;
  } while (!g_records.compare_exchange_weak(head, r));
  return r;
}

// Frees what this thread retired during its call that just ended, when no
// call of another thread that began before the retirement and may hold it
// still runs (the common case: no lock, no shared list, no allocation);
// what must wait goes to the shared list, which the end of any later call
// drains. The retirees are taken out of `mine` first: a free function may
// itself make calls whose ends come back here.
void FreeMine(OpThreadRecord* self) {
  std::vector<Retiree> todo;
  todo.swap(self->mine);
  bool waits = false;
  for (Retiree& rt : todo) {
    if (!AnyCallBlocks(self, rt)) {
      rt.fn();
      continue;
    }
    if (!waits) {
      // The retirees carry g_epoch as it was at their retirement (Retire),
      // and a call that begins while g_epoch is still that epoch counts as
      // one that may hold them: moved on once, so that the calls that
      // begin from now on do not keep them waiting.
      g_epoch.fetch_add(1, std::memory_order_seq_cst);
      waits = true;
    }
    std::lock_guard<std::mutex> g(g_retire_mu);
    g_retirees.push_back(std::move(rt));
    g_retiree_count.store(g_retirees.size(), std::memory_order_relaxed);
  }
  todo.clear();
  if (self->mine.empty()) self->mine.swap(todo);  // its buffer serves the next call
}

struct RecordHolder {
  OpThreadRecord* rec = AcquireRecord();
  ~RecordHolder() {
    rec->active.store(0, std::memory_order_release);
    if (!rec->mine.empty()) FreeMine(rec);
    rec->owned.store(false, std::memory_order_release);
  }
};

OpThreadRecord* ThreadRecord() { return ThreadHeld<RecordHolder, &RecordHolder::rec>(); }

}  // namespace

OpGuard::OpGuard(DescriptorUse use) : rec_(ThreadRecord()) {
  if (const uint64_t w = rec_->active.load(std::memory_order_relaxed); w != 0) {
    // Nested: the outer call's declaration widens to cover this one's
    // before this one looks anything up (a retirement that saw the
    // narrower word emptied its slot before, so no lookup after this
    // store can find what it frees).
    if (!OpThreadRecord::Covers(OpThreadRecord::UseOf(w), use))
      rec_->active.store(OpThreadRecord::Word(OpThreadRecord::EpochOf(w), DescriptorUse::Any()),
                         std::memory_order_seq_cst);
    rec_ = nullptr;
    return;
  }
  uint64_t e = g_epoch.load(std::memory_order_seq_cst);
  for (;;) {
    rec_->active.store(OpThreadRecord::Word(e, use), std::memory_order_seq_cst);
    uint64_t e2 = g_epoch.load(std::memory_order_seq_cst);
    if (e2 == e) break;
    e = e2;
  }
}

OpGuard::~OpGuard() {
  if (!rec_) return;
  rec_->active.store(0, std::memory_order_release);
  if (!rec_->mine.empty()) FreeMine(rec_);
  // A descriptor closed while this call used it is freed by the end of the
  // last such call, not left for some later close. (Without a full fence,
  // which would cost every call, a call ending just as the descriptor is
  // retired may miss it; the next call to end, in any thread, frees it.)
  // Guards are outermost in every API call: no upfs lock is held here.
  if (g_retiree_count.load(std::memory_order_relaxed) != 0) Reclaim(nullptr);
}

void ReclaimEndedCalls() {
  if (g_retiree_count.load(std::memory_order_relaxed) != 0) Reclaim(nullptr, true);
}

void OpGuardsAfterForkInChild() {
  // Another thread may have held the lock at the fork: made anew.
  new (&g_retire_mu) std::mutex();
  IntentionallyLeaked(new std::vector<Retiree>(std::move(g_retirees)));
  g_retirees.clear();
  g_retiree_count.store(0, std::memory_order_relaxed);
  OpThreadRecord* self = ThreadRecord();
  for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    if (r == self) continue;
    IntentionallyLeaked(new std::vector<Retiree>(std::move(r->mine)));
    r->mine.clear();
    r->active.store(0, std::memory_order_relaxed);
    r->owned.store(false, std::memory_order_relaxed);  // its thread is not here
  }
}

namespace {

// Every caller has already made the object unreachable (emptied its slot,
// removed the mount) with a seq_cst store or exchange, so a call whose
// word is read here as idle, or as one that cannot use the object, can
// never find it afterwards.
void Retire(DescriptorUse use, std::function<void()> free_fn) {
  OpThreadRecord* self = ThreadRecord();
  Retiree rt{0, use, std::move(free_fn)};
  if (self->active.load(std::memory_order_relaxed) == 0) {  // outside any call
    // No call that may hold it is running (counting every running call as
    // begun before): freed now, with no shared line written. A close among
    // threads that each use their own descriptors goes this way.
    rt.epoch = UINT64_MAX;
    if (!AnyCallBlocks(self, rt)) {
      rt.fn();
      return;
    }
    Reclaim(&rt);
    return;
  }
  // Inside a call: the epoch as it is, not moved on. Every call that may
  // still hold the object began at or before this load, so its word's
  // epoch is at most this one (Blocks); a call that begins later may read
  // the same epoch and is then counted as one that may hold it, which only
  // delays the free (FreeMine moves the epoch on when something waits).
  // A fetch_add here made g_epoch a line written by every close and read
  // by every call's start in every thread.
  rt.epoch = g_epoch.load(std::memory_order_seq_cst);
  self->mine.push_back(std::move(rt));
}

}  // namespace

void RetireAfterOps(std::function<void()> free_fn) { Retire(DescriptorUse::Any(), std::move(free_fn)); }

void RetireDescriptor(int fd, std::function<void()> free_fn) {
  Retire(DescriptorUse::Only(fd), std::move(free_fn));
}

bool OpGuardCovers(int fd) {
  const uint64_t w = ThreadRecord()->active.load(std::memory_order_relaxed);
  return w == 0 || OpThreadRecord::Covers(OpThreadRecord::UseOf(w), DescriptorUse::Only(fd));
}

}  // namespace upfs
