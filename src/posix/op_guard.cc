#include "posix/op_guard.h"

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "util/leak.h"

namespace upfs {

struct Retiree {
  uint64_t epoch;
  std::function<void()> fn;
};

struct alignas(64) OpThreadRecord {
  std::atomic<uint64_t> active{0};  // epoch the thread's call began in, 0 = none
  std::atomic<bool> owned{false};
  OpThreadRecord* next = nullptr;
  // Retired during the owner's current call: freed at its end if no other
  // call that began before is running, else handed to the shared list.
  // Only the owning thread touches it.
  std::vector<Retiree> mine;
};

namespace {

std::atomic<uint64_t> g_epoch{1};
std::atomic<OpThreadRecord*> g_records{nullptr};
std::mutex g_retire_mu;
std::vector<Retiree> g_retirees;
// g_retirees.size(), readable without the lock: the end of every call
// looks at it.
std::atomic<size_t> g_retiree_count{0};

// Runs the retirees that no running call can still use. With `add`, first
// retires it. Without, the end of a call: if another thread is reclaiming
// already, it does not wait for it (what that thread's pass could not free
// yet, the next call to end frees).
void Reclaim(std::function<void()>* add) {
  std::vector<std::function<void()>> ready;
  {
    std::unique_lock<std::mutex> g(g_retire_mu, std::defer_lock);
    if (add) {
      g.lock();
    } else if (!g.try_lock()) {
      return;
    }
    if (add) {
      uint64_t e = g_epoch.fetch_add(1, std::memory_order_seq_cst);
      g_retirees.push_back({e, std::move(*add)});
      g_retiree_count.store(g_retirees.size(), std::memory_order_relaxed);
    }
    uint64_t min_active = UINT64_MAX;
    for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
      uint64_t a = r->active.load(std::memory_order_seq_cst);
      if (a != 0 && a < min_active) min_active = a;
    }
    size_t kept = 0;
    for (auto& rt : g_retirees) {
      if (rt.epoch < min_active)
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
// call of another thread that began before the retirement still runs (the
// common case: no lock, no shared list); what must wait goes to the shared
// list, which the end of any later call drains.
void FreeMine(OpThreadRecord* self) {
  uint64_t min_active = UINT64_MAX;
  for (OpThreadRecord* r = g_records.load(std::memory_order_acquire); r; r = r->next) {
    if (r == self) continue;
    const uint64_t a = r->active.load(std::memory_order_seq_cst);
    if (a != 0 && a < min_active) min_active = a;
  }
  std::vector<Retiree> ready, wait;
  for (Retiree& rt : self->mine) (rt.epoch < min_active ? ready : wait).push_back(std::move(rt));
  self->mine.clear();
  if (!wait.empty()) {
    std::lock_guard<std::mutex> g(g_retire_mu);
    for (Retiree& rt : wait) g_retirees.push_back(std::move(rt));
    g_retiree_count.store(g_retirees.size(), std::memory_order_relaxed);
  }
  for (Retiree& rt : ready) rt.fn();
}

struct RecordHolder {
  OpThreadRecord* rec = AcquireRecord();
  ~RecordHolder() {
    rec->active.store(0, std::memory_order_release);
    if (!rec->mine.empty()) FreeMine(rec);
    rec->owned.store(false, std::memory_order_release);
  }
};

OpThreadRecord* ThreadRecord() {
  thread_local RecordHolder h;
  return h.rec;
}

}  // namespace

OpGuard::OpGuard() : rec_(ThreadRecord()) {
  if (rec_->active.load(std::memory_order_relaxed) != 0) {
    rec_ = nullptr;
    return;
  }
  uint64_t e = g_epoch.load(std::memory_order_seq_cst);
  for (;;) {
    rec_->active.store(e, std::memory_order_seq_cst);
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

void RetireAfterOps(std::function<void()> free_fn) {
  OpThreadRecord* self = ThreadRecord();
  if (self->active.load(std::memory_order_relaxed) == 0) {  // outside any call
    Reclaim(&free_fn);
    return;
  }
  const uint64_t e = g_epoch.fetch_add(1, std::memory_order_seq_cst);
  self->mine.push_back({e, std::move(free_fn)});
}

}  // namespace upfs
