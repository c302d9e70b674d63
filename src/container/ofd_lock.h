// Byte locks on open file descriptions (fcntl's F_OFD_* commands), the way
// both containers tell live processes from dead ones: a lock ends with the
// last descriptor of its description, so a killed process's locks go with
// it, and a byte past any data needs nothing to exist there.
#pragma once

#include <sys/types.h>

namespace upfs {

// Takes (F_RDLCK, F_WRLCK) or drops (F_UNLCK) the one-byte lock at `start`
// of `fd`'s description; `wait` blocks until it is granted. Retried on
// EINTR. 0, or -1 with errno set.
int OfdLockByte(int fd, short type, off_t start, bool wait);

// Whether a description other than `fd`'s holds a lock on byte `start`
// that a write lock would conflict with. A failed query counts as held: a
// caller that would reclaim what the holder owns must not.
bool OfdByteHeldElsewhere(int fd, off_t start);

}  // namespace upfs
