// File: the times upfs keeps (FileTimes in the log root): mtime and the
// ctime of data changes, set by writes and by utimensat.
#include "engine/file.h"

#include <time.h>

#include <algorithm>

#include "engine/file_internal.h"
#include "medium/pm.h"
#include "util/time_ns.h"

namespace upfs {

using namespace format;

void File::TouchMtime() {
  // mtime needs no finer grain than the coarse clock (the kernel's tick,
  // as the kernel's own file times): one vDSO read of a word the kernel
  // keeps, about 9 ns here, against 20-22 for an rdtsc under this VM's
  // hypervisor (the check this replaced read the TSC and the clock only
  // every 2^20 cycles). Within one tick nothing is stored, which keeps the
  // times' shared cache line out of the write path. A value this process
  // did not store (utimensat, here or elsewhere) is replaced at once, as
  // the kernel's write replaces any mtime by the current time.
  const uint64_t now = ClockNs(CLOCK_REALTIME_COARSE);
  const uint64_t m = root_.times->mtime_ns.load(std::memory_order_relaxed);
  const uint64_t stored = last_mtime_stored_.load(std::memory_order_relaxed);
  if (now == stored && m == stored) return;
  if (m != now) pm::Store64(&root_.times->mtime_ns, now);
  if (root_.times->data_ctime_ns.load(std::memory_order_relaxed) != now)
    pm::Store64(&root_.times->data_ctime_ns, now);
  last_mtime_stored_.store(now, std::memory_order_relaxed);
}

Status File::SetMtime(int64_t mtime_ns) {
  if (read_only()) return ReadOnlyRefusal();
  // A zero data_ctime_ns marks a file from before it existed, where a zero
  // mtime means "never written": give it a value so that an mtime of
  // exactly the epoch is reported as such.
  if (root_.times->data_ctime_ns.load(std::memory_order_relaxed) == 0)
    pm::Store64(&root_.times->data_ctime_ns, std::max<uint64_t>(uint64_t(ReportedDataCtime(*root_.times, root_.created_ns)), 1));
  pm::Store64(&root_.times->mtime_ns, uint64_t(mtime_ns));
  pm::Flush(root_.times, sizeof(FileTimes));
  pm::Fence();
  return Status::OK();
}

}  // namespace upfs
