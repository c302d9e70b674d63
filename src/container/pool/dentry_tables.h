// The next namespace's directory tables over its dentries (docs/design.md,
// "The next namespace"): the view a SharedDirTable asks about the dentries
// its slots name (their names' hashes, their writers), name comparisons
// for lookups, and recovery's rebuild of every directory's table from the
// live dentries. Not used by the pool yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "container/pool/dentry_arena.h"
#include "container/pool/dentry_recovery.h"
#include "container/pool/shared_dir_table.h"
#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

// A slot's ref is its dentry's head line.
class DentryNames final : public DentryView {
 public:
  // `key`: the pool's key for DentryNameHash.
  DentryNames(DentryStore* store, uint64_t key) : s_(store), key_(key) {}
  uint64_t HashOf(uint64_t ref) override;
  uint32_t OwnerOf(uint64_t ref) override;
  uint64_t Hash(std::string_view name) const { return DentryNameHash(name, key_); }
  // Whether the dentry at `ref` names `name` in directory `parent`.
  bool Names(uint64_t ref, uint64_t parent, std::string_view name);

 private:
  std::string_view NameAt(uint64_t ref, std::string* buf);
  DentryStore* s_;
  uint64_t key_;
};

// Puts every live dentry of `r` into its directory's table: anchor(dir)
// is the word naming directory `dir`'s table (zero: none yet). Recovery's
// last step, with nothing else running. ENOMEM if a table cannot grow.
Status RebuildTables(TableMemory* mem, DentryNames* names, const RecoveredDentries& r,
                     FunctionRef<std::atomic<uint64_t>*(uint64_t dir)> anchor);

}  // namespace upfs
