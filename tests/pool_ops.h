// Namespace and file operations on a pool as data: what a crash test runs
// and what the reference model (pool_tree.h) says it must do. Shared by the
// crash-state explorer (which runs them through PoolNamespace) and the kill
// torture (which runs them through the C API).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "pool_tree.h"

namespace upfs::crashtest {

struct NsOp {
  enum Kind {
    kCreate, kMkdir, kSymlink, kLink, kUnlink, kRmdir, kRename, kExchange, kChmod,
    kWrite, kAppend, kTruncate,
    kUnlinkOpen,  // holds the file, unlinks it, writes to it, lets go (the release)
    kCheckpoint,  // writes a checkpoint of the namespace (the tree does not change)
    kNoFreeBlocks,  // from here on the pool has no free block for its namespace (a full pool)
    kUtimens,  // utimensat: atime set to a fixed time, mtime left (UTIME_OMIT), ctime to now
    kFsync,    // fsync of a regular file: its data times are durable from its return
  } kind;
  std::string a, b;  // paths; b: the second path, or a symbolic link's target
  uint64_t off = 0, len = 0;
  uint32_t seed = 0;
  mode_t mode = 0644;
  // A racing operation, run to completion by a second thread while this
  // one is held at its fence number race_fence.
  std::shared_ptr<NsOp> race;
  int race_fence = 0;
  int race_store = 0;  // if set, held at this 8-byte store instead

  std::string Describe() const {
    static const char* names[] = {"create", "mkdir", "symlink", "link", "unlink", "rmdir", "rename",
                                  "exchange", "chmod", "write", "append", "truncate", "unlink-open",
                                  "checkpoint", "no-free-blocks", "utimens", "fsync"};
    auto brief = [](const std::string& s) { return s.size() > 40 ? s.substr(0, 37) + "..." : s; };
    std::string d = std::string(names[kind]) + " " + brief(a);
    if (!b.empty()) d += " " + brief(b);
    if (kind == kWrite || kind == kAppend || kind == kTruncate || kind == kUnlinkOpen)
      d += " off=" + std::to_string(off) + " len=" + std::to_string(len);
    if (kind == kChmod || kind == kCreate || kind == kMkdir) {
      char m[16];
      std::snprintf(m, sizeof(m), " %04o", unsigned(mode));
      d += m;
    }
    if (race)
      d += (race_store ? " raced at store " + std::to_string(race_store) : " raced at fence " + std::to_string(race_fence)) +
           " by [" + race->Describe() + "]";
    return d;
  }
};

// Applies op to the model; returns the errno the operation must end with.
inline int ApplyModel(TreeModel* t, const NsOp& op) {
  switch (op.kind) {
    case NsOp::kCreate: return t->Create(op.a, op.mode);
    case NsOp::kMkdir: return t->Mkdir(op.a, op.mode);
    case NsOp::kSymlink: return t->Symlink(op.a, op.b);
    case NsOp::kLink: return t->Link(op.a, op.b);
    case NsOp::kUnlink: return t->Unlink(op.a);
    case NsOp::kRmdir: return t->Rmdir(op.a);
    case NsOp::kRename: return t->Rename(op.a, op.b);
    case NsOp::kExchange: return t->Exchange(op.a, op.b);
    case NsOp::kChmod: return t->Chmod(op.a, op.mode);
    case NsOp::kWrite: return t->Write(op.a, op.off, FillBytes(op.len, op.seed));
    case NsOp::kAppend: return t->Append(op.a, FillBytes(op.len, op.seed));
    case NsOp::kTruncate: return t->Truncate(op.a, op.len);
    case NsOp::kUnlinkOpen: return t->Unlink(op.a);  // the write lands in an unlinked file
    case NsOp::kCheckpoint: return 0;
    case NsOp::kNoFreeBlocks: return 0;
    case NsOp::kUtimens: return t->Touch(op.a);
    case NsOp::kFsync: return t->Touch(op.a);
  }
  return EINVAL;
}

inline NsOp Make(NsOp::Kind k, std::string a, std::string b = "", uint64_t off = 0, uint64_t len = 0,
          uint32_t seed = 0, mode_t mode = 0644) {
  NsOp op;
  op.kind = k;
  op.a = std::move(a);
  op.b = std::move(b);
  op.off = off;
  op.len = len;
  op.seed = seed;
  op.mode = mode;
  return op;
}
inline NsOp Create(std::string p, mode_t m = 0644) { return Make(NsOp::kCreate, std::move(p), "", 0, 0, 0, m); }
inline NsOp Mkdir(std::string p, mode_t m = 0755) { return Make(NsOp::kMkdir, std::move(p), "", 0, 0, 0, m); }
inline NsOp Symlink(std::string p, std::string t) { return Make(NsOp::kSymlink, std::move(p), std::move(t)); }
inline NsOp Link(std::string a, std::string b) { return Make(NsOp::kLink, std::move(a), std::move(b)); }
inline NsOp Unlink(std::string p) { return Make(NsOp::kUnlink, std::move(p)); }
inline NsOp Rmdir(std::string p) { return Make(NsOp::kRmdir, std::move(p)); }
inline NsOp Rename(std::string a, std::string b) { return Make(NsOp::kRename, std::move(a), std::move(b)); }
inline NsOp Exchange(std::string a, std::string b) { return Make(NsOp::kExchange, std::move(a), std::move(b)); }
inline NsOp Chmod(std::string p, mode_t m) { return Make(NsOp::kChmod, std::move(p), "", 0, 0, 0, m); }
inline NsOp Write(std::string p, uint64_t off, uint64_t len, uint32_t seed) {
  return Make(NsOp::kWrite, std::move(p), "", off, len, seed);
}
inline NsOp Append(std::string p, uint64_t len, uint32_t seed) { return Make(NsOp::kAppend, std::move(p), "", 0, len, seed); }
inline NsOp Truncate(std::string p, uint64_t len) { return Make(NsOp::kTruncate, std::move(p), "", 0, len); }
inline NsOp Checkpoint() { return Make(NsOp::kCheckpoint, ""); }
inline NsOp NoFreeBlocks() { return Make(NsOp::kNoFreeBlocks, ""); }
inline NsOp Utimens(std::string p) { return Make(NsOp::kUtimens, std::move(p)); }
inline NsOp Fsync(std::string p) { return Make(NsOp::kFsync, std::move(p)); }
// The times kUtimens sets: atime, and not mtime (set back, a directory's
// would go below what an earlier operation left, which the explorer's
// check of times that never go back would take for a loss).
inline constexpr struct timespec kUtimensTimes[2] = {{1000, 1}, {0, UTIME_OMIT}};
inline NsOp UnlinkOpen(std::string p, uint64_t off, uint64_t len, uint32_t seed) {
  return Make(NsOp::kUnlinkOpen, std::move(p), "", off, len, seed);
}

}  // namespace upfs::crashtest
