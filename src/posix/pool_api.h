// The C API's calls on paths and descriptors in mounted pools
// (pool_api.cc, pool_dirs.cc). Each existing upfs_* entry point asks
// InPool first and hands pool paths here.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "format/format.h"
#include "posix/pool_mounts.h"

namespace upfs {

int PoolOpen(const PoolPath& p, int flags, mode_t mode, format::Consistency c);
int PoolStat(const PoolPath& p, struct stat* st, bool follow);
int PoolUnlink(const PoolPath& p, bool dir);
int PoolRename(const PoolPath& from, const PoolPath& to, unsigned flags);
int PoolChmod(const PoolPath& p, mode_t mode, bool follow);
int PoolChown(const PoolPath& p, uid_t uid, gid_t gid, bool follow);
int PoolUtimens(const PoolPath& p, const struct timespec ts[2], bool follow);
int PoolTruncate(const PoolPath& p, off_t length);
int PoolStatvfs(const PoolPath& p, struct statvfs* buf);
// Descriptor forms; -2 when fd is not a pool descriptor.
int PoolFchmod(int fd, mode_t mode);
int PoolFchown(int fd, uid_t uid, gid_t gid);
int PoolFutimens(int fd, const struct timespec ts[2]);
int PoolFstatFd(int fd, struct stat* st);
// The absolute form of dirfd/path (false with errno set).
bool AbsolutePath(int dirfd, const char* path, std::string* out);

}  // namespace upfs
