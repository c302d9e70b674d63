// Counts the bytes the persistence primitives (pm.h) write back to media:
// the write amplification `upfs bench` reports (pm_bytes_per_byte).
//
// Media are written in cache lines, so the counter counts lines: a
// non-temporal copy or zero fill counts every line it touches, and a flush
// counts the lines in its range that were stored to (Store64 or a CAS)
// since they were last written back; a flush of a clean line writes
// nothing. Installed as the process's pm::Recorder, it sees every thread's
// primitives; it takes a mutex per primitive, so it is for a counting pass,
// not for timed code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "medium/pm.h"

namespace upfs {

class PersistCounter final : public pm::Recorder {
 public:
  // Installs the counter as the recorder; the destructor puts back what was
  // there. Only one recorder runs at a time: installing over another one is
  // a caller's error (asserted).
  PersistCounter();
  ~PersistCounter() override;
  PersistCounter(const PersistCounter&) = delete;
  PersistCounter& operator=(const PersistCounter&) = delete;

  // Bytes written back so far (a multiple of the cache line).
  uint64_t bytes() const;

  void OnCopy(void* dst, const void* src, size_t n) override;
  void OnZero(void* dst, size_t n) override;
  void OnStore(void* dst, uint64_t value) override;
  void OnFlush(const void* addr, size_t n) override;
  void OnFence() override {}

 private:
  void CountLines(const void* addr, size_t n);

  mutable std::mutex mu_;
  uint64_t bytes_ = 0;
  std::unordered_set<uintptr_t> dirty_;  // lines stored to and not yet flushed
};

}  // namespace upfs
