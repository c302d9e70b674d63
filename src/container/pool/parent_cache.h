// ParentCache: the directories a thread last created files in, so that its
// next create in one of them skips the path walk and the index lock held
// shared (the part the kernel's dentry cache plays in its creates). With
// two threads creating in one directory, that lock was where each waited
// for the other's commits.
//
// An entry is a directory's path inside one attachment of a pool, the
// inodes the walk to it went through (the root first, the directory last:
// each needs search permission, checked again at every use, since a chmod
// is no record) and the index's shape() when the walk was made. A create
// from an entry commits only if the shape is still that one at the log's
// tail (PoolNamespace::CreateCached): no directory was removed or moved
// since, so a walk then would have found the same directory. Per thread:
// nothing is shared, nothing is locked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace upfs {

// The directories one path walk went through (PoolNamespace::TraceWalks).
struct WalkTrace {
  static constexpr uint32_t kMaxDirs = 16;  // deeper walks are not kept
  uint64_t dirs[kMaxDirs];
  uint32_t n = 0;
  // Only names of directories from the pool's root: no ".", "..", symbolic
  // link or starting directory, whose walks the shape does not vouch for.
  bool plain = true;
  uint64_t shape = 0;  // NsIndex::shape() under the walk's lock
  void Reset() {
    n = 0;
    plain = true;
    shape = 0;
  }
  void Add(uint64_t dir) {
    if (n == kMaxDirs)
      plain = false;
    else
      dirs[n++] = dir;
  }
};

class ParentCache {
 public:
  struct Entry {
    uint64_t instance = 0;  // Pool::instance(); 0: empty
    std::string dir;        // the directory's path, as the caller gave it
    WalkTrace walk;
  };
  // This thread's entry for directory path `dir` of attachment `instance`.
  static const Entry* Find(uint64_t instance, std::string_view dir);
  static void Remember(uint64_t instance, std::string_view dir, const WalkTrace& walk);
  static void Forget(uint64_t instance, std::string_view dir);
  // Creates this thread made from its entries (tests).
  static uint64_t uses();
  static void CountUse();
};

// Splits an absolute path inside a pool into the directory part and a last
// component a create may use, or false (a trailing slash, ".", "..", a
// name too long: the walk answers those).
bool SplitCreatePath(std::string_view path, std::string_view* dir, std::string_view* name);

}  // namespace upfs
