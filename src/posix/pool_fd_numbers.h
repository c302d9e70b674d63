// The descriptor numbers of pool files and directories: from 1 << 19, below
// the descriptor table's 1 << 20, and never kernel descriptors (a pool file
// has no host file of its own). Taken and given back lock-free, so that a
// fork child inherits a consistent set whatever the other threads did.
#pragma once

namespace upfs {

// A free number, or -1 when all 2^19 are taken.
int TakePoolFdNumber();
// Gives back a number TakePoolFdNumber returned (once).
void GivePoolFdNumber(int n);

}  // namespace upfs
