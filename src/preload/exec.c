/* exec and spawn: the upfs descriptors a new program image inherits. */
#include "preload_internal.h"

#include <dirent.h>
#include <stdlib.h>

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
/* Every exec and spawn call: offsets first, then libc's call. */
#define EXEC_INTERPOSER(name, params, args) \
  EXPORT int name params {                  \
    sync_offsets_for_exec();                \
    return REAL(name) args;                 \
  }
EXEC_INTERPOSER(execve, (const char *path, char *const argv[], char *const envp[]),
                (path, argv, envp))
EXEC_INTERPOSER(execv, (const char *path, char *const argv[]), (path, argv))
EXEC_INTERPOSER(execvp, (const char *file, char *const argv[]), (file, argv))
EXEC_INTERPOSER(execvpe, (const char *file, char *const argv[], char *const envp[]),
                (file, argv, envp))
EXEC_INTERPOSER(posix_spawn,
                (pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]),
                (pid, path, fa, attr, argv, envp))
EXEC_INTERPOSER(posix_spawnp,
                (pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]),
                (pid, file, fa, attr, argv, envp))

/* ------------------------------------------------- inherited descriptors */

HIDDEN void adopt_inherited(void) {
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
