// The per-file container (MadFS): each upfs file is one host file on the
// medium; the kernel keeps its name, directory and permissions, and the file
// carries its own header, log and data blocks.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>
#include <string>

#include "container/perfile/shared_state.h"
#include "engine/block_source.h"
#include "engine/file.h"
#include "format/format.h"
#include "medium/medium.h"
#include "util/status.h"

namespace upfs {

// The marker of a upfs host file: its S_ISVTX bit, which Linux ignores on
// regular files. Set at creation, kept by chmod through upfs, and reported
// as clear. It tells a upfs file from a plain one through stat alone, for
// callers that may not read the file (who must not write it as plain bytes).
inline constexpr mode_t kMarkerBit = format::kHostMarkerBit;
static_assert(kMarkerBit == S_ISVTX);
// A regular, block-sized host file with the marker.
bool IsMarkedUpfs(const struct stat& st);

// True if the host file behind fd starts with the upfs magic.
bool LooksLikeUpfs(int fd);
// EUCLEAN for a marked file whose header lost its magic: damage, reported
// as such rather than as "not a upfs file".
Status MarkedWithoutMagic(const std::string& path);

// Opens the upfs file behind host descriptor `host_fd` (which the caller
// keeps). With `create`, an empty host file (or one whose creation was
// interrupted before its header was written) becomes a new upfs file in
// `consistency` mode, marked, with mode *new_mode if given. Not a upfs
// file: EMEDIUMTYPE. Damaged: EUCLEAN. No read and write permission: EACCES.
Status OpenPerFile(int host_fd, const std::string& path, bool create,
                   format::Consistency consistency, const mode_t* new_mode,
                   std::unique_ptr<File>* out);
// Opens it for reading only, for a caller who may not write it: a
// read-only mapping, no shared state, nothing written (File::OpenReadOnly).
Status OpenPerFileReadOnly(int host_fd, const std::string& path, std::unique_ptr<File>* out);

// What the per-file container lends a File, and its lifecycle: the host
// file's mapping (the block space), the shared state (the block source's
// domain and the log's words; none for a read-only File), and the header
// (the log root). Its last user of the file removes the shared state.
class PerFileStorage final : public StorageLease {
 public:
  PerFileStorage(std::unique_ptr<Medium> medium, std::unique_ptr<SharedState> shared);
  ~PerFileStorage() override;

  Medium* medium() const { return medium_.get(); }
  SharedState* shared() const { return shared_.get(); }  // null: read-only
  FileStorage storage();

 private:
  std::unique_ptr<Medium> medium_;
  std::unique_ptr<SharedState> shared_;
  std::unique_ptr<BlockSource> source_;
};

// The per-file storage of a File this container opened.
inline PerFileStorage* PerFile(const File& f) { return static_cast<PerFileStorage*>(f.lease()); }

}  // namespace upfs
