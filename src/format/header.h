// Recognising and validating the file header (format layer: no I/O; the
// per-file container reads and maps the bytes).
#pragma once

#include <cstdint>

#include "util/status.h"

namespace upfs::format {

// Checks the header of a host file mapped at `base` (`bytes` long).
Status ValidateHeader(const char* base, uint64_t bytes);

// True if `first` (the first two blocks of a host file) is what an
// interrupted creation leaves: no magic, and either nothing at all or a
// complete header that lacks only its magic (which is written last).
bool IsInterruptedCreation(const char* first);

}  // namespace upfs::format
