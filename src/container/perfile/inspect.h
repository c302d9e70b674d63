// Read-only inspection of a upfs file, for `upfs info` and `upfs fsck`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace upfs {

struct FileReport {
  std::string path;
  std::string medium;      // "dax", "tmpfs" or "page-cache"
  std::string durability;  // what survives which crash on this medium
  std::string consistency; // "strict" or "sync"
  uint32_t format_version = 0;
  uint64_t file_id = 0;
  uint64_t created_ns = 0;
  uint64_t size = 0;              // virtual file size in bytes
  uint64_t capacity_blocks = 0;   // logical blocks in the host file
  uint64_t log_blocks = 0;        // blocks in the log chain
  uint64_t log_entries = 0;       // committed entries in the chain
  uint64_t data_blocks = 0;       // blocks mapped by the block map
  uint64_t patched_blocks = 0;    // data blocks with live sub-block patches
  uint64_t paired_blocks = 0;     // data blocks paired by granule flips (each has a shadow)
  uint64_t patch_count = 0;       // live patches, and their bytes (in the log)
  uint64_t patch_bytes = 0;
  uint64_t overflow_blocks = 0;   // blocks holding large extended entries
  uint64_t free_blocks = 0;       // capacity minus everything referenced
  // Shared allocation state (in /dev/shm): present, how many processes have
  // the file open, and how many blocks it marks used that nothing
  // references (leaked by crashed processes; reclaimed at the next rebuild).
  bool shared_state_present = false;
  uint32_t live_processes = 0;
  int64_t leaked_blocks = -1;     // -1: not known (no shared state, or it is in use)
  // Words a crash left of the log's last commit, cut short: not part of
  // the log (the commit did not return), cleared by the next open that
  // rebuilds the shared state (docs/design.md, "After a crash").
  uint32_t cut_short_words = 0;
  // Problems found by a full check, each naming the damaged structure.
  std::vector<std::string> problems;
};

// Fills `out` from the file at `path` without modifying it. With
// `full_check`, every structure is verified (see docs/format.md, "fsck").
// Returns an error status if the file cannot be opened or is not a upfs file;
// damage found by the full check is listed in out->problems, and also makes
// the returned status EUCLEAN with the first problem as message.
Status InspectFile(const std::string& path, bool full_check, FileReport* out);

struct FileStat;
// The size, mapped blocks and mtime of the upfs file open as `fd` (not
// consumed), read without joining its shared state: no slot, no lock,
// nothing written. For stat of a file the process does not have open (a
// full open costs ~100 us). Nothing pins the log against a GC in another
// process, so the log head (block and sequence number) is read before and
// after the walk: EAGAIN if it moved (retry, or open the file); damage is
// reported as an open would report it.
Status PeekStat(int fd, const std::string& path, FileStat* out);

}  // namespace upfs
