// What recovery of a pool must leave as it was: a hash of the pool file's
// durable bytes. Shared by the pool corruption tests (a refused or
// recovered damage must not change them) and fuzz/fuzz_pool.cc.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "container/pool/pool_format.h"
#include "format/format.h"

namespace upfs_test {

// FNV-1a over the pool's durable bytes: every block but the volatile area
// [1, kDataStart), with the superblock's `clean` word left out (both are
// soft state that attaching rewrites). A hole and a block of zeros hash
// alike. 0 if the file cannot be opened.
inline uint64_t PoolDurableHash(const std::string& path) {
  namespace fp = upfs::format::pool;
  constexpr uint64_t kB = upfs::format::kBlockSize;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  ::fstat(fd, &st);
  uint64_t h = 1469598103934665603ull ^ uint64_t(st.st_size);
  std::vector<unsigned char> blk(kB);
  static const std::vector<unsigned char> zero(kB, 0);
  for (off_t at = 0; at < st.st_size;) {
    const off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0) break;
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t o = data / off_t(kB) * off_t(kB); o < hole; o += off_t(kB)) {
      const uint64_t b = uint64_t(o) / kB;
      if (b >= 1 && b < fp::kDataStart) continue;
      const ssize_t n = ::pread(fd, blk.data(), kB, o);
      if (n <= 0) break;
      if (b == 0) std::memset(blk.data() + offsetof(fp::Superblock, clean), 0, 8);
      if (std::memcmp(blk.data(), zero.data(), size_t(n)) == 0) continue;
      h = (h ^ b) * 1099511628211ull;
      for (ssize_t i = 0; i < n; ++i) h = (h ^ blk[size_t(i)]) * 1099511628211ull;
    }
    at = hole;
  }
  ::close(fd);
  return h;
}

}  // namespace upfs_test
