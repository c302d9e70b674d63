#include "medium/cpu_support.h"

#include <cpuid.h>

#include <atomic>
#include <string>

namespace upfs {

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    f.sse42 = (ecx & bit_SSE4_2) != 0;
    f.cmpxchg16b = (ecx & bit_CMPXCHG16B) != 0;
  }
  return f;
}

Status JudgeCpu(const CpuFeatures& f) {
  std::string missing;
  if (!f.sse42) missing += "SSE4.2 (crc32)";
  if (!f.cmpxchg16b) missing += std::string(missing.empty() ? "" : " and ") + "CMPXCHG16B";
  if (missing.empty()) return Status::OK();
  return Status::Error(ENOTSUP, "this processor lacks " + missing +
                                    ", which upfs needs (every x86-64-v2 processor has both)");
}

namespace {
CpuFeatures g_override_features;
std::atomic<bool> g_overridden{false};
}  // namespace

Status CheckCpuSupport() {
  if (g_overridden.load(std::memory_order_acquire)) return JudgeCpu(g_override_features);
  static const Status verdict = JudgeCpu(DetectCpuFeatures());
  return verdict;
}

void OverrideCpuFeaturesForTest(const CpuFeatures& f) {
  g_override_features = f;
  g_overridden.store(true, std::memory_order_release);
}

void ClearCpuFeaturesOverride() { g_overridden.store(false, std::memory_order_release); }

}  // namespace upfs
