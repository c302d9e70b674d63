// The crash-state explorer's workloads for a per-file upfs file
// (crash_explorer.cc): writes, appends, truncates and fallocates of every
// shape, GC and quiet folds, in strict and sync mode and in older file
// format versions, alone or raced by a second thread held at a fence or a
// store.
#pragma once

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "format/format.h"

namespace upfs::crashtest {

struct Op {
  enum Kind { kWrite, kAppend, kTruncate, kFallocate, kGc, kQuietFold } kind;
  uint64_t off = 0, len = 0;
  int mode = 0;
  uint32_t seed = 0;
  // A racing operation: run to completion by a second thread while this one
  // is held at its fence number race_fence (before that fence takes effect).
  std::shared_ptr<Op> race;
  int race_fence = 0;
  int race_store = 0;  // if set, held at this 8-byte store instead of a fence
  std::string Describe() const {
    char b[160];
    static const char* names[] = {"write", "append", "truncate", "fallocate", "gc"};
    std::snprintf(b, sizeof(b), "%s off=%" PRIu64 " len=%" PRIu64 " mode=%d", names[kind], off,
                  len, mode);
    std::string d = b;
    if (race)
      d += (race_store ? " raced at store " + std::to_string(race_store) : " raced at fence " + std::to_string(race_fence)) +
           " by [" + race->Describe() + "]";
    return d;
  }
};

struct Workload {
  std::string name;
  format::Consistency mode = format::Consistency::kStrict;
  std::vector<Op> setup;  // run before recording
  std::vector<Op> ops;    // recorded and explored
  size_t explore_from = 0;  // ops before this index run recorded but unexplored
  // The file's format version, if not the current one: made as a build of
  // that version would have made it (version 3: small writes as patches;
  // version 4: first flips copy blocks into pairs of neighbours).
  uint32_t version = 0;
};

std::vector<Workload> MakeWorkloads();

}  // namespace upfs::crashtest
