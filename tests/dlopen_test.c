/* libupfs.so loaded with dlopen() by a program that was not linked against
 * it (as Python's ctypes and plugin hosts load libraries):
 *
 *   dlopen_test LIBUPFS
 *
 * The library must load (a build whose thread-locals used the initial-exec
 * TLS model was refused by glibc: "cannot allocate memory in static TLS
 * block") and work: a pool made, mounted, a file created in it and stat'ed
 * from a second thread, unmounted, removed (what the library exports is
 * exports_test.sh's to check). Exits 0 only if every step did what it
 * should. The pool goes into a fresh directory under /dev/shm (TMPDIR or
 * /tmp when there is none), removed again. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*mkfs_fn)(const char *, uint64_t);
typedef int (*mount_fn)(const char *, const char *);
typedef int (*umount_fn)(const char *);
typedef int (*open_fn)(const char *, int, ...);
typedef int (*close_fn)(int);
typedef int (*stat_fn)(const char *, struct stat *);

static stat_fn g_stat;
static char g_file[1200];

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) fprintf(stderr, "dlopen_test: FAIL: %s not exported: %s\n", name, dlerror());
  return p;
}

/* A thread of its own: its first upfs call takes its per-thread slots. */
static void *stat_in_thread(void *arg) {
  struct stat st;
  (void)arg;
  return (void *)(intptr_t)(g_stat(g_file, &st) == 0 && st.st_size == 0 && S_ISREG(st.st_mode));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_test LIBUPFS\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen_test: FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  mkfs_fn mkfs = (mkfs_fn)sym(h, "upfs_mkfs");
  mount_fn mount = (mount_fn)sym(h, "upfs_mount");
  umount_fn umount = (umount_fn)sym(h, "upfs_umount");
  open_fn open_ = (open_fn)sym(h, "upfs_open");
  close_fn close_ = (close_fn)sym(h, "upfs_close");
  g_stat = (stat_fn)sym(h, "upfs_stat");
  if (!mkfs || !mount || !umount || !open_ || !close_ || !g_stat) return 1;

  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[1024], pool[1100], mnt[1100];
  snprintf(dir, sizeof(dir), "%s/upfs-dlopen.XXXXXX", base);
  if (!mkdtemp(dir)) {
    perror("dlopen_test: mkdtemp");
    return 1;
  }
  snprintf(pool, sizeof(pool), "%s/pool", dir);
  snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
  snprintf(g_file, sizeof(g_file), "%s/f", mnt);
  int ok = 0;
  const char *step = "upfs_mkfs";
  if (mkfs(pool, 0) == 0) {
    step = "upfs_mount";
    if (mount(pool, mnt) == 0) {
      step = "upfs_open O_CREAT";
      const int fd = open_(g_file, O_CREAT | O_EXCL | O_WRONLY, 0644);
      if (fd >= 0 && close_(fd) == 0) {
        step = "upfs_stat in another thread";
        pthread_t t;
        void *res = NULL;
        if (pthread_create(&t, NULL, stat_in_thread, NULL) == 0 && pthread_join(t, &res) == 0 && res)
          ok = 1;
      }
      if (umount(mnt) != 0 && ok) {
        step = "upfs_umount";
        ok = 0;
      }
    }
  }
  if (!ok) fprintf(stderr, "dlopen_test: FAIL: %s: %s\n", step, strerror(errno));
  unlink(pool);
  rmdir(dir);
  return ok ? 0 : 1;
}
