// Pool files' pages mapped ahead of their first reads.
//
// A process that attaches a pool maps the pool file but none of its pages:
// in small pages, a first sequential read of a pool file took a fault per
// 16 pages (fault-around), 1.50-1.72x the kernel (`upfs bench --pool
// --filter pool-read-seq-4k-cold` with UPFS_HUGEPAGES=0), 2.01-2.25x with
// the pages mapped ahead; in huge pages, where a fault maps 2 MiB, about
// 3x either way. A per-file file populates its whole mapping
// (Medium::PopulateAhead); a pool file's blocks lie among other files'
// blocks, so only the extents that hold its data are populated
// (docs/design.md, "Populating a file's mapping").
#include "container/pool/pool.h"
#include "medium/medium.h"

namespace upfs {

void Pool::PopulateForUse(uint64_t ino, File* f) {
  {
    std::lock_guard<std::mutex> g(files_mu_);
    auto it = files_.find(ino);
    if (it == files_.end() || it->second.populated) return;
    it->second.populated = true;
  }
  uint64_t size = 0;
  if (!f->Size(&size).ok() || size < kPopulateAtOpenBytes) return;
  constexpr uint64_t kExtentBlocks = kExtentSize / format::kBlockSize;
  // The probe first, on the extent of the file's first block: in huge
  // pages (a fault or two per extent), the reader's own faults cost as
  // little as populating would, and the file's table is not walked.
  std::vector<uint64_t> extents;
  if (!f->DataExtents(kExtentBlocks, 1, &extents).ok() || extents.empty()) return;
  if (!medium_->PopulateProbe(extents.front() * kExtentSize)) return;
  if (!f->DataExtents(kExtentBlocks, SIZE_MAX, &extents).ok() || extents.size() < 2) return;
  extents.erase(extents.begin());  // the probe mapped it
  for (uint64_t& e : extents) e *= kExtentSize;
  medium_->PopulateExtents(std::move(extents));
}

}  // namespace upfs
