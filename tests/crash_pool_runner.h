// The crash explorer's runner of pool operations (crash_explorer_pool.cc):
// each NsOp of a workload made through the pool's namespace, as the C API
// makes it.
#pragma once

#include <fcntl.h>
#include <stdio.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "crash_pool_workloads.h"
#include "pool_ops.h"
#include "pool_tree.h"

namespace upfs::crashtest {

// Runs op through the pool's namespace as the C API does (resolve, then the
// change; ESTALE: the namespace changed between the two, resolve again).
class Runner {
 public:
  explicit Runner(Pool* pool) : pool_(pool) {
    who_.uid = 0;
    who_.gid = 0;
    who_.umask = 0;
  }

  Status Run(const NsOp& op) {
    for (int attempt = 0;; ++attempt) {
      Status st = Once(op);
      if (st.err() != ESTALE || attempt > 100) return st;
    }
  }

 private:
  Status Once(const NsOp& op) {
    if (op.kind == NsOp::kCheckpoint) return pool_->Checkpoint();
    if (op.kind == NsOp::kNoFreeBlocks) {
      pool_->RefuseBlocksForTest();
      return Status::OK();
    }
    PoolNamespace ns(pool_, &who_);
    Resolved r, r2;
    UPFS_RETURN_IF_ERROR(ns.Resolve(op.a, false, &r));
    switch (op.kind) {
      case NsOp::kCreate: {
        if (r.ino) return Status::Error(EEXIST, "file exists");
        uint64_t ino;
        bool created;
        return ns.Create(r, op.mode, format::Consistency::kStrict, &ino, &created);
      }
      case NsOp::kMkdir: return ns.Mkdir(r, op.mode);
      case NsOp::kSymlink: return ns.Symlink(r, op.b);
      case NsOp::kLink:
        UPFS_RETURN_IF_ERROR(ns.Resolve(op.b, false, &r2));
        return ns.Link(r, r2);
      case NsOp::kUnlink: return ns.Remove(r, false);
      case NsOp::kRmdir: return ns.Remove(r, true);
      case NsOp::kRename:
      case NsOp::kExchange:
        UPFS_RETURN_IF_ERROR(ns.Resolve(op.b, false, &r2));
        if (!r.ino) return Status::Error(ENOENT, "no such file");
        return ns.Rename(r, r2, op.kind == NsOp::kExchange ? RENAME_EXCHANGE : 0);
      case NsOp::kCheckpoint:
      case NsOp::kNoFreeBlocks: break;
      case NsOp::kChmod:
        if (!r.ino) return Status::Error(ENOENT, "no such file");
        return ns.Chmod(r.ino, op.mode);
      case NsOp::kUtimens:
        if (!r.ino) return Status::Error(ENOENT, "no such file");
        return ns.Utimens(r.ino, kUtimensTimes);
      case NsOp::kFsync: {
        if (!r.ino) return Status::Error(ENOENT, "no such file");
        uint32_t gen;
        UPFS_RETURN_IF_ERROR(ns.TakeHold(r.ino, &gen));
        std::shared_ptr<File> f;
        Status st = pool_->FileOf(r.ino, &f);
        if (st.ok()) st = f->Sync();
        f.reset();
        ns.DropHold(r.ino, gen);
        return st;
      }
      case NsOp::kWrite:
      case NsOp::kAppend:
      case NsOp::kTruncate:
      case NsOp::kUnlinkOpen: {
        if (!r.ino) return Status::Error(ENOENT, "no such file");
        uint32_t gen;
        UPFS_RETURN_IF_ERROR(ns.TakeHold(r.ino, &gen));
        Status st;
        if (op.kind == NsOp::kUnlinkOpen) st = ns.Remove(r, false);
        std::shared_ptr<File> f;
        if (st.ok()) st = pool_->FileOf(r.ino, &f);
        const std::string data = FillBytes(op.len, op.seed);
        uint64_t at;
        if (st.ok()) {
          switch (op.kind) {
            case NsOp::kTruncate: st = f->Truncate(op.len); break;
            case NsOp::kAppend: st = f->Write(data.data(), data.size(), 0, true, &at); break;
            default: st = f->Write(data.data(), data.size(), op.off, false, &at);
          }
        }
        f.reset();
        ns.DropHold(r.ino, gen);
        return st;
      }
    }
    return Status::Error(EINVAL, "unknown operation");
  }

  Pool* pool_;
  Credentials who_;
};

}  // namespace upfs::crashtest
