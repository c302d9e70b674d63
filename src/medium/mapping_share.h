// MappingShare: how much of the medium's worker time mapping work (a moved
// mapping's pages, then population) may take while growth is asked for.
//
// Growth comes first: a writer out of space waits for it. Mapping work
// waited for no growth at all until 53c2e19 and e8c64b8, and starved
// while a file grew step after step (a remap or a reader's population
// stalled for seconds). So each growth step of t allows t / kShare of
// mapping work before the next step. What mapping work overspends (its
// steps are an extent each, not cut to fit) is paid back from the next
// step's share. What a step's share leaves unspent is not carried: a
// writer's prefill of 1 GiB grew the file for a second with no mapping
// work, banking about a quarter of it (arithmetic), and the remap that
// came next (the mapping had moved to a larger reservation) ran while the
// writer waited for space: one write of random 1 KiB ones over a fresh
// 1 GiB file took 188 ms, about 160 of them asleep in clock_nanosleep
// (docs/design.md, "Background worker"). Mapping
// work done while nobody asks for growth costs growth nothing.
//
// And none while a thread waits for the growth (a GrowthWaiter: a writer
// out of space): the share is for growth asked ahead of need. A
// step's share spent while a writer waited for space was that writer's
// wait: random 128-byte writes over a fresh 1 GiB file, whose first flips
// take shadows faster than the space grows, waited 22-47 ms for it two
// or three times in a first pass (eight runs; docs/design.md,
// "Background worker").
//
// Times are passed in, so that tests can drive it. Not thread-safe: the
// worker's, under its lock.
#pragma once

#include <algorithm>
#include <chrono>

namespace upfs {

class MappingShare {
 public:
  using Duration = std::chrono::steady_clock::duration;
  static constexpr int kShare = 4;  // a growth step of t allows t / kShare

  // Whether a mapping step may run now, with growth asked for;
  // `growth_awaited`: a thread waits for it.
  bool MayMapWhileGrowing(bool growth_awaited) const {
    return !growth_awaited && budget_ > Duration::zero();
  }
  // A mapping step took t; `growth_asked`: growth was asked for meanwhile.
  void NoteMapping(Duration t, bool growth_asked) {
    if (growth_asked) budget_ -= t;
  }
  // A growth step took t.
  void NoteGrowth(Duration t) { budget_ = std::min(budget_, Duration::zero()) + t / kShare; }

 private:
  Duration budget_{};  // what mapping work may still take before the next growth step
};

}  // namespace upfs
