// HugePageChoice: whether a file's growth makes fresh 2 MiB extents huge
// pages (MADV_COLLAPSE of a seeded extent) or small ones (fallocate and
// populate), from what each has cost lately.
//
// On tmpfs a seeded collapse cost 0.15 ms where free huge pages were at
// hand and 4.6 ms (median of 64 extents, one run after the other on the
// development machine) where the kernel had to compact free memory first,
// against 1-1.2 ms for the extent's small pages either way. Single
// collapses vary: in a run where most took 0.1-0.3 ms, one in 15 took over
// 3 ms. So while the median of the last kSamples collapses costs more than
// small pages (their moving average), growth uses small pages (the
// medium's worker collapses those extents once growth is quiet), and after
// an off period it tries one collapse again: a cheap one turns huge pages
// back on (the kernel's memory may have been compacted meanwhile, or
// another file freed its huge pages). A tenth of a second, not a second:
// on a VM that hands free 2 MiB blocks back to its host within seconds,
// a freed huge page is cheap to take again only briefly, and per-file
// `upfs bench --quick` append-4k measured a median of 1.47x the kernel
// against 1.23x over nine alternations.
//
// Memory the host has not backed yet (a freshly booted VM of the
// development machines' kind) made single collapses take up to 36 ms, on
// the appending thread: the median needed four of them (up to 144 ms,
// more than a round of the quick demo) before it turned huge pages off,
// and every probe after 0.1 s cost as much again. So one collapse slower
// than kVerySlow times small pages turns huge pages off at once (single
// collapses measured on memory the host had backed took up to 8 ms, small
// pages 1 ms: the median judges those), and each probe that finds
// collapses still slow doubles the off period, up to kHugeOffMax; huge
// pages back on start it again at kHugeOffFor.
// Times are passed in (steady clock, ns) so that tests can drive it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace upfs {

class HugePageChoice {
 public:
  enum Choice { kSmall, kHuge, kProbe };
  static constexpr int kSamples = 8;
  static constexpr int64_t kHugeOffFor = 100'000'000;   // ns, the first off period
  static constexpr int64_t kHugeOffMax = 1'600'000'000;  // ns, the longest
  static constexpr int64_t kVerySlow = 10;               // times small pages' cost

  Choice Now(int64_t now_ns) const {
    const int64_t off = off_until_.load(std::memory_order_relaxed);
    if (off == 0) return kHuge;
    return now_ns >= off ? kProbe : kSmall;
  }
  // A collapse made on choice c took `ns` (ok: it succeeded), ending at now_ns.
  void NoteCollapse(Choice c, int64_t ns, bool ok, int64_t now_ns) {
    const int64_t small = small_ns_.load(std::memory_order_relaxed);
    if (c == kProbe && ok && ns <= small) {
      for (auto& v : recent_) v.store(ns, std::memory_order_relaxed);
      off_until_.store(0, std::memory_order_relaxed);
      off_for_.store(kHugeOffFor, std::memory_order_relaxed);
      return;
    }
    recent_[next_.fetch_add(1, std::memory_order_relaxed) % kSamples].store(ok ? ns : kFailed,
                                                                           std::memory_order_relaxed);
    const bool worth = c != kProbe && MedianNs() <= small && !(ok && ns > kVerySlow * small);
    if (worth) {
      off_until_.store(0, std::memory_order_relaxed);
      return;
    }
    // Off for the period; a probe that failed doubles it.
    int64_t off = off_for_.load(std::memory_order_relaxed);
    if (c == kProbe) {
      off = std::min(2 * off, kHugeOffMax);
      off_for_.store(off, std::memory_order_relaxed);
    }
    off_until_.store(now_ns + off, std::memory_order_relaxed);
  }
  // An extent's small pages took `ns`.
  void NoteSmall(int64_t ns) {
    const int64_t avg = small_ns_.load(std::memory_order_relaxed);
    small_ns_.store(avg + (ns - avg) / 4, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kFailed = int64_t{1} << 40;  // a failed collapse counts as endless
  int64_t MedianNs() const {
    std::array<int64_t, kSamples> v;
    for (int i = 0; i < kSamples; ++i) v[i] = recent_[i].load(std::memory_order_relaxed);
    std::nth_element(v.begin(), v.begin() + kSamples / 2, v.end());
    return v[kSamples / 2];
  }
  // Relaxed throughout: racing growers only blur the samples a little.
  std::atomic<int64_t> off_until_{0};                    // steady clock ns; 0: huge pages on
  std::atomic<int64_t> off_for_{kHugeOffFor};            // the next off period, ns
  std::array<std::atomic<int64_t>, kSamples> recent_{};  // the last collapses, ns (0: none yet)
  std::atomic<uint32_t> next_{0};
  std::atomic<int64_t> small_ns_{1'000'000};  // moving average of a small-page extent
};

}  // namespace upfs
