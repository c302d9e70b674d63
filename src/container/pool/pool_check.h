// CheckPool: fsck and info of a pool file, read-only. Walks every
// structure (superblock, namespace log, inode blocks, every inode and its
// file's log) without changing a byte, and reports what it holds and every
// problem it finds. Used by `upfs fsck`, `upfs info`, the crash explorer
// and the corruption tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace upfs {

struct PoolReport {
  uint32_t version = 0;     // the pool's format version (superblock)
  std::string medium;       // MediumKindName
  std::string durability;   // MediumDurability
  uint64_t pool_bytes = 0;  // the pool file's size
  uint64_t capacity_blocks = 0;
  uint64_t directories = 0;  // including the root
  uint64_t files = 0;        // regular files with at least one name
  uint64_t symlinks = 0;
  uint64_t extra_links = 0;  // names beyond the first of files with several
  uint64_t inodes_in_use = 0;
  uint64_t inode_blocks = 0;
  uint64_t orphans = 0;      // inodes in use with no name: freed at the next recovery
  uint64_t log_blocks = 0;   // of the namespace log
  uint64_t log_records = 0;
  uint64_t log_reserve_blocks = 0;  // set aside for removals in a full pool (version 7)
  uint64_t checkpoint_number = 0;  // 0: none yet
  uint64_t checkpoint_entries = 0;
  uint64_t checkpoint_image_blocks = 0;
  // Log blocks after which the next checkpoint is due (CheckpointIntervalBlocks).
  uint64_t checkpoint_interval_blocks = 0;
  uint64_t referenced_blocks = 0;  // every block a structure references
  uint64_t file_blocks = 0;        // data, log and overflow blocks of files
  uint64_t data_blocks = 0;        // files' data blocks
  uint64_t data_runs = 0;          // ... in this many runs (contiguity)
  bool clean = false;              // the volatile area was left consistent
  uint32_t attached_processes = 0;
  // Blocks the bitmap holds but nothing references, when it can be read
  // (nobody attached and the volatile area clean); -1 otherwise.
  int64_t leaked_blocks = -1;
  // Blocks of the 2 MiB extents given back to the host (version 10: taken
  // in the bitmap, referenced by nothing, holes in the file), when the
  // bitmap can be read; -1 otherwise. Not counted as leaked.
  int64_t given_back_blocks = -1;
  // Where the namespace log holds a commit a crash cut short (recovery
  // discards it: not damage); empty if none. Only on a pool nobody is
  // attached to and that was not left clean.
  std::string torn_commit;
  // New files (version 9) whose image may not be the durable one of their
  // create record: judged from the record, which recovery writes into
  // them; counted only on a pool a crash left.
  uint64_t images_from_records = 0;
  std::vector<std::string> problems;  // empty: the pool is consistent
};

// EMEDIUMTYPE: not a pool; EUCLEAN: a structure so damaged the walk cannot
// go on (the message names it); otherwise OK, with what was found in
// out->problems.
Status CheckPool(const std::string& path, PoolReport* out);

}  // namespace upfs
