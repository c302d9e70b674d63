// ParentCache: the directories a thread last made names in (a create, a
// mkdir, a symbolic link), so that its next new name in one of them needs
// no walk and no index lock held shared (PoolNamespace::CachedParent; the
// part the kernel's dentry cache plays in its creates), the entry checked
// at the commit instead. With two threads creating in one directory, the
// lookup's lock was where each waited for the other's commits. Its
// removals and renames of names there skip the walk too, the entry checked
// under the index lock they hold (PoolNamespace::FromKeptParent), and
// their walks keep entries as the creates' do.
//
// An entry is a directory's path inside one attachment of a pool, the
// inodes the walk to it went through (the root first, the directory last:
// each needs search permission, checked again at every use, since a chmod
// is no record) and the index's shape() when the walk was made: while the
// shape stays the same, no directory was moved, so a walk would find the
// same directories if the last one is still there (a directory with a
// path below it cannot be removed), which each use checks with its
// inode's ident. Per thread: nothing is shared, nothing is locked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace upfs {

// The directories one path walk went through (PoolNamespace::Walk).
struct WalkTrace {
  static constexpr uint32_t kMaxDirs = 16;  // deeper walks are not kept
  uint64_t dirs[kMaxDirs];
  uint32_t n = 0;
  // Only names of directories from the pool's root: no ".", "..", symbolic
  // link or starting directory, whose walks the shape does not vouch for.
  bool plain = true;
  uint64_t shape = 0;  // NsIndex::shape() under the walk's lock
  // The last directory's inode ident (kind and generation) as the walk saw
  // it: an rmdir changes no shape, and an inode freed by one may be made
  // a directory again elsewhere, so a use checks the directory is still
  // that life of its inode.
  uint64_t ident = 0;
  void Add(uint64_t dir, uint64_t dir_ident) {
    if (n == kMaxDirs) {
      plain = false;
    } else {
      dirs[n++] = dir;
      ident = dir_ident;
    }
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
  // Calls this thread made from its entries (tests).
  static uint64_t uses();
  static void CountUse();
  // Lookups this thread answered from its entries (tests).
  static uint64_t lookups();
  static void CountLookup();
};

// Splits an absolute path inside a pool into the directory part and a last
// component a create may use, or false (a trailing slash, ".", "..", a
// name too long: the walk answers those).
bool SplitCreatePath(std::string_view path, std::string_view* dir, std::string_view* name);

}  // namespace upfs
