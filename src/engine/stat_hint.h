// StatHint: a file's size and block count as of a log position, kept in
// the log's LogWords (soft), so that a stat of a file nobody in the process
// has open need not build an engine File and replay its log (docs/design.md,
// "Stat without replaying the log"). A hint is only ever a claim about one
// position; a reader takes it only when nothing was committed after that
// position, which it sees in the log itself. So a stale hint, a racing
// writer or a torn read costs a replay, never a wrong answer.
#pragma once

#include <cstdint>

#include "engine/block_table.h"
#include "engine/log.h"
#include "engine/log_root.h"

namespace upfs {

// Records that, with the log's first block `head`, the state after
// everything before `at` has `size` bytes and `blocks` mapped blocks. Does
// nothing if another thread is recording one at the same moment.
void PublishStatHint(LogWords* w, uint64_t head, const LogPos& at, uint64_t size, uint64_t blocks);

// The hinted size and block count, if the hint is there and still true:
// the log still starts at `head`, the hinted block is still a log block of
// the live chain (its seq, not compacted away) and nothing was committed at
// or after the hinted position. The caller keeps the chain's blocks from
// reuse meanwhile (an epoch pin), as any reader of the log does.
bool ReadStatHint(const LogWords& w, const BlockAccess& access, uint64_t head, uint64_t* size,
                  uint64_t* blocks);

// How many times ReadStatHint answered in the calling thread (for tests:
// a thread's own count costs the stat no shared write).
uint64_t StatHintsTakenInThisThread();

}  // namespace upfs
