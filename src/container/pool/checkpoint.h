// Checkpoints of a pool's namespace (KucoFS's checkpointing, NVMKVFS's
// hash-indexed metadata): the namespace as per-directory hash tables in the
// pool, read in place. A process's index is the newest checkpoint (the
// base) plus the records after it (docs/design.md, "Pools").
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "container/pool/name_table.h"
#include "container/pool/pool_format.h"
#include "engine/log.h"
#include "util/status.h"

namespace upfs {

// A directory as the image has it.
struct BaseDir {
  uint64_t ino = 0;
  uint64_t parent = 0;
  uint64_t subdirs = 0;
  uint64_t entries = 0;
  uint64_t table = 0;  // first word of its hash table
  uint64_t slots = 0;
};

// A read-only view of a checkpoint image, in the pool's mapping. Every read
// is bounds-checked: a damaged image gives wrong answers or EUCLEAN from
// Open, never a read outside it.
class BaseImage {
 public:
  // Checks the header's image (checksum of every word) and maps its blocks.
  // `verify` false: the image was just written by this process from the
  // buffer its checksum was computed over (a checkpoint it publishes):
  // the pass over every word is skipped, the structure checks are not.
  Status Open(const BlockAccess& ba, const format::pool::CheckpointHeader& h, uint64_t header_block,
              bool verify = true);
  uint64_t header_block() const { return header_block_; }
  const format::pool::CheckpointHeader& header() const { return *h_; }
  // The header's image_words, as Open checked it (read from DRAM).
  uint64_t image_words() const { return image_words_; }

  // The row of directory `ino`: from this thread's cache of rows it found
  // in this image, else by a binary search of the directory table.
  bool FindDir(uint64_t ino, BaseDir* out) const;
  // `crc`: NameHash(name).
  bool FindName(const BaseDir& d, std::string_view name, uint32_t crc, NsEntry* out) const;
  // Starts loading the lines a FindName of a name with hash `crc` in d
  // reads first (its tag and its home slot, which FindName would otherwise
  // load one after the other), so that a caller can also overlap them with
  // misses of its own. Call it before FindName.
  void Prefetch(const BaseDir& d, uint32_t crc) const;
  // Where d's tags and slots lie, for a prefetch made before d is looked
  // up again (NameHint): false unless the image is flat and tagged.
  bool TableLines(const BaseDir& d, const char** tags, const char** slots) const {
    if (!flat_ || !tagged_) return false;
    *tags = WordPtr(d.table);
    *slots = WordPtr(SlotAt(d, 0));
    return true;
  }
  // fn(name, entry) for every name of d.
  template <typename Fn>
  void ForEachName(const BaseDir& d, Fn fn) const {
    ForEachNameHashed(d, [&](std::string_view name, const NsEntry& e, uint32_t) { fn(name, e); });
  }
  // fn(name, entry, hash) for every name of d (NameHash, as the image keeps it).
  template <typename Fn>
  void ForEachNameHashed(const BaseDir& d, Fn fn) const {
    for (uint64_t s = 0; s < d.slots; ++s) {
      const uint64_t at = SlotAt(d, s);
      const uint64_t ino = Word(at);
      if (ino == 0) continue;
      std::string_view name;
      NsEntry e;
      if (DecodeSlot(at, &name, &e)) fn(name, e, uint32_t(Word(at + 1)));
    }
  }
  // Whether the image is of the tagged format (pools of version 3 on).
  bool tagged() const { return tagged_; }
  // Whether its blocks lie side by side, read through one pointer.
  bool flat() const { return flat_ != nullptr; }
  // fsck's check of a directory's table, beyond what a lookup checks: every
  // slot decodes, holds its name's checksum, agrees with its tag and lies
  // on its name's probe run, and the used slots are `entries`. False, with
  // *why, at the first that does not.
  bool CheckTable(const BaseDir& d, std::string* why) const;
  template <typename Fn>
  void ForEachDir(Fn fn) const {
    for (uint64_t i = 0; i < h_->dirs; ++i) {
      BaseDir d;
      if (RowAt(i, &d)) fn(d);
    }
  }
  // d's table (its tags and slots) as words side by side, for a copy of it
  // as it is: null unless the image is flat.
  const uint64_t* FlatTable(const BaseDir& d) const { return flat_ ? flat_ + d.table : nullptr; }
  // The name in slot s of d; false if the slot does not decode.
  bool NameInSlot(const BaseDir& d, uint64_t s, std::string_view* name) const {
    NsEntry e;
    return DecodeSlot(SlotAt(d, s), name, &e);
  }
  // Links of a non-directory the image holds: the multi-link table's
  // count, else 1.
  uint32_t Links(uint64_t ino) const;
  template <typename Fn>
  void ForEachMultiLink(Fn fn) const {
    for (uint64_t i = 0; i < h_->multi; ++i)
      fn(Word(h_->multi_words + 2 * i), uint32_t(Word(h_->multi_words + 2 * i + 1)));
  }

 private:
  uint64_t Word(uint64_t w) const {
    if (w >= image_words_) return 0;
    if (flat_) return flat_[w];
    return blocks_[w / (format::kBlockSize / 8)][w % (format::kBlockSize / 8)];
  }
  bool RowAt(uint64_t i, BaseDir* out) const;
  // The first word of slot s (after the tags, in a tagged image).
  uint64_t SlotAt(const BaseDir& d, uint64_t s) const {
    return d.table + (tagged_ ? d.slots : 0) + s * format::pool::kNameSlotWords;
  }
  bool DecodeSlot(uint64_t at, std::string_view* name, NsEntry* e) const;
  const char* WordPtr(uint64_t w) const {
    if (flat_) return reinterpret_cast<const char*>(flat_ + w);
    return reinterpret_cast<const char*>(&blocks_[w / (format::kBlockSize / 8)][w % (format::kBlockSize / 8)]);
  }
  bool FindTagged(const BaseDir& d, std::string_view name, uint32_t crc, NsEntry* out) const;

  const format::pool::CheckpointHeader* h_ = nullptr;
  uint64_t header_block_ = 0;
  std::vector<const uint64_t*> blocks_;
  // The image's words where its blocks lie side by side in the mapping (an
  // image is allocated as one run when it can be), else null: a word is
  // then one load, not two (blocks_ first), on every lookup's path.
  const uint64_t* flat_ = nullptr;
  uint64_t image_words_ = 0;  // the header's, read once
  const BlockSpace* space_ = nullptr;  // the pool's (for FindName's prefetch)
  bool tagged_ = false;
  // Unique to each Open in the process (never reused, unlike an address):
  // what a thread's cached rows were found in (FindDir).
  uint64_t id_ = 0;
};

// Builds an image: directories are added in order of inode number, each
// with its names (from any source), then the multi-link rows. The image is
// built in one vector, in its final layout (the directory table first, its
// size known from the start), so that nothing is copied or moved after.
class ImageWriter {
 public:
  // Builds into *img (emptied; a buffer kept from an earlier image keeps its
  // memory, which would otherwise be faulted in again every time). `dirs`:
  // how many directories will be added; `words_hint`: the image's expected
  // size, reserved up front; `tagged`: the format (pool_format.h).
  ImageWriter(std::vector<uint64_t>* img, uint64_t dirs, uint64_t words_hint, bool tagged);
  struct Name {
    std::string_view name;
    NsEntry e;
    uint32_t hash;  // NameHash(name)
  };
  void AddDir(uint64_t ino, uint64_t parent, uint64_t subdirs, const std::vector<Name>& names);
  // Adds directory d of image `from`, none of whose names changed since:
  // its table copied word for word (where linear probing placed each name
  // depends only on the set of names and the table's size), the names too
  // long for a slot placed again (docs/design.md, "Checkpoints and the log
  // bound", for what it saved). False, nothing added, if the table
  // cannot be copied so: `from` not flat, untagged, or of other sizing, or
  // a slot that does not decode (AddDir then takes what decodes).
  bool CopyDir(const BaseImage& from, const BaseDir& d, uint64_t parent, uint64_t subdirs);
  void AddMultiLink(uint64_t ino, uint32_t links) { multi_.emplace_back(ino, links); }
  // Completes the image's words; fills the header's magic (the format) and
  // counts (dirs, entries, multi, multi_words, image_words, image_crc).
  void Finish(format::pool::CheckpointHeader* h);

  // Slots of a directory's hash table for `names` names.
  static uint64_t TableSlots(uint64_t names, bool tagged);
  // Words of that table (tags and slots; names placed apart not counted).
  static uint64_t TableWords(uint64_t names, bool tagged);

 private:
  uint64_t PlaceName(std::string_view name);
  // The 4-word aligned start of a new table.
  uint64_t AlignTable();
  void AddRow(uint64_t ino, uint64_t parent, uint64_t subdirs, uint64_t entries, uint64_t table, uint64_t slots);
  const bool tagged_;
  uint64_t dirs_expected_;
  uint64_t dirs_ = 0;
  std::vector<uint64_t>& img_;  // the directory table, then the tables and names
  std::vector<std::pair<uint64_t, uint32_t>> multi_;
  uint64_t entries_ = 0;
};

// The header at block `l` of a pool of version `pool_version`, checked
// (magic of that version's format, checksum, runs in the pool).
Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l, uint32_t pool_version,
                            const format::pool::CheckpointHeader** out);
uint32_t CheckpointHeaderCrc(const format::pool::CheckpointHeader& h);
// Calls fn(lblock) for the header block and every image block.
template <typename Fn>
void ForEachCheckpointBlock(uint64_t header_block, const format::pool::CheckpointHeader& h, Fn fn) {
  fn(uint32_t(header_block));
  for (uint32_t r = 0; r < h.nruns; ++r)
    for (uint32_t i = 0; i < h.runs[r].count; ++i) fn(h.runs[r].lblock + i);
}

}  // namespace upfs
