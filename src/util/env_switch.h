// Tuning switches read from the environment (README, "Running programs on
// upfs": UPFS_HUGEPAGES, UPFS_POPULATE, UPFS_BACKGROUND_GC): a switch
// is on unless its variable is set to a value that starts with '0'.
#pragma once

#include <cstdlib>

namespace upfs {

inline bool EnvSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return !(v && v[0] == '0');
}

}  // namespace upfs
