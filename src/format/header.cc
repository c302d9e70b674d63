#include "format/header.h"

#include <cstring>
#include <string>

#include "format/format.h"
#include "util/crc32c.h"

namespace upfs::format {

Status ValidateHeader(const char* base, uint64_t bytes) {
  if (bytes < 2 * kBlockSize) return Status::Corrupt("file", "shorter than a header and a log block");
  const auto* h = reinterpret_cast<const FileHeader*>(base);
  if (h->format_version < kOldestFormatVersion || h->format_version > kFormatVersion)
    return Status::Corrupt("file header", "format version " + std::to_string(h->format_version) +
                                              " (this upfs reads versions " +
                                              std::to_string(kOldestFormatVersion) + " to " +
                                              std::to_string(kFormatVersion) + ")");
  if (Crc32c(base, offsetof(FileHeader, header_crc)) != h->header_crc)
    return Status::Corrupt("file header", "checksum mismatch");
  if (h->block_size != kBlockSize)
    return Status::Corrupt("file header", "block size " + std::to_string(h->block_size));
  if (h->consistency != uint32_t(Consistency::kStrict) &&
      h->consistency != uint32_t(Consistency::kSync))
    return Status::Corrupt("file header", "unknown consistency mode");
  if (h->flags != 0) return Status::Corrupt("file header", "unknown flags");
  if (bytes % kBlockSize != 0)
    return Status::Corrupt("file", "size " + std::to_string(bytes) + " is not whole blocks");
  return Status::OK();
}

bool IsInterruptedCreation(const char* first) {
  for (size_t i = 0; i < sizeof(kMagic); ++i)
    if (first[i]) return false;
  bool all_zero = true;
  for (size_t i = 0; i < 2 * kBlockSize && all_zero; ++i) all_zero = first[i] == 0;
  if (all_zero) return true;
  // A header body that checks out once the missing magic is put back.
  char h[kCacheLine];
  std::memcpy(h, first, sizeof(h));
  std::memcpy(h, kMagic, sizeof(kMagic));
  uint32_t crc;
  std::memcpy(&crc, h + offsetof(FileHeader, header_crc), sizeof(crc));
  return Crc32c(h, offsetof(FileHeader, header_crc)) == crc;
}

}  // namespace upfs::format
