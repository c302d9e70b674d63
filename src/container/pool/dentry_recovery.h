// What the next namespace's recovery makes of its dentries (docs/design.md,
// "The next namespace", Recovery): which names are live after a crash at
// any point, and which runs go back to the arenas. A live dentry is
// valid, in state live, and superseded by no rename that took effect; a
// rename took effect if its dentry is valid (live or dead) and, for one of
// an exchange's pair, its partner is too and names it back. Two live
// names of one directory and name, or a directory with two live names,
// are damage, never settled by picking one. Not used by the pool yet.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "container/pool/dentry.h"
#include "container/pool/dentry_arena.h"
#include "util/status.h"

namespace upfs {

struct RecoveredDentry {
  uint64_t line = 0;  // its head
  uint32_t lines = 0;
  Dentry d;           // d.name points into `name`
  std::string name;
};

struct RecoveredDentries {
  std::vector<RecoveredDentry> live;
  // Live in their state word but superseded: set dead before anything is
  // freed (ApplyRecovery), so that the claims that superseded them may go.
  std::vector<RecoveredDentry> superseded;
  // Runs that go back to the arenas (pending, torn, dead, superseded): head,
  // lines, and the generation each line keeps.
  struct Run {
    uint64_t head;
    uint32_t lines;
    uint32_t gen;
  };
  std::vector<Run> free;
  // Live names of each inode.
  std::unordered_map<uint64_t, uint32_t> links;
};

// Reads every dentry of the chain (ScanDentries) and decides. EUCLEAN for
// a damaged chain or dentry, and for two live names of one directory and
// name or two live names of one directory inode.
Status RecoverDentries(DentryStore* store, RecoveredDentries* out);

// Makes it so: the superseded set dead (written back, fenced), then the
// free runs zeroed but for their generations (written back, fenced).
void ApplyRecovery(DentryStore* store, const RecoveredDentries& r);

}  // namespace upfs
