// Provide: memory behind pages before anything is stored to them.
//
// A store into a page of a shared file mapping that the file system cannot
// back (tmpfs at its size limit, a full DAX file system) is not an error
// the store can return: the kernel sends SIGBUS and the program dies. Every
// range the engine may store to is provided first, when it is handed out
// (growth publishing new capacity, recovery rebuilding the allocator), so
// that a full file system is an ENOSPC of the call that wanted the space.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "util/status.h"

namespace upfs {

// Makes every page of [addr, addr + len) present and writable in this
// process's mapping (MADV_POPULATE_WRITE). Pages already there cost a page
// table walk. ENOSPC naming `what` if the file system cannot back them;
// OK where the kernel has no such advice (before 5.14): nothing better
// can be done there.
Status ProvideMemory(void* addr, uint64_t len, const char* what);

// Allocates the holes of [from, to) in file fd (SEEK_HOLE, then
// fallocate of each hole, so that a range with none costs one
// lseek). Never changes the file's size (FALLOC_FL_KEEP_SIZE); OK where
// the file system cannot allocate ahead (EOPNOTSUPP).
Status ProvideFileRange(int fd, uint64_t from, uint64_t to, const std::string& what);

// fn(hole, end) for each hole of file fd within [from, to), in order (on
// tmpfs, pages allocated ahead but never written count as holes too);
// stops at fn's first error.
Status ForEachHole(int fd, uint64_t from, uint64_t to, const std::string& what,
                   const std::function<Status(uint64_t, uint64_t)>& fn);

}  // namespace upfs
