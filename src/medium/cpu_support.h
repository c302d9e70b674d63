// CpuSupport: the processor features upfs's code is built for, checked
// before anything runs it.
//
// upfs is compiled with -msse4.2 (CRC-32C of every header, log entry and
// checkpoint is the crc32 instruction; the compiler may use SSE4 anywhere)
// and stores two-word log entries with lock cmpxchg16b (pm::Cas128). A
// processor without them would kill the program with SIGILL at the first
// such instruction; instead, opening any upfs file or pool fails with
// ENOTSUP and says which feature is missing. Cache-line write-back
// (clwb, clflushopt, clflush) is chosen at run time by libpmem.
#pragma once

#include "util/status.h"

namespace upfs {

struct CpuFeatures {
  bool sse42 = false;
  bool cmpxchg16b = false;
};

// What this processor has (cpuid leaf 1).
CpuFeatures DetectCpuFeatures();

// OK if `f` has everything upfs needs; else ENOTSUP naming what is missing.
Status JudgeCpu(const CpuFeatures& f);

// JudgeCpu of this processor, detected once, or of the features a test
// put in its place.
Status CheckCpuSupport();

// Tests only: CheckCpuSupport judges `f` instead of this processor until
// ClearCpuFeaturesOverride, so that a test can drive every open, mkfs and
// mount to the refusal a processor without the features would get (no
// machine the tests run on lacks them). Not thread-safe against opens in
// flight.
void OverrideCpuFeaturesForTest(const CpuFeatures& f);
void ClearCpuFeaturesOverride();

}  // namespace upfs
