#include "posix/op_guard.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace upfs {

struct OpThreadRecord {
  std::atomic<uint64_t> active{0};  // epoch the thread's call began in, 0 = none
  std::atomic<bool> owned{false};
  OpThreadRecord* next = nullptr;
  char pad[40];
};

namespace {

std::atomic<uint64_t> g_epoch{1};
std::atomic<OpThreadRecord*> g_records{nullptr};
std::mutex g_retire_mu;
struct Retiree {
  uint64_t epoch;
  std::function<void()> fn;
};
std::vector<Retiree> g_retirees;
// g_retirees.size(), readable without the lock: the end of every call
// looks at it.
std::atomic<size_t> g_retiree_count{0};

// Runs the retirees that no running call can still use. With `add`, first
// retires it.
void Reclaim(std::function<void()>* add) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> g(g_retire_mu);
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

struct RecordHolder {
  OpThreadRecord* rec = AcquireRecord();
  ~RecordHolder() {
    rec->active.store(0, std::memory_order_release);
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
  // A descriptor closed while this call used it is freed by the end of the
  // last such call, not left for some later close. (Without a full fence,
  // which would cost every call, a call ending just as the descriptor is
  // retired may miss it; the next call to end, in any thread, frees it.)
  // Guards are outermost in every API call: no upfs lock is held here.
  if (g_retiree_count.load(std::memory_order_relaxed) != 0) Reclaim(nullptr);
}

void RetireAfterOps(std::function<void()> free_fn) { Reclaim(&free_fn); }

}  // namespace upfs
