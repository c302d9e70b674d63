// A live dentry of a regular file for the dentry tests, with plausible
// inode numbers (in a pool's data region).
#pragma once

#include <string_view>

#include "container/pool/dentry.h"

namespace upfs {

inline Dentry SampleDentry(std::string_view name, uint32_t gen = 7) {
  Dentry d;
  d.state = format::pool::kDentryStateLive;
  d.kind = 1;
  d.gen = gen;
  d.parent = 139265;
  d.ino = 139281;
  d.ino_gen = 12;
  d.name = name;
  return d;
}

}  // namespace upfs
