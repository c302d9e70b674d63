// Copies from shared media that another thread may be rewriting at the same
// time. Callers validate afterwards (against the log) and retry if anything
// they read could have changed, as a seqlock reader does, so the race is
// intended; ThreadSanitizer is told to ignore these reads only.
#pragma once

#include <cstddef>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UPFS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define UPFS_TSAN 1
#endif

#ifdef UPFS_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace upfs {

inline void OptimisticCopy(void* dst, const void* src, size_t n) {
#ifdef UPFS_TSAN
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
  std::memcpy(dst, src, n);
#ifdef UPFS_TSAN
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

}  // namespace upfs
