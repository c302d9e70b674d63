// Persistence primitives: the only code that writes mapped media.
//
// Everything that stores to a mapping of a upfs file goes through these
// functions, so that a recording build (issue: crash-state explorer) can see
// every store, non-temporal copy, flush and fence with its address and bytes.
//
// Ordering model (x86-64): non-temporal copies and flushes are weakly ordered;
// Fence() (sfence) orders them before any later store, including a CAS that
// commits a log entry. Locked instructions (CAS) are full fences for
// ordinary stores but not a persistence barrier by themselves.
#pragma once

#include <emmintrin.h>
#include <libpmem.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UPFS_PM_TSAN 1
#endif
#endif
#if !defined(UPFS_PM_TSAN) && defined(__SANITIZE_THREAD__)
#define UPFS_PM_TSAN 1
#endif
#if UPFS_PM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace upfs::pm {

// Hook for recording builds. A recorder sees each primitive before it runs.
struct Recorder {
  virtual ~Recorder() = default;
  virtual void OnCopy(void* dst, const void* src, size_t n) = 0;  // NT copy
  virtual void OnZero(void* dst, size_t n) = 0;                   // NT zero
  virtual void OnStore(void* dst, uint64_t value) = 0;            // 8-byte store/CAS result
  virtual void OnStoreBytes(void* dst, const void* src, size_t n) = 0;  // cached stores
  virtual void OnFlush(const void* addr, size_t n) = 0;
  virtual void OnFence() = 0;
};
extern std::atomic<Recorder*> g_recorder;

inline Recorder* ActiveRecorder() { return g_recorder.load(std::memory_order_relaxed); }

// Non-temporal copy into media. Not ordered until Fence().
//
// Whole, aligned lines shorter than a block (a granule flip's runs, a
// fold's) go through a loop of SSE2 streaming stores instead of libpmem's
// dispatch, which cost about 135 instructions a call (callgrind): a flip
// copies one run of 128-byte granules per call, up to 16 of them for a
// 2 KiB write whose granules alternate between their homes (docs/design.md,
// "A toggle"). One copy and a fence into a random spot of a 256 MiB tmpfs
// mapping (scratch `ntcmp`, three runs): 112-117 ns against 117-135 with
// libpmem at 128 bytes, 162-175 against 163-206 at 1 KiB, 321-369 against
// 311-364 at 4 KiB; longer copies stay with libpmem. ThreadSanitizer
// builds copy through libpmem throughout: the race detector has never seen
// media copies (optimistic readers race them by design, and validate).
inline void CopyNT(void* dst, const void* src, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnCopy(dst, src, n);
#if !UPFS_PM_TSAN
  if (n < 4096 && n % 64 == 0 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0) {
    __m128i* d = static_cast<__m128i*>(dst);
    const __m128i_u* s = static_cast<const __m128i_u*>(src);  // any alignment
    for (size_t i = 0; i < n / 16; i += 4) {
      const __m128i a = _mm_loadu_si128(s + i), b = _mm_loadu_si128(s + i + 1);
      const __m128i c = _mm_loadu_si128(s + i + 2), e = _mm_loadu_si128(s + i + 3);
      _mm_stream_si128(d + i, a);
      _mm_stream_si128(d + i + 1, b);
      _mm_stream_si128(d + i + 2, c);
      _mm_stream_si128(d + i + 3, e);
    }
    return;
  }
#endif
  pmem_memcpy(dst, src, n, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
}

// Copy into media with ordinary stores, then written back (clwb): for
// small copies that are read again soon (a log payload, which every
// catch-up decodes), where non-temporal stores would send the reader to
// memory. Like CopyNT, not ordered until Fence().
inline void CopyFlush(void* dst, const void* src, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnCopy(dst, src, n);
  pmem_memcpy(dst, src, n, PMEM_F_MEM_TEMPORAL | PMEM_F_MEM_NODRAIN);
}

// Copies into media with ordinary stores and leaves the lines in the cache,
// like StoreBytes (Flush + Fence persist them), through libpmem as CopyNT
// and CopyFlush do: for words others read atomically meanwhile (a new
// inode's image), which ThreadSanitizer must not see as a plain copy.
inline void StoreCopy(void* dst, const void* src, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnStoreBytes(dst, src, n);
  pmem_memcpy(dst, src, n, PMEM_F_MEM_TEMPORAL | PMEM_F_MEM_NOFLUSH | PMEM_F_MEM_NODRAIN);
}

// Copies 8-byte words into media with ordinary stores and leaves them in
// the cache: Flush + Fence persist them (for a line that a later store, an
// entry's CAS, is to join before it is written back).
inline void StoreWords(std::atomic<uint64_t>* dst, const uint64_t* src, size_t words) {
  Recorder* r = ActiveRecorder();
  for (size_t i = 0; i < words; ++i) {
    if (r) r->OnStore(&dst[i], src[i]);
    dst[i].store(src[i], std::memory_order_relaxed);
  }
}

// Copies bytes into media with ordinary stores and leaves them in the
// cache, like StoreWords: Flush + Fence persist them (an append's bytes,
// written back with the entry that commits them, after its CAS).
inline void StoreBytes(void* dst, const void* src, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnStoreBytes(dst, src, n);
  std::memcpy(dst, src, n);
}

// Non-temporal zero fill of media. Not ordered until Fence().
inline void ZeroNT(void* dst, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnZero(dst, n);
  pmem_memset(dst, 0, n, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
}

// Writes cache lines covering [addr, addr+n) back to media (clwb).
inline void Flush(const void* addr, size_t n) {
  if (Recorder* r = ActiveRecorder()) r->OnFlush(addr, n);
  pmem_flush(addr, n);
}

// Orders all earlier copies and flushes before later stores (sfence).
inline void Fence() {
  if (Recorder* r = ActiveRecorder()) r->OnFence();
  pmem_drain();
}

// An 8-byte atomic store to media (cached; Flush + Fence to persist).
inline void Store64(std::atomic<uint64_t>* dst, uint64_t value) {
  if (Recorder* r = ActiveRecorder()) r->OnStore(dst, value);
  dst->store(value, std::memory_order_release);
}

// An 8-byte compare-and-swap on media; the commit point of every log entry.
// Sequentially consistent: commits are read against other words (a pool
// remover's commit and then an inode's hold count, against a holder's
// count and then the log's tail: docs/design.md, "Holds") in
// store-buffering patterns, which acquire/release does not order. On x86
// it is the same locked instruction.
inline bool Cas64(std::atomic<uint64_t>* dst, uint64_t& expected, uint64_t desired) {
  bool ok = dst->compare_exchange_strong(expected, desired, std::memory_order_seq_cst,
                                         std::memory_order_acquire);
  if (ok) {
    if (Recorder* r = ActiveRecorder()) r->OnStore(dst, desired);
  }
  return ok;
}

// A 16-byte compare-and-swap of two adjacent words on media, 16-byte
// aligned (lock cmpxchg16b: atomic for every reader, as an 8-byte CAS is;
// persisted, like any store, only 8 bytes at a time). Succeeds only if
// both words hold `expected0` and `expected1`.
inline bool Cas128(std::atomic<uint64_t>* dst, uint64_t expected0, uint64_t expected1,
                   uint64_t desired0, uint64_t desired1) {
  bool ok;
  __asm__ __volatile__("lock cmpxchg16b %1"
                       : "=@ccz"(ok), "+m"(*reinterpret_cast<volatile unsigned __int128*>(dst)),
                         "+a"(expected0), "+d"(expected1)
                       : "b"(desired0), "c"(desired1)
                       : "memory");
  if (ok) {
#if UPFS_PM_TSAN
    // ThreadSanitizer does not see the instruction: it is told that the
    // words are released, as an 8-byte CAS would release them.
    __tsan_release(&dst[0]);
    __tsan_release(&dst[1]);
#endif
    // One store of 16 bytes, as the instruction makes it: a recorder that
    // races another thread in after a store must not see the first word
    // without the second.
    if (Recorder* r = ActiveRecorder()) {
      const uint64_t both[2] = {desired0, desired1};
      r->OnStoreBytes(dst, both, sizeof(both));
    }
  }
  return ok;
}

// Persists one 8-byte word that was stored with Store64/Cas64.
inline void PersistWord(const void* addr) {
  Flush(addr, 8);
  Fence();
}

}  // namespace upfs::pm
