// The flock(2) locks of a upfs file's open file descriptions.
//
// A upfs descriptor is the host file's kernel descriptor, but upfs opens the
// host file itself and holds a flock on it while it checks the header, so a
// program's flock locks are taken elsewhere: on a lock object of the inode,
// /dev/shm/upfs-DEV-INO.lock, which every process opens by the same name,
// through one description of its own per description of the program (the
// locks belong to descriptions, as in the kernel). The object holds no data;
// anyone may open it, read-only. It exists while a lock may be held on it:
// the last description to let go removes it, and a locker that finds it
// removed under its lock takes the lock again on the new one.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "util/status.h"

namespace upfs {

// flock(fd, op) on the lock object of inode (dev, ino), opening it into *fd
// first if *fd is -1. Returns 0, or -1 with errno.
int FlockLockObject(dev_t dev, ino_t ino, int* fd, int op);

// At the end of a description that locked through fd: removes the lock
// object if no description holds a lock on it, and closes fd.
void ReleaseLockObject(dev_t dev, ino_t ino, int fd);

// Removes the lock objects nobody holds a lock on (left by killed
// processes); adds to the counts.
Status SweepLockObjects(uint32_t* removed, uint32_t* in_use);

}  // namespace upfs
