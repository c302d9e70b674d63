/*
 * upfs: a userspace file system for persistent memory.
 *
 * POSIX-like C API. Every function has the argument order of its POSIX twin
 * and reports errors as -1 with errno set. File descriptors returned by
 * upfs_open are upfs descriptors: they are only valid with upfs_* calls.
 *
 * A upfs file is a host file (on /dev/shm, a DAX file system or a page-cache
 * file system) that carries its own metadata log; see docs/format.md.
 *
 * errno values specific to upfs:
 *   EMEDIUMTYPE  the file exists but is not a upfs file
 *   EUCLEAN      the file is a upfs file but a structure in it is damaged
 *                (upfs_last_error() names the structure)
 *   EOPNOTSUPP   an operation upfs does not implement (e.g. some fallocate
 *                modes); nothing is changed
 */
#ifndef UPFS_UPFS_H_
#define UPFS_UPFS_H_

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h> /* struct timespec, which <sys/stat.h> leaves out in strict ISO C */

#ifdef __cplusplus
extern "C" {
#endif

/* Consistency mode, chosen per file when it is created. */
enum upfs_consistency {
  UPFS_STRICT = 1, /* every write atomic and durable when it returns */
  UPFS_SYNC = 2,   /* overwrites in place: durable on return, not atomic */
};

/* open(2). With O_CREAT, a new file is created as a upfs file in the
 * process default consistency mode (strict unless changed). */
int upfs_open(const char *path, int flags, ... /* mode_t mode */);

/* open(2) with an explicit consistency mode for a newly created file. The
 * mode of an existing file is fixed at its creation and is not changed. */
int upfs_open_mode(const char *path, int flags, mode_t mode,
                   enum upfs_consistency consistency);

/* Sets the mode upfs_open uses for files it creates. Returns 0 or -1. */
int upfs_set_default_consistency(enum upfs_consistency consistency);

int upfs_close(int fd);
ssize_t upfs_read(int fd, void *buf, size_t count);
ssize_t upfs_write(int fd, const void *buf, size_t count);
ssize_t upfs_pread(int fd, void *buf, size_t count, off_t offset);
ssize_t upfs_pwrite(int fd, const void *buf, size_t count, off_t offset);
off_t upfs_lseek(int fd, off_t offset, int whence);
int upfs_ftruncate(int fd, off_t length);
int upfs_fallocate(int fd, int mode, off_t offset, off_t len);
int upfs_fsync(int fd);
int upfs_fdatasync(int fd);
int upfs_fstat(int fd, struct stat *st);

/* Waits until background work on the file is done: growth of the host file
 * ahead of the allocator, on tmpfs collapsing it into 2 MiB pages (which
 * otherwise starts once the file has stopped growing for a second), and a
 * compaction of its log asked for by this process. Never needed for
 * correctness; benchmarks call it after filling a file. */
int upfs_settle(int fd);

/* The last close of a upfs file keeps its mapping and state in the process
 * for up to a second (at most UPFS_PARKED_FILES files, default 16; 0 turns
 * this off), so that reopening it costs what the kernel's open does. This
 * lets them go now: for a caller that is about to change the file by other
 * means than upfs (a damaged-file test, say) or needs no user of it left.
 * Returns 0. */
int upfs_drop_closed_files(void);

/* unlink(2) that also removes the file's shared allocation state. */
int upfs_unlink(const char *path);

/* A upfs file's shared state (a POSIX shared-memory object,
 * /dev/shm/upfs-DEV-INO) lives while some process has the file open; a
 * process killed with upfs files open leaves it behind. This removes every
 * such object that no process uses. *removed and *in_use (either may be
 * NULL) receive the counts. Returns 0, or -1 with errno. */
int upfs_sweep(unsigned *removed, unsigned *in_use);

/* 1 if path names a upfs file, 0 if it names something else, -1 on error.
 * A upfs file the caller may not read is still recognised (by its marker,
 * the S_ISVTX bit of the host file, which upfs reports as clear). */
int upfs_is_upfs_file(const char *path);

/* ------------------------------------------------ attributes, as the kernel's
 *
 * These work on any path or descriptor: for a upfs file they give or change
 * the upfs attributes (size, blocks, times) with the kernel's permission
 * checks and time rules; for anything else they are the kernel's call.
 * Times: mtime changes on every write and truncate through upfs, and on
 * utimensat; ctime on those and on every change the kernel makes to the
 * host inode (chmod, chown, link, unlink, rename). atime is the host file's:
 * upfs reads do not update it (the noatime policy), upfs's own bookkeeping
 * never changes it, and utimensat sets it. A write or truncate by a caller
 * without CAP_FSETID clears S_ISUID and S_ISGID as the kernel does. */
int upfs_stat(const char *path, struct stat *st);
int upfs_lstat(const char *path, struct stat *st);
/* flags: AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH (dirfd may then be a upfs
 * descriptor). */
int upfs_fstatat(int dirfd, const char *path, struct stat *st, int flags);
/* S_ISVTX is not kept for a upfs file (the host file's bit is its marker). */
int upfs_chmod(const char *path, mode_t mode);
int upfs_fchmod(int fd, mode_t mode);
int upfs_fchmodat(int dirfd, const char *path, mode_t mode, int flags);
int upfs_chown(const char *path, uid_t owner, gid_t group);
int upfs_lchown(const char *path, uid_t owner, gid_t group);
int upfs_fchown(int fd, uid_t owner, gid_t group);
int upfs_fchownat(int dirfd, const char *path, uid_t owner, gid_t group, int flags);
/* times may be NULL (both now), and either may be UTIME_NOW or UTIME_OMIT;
 * flags: AT_SYMLINK_NOFOLLOW. */
int upfs_utimensat(int dirfd, const char *path, const struct timespec times[2], int flags);
int upfs_futimens(int fd, const struct timespec times[2]);
/* truncate(2) of a path: a upfs file is truncated through upfs. */
int upfs_truncate(const char *path, off_t length);

/* The host file descriptor behind a upfs descriptor (the descriptor
 * number itself), or -1 with errno EBADF. It is open read-only in the
 * kernel whatever the access mode of the upfs descriptor: upfs writes
 * through a mapping of its own, and a write through the kernel descriptor
 * (a raw system call) fails instead of damaging the file. fstat, fchmod,
 * fsync work on it; for record locks use upfs_fcntl_lock. */
int upfs_host_fd(int fd);

/* fcntl(2) record locks on a upfs descriptor: cmd is F_SETLK, F_SETLKW,
 * F_GETLK or their F_OFD_ forms, with the kernel's semantics (process
 * locks, or locks of the open file description) and its access checks (a
 * write lock needs a descriptor open for writing: EBADF). Returns 0 or -1. */
struct flock;
int upfs_fcntl_lock(int fd, int cmd, struct flock *lock);

/* A human-readable description of the last error in this thread, naming the
 * damaged structure for EUCLEAN. Never NULL. */
const char *upfs_last_error(void);

/* ------------------------------------------------------------------ pools
 *
 * A pool is one file (on /dev/shm, a DAX file system or a page-cache file
 * system) that holds a whole namespace: directories, regular files,
 * symbolic links and hard links, served in this process without system
 * calls and shared lock-free with every other process that mounts it
 * (docs/design.md, "Pools"). A pool file grows as needed.
 *
 * upfs_mount makes every path whose absolute form is `dir` or below it a
 * path in the pool, for every upfs_* path call of this process (dir need
 * not exist in the kernel; relative paths are made absolute with the
 * process's current directory). Paths outside every mount keep the
 * per-file behaviour above. Descriptors of pool files and directories are
 * upfs descriptors (numbers from 1<<19 up, never kernel descriptors): they
 * work with every upfs_* descriptor call. A rename or link between a pool
 * and anything else fails with EXDEV, as across mounts. A path that leaves
 * the pool while it is resolved (a symbolic link with an absolute target,
 * ".." above the pool's root) goes on from where it leads, another pool or
 * the kernel's tree, as the kernel follows it; *at calls relative to a
 * pool directory's descriptor start from that directory wherever it has
 * been renamed to. O_TMPFILE in a pool fails with EOPNOTSUPP.
 *
 * Times in a pool: mtime and ctime as the kernel keeps them; atime is set
 * at creation and by utimensat only (the noatime policy). Permissions are
 * checked against the caller's effective uid and gid and its supplementary
 * groups, root (uid 0) passing as in the kernel; they and the umask are
 * read at upfs_mount: a process that changes them must mount again.
 *
 * Across fork: the child keeps the mounts and attaches each pool again on
 * its first path call (the parent's attachment is the parent's); pool
 * descriptors and directory streams of the parent are not inherited
 * (their numbers give EBADF in the child). */

/* Makes a new, empty pool file `pool` (EEXIST if it exists). size_hint
 * (bytes, 0 for the default) is the space to map up front: the pool grows
 * past it as needed. */
int upfs_mkfs(const char *pool, uint64_t size_hint);
/* Mounts `pool` at `dir` in this process; EBUSY if dir is mounted. A
 * foreign, truncated or damaged pool is refused (EMEDIUMTYPE, EUCLEAN;
 * upfs_last_error() names the structure). */
int upfs_mount(const char *pool, const char *dir);
/* EBUSY while descriptors or directory streams of the pool are open. */
int upfs_umount(const char *dir);

int upfs_openat(int dirfd, const char *path, int flags, ... /* mode_t mode */);
int upfs_mkdir(const char *path, mode_t mode);
int upfs_mkdirat(int dirfd, const char *path, mode_t mode);
int upfs_rmdir(const char *path);
/* flags: 0 or AT_REMOVEDIR. */
int upfs_unlinkat(int dirfd, const char *path, int flags);
int upfs_rename(const char *oldpath, const char *newpath);
int upfs_link(const char *oldpath, const char *newpath);
int upfs_symlink(const char *target, const char *linkpath);
ssize_t upfs_readlink(const char *path, char *buf, size_t bufsiz);
/* mode: F_OK or any of R_OK, W_OK, X_OK; checked with the real uid and gid,
 * as access(2). */
int upfs_access(const char *path, int mode);
struct statvfs;
int upfs_statvfs(const char *path, struct statvfs *buf);

/* Directory streams over pool directories. A listing lists every entry
 * that exists for the whole scan exactly once, and no entry twice, while
 * others change the directory. */
typedef struct upfs_dir UPFS_DIR;
UPFS_DIR *upfs_opendir(const char *path);
/* Takes over fd (a upfs descriptor of a pool directory). */
UPFS_DIR *upfs_fdopendir(int fd);
struct dirent *upfs_readdir(UPFS_DIR *dir);
void upfs_rewinddir(UPFS_DIR *dir);
int upfs_closedir(UPFS_DIR *dir);
int upfs_dirfd(UPFS_DIR *dir);
/* getdents64(2) on a upfs descriptor of a pool directory: fills buf with
 * struct linux_dirent64 records; 0 at the end. */
ssize_t upfs_getdents64(int fd, void *buf, size_t count);

#ifdef __cplusplus
}
#endif

/* Extensions for programs that look at upfs files from outside the C API's
 * descriptors (the LD_PRELOAD layer among them). The entry points only that
 * layer uses are declared in src/posix/preload_hooks.h. */
#ifdef __cplusplus
extern "C" {
#endif

/* If this process has the upfs file with the host attributes *host (from
 * stat) open, fills *out (may be NULL) with its upfs attributes and
 * returns 1; else returns 0 without touching the file. */
int upfs_stat_if_open(const struct stat *host, struct stat *out);

/* Fills *out with the attributes of the upfs file open as the kernel
 * descriptor host_fd (not consumed, not made a upfs descriptor): the host
 * file's, with the upfs size, blocks and times. If this process does not
 * have the file open, the log is read without opening the file as a upfs
 * file (no shared state, no locks, nothing written). Returns 0, or -1 with
 * errno (EMEDIUMTYPE: not a upfs file; EUCLEAN: damaged). */
int upfs_stat_host_fd(int host_fd, struct stat *out);

/* renameat2(2) that also removes the shared state of a upfs file whose
 * last link goes (the file the rename replaces), once no process has it
 * open. Returns 0 or -1. */
int upfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                   unsigned int flags);

#ifdef __cplusplus
}
#endif

#endif /* UPFS_UPFS_H_ */
