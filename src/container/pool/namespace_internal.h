// Helpers the namespace's two halves share (namespace.cc: names and
// holds; namespace_attrs.cc: attributes and permissions). Internal to the
// pool container.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <string_view>

#include "container/pool/fresh_inode.h"
#include "container/pool/pool_format.h"
#include "medium/pm.h"
#include "util/assert.h"
#include "util/time_ns.h"

namespace upfs {

// The lines a commit's with_payload stored, in a version 8 pool, to be
// written back after the index lock (PoolNamespace::Commit): a flush
// before a locked instruction makes that instruction wait for it.
class CommitFlushes {
 public:
  void Add(const void* line) {
    UPFS_ASSERT(n_ < kMax);
    if (n_ == kMax) return pm::Flush(line, 8);  // sooner, and still before the fence
    lines_[n_++] = line;
  }
  void FlushAll() const {
    for (uint32_t i = 0; i < n_; ++i) pm::Flush(lines_[i], 8);
  }

 private:
  // A rename touches two directories and an inode; a create its directory,
  // its image and a kept log's rewritten lines.
  static constexpr uint32_t kMax = 4 + kKeptLogLinesMax;
  const void* lines_[kMax];
  uint32_t n_ = 0;
};

// Writes the line of `word` back now (later == nullptr) or with the commit.
inline void FlushLine(const void* word, CommitFlushes* later) {
  if (later)
    later->Add(word);
  else
    pm::Flush(word, 8);
}

}  // namespace upfs

namespace upfs::ns_internal {

// The last component of a path ("" for none): the name a call on the path
// most likely looks up last (NsIndex::PrefetchLikely).
inline std::string_view LastComponent(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Permission bits Permit asks for (those of "other" in a mode).
inline constexpr int kWantRead = 4, kWantWrite = 2, kWantExec = 1;

// The time stamps a namespace call writes: the coarse clock, as the
// kernel's file times.
inline uint64_t Now() { return ClockNs(CLOCK_REALTIME_COARSE); }

inline mode_t TypeBits(format::pool::FileType t) {
  switch (t) {
    case format::pool::FileType::kDirectory: return S_IFDIR;
    case format::pool::FileType::kSymlink: return S_IFLNK;
    default: return S_IFREG;
  }
}

// An inode's owner word: uid in the low half, gid in the high half.
inline uid_t OwnerUid(uint64_t w) { return uid_t(uint32_t(w)); }
inline gid_t OwnerGid(uint64_t w) { return gid_t(uint32_t(w >> 32)); }

}  // namespace upfs::ns_internal
