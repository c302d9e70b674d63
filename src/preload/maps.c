/* mmap, munmap, msync and mremap of upfs files, emulated with anonymous
 * memory. */
#include "preload_internal.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

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

/* A fork while another thread holds the map table must not leave the
 * child's copy of the lock taken. */
HIDDEN void maps_init(void) { pthread_atfork(maps_lock, maps_unlock, maps_unlock); }

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

/* Under g_maps_mu, for a shared writable map m of fd: checks that no
 * shared writable map of ours of the file overlaps it, then takes the
 * file's map lock (m->guard_fd) and a private upfs duplicate of fd for the
 * write-back (m->wfd). Returns 0 or an errno, with nothing taken. */
static int claim_write_back(struct upfs_map *m, int fd) {
  for (int i = 0; i < g_nmaps; ++i)
    if (g_maps[i].wfd >= 0 && g_maps[i].dev == m->dev && g_maps[i].ino == m->ino &&
        g_maps[i].off < m->off + (off_t)m->len && m->off < g_maps[i].off + (off_t)g_maps[i].len)
      return EAGAIN;
  m->guard_fd = upfs_map_guard(fd);
  if (m->guard_fd < 0) return errno;
  m->wfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0);
  if (m->wfd < 0 || upfs_adopt_dup(fd, m->wfd) < 0) {
    int err = errno;
    if (m->wfd >= 0) REAL(close)(m->wfd);
    m->wfd = -1;
    REAL(close)(m->guard_fd);
    return err;
  }
  return 0;
}

/* The memory of map m (at addr, a hint or MAP_FIXED's address, as flags
 * say): anonymous, writable, filled from fd; for a write-back map also its
 * pristine copy, m->base. Returns it, or MAP_FAILED with *err. */
static char *fill_map(void *addr, struct upfs_map *m, int flags, int fd, int *err) {
  int aflags = (flags & ~(MAP_SHARED | MAP_PRIVATE | MAP_SHARED_VALIDATE | MAP_SYNC)) |
               MAP_PRIVATE | MAP_ANONYMOUS;
  char *p = REAL(mmap)(addr, m->len, m->prot | PROT_WRITE, aflags, -1, 0);
  if (p == MAP_FAILED) {
    *err = errno;
    return MAP_FAILED;
  }
  if (fill_from_file(fd, p, m->len, m->off) != 0) {
    *err = errno == EBADF ? EACCES : errno;
    REAL(munmap)(p, m->len);
    return MAP_FAILED;
  }
  if (m->wfd >= 0) {
    m->base = REAL(mmap)(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->base == MAP_FAILED) {
      *err = errno;
      REAL(munmap)(p, m->len);
      return MAP_FAILED;
    }
    memcpy(m->base, p, m->len);
  }
  return p;
}

/* Under g_maps_mu: enters m, mapped at p, in the table. */
static void add_map(struct upfs_map *m, char *p) {
  /* Displacing one of our maps (MAP_FIXED) ends it without write-back, as
   * the kernel drops a shared map's pages it replaces. */
  for (int i = 0; i < g_nmaps; ++i)
    if (g_maps[i].addr < p + m->len && p < g_maps[i].addr + g_maps[i].len) drop_map(&g_maps[i--]);
  m->addr = p;
  g_maps[g_nmaps] = *m;
  __atomic_store_n(&g_nmaps, g_nmaps + 1, __ATOMIC_RELEASE);
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
  struct upfs_map m = {NULL, page_round(len), off, -1, -1, NULL, st.st_dev, st.st_ino, prot};
  pthread_mutex_lock(&g_maps_mu);
  int err = g_nmaps == MAX_MAPS ? ENOMEM : shared_write ? claim_write_back(&m, fd) : 0;
  char *p = err ? MAP_FAILED : fill_map(addr, &m, flags, fd, &err);
  if (p == MAP_FAILED) {
    if (m.wfd >= 0) {
      upfs_close(m.wfd);
      REAL(close)(m.guard_fd);
    }
    pthread_mutex_unlock(&g_maps_mu);
    errno = err;
    return MAP_FAILED;
  }
  if (!(prot & PROT_WRITE)) mprotect(p, m.len, prot);
  add_map(&m, p);
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
