/*
 * libupfs-preload.so: runs unmodified dynamically linked programs on upfs.
 *
 * Loaded with LD_PRELOAD, it interposes the libc file API. Configuration is
 * read once, at load, from the environment:
 *   UPFS_DIR   regular files created under this directory become upfs files
 *   UPFS_MODE  strict (default) or sync: the consistency mode of new files
 * An existing upfs file is recognised (by its marker, or its magic) wherever
 * it is opened; every other file, and every other descriptor, goes to libc
 * untouched.
 *
 * A upfs descriptor is the kernel descriptor of the host file (see
 * posix/api.cc), so descriptor numbers never collide; g_fd_kind says which
 * descriptors are upfs with one relaxed byte load on the hot path.
 *
 * upfs_core is linked into this library with its libc calls renamed to
 * upfs_real_* (see CMakeLists.txt), so the engine's own open/pread/mmap/...
 * never come back here.
 *
 * The library, one concern per file:
 *   preload.c           this overview, and the constructors
 *   preload_internal.h  what the files share
 *   real_libc.c         libc's own functions (real_*), and the engine's
 *                       renamed libc calls (upfs_real_*)
 *   which_upfs.c        which descriptors and which files are upfs; UPFS_DIR
 *   open.c              the open family, creat, the mkstemp family
 *   io.c                read, write and their positioned, vectored and
 *                       checked forms, lseek, the kernel copy calls
 *   sync_size.c         fsync and friends, truncate, fallocate, fadvise
 *   stat.c              the stat family and statx
 *   attributes.c        chmod, chown and the time calls
 *   names.c             rename, unlink, remove
 *   descriptors.c       close, dup, fcntl, lockf, flock
 *   maps.c              mmap of upfs files, emulated
 *   stdio.c             FILE streams on upfs files, the standard streams
 *   exec.c              exec and spawn; descriptors inherited across exec
 *   exit.c              _exit and _Exit, which skip atexit
 *   preload_late.c      the late constructor (see below)
 *
 * Start-up is two constructors: upfs_preload_init, here, which must not use
 * the engine, and the one in preload_late.c, which runs after upfs_core's
 * C++ static initializers and calls upfs_preload_late_init.
 */
#include "preload_internal.h"

/* ------------------------------------------------------------ constructor */

__attribute__((constructor)) static void upfs_preload_init(void) {
  resolve_all_real();
  read_config();
  maps_init();
}

/* Called by the constructor in preload_late.c, which is linked after
 * upfs_core so that it runs after the engine's C++ static initializers. */
HIDDEN void upfs_preload_late_init(void) { adopt_inherited(); }
