// PoolNode: what an open file description of a pool file or directory
// holds: the pool, the inode (with its generation), the hold that keeps
// the inode from being freed while the description lives, and for a
// directory the listing a scan goes through.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"

namespace upfs {

struct PoolNode {
  Pool* pool = nullptr;
  const Credentials* who = nullptr;
  uint64_t ino = 0;
  uint32_t gen = 0;
  format::pool::FileType type{};
  // A directory's scan (getdents64, readdir): a snapshot taken at its
  // start, so that it lists every entry that exists for the whole scan
  // once, and none twice.
  std::mutex scan_mu;
  Listing listing;
  size_t scan_pos = 0;
  bool scanned = false;
  ~PoolNode();
};

}  // namespace upfs
