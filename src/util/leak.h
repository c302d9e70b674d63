// Objects a process leaks on purpose (the state of files a fork child
// inherited from its parent, which the child must never destroy): told to
// LeakSanitizer, so that a child's exit() is not reported.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UPFS_HAS_LSAN 1
#endif
#endif
#if !defined(UPFS_HAS_LSAN) && defined(__SANITIZE_ADDRESS__)
#define UPFS_HAS_LSAN 1
#endif

#ifdef UPFS_HAS_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace upfs {

template <typename T>
T* IntentionallyLeaked(T* p) {
#ifdef UPFS_HAS_LSAN
  __lsan_ignore_object(p);
#endif
  return p;
}

}  // namespace upfs
