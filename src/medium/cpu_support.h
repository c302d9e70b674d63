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

// JudgeCpu of this processor, detected once.
Status CheckCpuSupport();

}  // namespace upfs
