// UPFS_ASSERT: invariants the code relies on, checked in debug and sanitizer
// builds (UPFS_ASSERTIONS, set by CMake for them) and compiled out of
// release builds, where they cost nothing on the hot path. A failed
// assertion is a bug in upfs, never bad input: input is validated and gets
// a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#if defined(UPFS_ASSERTIONS)
#define UPFS_ASSERT(cond)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "upfs: %s:%d: assertion failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                             \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
#else
#define UPFS_ASSERT(cond) \
  do {                    \
    (void)sizeof(cond);   \
  } while (0)
#endif
