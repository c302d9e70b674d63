// Counts the bytes the persistence primitives (pm.h) write back to media:
// the write amplification `upfs bench` reports (pm_bytes_per_byte).
//
// Media are written in cache lines, so the counter counts lines: a
// non-temporal copy or zero fill counts every line it touches, and a flush
// counts the lines in its range that were stored to (Store64 or a CAS)
// since they were last written back; a flush of a clean line writes
// nothing. It sees every thread's primitives (through a recorder installed
// for it, which outlives it: a thread of the process's GC worker, say, may
// be inside a primitive when the counter goes); it takes a mutex per
// primitive, so it is for a counting pass, not for timed code.
#pragma once

#include <cstdint>

namespace upfs {

class PersistCounter {
 public:
  // Starts counting; the destructor stops. Only one recorder runs at a
  // time: counting while another one is installed is a caller's error
  // (asserted).
  PersistCounter();
  ~PersistCounter();
  PersistCounter(const PersistCounter&) = delete;
  PersistCounter& operator=(const PersistCounter&) = delete;

  // Bytes written back since this counter started (a multiple of the
  // cache line).
  uint64_t bytes() const;
};

}  // namespace upfs
