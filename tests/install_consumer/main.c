/* A program built against an installed upfs (tests/install_test.sh): creates
 * a upfs file, writes it, reads it back, removes it, all through the C API
 * of <upfs/upfs.h>. Exits 0 only if every step did what it should.
 *
 *   upfs_consumer [DIR]
 *
 * The file goes into DIR, or into a fresh directory under /dev/shm (TMPDIR
 * or /tmp when there is no /dev/shm) that the program removes again. */
#define _XOPEN_SOURCE 700 /* mkdtemp, S_ISVTX under -std=c11 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <upfs/upfs.h>

#define SIZE (3 * 4096 + 100) /* three blocks and part of a fourth */

static int fail(const char *what) {
  fprintf(stderr, "upfs_consumer: FAIL: %s: %s (%s)\n", what, strerror(errno),
          upfs_last_error());
  return 0;
}

/* Runs the whole round trip on DIR/consumer.upfs; 1 if all went well. */
static int round_trip(const char *dir) {
  static char out[SIZE], in[SIZE];
  char path[4096];
  struct stat st, host;
  char shm[128];
  ssize_t n;
  int fd;

  snprintf(path, sizeof(path), "%s/consumer.upfs", dir);
  for (size_t i = 0; i < SIZE; ++i) out[i] = (char)(i * 7 + i / 4096);

  fd = upfs_open_mode(path, O_RDWR | O_CREAT | O_EXCL, 0600, UPFS_STRICT);
  if (fd < 0) return fail("upfs_open_mode O_CREAT");
  if (upfs_write(fd, out, 4096) != 4096) return fail("upfs_write");
  if (upfs_write(fd, out + 4096, SIZE - 4096) != SIZE - 4096) return fail("upfs_write");
  if (upfs_fsync(fd) != 0) return fail("upfs_fsync");
  if (upfs_fstat(fd, &st) != 0) return fail("upfs_fstat");
  if (st.st_size != SIZE) {
    fprintf(stderr, "upfs_consumer: FAIL: size %lld after writing %d bytes\n",
            (long long)st.st_size, SIZE);
    return 0;
  }
  /* The host file carries upfs's marker, and while the file is open for
   * writing its shared state exists in /dev/shm (upfs-DEV-INO, hex). */
  if (stat(path, &host) != 0) return fail("stat of the host file");
  if (!(host.st_mode & S_ISVTX)) {
    fprintf(stderr, "upfs_consumer: FAIL: %s is not marked as a upfs file\n", path);
    return 0;
  }
  snprintf(shm, sizeof(shm), "/dev/shm/upfs-%llx-%llx", (unsigned long long)host.st_dev,
           (unsigned long long)host.st_ino);
  if (access("/dev/shm", F_OK) == 0 && access(shm, F_OK) != 0) return fail(shm);
  if (upfs_close(fd) != 0) return fail("upfs_close");

  if (upfs_is_upfs_file(path) != 1) return fail("upfs_is_upfs_file");
  fd = upfs_open(path, O_RDONLY);
  if (fd < 0) return fail("upfs_open O_RDONLY");
  n = upfs_read(fd, in, sizeof(in));
  if (n != SIZE || memcmp(in, out, SIZE) != 0) {
    fprintf(stderr, "upfs_consumer: FAIL: read back %zd bytes of %d%s\n", n, SIZE,
            n == SIZE ? ", contents differ" : "");
    return 0;
  }
  if (upfs_read(fd, in, sizeof(in)) != 0) return fail("upfs_read at end of file");
  if (upfs_pread(fd, in, 200, 4000) != 200 || memcmp(in, out + 4000, 200) != 0) {
    fprintf(stderr, "upfs_consumer: FAIL: upfs_pread across a block boundary\n");
    return 0;
  }
  if (upfs_close(fd) != 0) return fail("upfs_close");

  /* upfs_unlink removes the file and its shared state. */
  if (upfs_unlink(path) != 0) return fail("upfs_unlink");
  if (access(path, F_OK) == 0 || errno != ENOENT) {
    fprintf(stderr, "upfs_consumer: FAIL: %s still exists after upfs_unlink\n", path);
    return 0;
  }
  if (access(shm, F_OK) == 0) {
    fprintf(stderr, "upfs_consumer: FAIL: %s left behind after upfs_unlink\n", shm);
    return 0;
  }
  printf("upfs_consumer: ok: %d bytes written, read back and removed in %s\n", SIZE, dir);
  return 1;
}

int main(int argc, char **argv) {
  char made[1024] = "";
  const char *dir;
  int ok;

  if (argc > 2) {
    fprintf(stderr, "usage: upfs_consumer [DIR]\n");
    return 2;
  }
  if (argc == 2) {
    dir = argv[1];
  } else {
    struct stat st;
    const char *base = "/dev/shm";
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) {
      base = getenv("TMPDIR");
      if (!base || !*base) base = "/tmp";
    }
    snprintf(made, sizeof(made), "%s/upfs-consumer.XXXXXX", base);
    if (!mkdtemp(made)) {
      fprintf(stderr, "upfs_consumer: FAIL: mkdtemp %s: %s\n", made, strerror(errno));
      return 1;
    }
    dir = made;
  }
  printf("upfs_consumer: directory %s\n", dir); /* for the caller's cleanup */
  fflush(stdout);
  ok = round_trip(dir);
  if (made[0]) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/consumer.upfs", made);
    if (access(path, F_OK) == 0) upfs_unlink(path); /* after a failure */
    if (rmdir(made) != 0) {
      fprintf(stderr, "upfs_consumer: FAIL: rmdir %s: %s\n", made, strerror(errno));
      ok = 0;
    }
  }
  return ok ? 0 : 1;
}
