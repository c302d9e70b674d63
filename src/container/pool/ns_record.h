// NsRecord: one namespace change as the pool's namespace log keeps it, and
// its payload words (docs/format.md, "The namespace log"): what a committer
// writes into its reservation and what every reader decodes and checks.
#pragma once

#include <cstdint>
#include <string_view>

#include "container/pool/pool_format.h"
#include "util/status.h"

namespace upfs {

struct NsRecord {
  format::pool::RecordType type{};
  format::pool::FileType ftype{};
  uint64_t ino = 0;
  uint64_t dir1 = 0;
  uint64_t dir2 = 0;
  uint64_t victim = 0;
  std::string_view name1;
  std::string_view name2;
};

// Encodes rec's payload words into `out` (kMaxRecordWords words); returns
// the word count. `tagged`: as a version 8 pool keeps them (every word
// nonzero).
uint32_t EncodeRecord(const NsRecord& rec, uint64_t* out, bool tagged);
// Decodes and checks a payload of `n` words (names point into `words`).
Status DecodeRecord(const uint64_t* words, uint32_t n, NsRecord* rec, bool tagged);

}  // namespace upfs
