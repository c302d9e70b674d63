// CpuSupport (src/medium/cpu_support.h): a processor without the features
// upfs is built for gets ENOTSUP naming them, never SIGILL.
#include "medium/cpu_support.h"

#include <gtest/gtest.h>

namespace {

using upfs::CpuFeatures;
using upfs::JudgeCpu;

TEST(CpuSupport, AProcessorWithBothFeaturesIsAccepted) {
  EXPECT_TRUE(JudgeCpu(CpuFeatures{.sse42 = true, .cmpxchg16b = true}).ok());
}

TEST(CpuSupport, EachMissingFeatureIsNamedWithENOTSUP) {
  const upfs::Status no_sse = JudgeCpu(CpuFeatures{.sse42 = false, .cmpxchg16b = true});
  ASSERT_FALSE(no_sse.ok());
  EXPECT_EQ(no_sse.err(), ENOTSUP);
  EXPECT_NE(no_sse.ToString().find("SSE4.2"), std::string::npos) << no_sse.ToString();
  EXPECT_EQ(no_sse.ToString().find("CMPXCHG16B"), std::string::npos) << no_sse.ToString();

  const upfs::Status no_cas = JudgeCpu(CpuFeatures{.sse42 = true, .cmpxchg16b = false});
  ASSERT_FALSE(no_cas.ok());
  EXPECT_EQ(no_cas.err(), ENOTSUP);
  EXPECT_NE(no_cas.ToString().find("CMPXCHG16B"), std::string::npos) << no_cas.ToString();
  EXPECT_EQ(no_cas.ToString().find("SSE4.2"), std::string::npos) << no_cas.ToString();

  const upfs::Status neither = JudgeCpu(CpuFeatures{});
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.ToString().find("SSE4.2 (crc32) and CMPXCHG16B"), std::string::npos)
      << neither.ToString();
}

TEST(CpuSupport, ThisProcessorHasWhatTheTestsRunOn) {
  // The rest of the suite runs crc32 and cmpxchg16b here, so the detection
  // must find both (a detection that read the wrong bits would refuse
  // every file on a capable machine).
  const CpuFeatures f = upfs::DetectCpuFeatures();
  EXPECT_TRUE(f.sse42);
  EXPECT_TRUE(f.cmpxchg16b);
  EXPECT_TRUE(upfs::CheckCpuSupport().ok());
}

}  // namespace
