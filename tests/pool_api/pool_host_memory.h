// What a pool file holds in memory, for the tests of free space given back
// to the host (pool_give_back_test, pool_give_back_race_test).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "container/pool/pool_format.h"

namespace upfs_test {

namespace fp = upfs::format::pool;
using upfs::format::kBlockSize;

struct Host {
  uint64_t bytes;  // memory the pool file holds (what du shows)
  uint64_t size;
};

inline Host HostOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return Host{uint64_t(st.st_blocks) * 512, uint64_t(st.st_size)};
}

// Blocks the (detached, clean) pool's bitmap has free whose page has no
// memory behind it, where a store could be a SIGBUS on a full file system.
// An allocation of the page tells (mincore and SEEK_DATA do not, on tmpfs):
// it adds to st_blocks only where there was none.
inline uint64_t FreeBlocksWithoutMemory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR);
  EXPECT_GE(fd, 0);
  const size_t header = size_t(fp::kDataStart) * kBlockSize;
  void* m = mmap(nullptr, header, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT_NE(m, MAP_FAILED);
  const auto* base = static_cast<const char*>(m);
  const auto* words = reinterpret_cast<const fp::PoolWords*>(base + size_t(fp::kWordsBlock) * kBlockSize);
  const auto* bits = reinterpret_cast<const uint64_t*>(base + size_t(fp::kBitmapBlock) * kBlockSize);
  const uint64_t cap = words->bitmap.capacity_blocks.load();
  uint64_t n = 0;
  for (uint64_t b = fp::kDataStart; b < cap; ++b) {
    if ((bits[b / 64] >> (b % 64)) & 1) continue;
    struct stat before, after;
    EXPECT_EQ(fstat(fd, &before), 0);
    EXPECT_EQ(fallocate(fd, FALLOC_FL_KEEP_SIZE, off_t(b * kBlockSize), off_t(kBlockSize)), 0);
    EXPECT_EQ(fstat(fd, &after), 0);
    n += after.st_blocks > before.st_blocks;
  }
  munmap(m, header);
  close(fd);
  return n;
}

}  // namespace upfs_test
