// upfs bench: the bytes a workload's program writes, for its write
// amplification (pm_bytes_per_byte = bytes the persistence primitives wrote
// back to media / bytes the program wrote). Counted only during the
// untimed counting pass; a timed round pays one relaxed load of a flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace upfs::cli::bench {

extern std::atomic<bool> g_counting_writes;
extern std::atomic<uint64_t> g_bytes_written;

inline void CountWritten(size_t n) {
  if (g_counting_writes.load(std::memory_order_relaxed))
    g_bytes_written.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace upfs::cli::bench
