/* libc's own functions, which the interposers call for everything that is
 * not upfs, and the engine's libc calls (renamed to upfs_real_*). */
#include "preload_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/syscall.h>

#define DEFINE_REAL(ret, name, args) HIDDEN ret(*real_##name) args;
REAL_FUNCS(DEFINE_REAL)
#undef DEFINE_REAL

HIDDEN void *resolve_real(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) {
    static const char msg[] = "libupfs-preload: a libc function is missing\n";
    ssize_t ignored = syscall(SYS_write, 2, msg, sizeof(msg) - 1);
    (void)ignored;
    abort();
  }
  return p;
}

HIDDEN void resolve_all_real(void) {
#define RESOLVE(ret, name, args) \
  if (!real_##name) real_##name = (__typeof__(real_##name))resolve_real(#name);
  REAL_FUNCS(RESOLVE)
#undef RESOLVE
}

/* The engine's libc calls, renamed by objcopy (src/preload/renames.txt;
 * check_renames.sh fails the build if the engine calls anything else this
 * library interposes). */
HIDDEN int upfs_real_open(const char *p, int f, ...) { return REAL(open)(p, f, VA_OPEN_MODE(f)); }
HIDDEN int upfs_real_openat(int d, const char *p, int f, ...) {
  return REAL(openat)(d, p, f, VA_OPEN_MODE(f));
}
HIDDEN int upfs_real_fcntl(int fd, int cmd, ...) { return REAL(fcntl)(fd, cmd, VA_FCNTL_ARG(cmd)); }
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
HIDDEN int upfs_real_fallocate(int fd, int mode, off_t o, off_t l) { return REAL(fallocate)(fd, mode, o, l); }
HIDDEN off_t upfs_real_lseek(int fd, off_t o, int whence) { return REAL(lseek)(fd, o, whence); }
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
