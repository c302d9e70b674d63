// A directory table's listing in hash order (shared_dir_table.h, Scan).
//
// Linear probing keeps every name in the cluster (run of used slots) that
// holds its home, at or after the home, and a slot never becomes unused
// again: so the names of a cluster read in slot order, sorted by hash,
// follow those of the clusters before it. The walk starts at the home of
// the last hash taken, which in a table of any size (the home is the
// hash's top bits) lies at or before every greater hash: a continuation
// after a growth goes on where the last call stopped.
#include <algorithm>
#include <vector>

#include "container/pool/shared_dir_table.h"
#include "container/pool/shared_dir_table_internal.h"

namespace upfs {

using namespace dir_slot;

namespace {
struct Named {
  uint64_t hash;
  uint64_t ref;
};
}  // namespace

void SharedDirTable::Scan(uint64_t after, bool from_start,
                    FunctionRef<bool(uint64_t hash, const uint64_t* refs, size_t n)> fn) const {
  uint64_t h;
  Table* t = Current(&h);
  if (!t) return;
  const uint64_t mask = t->mask(), n = t->slots();
  const uint64_t start = from_start ? 0 : t->Home(after);
  bool have = !from_start;  // whether `cookie` bounds what is taken
  uint64_t cookie = after;
  std::vector<Named> cluster, late;
  std::vector<uint64_t> refs;
  // Takes the names of `v` above the cookie, a hash at a time (names of one
  // hash are never split: the cookie could not tell them apart).
  auto emit = [&](std::vector<Named>& v) {
    std::sort(v.begin(), v.end(), [](const Named& a, const Named& b) { return a.hash < b.hash; });
    for (size_t i = 0; i < v.size();) {
      size_t j = i;
      refs.clear();
      while (j < v.size() && v[j].hash == v[i].hash) refs.push_back(v[j++].ref);
      // A name made during the scan may sort below what was taken: skipped,
      // as the kernel may skip a name made while it lists.
      if (!have || v[i].hash > cookie) {
        if (!fn(v[i].hash, refs.data(), refs.size())) return false;
        cookie = v[i].hash;
        have = true;
      }
      i = j;
    }
    v.clear();
    return true;
  };
  for (uint64_t d = 0; d < n; ++d) {
    const uint64_t w = t->slot((start + d) & mask).load(std::memory_order_acquire) & ~kFrozen;
    if (w == 0) {
      if (!emit(cluster)) return;
      continue;
    }
    if (StateOf(w) != kLive) continue;
    const uint64_t hash = view_->HashOf(RefOf(w));
    // A home behind the walk's start: a name placed past the table's end
    // into its first slots (largest hashes: they sort last), or one whose
    // home lies before `after`'s (smaller: the cookie skips it).
    (t->Distance(start, t->Home(hash)) <= d ? cluster : late).push_back({hash, RefOf(w)});
  }
  // The walk's last cluster goes on past the table's end: the names it
  // placed there were met first, as `late`.
  cluster.insert(cluster.end(), late.begin(), late.end());
  emit(cluster);
}

}  // namespace upfs
