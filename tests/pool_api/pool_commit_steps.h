// The steps of PoolNamespace::Commit after the reservation, for tests that
// reserve by hand and commit in between (pool_open_line_test,
// pool_any_new_test): under the index lock, catch up, CAS the kApply and
// apply the record; then make the commit durable. No validation: the
// test's record is valid by construction, and no other commit may land
// between its catch-up and its CAS (the test commits one at a time).
#pragma once

#include <gtest/gtest.h>

#include <mutex>

#include "container/pool/ns_log.h"
#include "container/pool/pool.h"
#include "util/spin_shared_mutex.h"

namespace upfs {

inline void CommitReserved(Pool& p, const NsLog::Reservation& r, const NsRecord& rec) {
  bool committed = false, lost = false;
  NsLog::Pending pending;
  {
    std::unique_lock<SpinSharedMutex> g(p.index_mu());
    ASSERT_TRUE(p.CatchUpLocked().ok());
    ASSERT_TRUE(p.log()->TryCommit(r, &committed, &lost, &pending).ok());
    ASSERT_TRUE(committed && !lost);
    ASSERT_TRUE(p.index()->Apply(rec, /*validated=*/true).ok());
  }
  p.log()->MakeDurable(pending);
}

}  // namespace upfs
