// Recognising and validating the file header (format layer: no I/O beyond
// reading the first bytes of a descriptor).
#pragma once

#include <cstdint>

#include "util/status.h"

namespace upfs::format {

// Checks the header of a host file mapped at `base` (`bytes` long).
Status ValidateHeader(const char* base, uint64_t bytes);

// True if the host file behind fd starts with the upfs magic.
bool LooksLikeUpfs(int fd);

// True if `first` (the first two blocks of a host file) is what an
// interrupted creation leaves: no magic, and either nothing at all or a
// complete header that lacks only its magic (which is written last).
bool IsInterruptedCreation(const char* first);

// Reads the file id of a upfs file.
Status ReadFileId(int fd, uint64_t* id);

}  // namespace upfs::format
