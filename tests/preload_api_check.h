/*
 * What the parts of preload_api_test share (preload_api_test.c, which has
 * main, and preload_api_attrs.c): the check that counts failures, the
 * test directory, and the helpers that look at host files around the
 * library.
 */
#ifndef UPFS_TESTS_PRELOAD_API_CHECK_H
#define UPFS_TESTS_PRELOAD_API_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

extern int g_failures;
extern const char *g_dir;

#define CHECK(what, cond)                                                        \
  do {                                                                           \
    if (cond) {                                                                  \
      printf("ok   %s\n", what);                                                 \
    } else {                                                                     \
      printf("FAIL %s (line %d, errno %d %s)\n", what, __LINE__, errno,          \
             strerror(errno));                                                   \
      ++g_failures;                                                              \
    }                                                                            \
  } while (0)

/* DIR/name, in one of eight rotating buffers. */
char *path_of(const char *name);
/* Whether the host file holds a upfs file (read around the library). */
int host_is_upfs(const char *path);
/* Whether the host file keeps the upfs marker (S_ISVTX), around the library. */
int host_marked(const char *path);
/* A new file DIR/name holding content (may be NULL), open read-write. */
int make_file(const char *name, const char *content);

void test_attributes(void);

#endif
