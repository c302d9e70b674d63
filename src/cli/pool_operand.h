// The pool verbs' operands: "POOL:PATH" names PATH inside the pool file
// POOL, anything else a host path; and the private mounts through which the
// tool reaches a pool (the C API serves a pool only under a mount point).
#pragma once

#include <map>
#include <string>

#include "util/status.h"

namespace upfs::cli {

struct Operand {
  bool in_pool = false;
  std::string pool;  // the pool file, as typed
  std::string path;  // inside the pool ("/..."), or the host path
  std::string text;  // as typed, for messages
};

// "POOL:PATH" is a pool operand when POOL is a pool file (so host paths
// with a colon still work); with bare_pool, "POOL" alone means "POOL:/".
// A relative PATH is taken from the pool's root.
Operand ParseOperand(const std::string& arg, bool bare_pool);

// Mounts each pool once, at a made-up directory no one else uses
// ("/.upfs-cli-PID-N": the C API needs no kernel directory there), and
// unmounts them when destroyed.
class PoolMounts {
 public:
  PoolMounts() = default;
  PoolMounts(const PoolMounts&) = delete;
  PoolMounts& operator=(const PoolMounts&) = delete;
  ~PoolMounts();

  // The mount directory of `pool`, mounting it on first use.
  Status Mount(const std::string& pool, std::string* dir);

 private:
  std::map<std::string, std::string> dirs_;  // canonical pool path -> mount dir
};

}  // namespace upfs::cli
