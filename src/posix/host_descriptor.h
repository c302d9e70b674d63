// The program's kernel descriptor of a upfs file.
//
// A upfs descriptor is the kernel descriptor of the host file (so that its
// number never collides with the process's other files, and fstat, fchmod,
// fsync and the like work on it). upfs never writes through it: it writes
// through a mapping of its own. So the kernel descriptor is made read-only,
// and a write through it that bypasses the library (a raw system call, a
// write glibc makes from inside itself, io_uring) fails with EBADF instead
// of overwriting upfs structures.
//
// The access mode the program asked for lives in the upfs description, and,
// so that it survives execve and every other way a descriptor is inherited
// (system(), popen, posix_spawn, a program that is not upfs-aware in
// between), it is also recorded in the kernel description itself: as its
// F_SETSIG signal number, which only matters for O_ASYNC signal-driven I/O,
// and Linux sends no such signals for regular files.
#pragma once

#include "util/status.h"

namespace upfs {

// Makes fd, a descriptor of a upfs host file, read-only if `may_reopen`
// (the process has no other descriptor of the file, whose record locks
// closing the writable description would drop) and records `access`
// (O_RDONLY, O_WRONLY or O_RDWR) on it. The number, FD_CLOEXEC and the
// status flags stay.
// `known_read_only`: fd was opened read-only just now (nothing to look
// at, nothing recorded on it yet).
Status ProtectHostDescriptor(int fd, int access, bool may_reopen, bool known_read_only);

// The access mode recorded on fd's description, or -1 if none.
int RecordedAccess(int fd);

}  // namespace upfs
