/*
 * What the source files of libupfs-preload.so share: libc's real functions,
 * the descriptor table, the helpers one concern lends another, and the
 * shapes most interposers share (FD_INTERPOSER, API_INTERPOSER).
 * preload.c describes the library and lists its files.
 *
 * Every source file of the library includes this header first: it sets the
 * feature macros the system headers depend on.
 */
#ifndef UPFS_PRELOAD_INTERNAL_H_
#define UPFS_PRELOAD_INTERNAL_H_

#define _GNU_SOURCE
/* glibc declares most pointer arguments nonnull, and GCC then deletes the
 * interposers' checks of them (-fno-delete-null-pointer-checks does not
 * stop it); programs do pass NULL, and the real call must then fail, not
 * crash here. cdefs.h defines __nonnull only if it is not defined. */
#define __nonnull(params)
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "posix/preload_hooks.h"
#include "upfs/upfs.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------- real libc (real_libc.c) */

#define REAL_FUNCS(X)                                                        \
  X(int, open, (const char *, int, ...))                                     \
  X(int, openat, (int, const char *, int, ...))                              \
  X(int, close, (int))                                                       \
  X(ssize_t, read, (int, void *, size_t))                                    \
  X(ssize_t, write, (int, const void *, size_t))                             \
  X(ssize_t, pread, (int, void *, size_t, off_t))                            \
  X(ssize_t, pwrite, (int, const void *, size_t, off_t))                     \
  X(ssize_t, readv, (int, const struct iovec *, int))                        \
  X(ssize_t, writev, (int, const struct iovec *, int))                       \
  X(ssize_t, preadv, (int, const struct iovec *, int, off_t))                \
  X(ssize_t, pwritev, (int, const struct iovec *, int, off_t))               \
  X(ssize_t, preadv2, (int, const struct iovec *, int, off_t, int))          \
  X(ssize_t, pwritev2, (int, const struct iovec *, int, off_t, int))         \
  X(off_t, lseek, (int, off_t, int))                                         \
  X(int, fsync, (int))                                                       \
  X(int, fdatasync, (int))                                                   \
  X(int, sync_file_range, (int, off_t, off_t, unsigned int))                 \
  X(int, ftruncate, (int, off_t))                                            \
  X(int, truncate, (const char *, off_t))                                    \
  X(int, fallocate, (int, int, off_t, off_t))                                \
  X(int, posix_fallocate, (int, off_t, off_t))                               \
  X(int, posix_fadvise, (int, off_t, off_t, int))                            \
  X(ssize_t, readahead, (int, off64_t, size_t))                              \
  X(int, fstat, (int, struct stat *))                                        \
  X(int, fstatat, (int, const char *, struct stat *, int))                   \
  X(int, statx, (int, const char *, int, unsigned int, struct statx *))      \
  X(int, chmod, (const char *, mode_t))                                      \
  X(int, fchmod, (int, mode_t))                                              \
  X(int, fchmodat, (int, const char *, mode_t, int))                         \
  X(int, chown, (const char *, uid_t, gid_t))                                \
  X(int, lchown, (const char *, uid_t, gid_t))                               \
  X(int, fchown, (int, uid_t, gid_t))                                        \
  X(int, fchownat, (int, const char *, uid_t, gid_t, int))                   \
  X(int, utimensat, (int, const char *, const struct timespec[2], int))      \
  X(int, futimens, (int, const struct timespec[2]))                          \
  X(int, unlink, (const char *))                                             \
  X(int, unlinkat, (int, const char *, int))                                 \
  X(int, rmdir, (const char *))                                              \
  X(int, dup, (int))                                                         \
  X(int, dup2, (int, int))                                                   \
  X(int, dup3, (int, int, int))                                              \
  X(int, lockf, (int, int, off_t))                                           \
  X(int, fcntl, (int, int, ...))                                             \
  X(void *, mmap, (void *, size_t, int, int, int, off_t))                    \
  X(ssize_t, copy_file_range, (int, off64_t *, int, off64_t *, size_t, unsigned int)) \
  X(ssize_t, sendfile, (int, int, off_t *, size_t))                          \
  X(ssize_t, splice, (int, off64_t *, int, off64_t *, size_t, unsigned int)) \
  X(FILE *, fdopen, (int, const char *))                                     \
  X(FILE *, freopen, (const char *, const char *, FILE *))                   \
  X(int, execve, (const char *, char *const[], char *const[]))               \
  X(int, execv, (const char *, char *const[]))                               \
  X(int, execvp, (const char *, char *const[]))                              \
  X(int, execvpe, (const char *, char *const[], char *const[]))             \
  X(int, flock, (int, int))                                                  \
  X(int, rename, (const char *, const char *))                               \
  X(int, renameat, (int, const char *, int, const char *))                   \
  X(int, renameat2, (int, const char *, int, const char *, unsigned int))    \
  X(int, munmap, (void *, size_t))                                           \
  X(int, msync, (void *, size_t, int))                                       \
  X(void *, mremap, (void *, size_t, size_t, int, ...))                      \
  X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
                       const posix_spawnattr_t *, char *const[], char *const[]))  \
  X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
                        const posix_spawnattr_t *, char *const[], char *const[])) \
  X(void, _exit, (int))                                                      \
  X(void, _Exit, (int))

/* real_open, real_read...: libc's functions, found with dlsym(RTLD_NEXT). */
#define DECLARE_REAL(ret, name, args) extern HIDDEN ret(*real_##name) args;
REAL_FUNCS(DECLARE_REAL)
#undef DECLARE_REAL

/* libc's function `name`; aborts the process if there is none. */
HIDDEN void *resolve_real(const char *name);
/* Resolves every real_* not resolved yet (the constructor). */
HIDDEN void resolve_all_real(void);

/* Resolved in the constructor; lazily too, for calls made by libraries
 * whose constructors run before ours. */
#define REAL(name)                                                                  \
  (LIKELY(__atomic_load_n(&real_##name, __ATOMIC_RELAXED) != NULL)                 \
       ? real_##name                                                                \
       : (__atomic_store_n(&real_##name, (__typeof__(real_##name))resolve_real(#name), \
                           __ATOMIC_RELAXED),                                       \
          real_##name))

/* ---------------------------------------------------- variadic arguments */

/* The mode argument of an open variant, present only when it creates. */
static inline mode_t va_mode(int flags, va_list ap) {
  return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}
/* In a function (..., int flags, ...) of the open family: its mode. */
#define VA_OPEN_MODE(flags)             \
  __extension__({                       \
    va_list ap_;                        \
    va_start(ap_, flags);               \
    mode_t mode_ = va_mode(flags, ap_); \
    va_end(ap_);                        \
    mode_;                              \
  })
/* In a function (..., int cmd, ...) of the fcntl family: its argument. */
#define VA_FCNTL_ARG(cmd)             \
  __extension__({                     \
    va_list ap_;                      \
    va_start(ap_, cmd);               \
    void *arg_ = va_arg(ap_, void *); \
    va_end(ap_);                      \
    arg_;                             \
  })

/* ---------------------------------- which descriptors are upfs (which_upfs.c) */

#define MAX_FD (1 << 20)
extern HIDDEN unsigned char g_fd_kind[MAX_FD]; /* 1: upfs descriptor */

static inline int is_upfs(int fd) {
  return (unsigned)fd < MAX_FD && __atomic_load_n(&g_fd_kind[fd], __ATOMIC_RELAXED) != 0;
}
static inline void mark(int fd, int on) {
  if ((unsigned)fd < MAX_FD) __atomic_store_n(&g_fd_kind[fd], on ? 1 : 0, __ATOMIC_RELAXED);
}

/* UPFS_DIR and UPFS_MODE, read from the environment (the constructor). */
HIDDEN void read_config(void);
/* UPFS_MODE: the consistency mode of the files the library creates. */
extern HIDDEN enum upfs_consistency g_mode;
/* The length of UPFS_DIR; 0: no directory, nothing is created as upfs. */
extern HIDDEN size_t g_dir_len;

/* A host file can only be a upfs file if it is regular and block-sized. */
HIDDEN int size_candidate(const struct stat *st);
/* Does the host file carry the upfs marker (S_ISVTX on a candidate)? */
HIDDEN int marked(const struct stat *st);
/* Does the open regular file kfd carry the upfs magic? readable: kfd may
 * be read (else the file is reopened for reading). errno is kept. */
HIDDEN int has_magic(int kfd, int readable);
/* Is the file open as kfd located (physically) under UPFS_DIR? */
HIDDEN int under_dir(int kfd);
/* Makes the open host file kfd a upfs descriptor, in place. Returns kfd,
 * or -1 with kfd still open. */
HIDDEN int upfs_from_kfd(int kfd, int flags);

/* ------------------------------------------------------------ shared helpers */

/* The result of a upfs_* call that fails with -1 and errno; errno is left
 * as the caller had it on success, as libc does. */
static inline int keep_errno(int saved, int r) {
  if (r == 0) errno = saved;
  return r;
}

/* The open protocol shared by every open variant (open.c). */
HIDDEN int do_open(int dirfd, const char *path, int flags, mode_t mode);

/* descriptors.c: close of a upfs descriptor; fcntl; dup2/dup3 (is_dup2:
 * dup2's rules). */
HIDDEN int close_upfs(int fd);
HIDDEN int do_fcntl(int fd, int cmd, void *arg);
HIDDEN int do_dup3(int oldfd, int newfd, int flags, int is_dup2);

/* stdio.c: puts the standard stream of fd (0, 1 or 2) right after fd
 * became, or stopped being, a upfs descriptor. */
HIDDEN void std_streams_follow(int fd);
/* Called on every descriptor a call produces; returns fd. */
static inline int follow_std(int fd) {
  if ((unsigned)fd <= 2) std_streams_follow(fd);
  return fd;
}

/* maps.c: keeps the map table's lock consistent across fork. */
HIDDEN void maps_init(void);

/* exec.c: makes the upfs descriptors inherited across exec upfs again. */
HIDDEN void adopt_inherited(void);

/* ------------------------------------------------------- interposer shapes */

/* The interposer of a descriptor call, in its most common shape: a upfs
 * descriptor `fd` goes to on_upfs, any other to libc's `real`, with the
 * same arguments. For example
 *   FD_INTERPOSER(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n),
 *                 upfs_read, read)
 * is read(), which calls upfs_read(fd, buf, n) or real_read(fd, buf, n). */
#define FD_INTERPOSER(ret, name, params, args, on_upfs, real) \
  EXPORT ret name params {                                    \
    if (UNLIKELY(is_upfs(fd))) return on_upfs args;           \
    return REAL(real) args;                                   \
  }

/* The interposer that is one C API call for every file, the call itself
 * telling a upfs file from any other (upfs_fstatat, upfs_chmod...). The
 * call fails with -1 and errno; on success errno is left as the caller had
 * it, as libc does. For example
 *   API_INTERPOSER(chmod, (const char *path, mode_t mode), upfs_chmod(path, mode)) */
#define API_INTERPOSER(name, params, call) \
  EXPORT int name params {                 \
    int saved = errno;                     \
    return keep_errno(saved, call);        \
  }

#endif /* UPFS_PRELOAD_INTERNAL_H_ */
