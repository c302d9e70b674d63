/* _exit and _Exit: a program that leaves through them skips atexit, where
 * upfs removes the shared state of the files only it used (parked after
 * their last close). Shells leave so (dash after `echo > file` in a loop
 * left one object per parked file): do here what exit would have done. */
#include "preload_internal.h"

EXPORT void _exit(int status) {
  upfs_before_exit();
  REAL(_exit)(status);
  __builtin_unreachable();
}

EXPORT void _Exit(int status) {
  upfs_before_exit();
  REAL(_Exit)(status);
  __builtin_unreachable();
}
