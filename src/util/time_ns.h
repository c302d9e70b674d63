// Times as upfs stores them: nanoseconds since the epoch in one 64-bit word
// (docs/format.md). The word is unsigned on the media but holds an int64_t:
// utimensat may set a time before 1970, and the conversions go through
// int64_t so that such a time comes back as it was set.
#pragma once

#include <time.h>

#include <cstdint>

namespace upfs {

inline constexpr int64_t kNsPerSecond = 1000000000;

inline uint64_t TimespecNs(const struct timespec& ts) {
  return uint64_t(int64_t(ts.tv_sec) * kNsPerSecond + int64_t(ts.tv_nsec));
}

inline struct timespec NsTimespec(uint64_t ns) {
  struct timespec ts;
  ts.tv_sec = time_t(int64_t(ns) / kNsPerSecond);
  ts.tv_nsec = long(int64_t(ns) % kNsPerSecond);
  if (ts.tv_nsec < 0) {  // C++ division rounds towards zero
    ts.tv_nsec += kNsPerSecond;
    ts.tv_sec -= 1;
  }
  return ts;
}

// The clock now, in stored form. File times use CLOCK_REALTIME_COARSE, as
// the kernel's do (its tick, not a vDSO read of the TSC).
inline uint64_t ClockNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return TimespecNs(ts);
}

}  // namespace upfs
