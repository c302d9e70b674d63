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

  bool FindDir(uint64_t ino, BaseDir* out) const;
  bool FindName(const BaseDir& d, std::string_view name, NsEntry* out) const;
  // fn(name, entry) for every name of d.
  template <typename Fn>
  void ForEachName(const BaseDir& d, Fn fn) const {
    ForEachNameHashed(d, [&](std::string_view name, const NsEntry& e, uint32_t) { fn(name, e); });
  }
  // fn(name, entry, hash) for every name of d (NameHash, as the image keeps it).
  template <typename Fn>
  void ForEachNameHashed(const BaseDir& d, Fn fn) const {
    for (uint64_t s = 0; s < d.slots; ++s) {
      const uint64_t at = d.table + s * format::pool::kNameSlotWords;
      const uint64_t ino = Word(at);
      if (ino == 0) continue;
      std::string_view name;
      NsEntry e;
      if (DecodeSlot(at, &name, &e)) fn(name, e, uint32_t(Word(at + 1)));
    }
  }
  template <typename Fn>
  void ForEachDir(Fn fn) const {
    for (uint64_t i = 0; i < h_->dirs; ++i) {
      BaseDir d;
      if (RowAt(i, &d)) fn(d);
    }
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
    if (w >= h_->image_words) return 0;
    return blocks_[w / (format::kBlockSize / 8)][w % (format::kBlockSize / 8)];
  }
  bool RowAt(uint64_t i, BaseDir* out) const;
  bool DecodeSlot(uint64_t at, std::string_view* name, NsEntry* e) const;

  const format::pool::CheckpointHeader* h_ = nullptr;
  uint64_t header_block_ = 0;
  std::vector<const uint64_t*> blocks_;
  const BlockSpace* space_ = nullptr;  // the pool's (for FindName's prefetch)
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
  // size, reserved up front.
  ImageWriter(std::vector<uint64_t>* img, uint64_t dirs, uint64_t words_hint);
  struct Name {
    std::string_view name;
    NsEntry e;
    uint32_t hash;  // NameHash(name)
  };
  void AddDir(uint64_t ino, uint64_t parent, uint64_t subdirs, const std::vector<Name>& names);
  void AddMultiLink(uint64_t ino, uint32_t links) { multi_.emplace_back(ino, links); }
  // Completes the image's words; fills the header's counts (dirs, entries,
  // multi, multi_words, image_words, image_crc).
  void Finish(format::pool::CheckpointHeader* h);

  // Words of a directory's hash table for `names` names.
  static uint64_t TableSlots(uint64_t names);

 private:
  uint64_t PlaceName(std::string_view name);
  uint64_t dirs_expected_;
  uint64_t dirs_ = 0;
  std::vector<uint64_t>& img_;  // the directory table, then the tables and names
  std::vector<std::pair<uint64_t, uint32_t>> multi_;
  uint64_t entries_ = 0;
};

// The header at block `l`, checked (magic, checksum, runs in the pool).
Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l,
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
