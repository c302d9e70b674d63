// The crash-state explorer's workloads for pools (crash_explorer_pool.cc):
// namespace operations alone and mixed with file writes, log and inode
// block rollover, checkpoints, races held at a fence or a store, and
// removals in a full pool.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pool_ops.h"

namespace upfs::crashtest {

struct Workload {
  std::string name;
  std::vector<NsOp> setup;  // run before recording
  std::vector<NsOp> ops;    // recorded and explored
  size_t explore_from = 0;  // ops before this index run recorded but unexplored
  bool long_only = false;   // only with --long
  // The pool's format version (0: this build's): an older one, as its
  // builds made it, keeps the protocol they recover (docs/format.md).
  uint32_t pool_version = 0;
};

std::vector<Workload> MakeWorkloads();

}  // namespace upfs::crashtest
