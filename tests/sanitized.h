// Whether the test runs under AddressSanitizer or ThreadSanitizer (GCC
// says so with __SANITIZE_*__, clang with __has_feature): tests that
// count page faults or race many rounds scale down there, and one that
// makes a fork child call exit() skips (semantics_leaks_test.cc).
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UPFS_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UPFS_TEST_SANITIZED 1
#endif
#endif
#ifndef UPFS_TEST_SANITIZED
#define UPFS_TEST_SANITIZED 0
#endif

inline constexpr bool kSanitized = UPFS_TEST_SANITIZED;
