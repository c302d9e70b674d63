// Who may use a file's shared state: the users who may write the file.
//
// The shared state is a /dev/shm object; the kernel decides who may open
// it, by its owner, group and mode, as it decides who may open the host
// file. The object keeps the owner who created it (so that its last user,
// usually that creator, may remove it from the sticky /dev/shm): when that
// is the host file's owner, the object gets the host file's group and
// read/write bits; otherwise a POSIX ACL gives the host file's owner, group
// and others what the host file gives them (and the creator, a writer of
// the file, keeps read and write).
#pragma once

#include <sys/stat.h>

#include <string>

#include "util/status.h"

namespace upfs {

// Gives the shared-state object at `path` (owned by this user, or by
// anyone when root) the access of the host file `host`.
Status GiveHostAccess(const std::string& path, const struct stat& host);
// The same for an object this process has just created as fd (owned by it,
// mode 0600, no ACL); root also makes the host file's owner its owner.
Status GiveHostAccessAtCreation(int fd, const std::string& path, const struct stat& host);

}  // namespace upfs
