/* stdio: FILE streams on upfs descriptors, and the standard streams when
 * descriptor 0, 1 or 2 is one. */
#include "preload_internal.h"

#include <stdio_ext.h>

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

HIDDEN void std_streams_follow(int fd) {
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
