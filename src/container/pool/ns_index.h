// NsIndex: one process's view of a pool's namespace: the newest checkpoint
// image, read in place (the base), plus the records committed after it,
// applied in DRAM (the delta), KucoFS's DRAM index over NVMKVFS's
// hash-indexed metadata. A lookup costs one hash probe in the delta and at
// most one in the image, whatever the directory's size; attaching reads
// only the records after the checkpoint. Each checkpoint starts a new,
// empty delta (Rebase).
//
// While this process writes a checkpoint, the index has three layers, as a
// LevelDB memtable being flushed: the delta up to the checkpoint's position
// is frozen (Freeze) and becomes the lower layer, read by the checkpoint
// writer without the index lock while new records go to a fresh delta over
// it; the image written from it then replaces it (Publish). The fresh
// delta's words about the lower layer (fresh, hides_base, link counts) hold
// for the image too, which is the frozen layer written out.
//
// Link counts are derived, never stored per inode: a directory's is 2 plus
// its subdirectories; a non-directory's is the delta's count if a record
// after the checkpoint changed it from the lower layer's, else the image's
// (1, or its multi-link row). An inode the image does not name and no record touched has no link
// the index knows of: callers that ask by inode alone combine this with the
// inode's own unlinked bit (docs/design.md, "Holds").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "container/pool/checkpoint.h"
#include "container/pool/name_table.h"
#include "container/pool/ns_log.h"
#include "container/pool/pool_format.h"
#include "util/status.h"

namespace upfs {

struct NsDirInfo {
  uint64_t parent = 0;  // the root's parent is itself
  uint64_t subdirs = 0;
  uint64_t entries = 0;
};

class NsIndex {
 public:
  // An empty delta over `base` (null: no checkpoint, an empty root).
  void Rebase(uint64_t root, std::unique_ptr<BaseImage> base);
  const BaseImage* base() const { return base_.get(); }
  // Makes the whole view so far the lower layer (immutable from now on)
  // under an empty delta, and returns it; see above.
  std::shared_ptr<const NsIndex> Freeze();
  // The frozen layer, while a checkpoint of it is being written.
  const NsIndex* frozen() const { return frozen_.get(); }
  // The image of the frozen layer replaces it.
  void Publish(std::unique_ptr<BaseImage> image);
  // The checkpoint image of the whole view (ImageWriter), of the tagged
  // format or not: *h gets the image's fields; the caller places the image
  // and fills in its runs.
  // `copied_dirs`: if given, how many directories' tables were copied as
  // they were (ImageWriter::CopyDir).
  void BuildImage(std::vector<uint64_t>* image, format::pool::CheckpointHeader* h, bool tagged,
                  uint64_t* copied_dirs = nullptr) const;
  // Every non-directory with more than one link, and its count.
  void CollectMultiLinks(std::unordered_map<uint64_t, uint32_t>* out) const;
  uint64_t delta_records() const { return records_; }

  // Names where the index's directories are: a new number with every
  // record that moves a directory (a rename or exchange of one, a rename
  // over one) and with every rebase, never 0. While it stays the same, a
  // path made only of directories leads where it led, if its last
  // directory is still that directory (a create, link or symbolic link
  // cannot take a directory's name, and a directory with a path below it
  // cannot be removed); the parent cache relies on that
  // (container/pool/parent_cache.h), checking the last directory itself
  // (an rmdir changes no shape). Written under the index lock; read under
  // it, or without it as a hint.
  uint64_t shape() const { return shape_.load(std::memory_order_relaxed); }

  bool Dir(uint64_t ino, NsDirInfo* out) const;
  bool IsDir(uint64_t ino) const { return Dir(ino, nullptr); }
  bool Find(uint64_t dir, std::string_view name, NsEntry* out) const;
  // Starts loading the image lines a lookup of `name` reads first,
  // guessing its directory: the one this thread last found a name in
  // through the image. Called on entry to a path call, so that the loads
  // overlap the walk to that directory. A wrong or stale guess costs a
  // prefetch, never a read.
  void PrefetchLikely(std::string_view name) const;
  // Dir(dir, info) and, if it is one, Find(dir, name, out) into *found,
  // with one lookup of the directory (a path walk's step).
  bool DirAndFind(uint64_t dir, std::string_view name, NsDirInfo* info, NsEntry* out, bool* found) const;
  // Links of ino (of kind `type`); see above for what 0 means.
  uint32_t Nlink(uint64_t ino, format::pool::FileType type) const;
  // Whether `ino` is `dir` or one of its ancestors.
  bool IsAncestorOrSelf(uint64_t ino, uint64_t dir) const;
  // fn(name, entry) for every name of directory `dir`.
  template <typename Fn>
  void List(uint64_t dir, Fn fn) const {
    ListHashed(dir, [&](std::string_view name, const NsEntry& e, uint32_t) { fn(name, e); });
  }
  // fn(name, entry, NameHash(name)): the hash as the layers keep it (a
  // checkpoint moves names without hashing them again).
  template <typename Fn>
  void ListHashed(uint64_t dir, Fn fn) const;
  // fn(ino, info) for every directory.
  template <typename Fn>
  void ForEachDir(Fn fn) const;
  // fn(ino, links) for every non-directory whose count the delta holds.
  template <typename Fn>
  void ForEachTouchedFile(Fn fn) const {
    links_.ForEach(fn);
  }

  // Applies one committed record. The committer validated it against the
  // same state; a record that does not fit is damage (EUCLEAN).
  // `validated`: this thread's own record, just checked against this very
  // state under the index lock; the check that a name it adds is absent is
  // not repeated.
  Status Apply(const NsRecord& r, bool validated = false);
  // Tests: the next n applies of a validated record (the committer's own)
  // fail as damage would make them, in every index of the process.
  static void FailValidatedAppliesForTest(int n);

 private:
  // A directory some record after the checkpoint changed.
  struct DeltaDir {
    NsDirInfo info;
    bool removed = false;
    bool fresh = false;  // made after the checkpoint: the image has nothing of it
    // Delta names that hide a name of the image (tombstones of its names):
    // while 0, listing the image's names needs no lookup in the delta.
    uint64_t hides_base = 0;
    NameTable names;     // type kFree: a tombstone (the name is gone)
  };
  DeltaDir* Touch(uint64_t dir);
  NameTable NewNames(uint64_t dir) const { return NameTable(MixIno(dir) ^ delta_salt_); }
  Status Insert(uint64_t dir, std::string_view name, NsEntry e, bool validated = false);
  Status Remove(uint64_t dir, std::string_view name, uint64_t expect_ino, NsEntry* removed);
  uint32_t FileLinks(uint64_t ino) const;
  // shape() moves on (index lock held: one writer).
  void BumpShape() { shape_.store(shape_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  // The layer below the delta: the frozen index if there is one, else the
  // image (none: nothing below).
  bool LowerDir(uint64_t ino, NsDirInfo* out) const;
  // Find in directory `dir`, whose delta entry is d (null: none; not a
  // removed one).
  bool FindIn(const DeltaDir* d, uint64_t dir, std::string_view name, NsEntry* out) const;
  // `h`: NameHash(name), known already.
  bool FindIn(const DeltaDir* d, uint64_t dir, std::string_view name, uint32_t h, NsEntry* out) const;
  // Find in the layer below the delta alone.
  bool FindBelow(uint64_t dir, std::string_view name, uint32_t h, NsEntry* out) const;
  uint32_t LowerLinks(uint64_t ino) const;
  template <typename Fn>
  void LowerList(uint64_t dir, Fn fn) const;
  // List and ForEachDir of a frozen layer, type-erased (LowerList and
  // ForEachDir call them: as templates they would instantiate themselves
  // without end, a lambda around a lambda per layer).
  void ListErased(uint64_t dir, const std::function<void(std::string_view, const NsEntry&, uint32_t)>& fn) const {
    ListHashed(dir, fn);
  }
  void ForEachDirErased(const std::function<void(uint64_t, const NsDirInfo&)>& fn) const { ForEachDir(fn); }
  // The inode named by a removed entry loses that name.
  Status Unref(const NsEntry& e);
  // A count the lower layer already gives, for an inode the delta has no
  // count of, is not stored: the image gives 1 to every inode without a
  // multi-link row, so a create adds nothing here, and a stat of one of
  // many new files does not probe a table as large as their number (a
  // cache miss each).
  void SetLinks(uint64_t ino, uint32_t links) {
    if (links_.Find(ino) || LowerLinks(ino) != links) links_.Set(ino, links);
  }

  uint64_t root_ = 0;
  std::unique_ptr<BaseImage> base_;
  std::shared_ptr<const NsIndex> frozen_;  // if set, base_ is null: it is below
  DirTable<DeltaDir> dirs_;
  LinkTable links_;
  uint64_t records_ = 0;
  // Each delta's tables place names apart from the layers below (whose
  // listing order an `rm -rf` removes in): NameTable's salt.
  uint64_t delta_salt_ = 0;
  std::atomic<uint64_t> shape_{1};
};

template <typename Fn>
void NsIndex::LowerList(uint64_t dir, Fn fn) const {
  if (frozen_) {  // type-erased: a template would instantiate itself for ever
    frozen_->ListErased(dir, std::function<void(std::string_view, const NsEntry&, uint32_t)>(fn));
    return;
  }
  BaseDir b;
  if (base_ && base_->FindDir(dir, &b)) base_->ForEachNameHashed(b, fn);
}

template <typename Fn>
void NsIndex::ListHashed(uint64_t dir, Fn fn) const {
  const DeltaDir* dd = dirs_.Find(dir);
  if (dd && dd->removed) return;
  if (!(dd && dd->fresh)) {
    LowerList(dir, [&](std::string_view name, const NsEntry& e, uint32_t h) {
      if (!dd || dd->hides_base == 0 || !dd->names.Find(name, h)) fn(name, e, h);
    });
  }
  if (dd) {
    dd->names.ForEachHashed([&](std::string_view name, const NsEntry& e, uint32_t h) {
      if (e.type != format::pool::FileType::kFree) fn(name, e, h);
    });
  }
}

template <typename Fn>
void NsIndex::ForEachDir(Fn fn) const {
  if (frozen_) {
    frozen_->ForEachDirErased([&](uint64_t ino, const NsDirInfo& i) {
      if (!dirs_.Contains(ino)) fn(ino, i);
    });
  } else if (base_) {
    base_->ForEachDir([&](const BaseDir& b) {
      if (!dirs_.Contains(b.ino)) fn(b.ino, NsDirInfo{b.parent, b.subdirs, b.entries});
    });
  } else if (!dirs_.Contains(root_)) {
    fn(root_, NsDirInfo{root_, 0, 0});
  }
  dirs_.ForEach([&](uint64_t ino, const DeltaDir& d) {
    if (!d.removed) fn(ino, d.info);
  });
}

}  // namespace upfs
