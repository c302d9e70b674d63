// Checkpoints of a pool's namespace (KucoFS's checkpointing): the DRAM
// index as an image in the pool, from which a process attaching loads the
// namespace before reading the log after it, and which lets the log before
// it be freed (docs/design.md, "Pools": the log bound).
#pragma once

#include <cstdint>
#include <vector>

#include "container/pool/ns_index.h"
#include "container/pool/pool_format.h"
#include "engine/log.h"
#include "util/status.h"

namespace upfs {

// The image of `index` (pool_format.h, CheckpointHeader).
void SerializeIndex(const NsIndex& index, std::vector<uint64_t>* image, uint64_t* dirs,
                    uint64_t* entries);

// The header at block `l`, checked (magic, checksum, runs in the pool).
Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l,
                            const format::pool::CheckpointHeader** out);
// Loads the image of checkpoint `h` into `index` (reset first), checking
// its checksum and every row.
Status LoadCheckpoint(const BlockAccess& ba, const format::pool::CheckpointHeader& h,
                      uint64_t root, NsIndex* index);
// Calls fn(lblock) for the header block and every image block.
template <typename Fn>
void ForEachCheckpointBlock(uint64_t header_block, const format::pool::CheckpointHeader& h, Fn fn) {
  fn(uint32_t(header_block));
  for (uint32_t r = 0; r < h.nruns; ++r)
    for (uint32_t i = 0; i < h.runs[r].count; ++i) fn(h.runs[r].lblock + i);
}

}  // namespace upfs
