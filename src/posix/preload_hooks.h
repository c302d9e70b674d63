/*
 * The C API's entry points that only the LD_PRELOAD layer (src/preload/)
 * calls: descriptor adoption, duplication, status flags, flock, maps and
 * unlink as the interposers need them. They are exported from libupfs.so
 * like the rest of the API (defined in posix/api.cc and posix/api_fd.cc),
 * but they are not part of the public header, include/upfs/upfs.h.
 *
 * C and C++: the preload library is C.
 */
#ifndef UPFS_POSIX_PRELOAD_HOOKS_H_
#define UPFS_POSIX_PRELOAD_HOOKS_H_

#include "upfs/upfs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* newfd is a kernel duplicate (dup, dup2, F_DUPFD) of the upfs descriptor
 * oldfd: registers it as a upfs descriptor of the same open file
 * description, which the two share from then on as in the kernel: offset,
 * access mode and O_APPEND, flock locks. Returns newfd or -1. */
int upfs_adopt_dup(int oldfd, int newfd);

/* Makes host_fd, an open descriptor of a regular host file, a upfs
 * descriptor with the same number: the file must be a upfs file, or empty
 * with O_CREAT in flags (it is then formatted). flags gives the access mode,
 * O_APPEND, O_TRUNC and O_CREAT. Returns host_fd, or -1 with host_fd left
 * open (a non-empty plain file opened with O_CREAT | O_TRUNC has been
 * truncated to become a upfs file, as with upfs_open). Unlike upfs_open, no other descriptor of the file is
 * opened and closed, so the process's POSIX record locks on it survive. */
int upfs_open_host_fd(int host_fd, int flags, enum upfs_consistency consistency);

/* flock(2) on a upfs descriptor. The lock belongs to the open file
 * description, as in the kernel; it is taken on the file's shared-state
 * object, so it excludes flock through upfs in every process, not flock
 * of the host file by programs that bypass upfs. Returns 0 or -1. */
int upfs_flock(int fd, int op);

/* For a shared writable map of a upfs file: returns a new descriptor that
 * holds, until closed, the file's map lock, which one process at a time
 * may hold; -1 with EAGAIN if another process holds it. */
int upfs_map_guard(int fd);

/* upfs_unlinkat (upfs.h) also removes the shared state of a upfs file
 * whose last link goes, once no process has it open (as upfs_renameat2
 * does for the file a rename replaces). */

/* The access mode and O_APPEND of an inherited host descriptor of a upfs
 * file (after execve): what the upfs descriptor it was had, which its
 * read-only kernel description records (see upfs_host_fd). -1 on error. */
int upfs_inherited_flags(int host_fd);

/* Sets (on != 0) or clears O_APPEND on a upfs descriptor. Returns 0 or -1. */
int upfs_set_append(int fd, int on);

/* The access mode and O_APPEND of a upfs descriptor, or -1. */
int upfs_get_flags(int fd);

/* Before _exit/_Exit, which skip atexit: what exit would do for the
 * process's upfs files (removing shared state nobody else uses). Nothing in
 * a vfork child. */
void upfs_before_exit(void);

#ifdef __cplusplus
}
#endif

#endif /* UPFS_POSIX_PRELOAD_HOOKS_H_ */
