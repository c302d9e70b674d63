// Labels a per-file upfs file with an older format version, as the build
// of that version would have made it (its header checksum kept right):
// for tests and the crash explorer, which check that older files keep
// getting what their version allows.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <string>

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

}  // namespace upfs_test
