// Labels a per-file upfs file or a pool with an older format version, as
// the build of that version would have made it (its header checksum kept
// right): for tests and the crash explorer, which check that older files
// and pools keep getting what their version allows.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "container/pool/pool_format.h"
#include "format/format.h"
#include "util/crc32c.h"

namespace upfs_test {

inline bool RelabelVersion(const std::string& path, uint32_t version) {
  using upfs::format::FileHeader;
  const int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return false;
  FileHeader h;
  bool ok = pread(fd, &h, sizeof(h), 0) == ssize_t(sizeof(h));
  h.format_version = version;
  h.header_crc = upfs::Crc32c(&h, offsetof(FileHeader, header_crc));
  ok = ok && pwrite(fd, &h, sizeof(h), 0) == ssize_t(sizeof(h));
  close(fd);
  return ok;
}

// A pool (detached): before version 7 a pool keeps no namespace log
// reserve, so its words are cleared, and the next attach recovers (clean
// 0), which frees the blocks this build's mkfs set aside.
inline bool RelabelPoolVersion(const std::string& path, uint32_t version) {
  namespace fp = upfs::format::pool;
  const int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return false;
  fp::Superblock sb;
  bool ok = pread(fd, &sb, sizeof(sb), 0) == ssize_t(sizeof(sb));
  sb.version = version;
  sb.sb_crc = fp::SuperblockCrc(sb);
  if (version < fp::kFirstLogReservePoolVersion)
    for (auto& w : sb.nslog_reserve) w.store(0);
  sb.clean.store(0);
  ok = ok && pwrite(fd, &sb, sizeof(sb), 0) == ssize_t(sizeof(sb));
  close(fd);
  return ok;
}

}  // namespace upfs_test
