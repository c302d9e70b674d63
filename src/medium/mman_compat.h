// Flag values of mmap(2) and madvise(2), by the kernel's numbers, for
// headers older than the kernel: glibc 2.36 (Debian 12) lacks
// MADV_COLLAPSE; the others it has, and are kept for older headers. A
// kernel that does not know one answers EINVAL, which the callers handle.
#pragma once

#include <sys/mman.h>

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
