// fuzz_pool's seed corpus (make_corpus --pool OUTDIR).
#pragma once

#include <string>

namespace corpus {

// Writes the seeds into dir (made if missing); prints one summary line.
// Returns 0, or 1 if any seed could not be written.
int PoolSeeds(const std::string& dir);

}  // namespace corpus
