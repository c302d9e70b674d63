// Descriptor-level extensions of the C API used by the LD_PRELOAD layer:
// duplication (dup/dup2/dup3/F_DUPFD) and the O_APPEND status flag.
#include "upfs/upfs.h"
#include "posix/preload_hooks.h"

namespace upfs {
int ApiAdoptDuplicate(int oldfd, int newfd);
int ApiSetAppend(int fd, bool on);
int ApiGetFlags(int fd);
}  // namespace upfs

extern "C" {

int upfs_adopt_dup(int oldfd, int newfd) { return upfs::ApiAdoptDuplicate(oldfd, newfd); }

int upfs_set_append(int fd, int on) { return upfs::ApiSetAppend(fd, on != 0); }

int upfs_get_flags(int fd) { return upfs::ApiGetFlags(fd); }

}  // extern "C"
