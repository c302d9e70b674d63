/*
 * The four libpmem functions upfs uses, loading libpmem.so.1 on first use.
 *
 * Loading libpmem (and libndctl, libdaxctl, libudev, libcrypto... behind it)
 * costs several milliseconds at every program start. The preload library
 * and the `upfs` tool link this file instead of -lpmem, so a process that
 * never touches a upfs file never loads it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>


static void *(*p_memcpy)(void *, const void *, size_t, unsigned);
static void *(*p_memset)(void *, int, size_t, unsigned);
static void (*p_flush)(const void *, size_t);
static void (*p_drain)(void);
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *h = dlopen("libpmem.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    p_memcpy = (void *(*)(void *, const void *, size_t, unsigned))dlsym(h, "pmem_memcpy");
    p_memset = (void *(*)(void *, int, size_t, unsigned))dlsym(h, "pmem_memset");
    p_flush = (void (*)(const void *, size_t))dlsym(h, "pmem_flush");
    p_drain = (void (*)(void))dlsym(h, "pmem_drain");
  }
  if (!p_memcpy || !p_memset || !p_flush || !p_drain) {
    fprintf(stderr, "upfs: cannot load libpmem.so.1: %s\n", dlerror());
    abort();
  }
}

#define ENSURE(p) \
  if (__builtin_expect(__atomic_load_n(&p, __ATOMIC_ACQUIRE) == NULL, 0)) pthread_once(&g_once, load)

void *pmem_memcpy(void *dst, const void *src, size_t n, unsigned flags) {
  ENSURE(p_memcpy);
  return p_memcpy(dst, src, n, flags);
}
void *pmem_memset(void *dst, int c, size_t n, unsigned flags) {
  ENSURE(p_memset);
  return p_memset(dst, c, n, flags);
}
void pmem_flush(const void *addr, size_t n) {
  ENSURE(p_flush);
  p_flush(addr, n);
}
void pmem_drain(void) {
  ENSURE(p_drain);
  p_drain();
}
