// NsIndex: one process's DRAM index of a pool's namespace, kept up to date
// by applying the namespace log's records in order (KucoFS's DRAM index,
// NVMKVFS's hash-indexed metadata): a hash table per directory keyed by
// name, so that lookup, create and unlink cost the same in a directory of
// ten entries and of a hundred thousand.
//
// Link counts are derived, never stored: a file's is the number of names
// the index holds for it, a directory's 2 plus its subdirectories.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "container/pool/name_table.h"
#include "container/pool/ns_log.h"
#include "container/pool/pool_format.h"
#include "util/status.h"

namespace upfs {

struct NsDir {
  uint64_t parent = 0;  // the root's parent is itself
  uint32_t subdirs = 0;
  NameTable names;
};

class NsIndex {
 public:
  void Reset(uint64_t root);

  const NsDir* Dir(uint64_t ino) const {
    auto it = dirs_.find(ino);
    return it == dirs_.end() ? nullptr : &it->second;
  }
  // Valid until the next change of the index.
  const NsEntry* Find(const NsDir& d, std::string_view name) const { return d.names.Find(name); }
  // Links of a file, or 2 + subdirectories of a directory; 0 if unlinked.
  uint32_t Nlink(uint64_t ino) const;
  // Whether `ino` is `dir` or one of its ancestors (a directory may not
  // move below itself).
  bool IsAncestorOrSelf(uint64_t ino, uint64_t dir) const;

  // Applies one committed record. The committer validated it against the
  // same state; a record that does not fit is damage (EUCLEAN).
  Status Apply(const NsRecord& r);

  // Loading a checkpoint image: room for what it holds, each directory
  // (whose entries follow), each entry, and a check that every directory
  // an entry names was loaded and every loaded one but the root is named.
  void Reserve(uint64_t dirs, uint64_t entries);
  NsDir* LoadDir(uint64_t ino, uint64_t parent, uint64_t entries);
  Status LoadEntry(NsDir* d, std::string_view name, NsEntry e);
  Status CheckLoaded() const;

  uint64_t files() const { return links_.size(); }  // non-directories with a name
  uint64_t directories() const { return dirs_.size(); }
  template <typename Fn>
  void ForEachDir(Fn fn) const {
    for (const auto& [ino, d] : dirs_) fn(ino, d);
  }

 private:
  Status Insert(NsDir* d, std::string_view name, NsEntry e);
  Status Remove(NsDir* d, uint64_t dir_ino, std::string_view name, uint64_t expect_ino);
  NsDir* MutableDir(uint64_t ino) {
    auto it = dirs_.find(ino);
    return it == dirs_.end() ? nullptr : &it->second;
  }
  void Unref(const NsEntry& e, uint64_t parent);

  uint64_t root_ = 0;
  std::unordered_map<uint64_t, NsDir> dirs_;
  LinkCounts links_;  // non-directories: names per inode
};

}  // namespace upfs
