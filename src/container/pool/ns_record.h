// NsRecord: one namespace change as the pool's namespace log keeps it, and
// its payload words (docs/format.md, "The namespace log"): what a committer
// writes into its reservation and what every reader decodes and checks.
#pragma once

#include <cstdint>
#include <string_view>

#include "container/pool/fresh_inode.h"
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
  // A version 9 pool's kCreate of a regular file or kMkdir: the new
  // inode's values.
  NsCreation creation;
};

// Whether a record of type `t` and file type `f` carries creation words in
// a pool whose records have them (`creations`): a regular file's create
// and a mkdir.
inline bool CarriesCreation(format::pool::RecordType t, format::pool::FileType f, bool creations) {
  using format::pool::FileType;
  using format::pool::RecordType;
  return creations && ((t == RecordType::kCreate && f == FileType::kRegular) ||
                       (t == RecordType::kMkdir && f == FileType::kDirectory));
}

// Encodes rec's payload words into `out` (kMaxRecordWords words); returns
// the word count. `tagged`: as a version 8 pool keeps them (every word
// nonzero); `creations`: as a version 9 pool keeps them (a regular file's
// create carries its creation values, which it then must have).
uint32_t EncodeRecord(const NsRecord& rec, uint64_t* out, bool tagged, bool creations = false);
// Decodes and checks a payload of `n` words (names point into `words`).
Status DecodeRecord(const uint64_t* words, uint32_t n, NsRecord* rec, bool tagged, bool creations = false);

}  // namespace upfs
