/*
 * preload_api_test's attribute and time calls: chmod, chown, utime,
 * utimes, futimes, lutimes, futimesat, utimensat and futimens on upfs
 * files and descriptors, as the kernel does them on a plain file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <utime.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "preload_api_check.h"

static int ts_eq(struct timespec a, time_t sec, long nsec) {
  return a.tv_sec == sec && a.tv_nsec == nsec;
}
static long long ts_ns(struct timespec t) { return (long long)t.tv_sec * 1000000000LL + t.tv_nsec; }
static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return ts_ns(t);
}
/* t is "now", measured from `since` (the kernel's clock is coarse: it may
 * lag CLOCK_REALTIME by a tick). */
static int is_recent(struct timespec t, long long since) {
  return ts_ns(t) >= since - 100000000LL && ts_ns(t) <= now_ns();
}
static void pause_ms(long ms) {
  struct timespec d = {0, ms * 1000000L};
  nanosleep(&d, NULL);
}

/* chmod, chown and the time calls on upfs files and descriptors: what the
 * kernel would do on a plain file, seen by fstat, stat and statx, kept
 * across reopen; errno kept on success. */
void test_attributes(void) {
  int fd = make_file("attr", "hello");
  CHECK("attr: file is upfs", fd >= 0 && host_is_upfs(path_of("attr")));
  struct stat st, before;
  fstat(fd, &before);
  pause_ms(20);
  errno = 4242;
  CHECK("fchmod on a upfs descriptor, errno kept", fchmod(fd, 0640) == 0 && errno == 4242);
  CHECK("fstat shows the mode", fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0640);
  CHECK("stat shows the mode", stat(path_of("attr"), &st) == 0 && (st.st_mode & 07777) == 0640 &&
                                   S_ISREG(st.st_mode));
  CHECK("fchmod advanced ctime", ts_ns(st.st_ctim) > ts_ns(before.st_ctim));
  struct statx sx;
  CHECK("statx shows the mode",
        statx(AT_FDCWD, path_of("attr"), 0, STATX_MODE, &sx) == 0 && (sx.stx_mode & 07777) == 0640);
  CHECK("still a marked upfs file after fchmod",
        host_is_upfs(path_of("attr")) && host_marked(path_of("attr")));

  struct timespec ts[2] = {{981173106, 123456789}, {1049522828, 987654321}};
  CHECK("futimens on a upfs descriptor", futimens(fd, ts) == 0);
  CHECK("fstat shows the times", fstat(fd, &st) == 0 && ts_eq(st.st_atim, 981173106, 123456789) &&
                                     ts_eq(st.st_mtim, 1049522828, 987654321));
  CHECK("stat shows the times", stat(path_of("attr"), &st) == 0 &&
                                    ts_eq(st.st_atim, 981173106, 123456789) &&
                                    ts_eq(st.st_mtim, 1049522828, 987654321));
  CHECK("statx shows the times",
        statx(AT_FDCWD, path_of("attr"), 0, STATX_ATIME | STATX_MTIME, &sx) == 0 &&
            sx.stx_atime.tv_sec == 981173106 && sx.stx_atime.tv_nsec == 123456789 &&
            sx.stx_mtime.tv_sec == 1049522828 && sx.stx_mtime.tv_nsec == 987654321);
  struct timespec omit_now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  long long t0 = now_ns();
  CHECK("futimens UTIME_OMIT, UTIME_NOW", futimens(fd, omit_now) == 0);
  CHECK("atime kept, mtime now", fstat(fd, &st) == 0 && ts_eq(st.st_atim, 981173106, 123456789) &&
                                     is_recent(st.st_mtim, t0));
  struct timeval tv[2] = {{1000000000, 250000}, {1100000000, 999999}};
  CHECK("futimes on a upfs descriptor", futimes(fd, tv) == 0);
  CHECK("futimes: microseconds as nanoseconds", fstat(fd, &st) == 0 &&
                                                    ts_eq(st.st_atim, 1000000000, 250000000) &&
                                                    ts_eq(st.st_mtim, 1100000000, 999999000));
  t0 = now_ns();
  CHECK("a write sets mtime to now", write(fd, "!", 1) == 1 && fstat(fd, &st) == 0 &&
                                         is_recent(st.st_mtim, t0) && is_recent(st.st_ctim, t0));
  CHECK("a write keeps atime", ts_eq(st.st_atim, 1000000000, 250000000));
  close(fd);

  /* Path calls, on the closed file (reopened by upfs as needed). */
  struct timeval tv2[2] = {{1200000000, 1}, {1300000000, 2}};
  errno = 4242;
  CHECK("utimes, errno kept", utimes(path_of("attr"), tv2) == 0 && errno == 4242);
  CHECK("utimes: times seen by stat", stat(path_of("attr"), &st) == 0 &&
                                          ts_eq(st.st_atim, 1200000000, 1000) &&
                                          ts_eq(st.st_mtim, 1300000000, 2000) && st.st_size == 6);
  struct utimbuf ub = {1234567890, 1234567891};
  CHECK("utime", utime(path_of("attr"), &ub) == 0 && stat(path_of("attr"), &st) == 0 &&
                     ts_eq(st.st_atim, 1234567890, 0) && ts_eq(st.st_mtim, 1234567891, 0));
  CHECK("lutimes", lutimes(path_of("attr"), tv2) == 0 && lstat(path_of("attr"), &st) == 0 &&
                       ts_eq(st.st_mtim, 1300000000, 2000));
  CHECK("futimesat", futimesat(AT_FDCWD, path_of("attr"), tv) == 0 &&
                         stat(path_of("attr"), &st) == 0 && ts_eq(st.st_mtim, 1100000000, 999999000));
  CHECK("utimensat", utimensat(AT_FDCWD, path_of("attr"), ts, 0) == 0 &&
                         stat(path_of("attr"), &st) == 0 && ts_eq(st.st_mtim, 1049522828, 987654321));
  t0 = now_ns();
  CHECK("utimes(NULL): both now", utimes(path_of("attr"), NULL) == 0 &&
                                      stat(path_of("attr"), &st) == 0 &&
                                      is_recent(st.st_atim, t0) && is_recent(st.st_mtim, t0));
  errno = 0;
  const char *volatile no_path = NULL; /* glibc declares the path nonnull */
  CHECK("utimensat with a null path fails EINVAL (as glibc's)",
        utimensat(AT_FDCWD, no_path, ts, 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK("futimens(-1) fails EBADF", futimens(-1, ts) == -1 && errno == EBADF);
  errno = 0;
  CHECK("chmod of a missing file fails ENOENT",
        chmod(path_of("no-such-file"), 0600) == -1 && errno == ENOENT);
  CHECK("chmod", chmod(path_of("attr"), 0600) == 0 && stat(path_of("attr"), &st) == 0 &&
                     (st.st_mode & 07777) == 0600 && host_marked(path_of("attr")));
  CHECK("fchmodat", fchmodat(AT_FDCWD, path_of("attr"), 0604, 0) == 0 &&
                        stat(path_of("attr"), &st) == 0 && (st.st_mode & 07777) == 0604 &&
                        host_marked(path_of("attr")));
  CHECK("lchmod", lchmod(path_of("attr"), 0644) == 0 && lstat(path_of("attr"), &st) == 0 &&
                      (st.st_mode & 07777) == 0644 && host_marked(path_of("attr")));
  CHECK("chown, lchown, fchownat to oneself",
        chown(path_of("attr"), getuid(), getgid()) == 0 &&
            lchown(path_of("attr"), getuid(), (gid_t)-1) == 0 &&
            fchownat(AT_FDCWD, path_of("attr"), (uid_t)-1, getgid(), 0) == 0);
  fd = open(path_of("attr"), O_RDONLY);
  CHECK("fchown on a upfs descriptor", fd >= 0 && fchown(fd, getuid(), getgid()) == 0);
  /* The kernel lets the owner set the times through a read-only
   * descriptor. */
  CHECK("futimens on a read-only upfs descriptor",
        futimens(fd, ts) == 0 && fstat(fd, &st) == 0 && ts_eq(st.st_mtim, 1049522828, 987654321));
  close(fd);
  CHECK("times and mode kept across reopen",
        stat(path_of("attr"), &st) == 0 && (st.st_mode & 07777) == 0644 &&
            ts_eq(st.st_atim, 981173106, 123456789) && ts_eq(st.st_mtim, 1049522828, 987654321));
  t0 = now_ns();
  CHECK("truncate through the path", truncate(path_of("attr"), 3) == 0 &&
                                          stat(path_of("attr"), &st) == 0 && st.st_size == 3 &&
                                          is_recent(st.st_mtim, t0));
  char buf[8] = {0};
  fd = open(path_of("attr"), O_RDONLY);
  CHECK("contents intact, still upfs", fd >= 0 && read(fd, buf, sizeof(buf)) == 3 &&
                                           memcmp(buf, "hel", 3) == 0 && host_is_upfs(path_of("attr")));
  close(fd);
}
