// The per-file container (MadFS): each upfs file is one host file on the
// medium; the kernel keeps its name, directory and permissions, and the file
// carries its own header, log and data blocks.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "engine/file.h"
#include "format/format.h"
#include "util/status.h"

namespace upfs {

// Opens the upfs file behind host descriptor `host_fd` (which the caller
// keeps). With `create`, an empty host file (or one whose creation was
// interrupted before its header was written) becomes a new upfs file in
// `consistency` mode. Not a upfs file: EMEDIUMTYPE. Damaged: EUCLEAN.
Status OpenPerFile(int host_fd, const std::string& path, bool create,
                   format::Consistency consistency, std::unique_ptr<File>* out);

}  // namespace upfs
