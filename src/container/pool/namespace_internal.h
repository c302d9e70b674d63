// Helpers the namespace's two halves share (namespace.cc: names and
// holds; namespace_attrs.cc: attributes and permissions). Internal to the
// pool container.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <cstdint>

#include "container/pool/inode_alloc.h"
#include "container/pool/pool_format.h"

namespace upfs::ns_internal {

// Permission bits Permit asks for (those of "other" in a mode).
inline constexpr int kWantRead = 4, kWantWrite = 2, kWantExec = 1;

// The time stamps a namespace call writes: the coarse clock, as the
// kernel's file times.
inline uint64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline struct timespec ToTimespec(uint64_t ns) {
  struct timespec ts;
  ts.tv_sec = time_t(int64_t(ns) / 1000000000);
  ts.tv_nsec = long(int64_t(ns) % 1000000000);
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

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

// A new inode's image, written with the payload of the record that names
// it (PoolNamespace::Commit's `with_payload`), so that the two share one
// fence. A create that fails before its reservation writes it anyway
// (EnsureWritten) before giving the inode back: Free and ReleaseInode read
// the image's fields, and until then the inode holds its previous life's
// (a free inode's log_head is the free stack's link).
class NewInodeImage {
 public:
  NewInodeImage(format::pool::Inode* in, const format::pool::Inode* image) : in_(in), image_(image) {}
  void Write() {
    InodeAllocator::WriteImage(in_, *image_);
    written_ = true;
  }
  void EnsureWritten() {
    if (!written_) Write();
  }

 private:
  format::pool::Inode* in_;
  const format::pool::Inode* image_;
  bool written_ = false;
};

}  // namespace upfs::ns_internal
