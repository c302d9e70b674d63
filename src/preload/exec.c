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
