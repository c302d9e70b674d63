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
 */
#define _GNU_SOURCE
/* glibc declares most pointer arguments nonnull, and GCC then deletes the
 * interposers' checks of them (-fno-delete-null-pointer-checks does not
 * stop it); programs do pass NULL, and the real call must then fail, not
 * crash here. cdefs.h defines __nonnull only if it is not defined. */
#define __nonnull(params)
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <utime.h>

#include "posix/preload_hooks.h"
#include "upfs/upfs.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---------------------------------------------------------------- real libc */

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
                        const posix_spawnattr_t *, char *const[], char *const[]))

#define DECLARE_REAL(ret, name, args) static ret(*real_##name) args;
REAL_FUNCS(DECLARE_REAL)

static void *resolve(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) {
    static const char msg[] = "libupfs-preload: a libc function is missing\n";
    ssize_t ignored = syscall(SYS_write, 2, msg, sizeof(msg) - 1);
    (void)ignored;
    abort();
  }
  return p;
}

/* Resolved in the constructor; lazily too, for calls made by libraries
 * whose constructors run before ours. */
#define REAL(name)                                                                  \
  (LIKELY(__atomic_load_n(&real_##name, __ATOMIC_RELAXED) != NULL)                 \
       ? real_##name                                                                \
       : (__atomic_store_n(&real_##name, (__typeof__(real_##name))resolve(#name),   \
                           __ATOMIC_RELAXED),                                       \
          real_##name))

/* The mode argument of an open variant, present only when it creates. */
static mode_t va_mode(int flags, va_list ap) {
  return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

/* The engine's libc calls, renamed by objcopy (src/preload/renames.txt;
 * check_renames.sh fails the build if the engine calls anything else this
 * library interposes). */
HIDDEN int upfs_real_open(const char *p, int f, ...) {
  va_list ap;
  va_start(ap, f);
  mode_t m = va_mode(f, ap);
  va_end(ap);
  return REAL(open)(p, f, m);
}
HIDDEN int upfs_real_openat(int d, const char *p, int f, ...) {
  va_list ap;
  va_start(ap, f);
  mode_t m = va_mode(f, ap);
  va_end(ap);
  return REAL(openat)(d, p, f, m);
}
HIDDEN int upfs_real_fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return REAL(fcntl)(fd, cmd, arg);
}
HIDDEN int upfs_real_close(int fd) { return REAL(close)(fd); }
HIDDEN ssize_t upfs_real_pread(int fd, void *b, size_t n, off_t o) {
  return REAL(pread)(fd, b, n, o);
}
HIDDEN ssize_t upfs_real_pwrite(int fd, const void *b, size_t n, off_t o) {
  return REAL(pwrite)(fd, b, n, o);
}
HIDDEN int upfs_real_ftruncate(int fd, off_t l) { return REAL(ftruncate)(fd, l); }
HIDDEN int upfs_real_truncate(const char *p, off_t l) { return REAL(truncate)(p, l); }
HIDDEN int upfs_real_dup3(int o, int n, int f) { return REAL(dup3)(o, n, f); }
HIDDEN int upfs_real_posix_fallocate(int fd, off_t o, off_t l) {
  return REAL(posix_fallocate)(fd, o, l);
}
HIDDEN int upfs_real_fstat(int fd, struct stat *st) { return REAL(fstat)(fd, st); }
HIDDEN int upfs_real_fstatat(int d, const char *p, struct stat *st, int f) {
  return REAL(fstatat)(d, p, st, f);
}
HIDDEN void *upfs_real_mmap(void *a, size_t l, int p, int f, int fd, off_t o) {
  return REAL(mmap)(a, l, p, f, fd, o);
}
HIDDEN int upfs_real_munmap(void *a, size_t l) { return REAL(munmap)(a, l); }
HIDDEN int upfs_real_msync(void *a, size_t l, int f) { return REAL(msync)(a, l, f); }
HIDDEN int upfs_real_flock(int fd, int op) { return REAL(flock)(fd, op); }
HIDDEN int upfs_real_chmod(const char *p, mode_t m) { return REAL(chmod)(p, m); }
HIDDEN int upfs_real_fchmod(int fd, mode_t m) { return REAL(fchmod)(fd, m); }
HIDDEN int upfs_real_fchmodat(int d, const char *p, mode_t m, int f) {
  return REAL(fchmodat)(d, p, m, f);
}
HIDDEN int upfs_real_chown(const char *p, uid_t u, gid_t g) { return REAL(chown)(p, u, g); }
HIDDEN int upfs_real_lchown(const char *p, uid_t u, gid_t g) { return REAL(lchown)(p, u, g); }
HIDDEN int upfs_real_fchown(int fd, uid_t u, gid_t g) { return REAL(fchown)(fd, u, g); }
HIDDEN int upfs_real_fchownat(int d, const char *p, uid_t u, gid_t g, int f) {
  return REAL(fchownat)(d, p, u, g, f);
}
HIDDEN int upfs_real_utimensat(int d, const char *p, const struct timespec t[2], int f) {
  return REAL(utimensat)(d, p, t, f);
}
HIDDEN int upfs_real_futimens(int fd, const struct timespec t[2]) { return REAL(futimens)(fd, t); }
HIDDEN int upfs_real_unlinkat(int d, const char *p, int f) { return REAL(unlinkat)(d, p, f); }
HIDDEN int upfs_real_renameat2(int od, const char *op, int nd, const char *np, unsigned f) {
  return REAL(renameat2)(od, op, nd, np, f);
}

/* ------------------------------------------------------------ configuration */

static char g_dir[PATH_MAX];
static size_t g_dir_len; /* 0: no directory, nothing is created as upfs */
static enum upfs_consistency g_mode = UPFS_STRICT;

/* ------------------------------------------------------- descriptor table */

#define MAX_FD (1 << 20)
static unsigned char g_fd_kind[MAX_FD]; /* 1: upfs descriptor */

static inline int is_upfs(int fd) {
  return (unsigned)fd < MAX_FD && __atomic_load_n(&g_fd_kind[fd], __ATOMIC_RELAXED) != 0;
}
static inline void mark(int fd, int on) {
  if ((unsigned)fd < MAX_FD) __atomic_store_n(&g_fd_kind[fd], on ? 1 : 0, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ helpers */

/* Standard streams on upfs descriptors (defined with stdio, below). */
static void std_streams_follow(int fd);
static inline int follow_std(int fd) {
  if ((unsigned)fd <= 2) std_streams_follow(fd);
  return fd;
}

static const unsigned char kMagic[8] = {'U', 'P', 'F', 'S', 0x01, '\r', '\n', 0x1a};

static void proc_path(char *buf, size_t n, int fd) { snprintf(buf, n, "/proc/self/fd/%d", fd); }

/* A host file can only be a upfs file if it is regular and block-sized. */
static int size_candidate(const struct stat *st) {
  return S_ISREG(st->st_mode) && st->st_size >= 4096 && (st->st_size & 4095) == 0;
}
/* The marker of a upfs host file (container/perfile.h): S_ISVTX on a
 * regular file. It tells a upfs file by fstat alone, without reading it
 * (which a caller may not be allowed to do, and which would change its
 * atime); unmarked files of earlier versions are told by their magic. */
static int marked(const struct stat *st) {
  return (st->st_mode & S_ISVTX) != 0 && size_candidate(st);
}

/* Does the open regular file kfd carry the upfs magic? */
static int has_magic(int kfd, int readable) {
  unsigned char m[sizeof(kMagic)];
  int saved = errno;
  int rfd = kfd;
  if (!readable) {
    char p[64];
    proc_path(p, sizeof(p), kfd);
    rfd = REAL(open)(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (rfd < 0) {
      errno = saved;
      return 0;
    }
  }
  int r = REAL(pread)(rfd, m, sizeof(m), 0) == (ssize_t)sizeof(m) &&
          memcmp(m, kMagic, sizeof(m)) == 0;
  if (rfd != kfd) REAL(close)(rfd);
  errno = saved;
  return r;
}

/* The result of a upfs_* call that fails with -1 and errno; errno is left
 * as the caller had it on success, as libc does. */
static inline int keep_errno(int saved, int r) {
  if (r == 0) errno = saved;
  return r;
}

/* Is the file open as kfd located (physically) under UPFS_DIR? */
static int under_dir(int kfd) {
  if (!g_dir_len) return 0;
  char p[64], target[PATH_MAX];
  proc_path(p, sizeof(p), kfd);
  ssize_t n = readlink(p, target, sizeof(target) - 1);
  if (n <= 0) return 0;
  target[n] = 0;
  if (g_dir_len == 1) return target[0] == '/';
  return (size_t)n > g_dir_len && memcmp(target, g_dir, g_dir_len) == 0 &&
         target[g_dir_len] == '/';
}

/* Makes the open host file kfd a upfs descriptor, in place: no other
 * descriptor of the file is opened and closed, which would drop the
 * process's POSIX record locks on it. kfd carries the caller's O_APPEND
 * (upfs never writes through it), so F_GETFL reports it and it survives
 * execve. */
static int upfs_from_kfd(int kfd, int flags) {
  if (upfs_open_host_fd(kfd, flags & (O_ACCMODE | O_APPEND | O_TRUNC | O_CREAT), g_mode) < 0)
    return -1;
  mark(kfd, 1);
  return kfd;
}

/* The mode the kernel would have given a file created with `mode`, when it
 * was created with owner read and write added (st: its attributes then;
 * umask and default ACLs applied), plus `extra` (the upfs marker). */
static void fix_new_mode(int kfd, const struct stat *st, mode_t mode, mode_t extra) {
  const mode_t added = (S_IRUSR | S_IWUSR) & ~mode;
  if (!added) return;
  REAL(fchmod)(kfd, ((st->st_mode & 07777) & ~added) | extra);
}

static int do_open_fd(int dirfd, const char *path, int flags, mode_t mode);
/* The open protocol shared by every open variant. */
static int do_open(int dirfd, const char *path, int flags, mode_t mode) {
  return follow_std(do_open_fd(dirfd, path, flags, mode));
}
static int do_open_fd(int dirfd, const char *path, int flags, mode_t mode) {
  if (!path || (flags & (O_PATH | O_DIRECTORY)) || (flags & __O_TMPFILE) == __O_TMPFILE)
    return REAL(openat)(dirfd, path, flags, mode);
  int saved = errno;
  /* O_TRUNC would drop a upfs file's metadata; O_DIRECT would make the
   * magic unreadable. Both are applied below once the file is known. */
  int kflags = flags & ~(O_TRUNC | O_DIRECT);
  int created = 0;
  int kfd;
  /* A new file is created with owner read and write, so that upfs can map
   * it whatever mode was asked for (the kernel lets a creator write the
   * file it creates); the mode is then put right (fix_new_mode). */
  const mode_t cmode = mode | S_IRUSR | S_IWUSR;
  if ((flags & O_CREAT) && g_dir_len) {
    if (flags & O_EXCL) {
      kfd = REAL(openat)(dirfd, path, kflags, cmode);
      created = kfd >= 0;
    } else {
      kfd = REAL(openat)(dirfd, path, kflags & ~O_CREAT, mode);
      if (kfd < 0 && errno == ENOENT) {
        kfd = REAL(openat)(dirfd, path, kflags | O_EXCL, cmode);
        if (kfd >= 0)
          created = 1;
        else if (errno == EEXIST) /* a race, or a dangling symlink */
          kfd = REAL(openat)(dirfd, path, kflags, mode);
      }
    }
  } else {
    kfd = REAL(openat)(dirfd, path, kflags, mode);
  }
  if (kfd < 0) return -1;
  struct stat st;
  if (REAL(fstat)(kfd, &st) != 0 || !S_ISREG(st.st_mode)) {
    errno = saved;
    return kfd;
  }
  int acc = flags & O_ACCMODE;
  if (created && st.st_size == 0 && under_dir(kfd)) {
    if (upfs_from_kfd(kfd, (flags & ~O_TRUNC) | O_CREAT) < 0) {
      int err = errno;
      REAL(close)(kfd);
      REAL(unlinkat)(dirfd, path, 0);
      errno = err;
      return -1;
    }
    fix_new_mode(kfd, &st, mode, S_ISVTX);
    errno = saved;
    return kfd;
  }
  if (created) fix_new_mode(kfd, &st, mode, 0);
  /* A marked file is used as a upfs file or refused (never written as
   * plain bytes), whatever the caller may read. */
  if (marked(&st) || (size_candidate(&st) && (upfs_stat_if_open(&st, NULL) == 1 ||
                                              has_magic(kfd, acc != O_WRONLY)))) {
    if (upfs_from_kfd(kfd, flags & ~O_CREAT) < 0) {
      int err = errno;
      REAL(close)(kfd);
      errno = err;
      return -1;
    }
    errno = saved;
    return kfd;
  }
  if ((flags & O_DIRECT) && REAL(fcntl)(kfd, F_SETFL, REAL(fcntl)(kfd, F_GETFL) | O_DIRECT) != 0) {
    int err = errno;
    REAL(close)(kfd);
    errno = err;
    return -1;
  }
  if ((flags & O_TRUNC) && st.st_size > 0) {
    if (acc != O_RDONLY) {
      if (REAL(ftruncate)(kfd, 0) != 0) {
        int err = errno;
        REAL(close)(kfd);
        errno = err;
        return -1;
      }
    } else {
      REAL(close)(kfd);
      return REAL(openat)(dirfd, path, flags, mode);
    }
  }
  errno = saved;
  return kfd;
}


/* ------------------------------------------------------------------- open */

EXPORT int open(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t m = va_mode(flags, ap);
  va_end(ap);
  return do_open(AT_FDCWD, path, flags, m);
}
EXPORT int open64(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t m = va_mode(flags, ap);
  va_end(ap);
  return do_open(AT_FDCWD, path, flags | O_LARGEFILE, m);
}
EXPORT int openat(int dirfd, const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t m = va_mode(flags, ap);
  va_end(ap);
  return do_open(dirfd, path, flags, m);
}
EXPORT int openat64(int dirfd, const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t m = va_mode(flags, ap);
  va_end(ap);
  return do_open(dirfd, path, flags | O_LARGEFILE, m);
}
EXPORT int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
EXPORT int __open64_2(const char *path, int flags) {
  return do_open(AT_FDCWD, path, flags | O_LARGEFILE, 0);
}
EXPORT int __openat_2(int dirfd, const char *path, int flags) {
  return do_open(dirfd, path, flags, 0);
}
EXPORT int __openat64_2(int dirfd, const char *path, int flags) {
  return do_open(dirfd, path, flags | O_LARGEFILE, 0);
}
EXPORT int creat(const char *path, mode_t mode) {
  return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
EXPORT int creat64(const char *path, mode_t mode) {
  return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC | O_LARGEFILE, mode);
}

/* glibc's mkstemp family opens its file from inside libc, past the
 * interposers: done here instead, so a temporary file made under UPFS_DIR
 * (sed -i, sort, editors' atomic saves) is a upfs file like any other. */
static int do_mkstemp(char *tmpl, int suffixlen, int flags) {
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  size_t len = tmpl ? strlen(tmpl) : 0;
  if (suffixlen < 0 || len < (size_t)suffixlen + 6 ||
      memcmp(tmpl + len - (size_t)suffixlen - 6, "XXXXXX", 6) != 0 ||
      (flags & ~(O_APPEND | O_CLOEXEC | O_DIRECT | O_DSYNC | O_LARGEFILE | O_NOATIME | O_NOCTTY |
                 O_NONBLOCK | O_SYNC))) {
    errno = EINVAL;
    return -1;
  }
  char *x = tmpl + len - (size_t)suffixlen - 6;
  for (int attempt = 0; attempt < 62 * 62 * 62; ++attempt) {
    uint64_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
      r = __builtin_ia32_rdtsc() * 0x9e3779b97f4a7c15ull + (uint64_t)attempt;
    for (int i = 0; i < 6; ++i, r /= 62) x[i] = letters[r % 62];
    int fd = do_open(AT_FDCWD, tmpl, O_RDWR | O_CREAT | O_EXCL | flags, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}
EXPORT int mkstemp(char *tmpl) { return do_mkstemp(tmpl, 0, 0); }
EXPORT int mkstemp64(char *tmpl) { return do_mkstemp(tmpl, 0, 0); }
EXPORT int mkostemp(char *tmpl, int flags) { return do_mkstemp(tmpl, 0, flags); }
EXPORT int mkostemp64(char *tmpl, int flags) { return do_mkstemp(tmpl, 0, flags); }
EXPORT int mkstemps(char *tmpl, int suffixlen) { return do_mkstemp(tmpl, suffixlen, 0); }
EXPORT int mkstemps64(char *tmpl, int suffixlen) { return do_mkstemp(tmpl, suffixlen, 0); }
EXPORT int mkostemps(char *tmpl, int suffixlen, int flags) {
  return do_mkstemp(tmpl, suffixlen, flags);
}
EXPORT int mkostemps64(char *tmpl, int suffixlen, int flags) {
  return do_mkstemp(tmpl, suffixlen, flags);
}

/* ------------------------------------------------------------------ close */

static int close_upfs(int fd) {
  mark(fd, 0);
  return upfs_close(fd);
}

EXPORT int close(int fd) {
  if (UNLIKELY(is_upfs(fd))) return close_upfs(fd);
  return REAL(close)(fd);
}

/* ------------------------------------------------------------- read/write */

EXPORT ssize_t read(int fd, void *buf, size_t n) {
  if (UNLIKELY(is_upfs(fd))) return upfs_read(fd, buf, n);
  return REAL(read)(fd, buf, n);
}
EXPORT ssize_t write(int fd, const void *buf, size_t n) {
  if (UNLIKELY(is_upfs(fd))) return upfs_write(fd, buf, n);
  return REAL(write)(fd, buf, n);
}
EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off) {
  if (UNLIKELY(is_upfs(fd))) return upfs_pread(fd, buf, n, off);
  return REAL(pread)(fd, buf, n, off);
}
EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t off) {
  if (UNLIKELY(is_upfs(fd))) return upfs_pread(fd, buf, n, off);
  return REAL(pread)(fd, buf, n, off);
}
EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  if (UNLIKELY(is_upfs(fd))) return upfs_pwrite(fd, buf, n, off);
  return REAL(pwrite)(fd, buf, n, off);
}
EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
  if (UNLIKELY(is_upfs(fd))) return upfs_pwrite(fd, buf, n, off);
  return REAL(pwrite)(fd, buf, n, off);
}
extern void __chk_fail(void) __attribute__((noreturn));
EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}
EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}
EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}

/* Vectored I/O on a upfs descriptor goes through one bounce buffer so that
 * it stays a single (atomic, in strict mode) upfs call. */
static ssize_t iov_total(const struct iovec *iov, int cnt) {
  if (cnt < 0 || cnt > IOV_MAX) {
    errno = EINVAL;
    return -1;
  }
  size_t t = 0;
  for (int i = 0; i < cnt; ++i) {
    if (__builtin_add_overflow(t, iov[i].iov_len, &t) || t > SSIZE_MAX) {
      errno = EINVAL;
      return -1;
    }
  }
  return (ssize_t)t;
}

/* off < 0: at the descriptor's offset. */
static ssize_t upfs_readv_at(int fd, const struct iovec *iov, int cnt, off_t off) {
  ssize_t t = iov_total(iov, cnt);
  if (t < 0) return -1;
  if (cnt == 1) return off < 0 ? upfs_read(fd, iov[0].iov_base, iov[0].iov_len)
                               : upfs_pread(fd, iov[0].iov_base, iov[0].iov_len, off);
  char *b = malloc(t ? (size_t)t : 1);
  if (!b) {
    errno = ENOMEM;
    return -1;
  }
  ssize_t r = off < 0 ? upfs_read(fd, b, (size_t)t) : upfs_pread(fd, b, (size_t)t, off);
  if (r > 0) {
    size_t done = 0;
    for (int i = 0; i < cnt && done < (size_t)r; ++i) {
      size_t c = iov[i].iov_len < (size_t)r - done ? iov[i].iov_len : (size_t)r - done;
      memcpy(iov[i].iov_base, b + done, c);
      done += c;
    }
  }
  int err = errno;
  free(b);
  errno = err;
  return r;
}

static ssize_t upfs_writev_at(int fd, const struct iovec *iov, int cnt, off_t off) {
  ssize_t t = iov_total(iov, cnt);
  if (t < 0) return -1;
  if (cnt == 1) return off < 0 ? upfs_write(fd, iov[0].iov_base, iov[0].iov_len)
                               : upfs_pwrite(fd, iov[0].iov_base, iov[0].iov_len, off);
  char *b = malloc(t ? (size_t)t : 1);
  if (!b) {
    errno = ENOMEM;
    return -1;
  }
  size_t done = 0;
  for (int i = 0; i < cnt; ++i) {
    memcpy(b + done, iov[i].iov_base, iov[i].iov_len);
    done += iov[i].iov_len;
  }
  ssize_t r = off < 0 ? upfs_write(fd, b, (size_t)t) : upfs_pwrite(fd, b, (size_t)t, off);
  int err = errno;
  free(b);
  errno = err;
  return r;
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
  if (UNLIKELY(is_upfs(fd))) return upfs_readv_at(fd, iov, cnt, -1);
  return REAL(readv)(fd, iov, cnt);
}
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  if (UNLIKELY(is_upfs(fd))) return upfs_writev_at(fd, iov, cnt, -1);
  return REAL(writev)(fd, iov, cnt);
}
static ssize_t checked_off(off_t off) {
  if (off < 0) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}
EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
  if (UNLIKELY(is_upfs(fd)))
    return checked_off(off) ? -1 : upfs_readv_at(fd, iov, cnt, off);
  return REAL(preadv)(fd, iov, cnt, off);
}
EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  return preadv(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
  if (UNLIKELY(is_upfs(fd)))
    return checked_off(off) ? -1 : upfs_writev_at(fd, iov, cnt, off);
  return REAL(pwritev)(fd, iov, cnt, off);
}
EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
  return pwritev(fd, iov, cnt, off);
}
/* RWF_HIPRI, RWF_DSYNC and RWF_SYNC are satisfied by every upfs write;
 * RWF_NOWAIT and RWF_APPEND are not supported on upfs descriptors. */
static int rwf_ok(int flags) {
  if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC)) {
    errno = EOPNOTSUPP;
    return 0;
  }
  return 1;
}
EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (!rwf_ok(flags)) return -1;
    if (off < -1) return checked_off(off);
    return upfs_readv_at(fd, iov, cnt, off);
  }
  return REAL(preadv2)(fd, iov, cnt, off, flags);
}
EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
  return preadv2(fd, iov, cnt, off, flags);
}
EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (!rwf_ok(flags)) return -1;
    if (off < -1) return checked_off(off);
    return upfs_writev_at(fd, iov, cnt, off);
  }
  return REAL(pwritev2)(fd, iov, cnt, off, flags);
}
EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
  return pwritev2(fd, iov, cnt, off, flags);
}

EXPORT off_t lseek(int fd, off_t off, int whence) {
  if (UNLIKELY(is_upfs(fd))) return upfs_lseek(fd, off, whence);
  return REAL(lseek)(fd, off, whence);
}
EXPORT off64_t lseek64(int fd, off64_t off, int whence) { return lseek(fd, off, whence); }

/* ------------------------------------------------------- sync and size */

EXPORT int fsync(int fd) {
  if (UNLIKELY(is_upfs(fd))) return upfs_fsync(fd);
  return REAL(fsync)(fd);
}
EXPORT int fdatasync(int fd) {
  if (UNLIKELY(is_upfs(fd))) return upfs_fdatasync(fd);
  return REAL(fdatasync)(fd);
}
EXPORT int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags) {
  if (UNLIKELY(is_upfs(fd))) {
    if (off < 0 || n < 0 || (flags & ~(SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                       SYNC_FILE_RANGE_WAIT_AFTER))) {
      errno = EINVAL;
      return -1;
    }
    /* Data is already in the medium; only a waiting call makes it durable
     * on page-cache media, as fdatasync would. */
    return (flags & SYNC_FILE_RANGE_WAIT_AFTER) ? upfs_fdatasync(fd) : 0;
  }
  return REAL(sync_file_range)(fd, off, n, flags);
}
EXPORT int ftruncate(int fd, off_t len) {
  if (UNLIKELY(is_upfs(fd))) return upfs_ftruncate(fd, len);
  return REAL(ftruncate)(fd, len);
}
EXPORT int ftruncate64(int fd, off64_t len) { return ftruncate(fd, len); }

/* upfs_truncate truncates a upfs file through upfs, anything else with the
 * kernel's truncate. */
EXPORT int truncate(const char *path, off_t len) {
  int saved = errno;
  return keep_errno(saved, upfs_truncate(path, len));
}
EXPORT int truncate64(const char *path, off64_t len) { return truncate(path, len); }

EXPORT int fallocate(int fd, int mode, off_t off, off_t len) {
  if (UNLIKELY(is_upfs(fd))) return upfs_fallocate(fd, mode, off, len);
  return REAL(fallocate)(fd, mode, off, len);
}
EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) {
  return fallocate(fd, mode, off, len);
}
EXPORT int posix_fallocate(int fd, off_t off, off_t len) {
  if (UNLIKELY(is_upfs(fd))) {
    int saved = errno;
    int r = upfs_fallocate(fd, 0, off, len) == 0 ? 0 : errno;
    errno = saved;
    return r;
  }
  return REAL(posix_fallocate)(fd, off, len);
}
EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) {
  return posix_fallocate(fd, off, len);
}
EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  if (UNLIKELY(is_upfs(fd))) {
    if (advice < POSIX_FADV_NORMAL || advice > POSIX_FADV_NOREUSE || len < 0) return EINVAL;
    return 0; /* advice only */
  }
  return REAL(posix_fadvise)(fd, off, len, advice);
}
EXPORT int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) {
  return posix_fadvise(fd, off, len, advice);
}
EXPORT ssize_t readahead(int fd, off64_t off, size_t n) {
  if (UNLIKELY(is_upfs(fd))) return 0; /* the file is mapped already */
  return REAL(readahead)(fd, off, n);
}

/* ------------------------------------------------------------------- stat */

EXPORT int fstat(int fd, struct stat *st) {
  if (UNLIKELY(is_upfs(fd))) return upfs_fstat(fd, st);
  return REAL(fstat)(fd, st);
}
EXPORT int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
/* upfs_fstatat is the kernel's stat, with the upfs attributes (size,
 * blocks, times; the marker bit hidden) for a upfs file. It costs nothing
 * more for a file that cannot be one (not regular, or not block-sized and
 * unmarked). */
EXPORT int stat(const char *path, struct stat *st) {
  int saved = errno;
  return keep_errno(saved, upfs_fstatat(AT_FDCWD, path, st, 0));
}
EXPORT int stat64(const char *path, struct stat64 *st) { return stat(path, (struct stat *)st); }
EXPORT int lstat(const char *path, struct stat *st) {
  int saved = errno;
  return keep_errno(saved, upfs_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW));
}
EXPORT int lstat64(const char *path, struct stat64 *st) { return lstat(path, (struct stat *)st); }
/* With AT_EMPTY_PATH, kernels since 6.11 take a null path as "". */
static int empty_path(const char *path, int flags) {
  return (flags & AT_EMPTY_PATH) && (!path || path[0] == 0);
}
EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags) {
  if (empty_path(path, flags) && is_upfs(dirfd)) return upfs_fstat(dirfd, st);
  if (!path) { /* the kernel decides whether that is EFAULT */
    int r = REAL(fstatat)(dirfd, path, st, flags);
    if (r != 0 || !S_ISREG(st->st_mode)) return r;
    path = "";
  }
  int saved = errno;
  return keep_errno(saved, upfs_fstatat(dirfd, path, st, flags));
}
EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
  return fstatat(dirfd, path, (struct stat *)st, flags);
}
/* The pre-2.33 glibc entry points, still used by old binaries. */
EXPORT int __xstat(int ver, const char *path, struct stat *st) { return stat(path, st); }
EXPORT int __xstat64(int ver, const char *path, struct stat64 *st) { return stat64(path, st); }
EXPORT int __lxstat(int ver, const char *path, struct stat *st) { return lstat(path, st); }
EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st) { return lstat64(path, st); }
EXPORT int __fxstat(int ver, int fd, struct stat *st) { return fstat(fd, st); }
EXPORT int __fxstat64(int ver, int fd, struct stat64 *st) { return fstat64(fd, st); }
EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) {
  return fstatat(dirfd, path, st, flags);
}
EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) {
  return fstatat64(dirfd, path, st, flags);
}

static void to_statx_ts(struct statx_timestamp *t, const struct timespec *ts) {
  t->tv_sec = ts->tv_sec;
  t->tv_nsec = (uint32_t)ts->tv_nsec;
}
static void fill_statx(struct statx *stx, const struct stat *st) {
  stx->stx_mode = (uint16_t)((stx->stx_mode & ~07777) | (st->st_mode & 07777));
  stx->stx_size = (uint64_t)st->st_size;
  stx->stx_blocks = (uint64_t)st->st_blocks;
  stx->stx_blksize = (uint32_t)st->st_blksize;
  to_statx_ts(&stx->stx_mtime, &st->st_mtim);
  to_statx_ts(&stx->stx_ctime, &st->st_ctim);
}
EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx) {
  int r = REAL(statx)(dirfd, path, flags, mask, stx);
  /* Only a file that may be a upfs file costs more: regular, and marked
   * (S_ISVTX, which upfs sets on its host files) or block-sized. */
  if (r != 0 || !S_ISREG(stx->stx_mode) ||
      (!(stx->stx_mode & S_ISVTX) && (stx->stx_size < 4096 || (stx->stx_size & 4095))))
    return r;
  int saved = errno;
  struct stat st;
  if (empty_path(path, flags) && is_upfs(dirfd)) {
    if (upfs_fstat(dirfd, &st) == 0) fill_statx(stx, &st);
  } else if (upfs_fstatat(dirfd, path ? path : "", &st,
                          flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT)) == 0 &&
             S_ISREG(st.st_mode)) {
    fill_statx(stx, &st);
  }
  errno = saved;
  return r;
}

/* ------------------------------------------------------------ attributes */

/* The upfs_* attribute calls apply the kernel's call to the host file, and
 * for a upfs file also bring what upfs keeps beside it (shared state,
 * mtime) into step; for anything else they are the kernel's call. */
EXPORT int chmod(const char *path, mode_t mode) {
  int saved = errno;
  return keep_errno(saved, upfs_chmod(path, mode));
}
EXPORT int fchmod(int fd, mode_t mode) {
  int saved = errno;
  return keep_errno(saved, upfs_fchmod(fd, mode));
}
EXPORT int fchmodat(int dirfd, const char *path, mode_t mode, int flags) {
  int saved = errno;
  return keep_errno(saved, upfs_fchmodat(dirfd, path, mode, flags));
}
/* glibc's lchmod is fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW). */
EXPORT int lchmod(const char *path, mode_t mode) {
  int saved = errno;
  return keep_errno(saved, upfs_fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW));
}
EXPORT int chown(const char *path, uid_t owner, gid_t group) {
  int saved = errno;
  return keep_errno(saved, upfs_chown(path, owner, group));
}
EXPORT int lchown(const char *path, uid_t owner, gid_t group) {
  int saved = errno;
  return keep_errno(saved, upfs_lchown(path, owner, group));
}
EXPORT int fchown(int fd, uid_t owner, gid_t group) {
  int saved = errno;
  return keep_errno(saved, upfs_fchown(fd, owner, group));
}
EXPORT int fchownat(int dirfd, const char *path, uid_t owner, gid_t group, int flags) {
  int saved = errno;
  return keep_errno(saved, upfs_fchownat(dirfd, path, owner, group, flags));
}

/* The utimensat system call, as glibc's time calls use it: a null path
 * means dirfd itself (futimens, futimes, futimesat(fd, NULL, ...)). */
static int do_utimens(int dirfd, const char *path, const struct timespec *ts, int flags) {
  int saved = errno;
  if (!path) {
    if (dirfd == AT_FDCWD) {
      errno = EFAULT;
      return -1;
    }
    if (flags) {
      errno = EINVAL;
      return -1;
    }
    return keep_errno(saved, upfs_futimens(dirfd, ts));
  }
  return keep_errno(saved, upfs_utimensat(dirfd, path, ts, flags));
}
/* glibc's conversion: NULL stays NULL (both times now); microseconds are
 * not range-checked here (the kernel checks the nanoseconds). */
static const struct timespec *tv_to_ts(const struct timeval *tv, struct timespec ts[2]) {
  if (!tv) return NULL;
  for (int i = 0; i < 2; ++i) {
    ts[i].tv_sec = tv[i].tv_sec;
    ts[i].tv_nsec = tv[i].tv_usec * 1000;
  }
  return ts;
}
EXPORT int utimensat(int dirfd, const char *path, const struct timespec times[2], int flags) {
  if (!path) { /* glibc refuses what the system call would take as futimens */
    errno = EINVAL;
    return -1;
  }
  return do_utimens(dirfd, path, times, flags);
}
EXPORT int futimens(int fd, const struct timespec times[2]) {
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  return do_utimens(fd, NULL, times, 0);
}
EXPORT int utime(const char *path, const struct utimbuf *times) {
  struct timespec ts[2];
  if (times) {
    ts[0].tv_sec = times->actime;
    ts[0].tv_nsec = 0;
    ts[1].tv_sec = times->modtime;
    ts[1].tv_nsec = 0;
  }
  return do_utimens(AT_FDCWD, path, times ? ts : NULL, 0);
}
EXPORT int utimes(const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(AT_FDCWD, path, tv_to_ts(tv, ts), 0);
}
EXPORT int lutimes(const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(AT_FDCWD, path, tv_to_ts(tv, ts), AT_SYMLINK_NOFOLLOW);
}
EXPORT int futimes(int fd, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(fd, NULL, tv_to_ts(tv, ts), 0);
}
EXPORT int futimesat(int dirfd, const char *path, const struct timeval tv[2]) {
  struct timespec ts[2];
  return do_utimens(dirfd, path, tv_to_ts(tv, ts), 0);
}

/* ---------------------------------------------------------- unlink, remove */

/* unlink that also removes the shared state of a upfs file's last link. */
/* upfs_unlinkat and upfs_renameat2 act like the kernel calls and also
 * remove the shared state of a upfs file that loses its last link. */
static int do_unlinkat(int dirfd, const char *path) {
  int saved = errno;
  if (upfs_unlinkat(dirfd, path) != 0) return -1;
  errno = saved;
  return 0;
}
static int do_renameat2(int od, const char *op, int nd, const char *np, unsigned int flags) {
  int saved = errno;
  if (upfs_renameat2(od, op, nd, np, flags) != 0) return -1;
  errno = saved;
  return 0;
}
EXPORT int rename(const char *op, const char *np) {
  return do_renameat2(AT_FDCWD, op, AT_FDCWD, np, 0);
}
EXPORT int renameat(int od, const char *op, int nd, const char *np) {
  return do_renameat2(od, op, nd, np, 0);
}
EXPORT int renameat2(int od, const char *op, int nd, const char *np, unsigned int flags) {
  return do_renameat2(od, op, nd, np, flags);
}
EXPORT int unlink(const char *path) { return do_unlinkat(AT_FDCWD, path); }
EXPORT int unlinkat(int dirfd, const char *path, int flags) {
  if (flags & AT_REMOVEDIR) return REAL(unlinkat)(dirfd, path, flags);
  if (flags) {
    errno = EINVAL;
    return -1;
  }
  return do_unlinkat(dirfd, path);
}
EXPORT int remove(const char *path) {
  int saved = errno;
  int r = do_unlinkat(AT_FDCWD, path);
  if (r != 0 && errno == EISDIR) {
    errno = saved;
    return REAL(rmdir)(path);
  }
  return r;
}

/* ------------------------------------------------------------- dup, fcntl */

/* newfd, a kernel duplicate of the upfs descriptor oldfd, becomes one too. */
static int adopt(int oldfd, int newfd) {
  if (newfd < 0) return newfd;
  if (upfs_adopt_dup(oldfd, newfd) < 0) {
    int err = errno;
    REAL(close)(newfd);
    errno = err;
    return -1;
  }
  mark(newfd, 1);
  return follow_std(newfd);
}

EXPORT int dup(int fd) {
  if (UNLIKELY(is_upfs(fd))) return adopt(fd, REAL(dup)(fd));
  return follow_std(REAL(dup)(fd));
}
/* dup2/dup3 onto a upfs descriptor close it the upfs way first. */
static int do_dup3(int oldfd, int newfd, int flags, int is_dup2) {
  if (oldfd == newfd) return is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
  if (UNLIKELY(is_upfs(newfd))) {
    if (REAL(fcntl)(oldfd, F_GETFD) < 0) return -1; /* EBADF, newfd untouched */
    close_upfs(newfd);
  }
  int r = is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
  if (r >= 0 && UNLIKELY(is_upfs(oldfd))) return adopt(oldfd, r);
  return follow_std(r);
}
EXPORT int dup2(int oldfd, int newfd) { return do_dup3(oldfd, newfd, 0, 1); }
EXPORT int dup3(int oldfd, int newfd, int flags) { return do_dup3(oldfd, newfd, flags, 0); }

static int do_fcntl(int fd, int cmd, void *arg) {
  if (LIKELY(!is_upfs(fd))) return REAL(fcntl)(fd, cmd, arg);
  switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      return adopt(fd, REAL(fcntl)(fd, cmd, arg));
    case F_SETFL: {
      int fl = (int)(intptr_t)arg;
      /* O_APPEND goes to upfs (mirrored on the kernel descriptor);
       * O_DIRECT means nothing for a mapped file. */
      int r = REAL(fcntl)(fd, F_SETFL, (void *)(intptr_t)(fl & ~O_DIRECT));
      if (r != 0) return r;
      return upfs_set_append(fd, fl & O_APPEND);
    }
    case F_GETFL: {
      /* The kernel descriptor is read-only (posix/host_descriptor.h): the
       * access mode is upfs's; O_APPEND and the rest are mirrored. */
      int kfl = REAL(fcntl)(fd, F_GETFL);
      int ufl = upfs_get_flags(fd);
      if (kfl < 0 || ufl < 0) return -1;
      return (kfl & ~O_ACCMODE) | (ufl & O_ACCMODE);
    }
    case F_SETLK:
    case F_SETLKW:
    case F_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
    case F_OFD_GETLK: {
      int saved = errno;
      if (upfs_fcntl_lock(fd, cmd, (struct flock *)arg) != 0) return -1;
      errno = saved;
      return 0;
    }
    case F_GETSIG:
      return 0; /* the kernel's holds the access mode; no signal-driven I/O */
    case F_SETSIG:
      errno = EINVAL; /* signal-driven I/O is not offered on upfs files */
      return -1;
    default:
      /* F_GETFD/F_SETFD and the rest act on the host file, with kernel
       * semantics. */
      return REAL(fcntl)(fd, cmd, arg);
  }
}

/* glibc's lockf calls fcntl from inside libc, past the interposer. */
static int do_lockf(int fd, int cmd, off_t len) {
  if (LIKELY(!is_upfs(fd))) return REAL(lockf)(fd, cmd, len);
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_whence = SEEK_CUR;
  fl.l_len = len;
  switch (cmd) {
    case F_TEST:
      fl.l_type = F_RDLCK;
      if (do_fcntl(fd, F_GETLK, &fl) != 0) return -1;
      if (fl.l_type == F_UNLCK || fl.l_pid == getpid()) return 0;
      errno = EACCES;
      return -1;
    case F_ULOCK:
      fl.l_type = F_UNLCK;
      return do_fcntl(fd, F_SETLK, &fl);
    case F_LOCK:
      fl.l_type = F_WRLCK;
      return do_fcntl(fd, F_SETLKW, &fl);
    case F_TLOCK:
      fl.l_type = F_WRLCK;
      return do_fcntl(fd, F_SETLK, &fl);
    default:
      errno = EINVAL;
      return -1;
  }
}
EXPORT int lockf(int fd, int cmd, off_t len) { return do_lockf(fd, cmd, len); }
EXPORT int lockf64(int fd, int cmd, off_t len) { return do_lockf(fd, cmd, len); }
EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return do_fcntl(fd, cmd, arg);
}
EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return do_fcntl(fd, cmd, arg);
}

EXPORT int flock(int fd, int op) {
  if (UNLIKELY(is_upfs(fd))) {
    int saved = errno;
    if (upfs_flock(fd, op) != 0) return -1;
    errno = saved;
    return 0;
  }
  return REAL(flock)(fd, op);
}

/* ------------------------------------------------------- kernel copy calls */

/* The kernel would copy the host bytes, metadata log included: refuse, so
 * that callers fall back to read/write. */
EXPORT ssize_t copy_file_range(int in, off64_t *inoff, int out, off64_t *outoff, size_t n,
                               unsigned int flags) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EXDEV;
    return -1;
  }
  return REAL(copy_file_range)(in, inoff, out, outoff, n, flags);
}
EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EINVAL;
    return -1;
  }
  return REAL(sendfile)(out, in, off, n);
}
EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
  return sendfile(out, in, off, n);
}
EXPORT ssize_t splice(int in, off64_t *inoff, int out, off64_t *outoff, size_t n,
                      unsigned int flags) {
  if (UNLIKELY(is_upfs(in) || is_upfs(out))) {
    errno = EINVAL;
    return -1;
  }
  return REAL(splice)(in, inoff, out, outoff, n, flags);
}

/* ------------------------------------------------------------------- mmap */

/*
 * A map of a upfs file is anonymous memory filled with the file's bytes at
 * mmap time (the file's blocks move on every copy-on-write, so the host
 * file cannot be mapped directly). Semantics, documented in the README:
 *  - read-only and private maps show the file as of mmap time;
 *  - a shared writable map (fd open O_RDWR) also keeps a pristine copy,
 *    and msync and munmap (and mremap shrinking it) write back the bytes
 *    the program changed, within the file's size at that moment, as one
 *    upfs write per changed run; unchanged bytes are never written, so
 *    writes made meanwhile through write() survive unless the map changed
 *    the same bytes. Changes not written back are lost at exit, as if the
 *    process had crashed before msync.
 *  - one process at a time may have shared writable maps of a file, and
 *    they may not overlap (EAGAIN): maps are not coherent with each other.
 */
struct upfs_map {
  char *addr;
  size_t len;
  off_t off;
  int wfd;       /* shared writable: private upfs duplicate for write-back, else -1 */
  int guard_fd;  /* shared writable: holds the file's map lock */
  char *base;    /* shared writable: the bytes as last written back */
  dev_t dev;
  ino_t ino;
  int prot;
};
#define MAX_MAPS 16384
static struct upfs_map g_maps[MAX_MAPS];
/* > 0: munmap/msync/mremap look in g_maps. Changed under g_maps_mu with
 * atomic stores, read without it on every munmap/msync/mremap. */
static int g_nmaps;
static pthread_mutex_t g_maps_mu = PTHREAD_MUTEX_INITIALIZER;

static void maps_lock(void) { pthread_mutex_lock(&g_maps_mu); }
static void maps_unlock(void) { pthread_mutex_unlock(&g_maps_mu); }

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static size_t page_round(size_t n) { return (n + page_size() - 1) & ~(page_size() - 1); }

/* Fills [p, p+len) from the upfs file at off; bytes past the end read 0. */
static int fill_from_file(int fd, char *p, size_t len, off_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = upfs_pread(fd, p + done, len - done, off + (off_t)done);
    if (r < 0) return -1;
    if (r == 0) break;
    done += (size_t)r;
  }
  return 0;
}

/* Writes back the changed bytes of [from, to) of a shared writable map. */
static int write_back(struct upfs_map *m, size_t from, size_t to) {
  struct stat st;
  if (upfs_fstat(m->wfd, &st) != 0) return -1;
  size_t in_file = st.st_size > m->off ? (size_t)(st.st_size - m->off) : 0;
  if (to > in_file) to = in_file; /* as the kernel: bytes past EOF are not written */
  size_t i = from;
  while (i < to) {
    if (m->addr[i] == m->base[i]) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < to && m->addr[j] != m->base[j]) ++j;
    if (upfs_pwrite(m->wfd, m->addr + i, j - i, m->off + (off_t)i) != (ssize_t)(j - i)) return -1;
    memcpy(m->base + i, m->addr + i, j - i);
    i = j;
  }
  return 0;
}

static void drop_map(struct upfs_map *m) {
  if (m->wfd >= 0) {
    upfs_close(m->wfd);
    REAL(close)(m->guard_fd);
    REAL(munmap)(m->base, m->len);
  }
  *m = g_maps[g_nmaps - 1];
  __atomic_store_n(&g_nmaps, g_nmaps - 1, __ATOMIC_RELEASE);
}

static struct upfs_map *find_map(const void *addr) {
  for (int i = 0; i < g_nmaps; ++i)
    if ((const char *)addr >= g_maps[i].addr && (const char *)addr < g_maps[i].addr + g_maps[i].len)
      return &g_maps[i];
  return NULL;
}

static void *map_upfs(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (len == 0 || off < 0 || (off & (off_t)(page_size() - 1))) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  int shared_write = (flags & (MAP_SHARED | MAP_SHARED_VALIDATE)) && (prot & PROT_WRITE);
  int fl = upfs_get_flags(fd);
  if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (shared_write && (fl & O_ACCMODE) != O_RDWR)) {
    errno = EACCES;
    return MAP_FAILED;
  }
  struct stat st;
  if (upfs_fstat(fd, &st) != 0) return MAP_FAILED;
  size_t mlen = page_round(len);
  struct upfs_map m = {NULL, mlen, off, -1, -1, NULL, st.st_dev, st.st_ino, prot};
  pthread_mutex_lock(&g_maps_mu);
  int err = 0;
  if (g_nmaps == MAX_MAPS) err = ENOMEM;
  for (int i = 0; shared_write && !err && i < g_nmaps; ++i)
    if (g_maps[i].wfd >= 0 && g_maps[i].dev == m.dev && g_maps[i].ino == m.ino &&
        g_maps[i].off < off + (off_t)mlen && off < g_maps[i].off + (off_t)g_maps[i].len)
      err = EAGAIN;
  if (!err && shared_write) {
    m.guard_fd = upfs_map_guard(fd);
    if (m.guard_fd < 0) err = errno;
  }
  if (!err && shared_write) {
    m.wfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0);
    if (m.wfd < 0 || upfs_adopt_dup(fd, m.wfd) < 0) {
      err = errno;
      if (m.wfd >= 0) REAL(close)(m.wfd);
      m.wfd = -1;
      REAL(close)(m.guard_fd);
    }
  }
  if (err) {
    pthread_mutex_unlock(&g_maps_mu);
    errno = err;
    return MAP_FAILED;
  }
  int aflags = (flags & ~(MAP_SHARED | MAP_PRIVATE | MAP_SHARED_VALIDATE | MAP_SYNC)) |
               MAP_PRIVATE | MAP_ANONYMOUS;
  char *p = REAL(mmap)(addr, mlen, prot | PROT_WRITE, aflags, -1, 0);
  if (p != MAP_FAILED && fill_from_file(fd, p, mlen, off) != 0) {
    err = errno == EBADF ? EACCES : errno;
    REAL(munmap)(p, mlen);
    p = MAP_FAILED;
  }
  if (p != MAP_FAILED && shared_write) {
    m.base = REAL(mmap)(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m.base == MAP_FAILED) {
      err = errno;
      REAL(munmap)(p, mlen);
      p = MAP_FAILED;
    } else {
      memcpy(m.base, p, mlen);
    }
  }
  if (p == MAP_FAILED) {
    if (!err) err = errno;
    if (m.wfd >= 0) {
      upfs_close(m.wfd);
      REAL(close)(m.guard_fd);
    }
    pthread_mutex_unlock(&g_maps_mu);
    errno = err;
    return MAP_FAILED;
  }
  if (!(prot & PROT_WRITE)) mprotect(p, mlen, prot);
  /* Displacing one of our maps (MAP_FIXED) ends it without write-back, as
   * the kernel drops a shared map's pages it replaces. */
  for (int i = 0; i < g_nmaps; ++i)
    if (g_maps[i].addr < p + mlen && p < g_maps[i].addr + g_maps[i].len) drop_map(&g_maps[i--]);
  m.addr = p;
  g_maps[g_nmaps] = m;
  __atomic_store_n(&g_nmaps, g_nmaps + 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_maps_mu);
  return p;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (LIKELY(!is_upfs(fd)) || (flags & MAP_ANONYMOUS))
    return REAL(mmap)(addr, len, prot, flags, fd, off);
  return map_upfs(addr, len, prot, flags, fd, off);
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}

/* Partial munmap/msync/mremap of one of our maps act on whole maps of
 * ours only: a range that splits one fails with EINVAL rather than leave
 * part of a map untracked. */
EXPORT int munmap(void *addr, size_t len) {
  if (LIKELY(__atomic_load_n(&g_nmaps, __ATOMIC_ACQUIRE) == 0)) return REAL(munmap)(addr, len);
  pthread_mutex_lock(&g_maps_mu);
  int rc = 0, err = 0;
  char *lo = addr, *hi = (char *)addr + page_round(len);
  for (int i = 0; i < g_nmaps; ++i) {
    struct upfs_map *m = &g_maps[i];
    if (m->addr >= hi || m->addr + m->len <= lo) continue;
    if (m->addr < lo || m->addr + m->len > hi) {
      pthread_mutex_unlock(&g_maps_mu);
      errno = EINVAL;
      return -1;
    }
    if (m->wfd >= 0 && write_back(m, 0, m->len) != 0 && !err) err = errno;
    drop_map(m);
    --i;
  }
  rc = REAL(munmap)(addr, len);
  pthread_mutex_unlock(&g_maps_mu);
  if (rc == 0 && err) {
    errno = err; /* unmapped, but the write-back failed */
    return -1;
  }
  return rc;
}

EXPORT int msync(void *addr, size_t len, int flags) {
  if (LIKELY(__atomic_load_n(&g_nmaps, __ATOMIC_ACQUIRE) == 0)) return REAL(msync)(addr, len, flags);
  pthread_mutex_lock(&g_maps_mu);
  int err = 0, ours = 0;
  char *lo = addr, *hi = (char *)addr + len;
  for (int i = 0; i < g_nmaps; ++i) {
    struct upfs_map *m = &g_maps[i];
    if (m->addr >= hi || m->addr + m->len <= lo) continue;
    ours = 1;
    size_t from = lo > m->addr ? (size_t)(lo - m->addr) : 0;
    size_t to = hi < m->addr + m->len ? (size_t)(hi - m->addr) : m->len;
    if (m->wfd >= 0 && write_back(m, from, to) != 0 && !err) err = errno;
  }
  pthread_mutex_unlock(&g_maps_mu);
  if (!ours) return REAL(msync)(addr, len, flags);
  if ((uintptr_t)addr & (page_size() - 1) ||
      (flags & ~(MS_ASYNC | MS_SYNC | MS_INVALIDATE)) || ((flags & MS_ASYNC) && (flags & MS_SYNC)))
    err = EINVAL;
  if (err) {
    errno = err;
    return -1;
  }
  return 0; /* every upfs write is durable when it returns */
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *want = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    want = va_arg(ap, void *);
    va_end(ap);
  }
  if (LIKELY(__atomic_load_n(&g_nmaps, __ATOMIC_ACQUIRE) == 0))
    return REAL(mremap)(old, old_len, new_len, flags, want);
  pthread_mutex_lock(&g_maps_mu);
  struct upfs_map *m = find_map(old);
  if (!m) {
    pthread_mutex_unlock(&g_maps_mu);
    return REAL(mremap)(old, old_len, new_len, flags, want);
  }
  if (m->addr != (char *)old || page_round(old_len) != m->len || new_len == 0 ||
      (flags & MREMAP_DONTUNMAP)) {
    pthread_mutex_unlock(&g_maps_mu);
    errno = EINVAL;
    return MAP_FAILED;
  }
  size_t nlen = page_round(new_len);
  /* The grown tail must show the file too (the kernel maps the file
   * there): a read-only map keeps no descriptor, so one of the process's
   * readable descriptors of the file is needed. */
  int fill_fd = m->wfd;
  for (int f = 0; nlen > m->len && fill_fd < 0 && f < 4096; ++f) {
    struct stat st;
    if (is_upfs(f) && (upfs_get_flags(f) & O_ACCMODE) != O_WRONLY && upfs_fstat(f, &st) == 0 &&
        st.st_dev == m->dev && st.st_ino == m->ino)
      fill_fd = f;
  }
  if (nlen > m->len && fill_fd < 0) {
    pthread_mutex_unlock(&g_maps_mu);
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (nlen < m->len && m->wfd >= 0 && write_back(m, nlen, m->len) != 0) {
    pthread_mutex_unlock(&g_maps_mu);
    return MAP_FAILED;
  }
  if (m->wfd >= 0) {
    char *nb = REAL(mremap)(m->base, m->len, nlen, MREMAP_MAYMOVE);
    if (nb == MAP_FAILED) {
      pthread_mutex_unlock(&g_maps_mu);
      return MAP_FAILED;
    }
    m->base = nb;
  }
  char *p = REAL(mremap)(old, old_len, nlen, flags, want);
  if (p == MAP_FAILED) {
    int err = errno;
    if (m->wfd >= 0) m->base = REAL(mremap)(m->base, nlen, m->len, MREMAP_MAYMOVE);
    pthread_mutex_unlock(&g_maps_mu);
    errno = err;
    return MAP_FAILED;
  }
  if (nlen > m->len) {
    mprotect(p + m->len, nlen - m->len, PROT_READ | PROT_WRITE);
    fill_from_file(fill_fd, p + m->len, nlen - m->len, m->off + (off_t)m->len);
    if (m->wfd >= 0) memcpy(m->base + m->len, p + m->len, nlen - m->len);
    if (!(m->prot & PROT_WRITE)) mprotect(p + m->len, nlen - m->len, m->prot);
  }
  m->addr = p;
  m->len = nlen;
  pthread_mutex_unlock(&g_maps_mu);
  return p;
}

/* ------------------------------------------------------------------ stdio */

static ssize_t ck_read(void *c, char *buf, size_t n) {
  return upfs_read((int)(intptr_t)c, buf, n);
}
static ssize_t ck_write(void *c, const char *buf, size_t n) {
  ssize_t r = upfs_write((int)(intptr_t)c, buf, n);
  return r < 0 ? 0 : r;
}
static int ck_seek(void *c, off64_t *pos, int whence) {
  off_t r = upfs_lseek((int)(intptr_t)c, *pos, whence);
  if (r < 0) return -1;
  *pos = r;
  return 0;
}
static int ck_close(void *c) { return close_upfs((int)(intptr_t)c); }

/* A FILE over a upfs descriptor. fileno() reports the descriptor, so that
 * fsync(fileno(f)) and the like reach upfs. */
static FILE *upfs_stream(int fd, const char *mode) {
  cookie_io_functions_t io = {ck_read, ck_write, ck_seek, ck_close};
  FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
  if (f) f->_fileno = fd;
  return f;
}

/* glibc's stdin, stdout and stderr do their I/O inside libc, out of our
 * reach. Whenever descriptor 0, 1 or 2 becomes a upfs descriptor (opened,
 * dup2'ed onto, inherited, freopen'ed), its standard stream is replaced by
 * a upfs stream on that descriptor; when it stops being one, by a plain
 * stream again. Output the old stream still buffers goes to the new file,
 * as its next flush would have sent it. */
static FILE *g_std_upfs[3]; /* the upfs stream we installed, or NULL */

static FILE **std_slot(int fd) { return fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr; }

static const char *stream_mode(int fl) {
  int acc = fl & O_ACCMODE;
  return acc == O_RDONLY ? "r" : acc == O_RDWR ? "r+" : (fl & O_APPEND) ? "a" : "w";
}

static void move_pending_output(FILE *f, int fd, int to_upfs) {
  if (!f || f->_IO_write_ptr <= f->_IO_write_base) return;
  size_t n = (size_t)(f->_IO_write_ptr - f->_IO_write_base);
  ssize_t w = to_upfs ? upfs_write(fd, f->_IO_write_base, n) : REAL(write)(fd, f->_IO_write_base, n);
  (void)w;
  __fpurge(f);
}

static void install_std_stream(int fd, FILE *f, int ours) {
  if (fd == 2) setvbuf(f, NULL, _IONBF, 0);
  *std_slot(fd) = f;
  g_std_upfs[fd] = ours ? f : NULL;
}

static void std_streams_follow(int fd) {
  int saved = errno;
  FILE **slot = std_slot(fd);
  int ours = *slot != NULL && *slot == g_std_upfs[fd];
  int fl = do_fcntl(fd, F_GETFL, NULL);
  if (fl >= 0 && is_upfs(fd) && !ours) {
    move_pending_output(*slot, fd, 1);
    FILE *f = upfs_stream(fd, stream_mode(fl));
    if (f) install_std_stream(fd, f, 1);
  } else if (fl >= 0 && !is_upfs(fd) && ours) {
    move_pending_output(*slot, fd, 0);
    FILE *f = REAL(fdopen)(fd, stream_mode(fl));
    if (f) install_std_stream(fd, f, 0);
  }
  errno = saved;
}

static int stdio_flags(const char *mode, char *plain, size_t plain_len) {
  int flags, acc;
  switch (mode[0]) {
    case 'r': acc = O_RDONLY; flags = 0; break;
    case 'w': acc = O_WRONLY; flags = O_CREAT | O_TRUNC; break;
    case 'a': acc = O_WRONLY; flags = O_CREAT | O_APPEND; break;
    default: errno = EINVAL; return -1;
  }
  size_t j = 0;
  plain[j++] = mode[0];
  for (const char *m = mode + 1; *m && *m != ','; ++m) {
    if (*m == '+') acc = O_RDWR;
    else if (*m == 'x') { flags |= O_EXCL; continue; }
    else if (*m == 'e') flags |= O_CLOEXEC;
    if (j + 1 < plain_len) plain[j++] = *m;
  }
  plain[j] = 0;
  return acc | flags;
}

static FILE *do_fopen(const char *path, const char *mode) {
  char plain[16];
  int flags = stdio_flags(mode, plain, sizeof(plain));
  if (flags < 0) return NULL;
  int fd = do_open(AT_FDCWD, path, flags, 0666);
  if (fd < 0) return NULL;
  FILE *f = is_upfs(fd) ? upfs_stream(fd, plain) : REAL(fdopen)(fd, plain);
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}
EXPORT FILE *fopen(const char *path, const char *mode) { return do_fopen(path, mode); }
EXPORT FILE *fopen64(const char *path, const char *mode) { return do_fopen(path, mode); }
EXPORT FILE *fdopen(int fd, const char *mode) {
  if (LIKELY(!is_upfs(fd))) return REAL(fdopen)(fd, mode);
  if (mode[0] == 'a') {
    int fl = do_fcntl(fd, F_GETFL, NULL);
    if (fl >= 0 && !(fl & O_APPEND)) do_fcntl(fd, F_SETFL, (void *)(intptr_t)(fl | O_APPEND));
  }
  return upfs_stream(fd, mode);
}
/* freopen onto a upfs file needs a upfs stream, a different FILE object.
 * For stdin, stdout and stderr (the usual targets) the new stream takes
 * the old one's descriptor number and replaces the standard stream
 * variable, so later stdio on stdout (printf...) reaches the file; the
 * returned pointer is the new stream. Any other stream fails with
 * EOPNOTSUPP (and is closed, as a failed freopen closes it). */
EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream) {
  if (!path) return REAL(freopen)(path, mode, stream);
  char plain[16];
  int flags = stdio_flags(mode, plain, sizeof(plain));
  if (flags < 0) return REAL(freopen)(path, mode, stream);
  int saved = errno;
  int fd = do_open(AT_FDCWD, path, flags, 0666);
  if (fd < 0) {
    int err = errno;
    fclose(stream);
    errno = err;
    return NULL;
  }
  if (!is_upfs(fd)) {
    REAL(close)(fd);
    errno = saved;
    return REAL(freopen)(path, mode, stream);
  }
  int std = stream == stdin ? 0 : stream == stdout ? 1 : stream == stderr ? 2 : -1;
  int target = std >= 0 ? fileno(stream) : -1;
  fclose(stream);
  if (std < 0 || target < 0 || do_dup3(fd, target, 0, 1) != target) {
    close(fd);
    errno = EOPNOTSUPP;
    return NULL;
  }
  close(fd);
  /* do_dup3 installed a upfs stream on target; freopen returns it. */
  FILE *f = *std_slot(target);
  if (f != g_std_upfs[target]) {
    f = upfs_stream(target, plain);
    if (!f) return NULL;
    install_std_stream(target, f, 1);
  }
  errno = saved;
  return f;
}
EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream) {
  return freopen(path, mode, stream);
}

/* -------------------------------------------------------------- execve */

/* A new program image finds its inherited upfs descriptors again by their
 * magic (see adopt_inherited); before exec, the kernel offset of each one
 * is set to the upfs offset so that the new image continues from there. */
static void sync_offsets_for_exec(void) {
  int saved = errno;
  for (int fd = 0; fd < 4096; ++fd) {
    if (!is_upfs(fd)) continue;
    int fdfl = REAL(fcntl)(fd, F_GETFD);
    if (fdfl < 0 || (fdfl & FD_CLOEXEC)) continue;
    off_t pos = upfs_lseek(fd, 0, SEEK_CUR);
    if (pos >= 0) REAL(lseek)(fd, pos, SEEK_SET);
  }
  errno = saved;
}
EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  sync_offsets_for_exec();
  return REAL(execve)(path, argv, envp);
}
EXPORT int execv(const char *path, char *const argv[]) {
  sync_offsets_for_exec();
  return REAL(execv)(path, argv);
}
EXPORT int execvp(const char *file, char *const argv[]) {
  sync_offsets_for_exec();
  return REAL(execvp)(file, argv);
}
EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  sync_offsets_for_exec();
  return REAL(execvpe)(file, argv, envp);
}
EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
  sync_offsets_for_exec();
  return REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}
EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
  sync_offsets_for_exec();
  return REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}


static void adopt_inherited(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int dfd = dirfd(d);
  int fds[64], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 64) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd != dfd) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; ++i) {
    int fd = fds[i];
    struct stat st;
    if (REAL(fstat)(fd, &st) != 0 || !(marked(&st) || size_candidate(&st))) continue;
    int fl = REAL(fcntl)(fd, F_GETFL);
    if (fl < 0 || (!marked(&st) && !has_magic(fd, (fl & O_ACCMODE) != O_WRONLY))) continue;
    off_t pos = REAL(lseek)(fd, 0, SEEK_CUR);
    /* The access mode the descriptor had, which its read-only kernel
     * description records; in place, so inherited record locks survive. */
    int inherited = upfs_inherited_flags(fd);
    if (inherited < 0 || upfs_open_host_fd(fd, inherited, g_mode) < 0) continue;
    mark(fd, 1);
    if (pos > 0) upfs_lseek(fd, pos, SEEK_SET);
    follow_std(fd);
  }
}

/* ------------------------------------------------------------ constructor */

__attribute__((constructor)) static void upfs_preload_init(void) {
#define RESOLVE(ret, name, args) \
  if (!real_##name) real_##name = (__typeof__(real_##name))resolve(#name);
  REAL_FUNCS(RESOLVE)
#undef RESOLVE
  const char *dir = getenv("UPFS_DIR");
  if (dir && dir[0] == '/') {
    char canon[PATH_MAX];
    const char *use = realpath(dir, canon) ? canon : dir;
    size_t n = strlen(use);
    while (n > 1 && use[n - 1] == '/') --n;
    if (n < sizeof(g_dir)) {
      memcpy(g_dir, use, n);
      g_dir[n] = 0;
      g_dir_len = n;
    }
  }
  const char *mode = getenv("UPFS_MODE");
  if (mode && strcmp(mode, "sync") == 0) g_mode = UPFS_SYNC;
  /* A fork while another thread holds the map table must not leave the
   * child's copy of the lock taken. */
  pthread_atfork(maps_lock, maps_unlock, maps_unlock);
}

/* Called by the constructor in preload_late.c, which is linked after
 * upfs_core so that it runs after the engine's C++ static initializers. */
HIDDEN void upfs_preload_late_init(void) { adopt_inherited(); }
