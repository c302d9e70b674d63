#include "container/pool/shared_dir_table.h"

#include <immintrin.h>
#include <sched.h>


#include "container/pool/shared_dir_table_internal.h"
#include "util/assert.h"
#include "util/test_hook.h"

namespace upfs {

using namespace dir_slot;
using shared_dir_table_internal::kProbeCheck;
using shared_dir_table_internal::kMaxUsedTenths;

namespace shared_dir_table_internal {
void Pause(uint32_t round) {
  if (round % kSpinsBeforeYield == kSpinsBeforeYield - 1) {
    sched_yield();  // two vCPUs: the thread waited for may need this one
  } else {
    _mm_pause();
  }
}
}  // namespace shared_dir_table_internal

namespace {
TestHook g_before_claim_cas;

// This thread's last won claim: its Contest and Publish look there first
// (a whole probe run fewer each, when the table has not grown since).
struct ClaimHint {
  uint64_t handle = 0;
  uint64_t index = 0;
};
thread_local ClaimHint t_hint;

uint64_t StripeOfThisCpu(uint64_t stripes) {
  const int cpu = sched_getcpu();  // rseq's cpu_id in glibc 2.35 on: no system call
  return cpu < 0 ? 0 : uint64_t(cpu) % stripes;
}
}  // namespace

void SharedDirTable::BeforeClaimCasForTest(void (*fn)(void*), void* arg) { g_before_claim_cas.Set(fn, arg); }

SharedDirTable::Table* SharedDirTable::Current(uint64_t* handle) const {
  *handle = anchor_->load(std::memory_order_acquire);
  return *handle ? reinterpret_cast<Table*>(mem_->At(*handle)) : nullptr;
}

uint64_t SharedDirTable::SlotCount() const {
  uint64_t h;
  const Table* t = Current(&h);
  return t ? t->slots() : 0;
}

void SharedDirTable::AddToStripe(Table* t, int64_t live, int64_t used) {
  shared_dir_table_layout::Stripe* s = t->stripe(StripeOfThisCpu(t->h.stripes));
  if (live) s->live.fetch_add(live, std::memory_order_relaxed);
  if (used) s->used.fetch_add(used, std::memory_order_relaxed);
}

int64_t SharedDirTable::Entries() const {
  uint64_t h;
  Table* t = Current(&h);
  if (!t) return 0;
  int64_t sum = 0;
  for (uint64_t i = 0; i < t->h.stripes; ++i) sum += t->stripe(i)->live.load(std::memory_order_relaxed);
  return sum;
}

uint64_t SharedDirTable::Find(uint64_t hash, FunctionRef<bool(uint64_t ref)> same) const {
  for (;;) {
    uint64_t h;
    Table* t = Current(&h);
    if (!t) return 0;
    uint64_t found = 0;
    const uint64_t mask = t->mask();
    uint64_t i = t->Home(hash);
    for (uint64_t n = 0; n <= mask; ++n, i = (i + 1) & mask) {
      const uint64_t w = t->slot(i).load(std::memory_order_acquire) & ~kFrozen;
      if (w == 0) break;
      if (StateOf(w) == kLive && TagOf(w) == Tag(hash) && same(RefOf(w))) {
        found = RefOf(w);
        break;
      }
    }
    // A table replaced meanwhile may lack a removal made in its successor
    // after the switch: look again there.
    if (anchor_->load(std::memory_order_acquire) == h) return found;
  }
}

bool SharedDirTable::Locate(uint64_t hash, uint64_t want, uint64_t* handle, Table** t, uint64_t* index) const {
  *t = Current(handle);
  if (!*t) return false;
  if (*handle == t_hint.handle && t_hint.index <= (*t)->mask() &&
      ((*t)->slot(t_hint.index).load(std::memory_order_acquire) & ~kFrozen) == want) {
    *index = t_hint.index;
    return true;
  }
  const uint64_t mask = (*t)->mask();
  uint64_t i = (*t)->Home(hash);
  for (uint64_t n = 0; n <= mask; ++n, i = (i + 1) & mask) {
    const uint64_t w = (*t)->slot(i).load(std::memory_order_acquire) & ~kFrozen;
    if (w == 0) return false;
    if (w == want) {
      *index = i;
      return true;
    }
  }
  return false;
}

bool SharedDirTable::WaitPending(Table* t, uint64_t i, uint64_t w) {
  for (uint32_t round = 0;; ++round) {
    const uint64_t now = t->slot(i).load(std::memory_order_acquire);
    if (now & kFrozen) return false;
    if (now != w) return true;
    if (round % shared_dir_table_internal::kLivenessEvery == shared_dir_table_internal::kLivenessEvery - 1 &&
        !mem_->Alive(view_->OwnerOf(RefOf(w)))) {
      // Its claimer died: the claim ends here, as an Abandon would.
      uint64_t expect = w;
      t->slot(i).compare_exchange_strong(expect, kTombstone, std::memory_order_seq_cst);
      continue;
    }
    shared_dir_table_internal::Pause(round);
  }
}

Status SharedDirTable::Claim(uint64_t hash, uint64_t ref, FunctionRef<bool(uint64_t ref)> same, bool* claimed,
                       uint64_t* existing) {
  UPFS_ASSERT(ref >= kFirstRef && ref <= kRefMask);
  *claimed = false;
  *existing = 0;
  const uint64_t mine = Make(hash, kPending, ref);
  for (;;) {
    uint64_t h;
    Table* t;
    UPFS_RETURN_IF_ERROR(Ensure(&h, &t));
    if (t->h.grow.load(std::memory_order_acquire) != 0) {
      UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, false));
      continue;
    }
    const uint64_t mask = t->mask(), home = t->Home(hash);
    // Look for the name, and note the first free slot of its run and the
    // run's length (tombstones make it long, not the first free slot far).
    uint64_t free_at = ~uint64_t{0}, run = 0;
    bool retry = false, frozen = false;
    uint64_t i = home;
    for (uint64_t n = 0; n <= mask; ++n, i = (i + 1) & mask) {
      run = n;
      const uint64_t w = t->slot(i).load(std::memory_order_acquire);
      if (w & kFrozen) {
        frozen = true;
        break;
      }
      if (w == 0 || w == kTombstone) {
        if (free_at == ~uint64_t{0}) free_at = i;
        if (w == 0) break;
        continue;
      }
      if (TagOf(w) != Tag(hash) || !same(RefOf(w))) continue;
      if (StateOf(w) == kLive) {
        *existing = RefOf(w);
        return Status::OK();
      }
      // Another claim of the name, not ended: wait for it, then look again.
      if (!WaitPending(t, i, w)) frozen = true;
      retry = true;
      break;
    }
    if (frozen) {
      UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, false));
      continue;
    }
    if (retry) continue;
    if (free_at == ~uint64_t{0}) {  // no free slot in the whole table
      UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, true));
      continue;
    }
    if (run >= kProbeCheck) {
      int64_t used = 0;
      for (uint64_t s = 0; s < t->h.stripes; ++s) used += t->stripe(s)->used.load(std::memory_order_relaxed);
      if (used * 10 > int64_t(t->slots()) * kMaxUsedTenths) {
        UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, true));
        continue;
      }
    }
    g_before_claim_cas.Run();
    uint64_t expect = t->slot(free_at).load(std::memory_order_relaxed);
    if ((expect != 0 && expect != kTombstone) ||
        !t->slot(free_at).compare_exchange_strong(expect, mine, std::memory_order_seq_cst))
      continue;
    if (expect == 0) AddToStripe(t, 0, 1);
    t_hint = {h, free_at};
    bool won = true;
    uint64_t winner = 0;
    UPFS_RETURN_IF_ERROR(Contest(hash, ref, same, &won, &winner));
    if (won) {
      *claimed = true;
      return Status::OK();
    }
    if (winner != 0) {
      *existing = winner;
      return Status::OK();
    }
    // Lost to a claim that had not ended; it has now, without a name: again.
  }
}

// After a claim's CAS: the name may have been claimed elsewhere in its run
// at the same time. A live one wins; of two pending ones, the one nearer
// the home wins at once, and the other waits for it: a claim only ever
// waits for one farther along, so no two wait for each other. *won false
// and *winner 0: the claim lost to one that then ended without the name
// (the caller claims again).
Status SharedDirTable::Contest(uint64_t hash, uint64_t ref, FunctionRef<bool(uint64_t ref)> same, bool* won,
                         uint64_t* winner) {
  const uint64_t mine = Make(hash, kPending, ref);
  for (;;) {
    uint64_t h, at;
    Table* t;
    if (!Locate(hash, mine, &h, &t, &at)) {
      UPFS_ASSERT(false);  // only its claimer ends a live claimer's slot
      *won = false;
      return Status::OK();
    }
    const uint64_t mask = t->mask(), home = t->Home(hash);
    bool again = false;
    uint64_t j = home;
    for (uint64_t n = 0; n <= mask; ++n, j = (j + 1) & mask) {
      if (j == at) continue;
      const uint64_t w = t->slot(j).load(std::memory_order_seq_cst);
      if (w & kFrozen) {
        UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, false));
        again = true;
        break;
      }
      if (w == 0) break;
      if (Free(w) || TagOf(w) != Tag(hash) || !same(RefOf(w))) continue;
      const bool nearer = t->Distance(home, j) < t->Distance(home, at);
      if (StateOf(w) == kLive || nearer) {
        // Lost. A nearer pending claim may still end without the name: the
        // caller then looks again, and waits for it as any claim does.
        Abandon(hash, ref);
        *won = false;
        *winner = StateOf(w) == kLive ? RefOf(w) : 0;
        return Status::OK();
      }
      // A farther claim: it sees this one and gives up, or it went live
      // before this one was there.
      if (!WaitPending(t, j, w)) {
        UPFS_RETURN_IF_ERROR(GrowOrWait(h, t, false));
      }
      again = true;
      break;
    }
    if (!again) {
      *won = true;
      return Status::OK();
    }
  }
}

void SharedDirTable::Publish(uint64_t hash, uint64_t ref) {
  const uint64_t pending = Make(hash, kPending, ref), live = Make(hash, kLive, ref);
  for (;;) {
    uint64_t h, at;
    Table* t;
    if (!Locate(hash, pending, &h, &t, &at)) {
      UPFS_ASSERT(false);  // a won claim stays until its claimer ends it
      return;
    }
    uint64_t expect = pending;
    if (t->slot(at).compare_exchange_strong(expect, live, std::memory_order_seq_cst)) {
      AddToStripe(t, 1, 0);
      return;
    }
    (void)GrowOrWait(h, t, false);  // frozen: end it in the successor
  }
}

void SharedDirTable::Abandon(uint64_t hash, uint64_t ref) {
  const uint64_t pending = Make(hash, kPending, ref);
  for (;;) {
    uint64_t h, at;
    Table* t;
    if (!Locate(hash, pending, &h, &t, &at)) return;
    uint64_t expect = pending;
    if (t->slot(at).compare_exchange_strong(expect, kTombstone, std::memory_order_seq_cst)) return;
    (void)GrowOrWait(h, t, false);
  }
}

bool SharedDirTable::Remove(uint64_t hash, uint64_t ref) {
  const uint64_t live = Make(hash, kLive, ref);
  for (;;) {
    uint64_t h, at;
    Table* t;
    if (!Locate(hash, live, &h, &t, &at)) return false;
    uint64_t expect = live;
    if (t->slot(at).compare_exchange_strong(expect, kTombstone, std::memory_order_seq_cst)) {
      AddToStripe(t, -1, 0);
      return true;
    }
    if (!(expect & kFrozen)) return false;  // removed by another thread meanwhile
    (void)GrowOrWait(h, t, false);
  }
}

}  // namespace upfs
