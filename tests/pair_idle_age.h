// The idle age of quiet folds and give-backs (File::SetPairIdleMsForTest)
// for one scope of a test, restored to kPairIdleMs when it ends, also when
// an assertion ends the test early.
#pragma once

#include <cstdint>

#include "engine/file.h"

namespace upfs_test {

class PairIdleAge {
 public:
  explicit PairIdleAge(uint32_t ms) { Set(ms); }
  ~PairIdleAge() { upfs::File::SetPairIdleMsForTest(0); }
  PairIdleAge(const PairIdleAge&) = delete;
  PairIdleAge& operator=(const PairIdleAge&) = delete;
  void Set(uint32_t ms) { upfs::File::SetPairIdleMsForTest(ms); }
};

}  // namespace upfs_test
