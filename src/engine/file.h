// File: the upfs file engine for one open file in one process.
//
// Every operation runs in the caller's thread, without locks shared with
// other processes (docs/design.md, "Concurrency"):
//   1. pin the current reclamation epoch (so no log block or retired data
//      block it may read is reused under it);
//   2. catch the process's block table up to the log tail;
//   3. read, or prepare a write privately (new blocks, copy, persist);
//   4. validate / commit with one CAS at the log tail, re-checking entries
//      committed in between for conflicts and redoing if there are any.
// The engine knows blocks only by number: the Medium maps them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/allocator.h"
#include "engine/block_table.h"
#include "engine/log.h"
#include "engine/shared_state.h"
#include "format/format.h"
#include "medium/medium.h"
#include "util/status.h"

namespace upfs {

inline constexpr uint32_t kMaxThreads = 1024;
// GC runs when a new log block makes the chain longer than this plus twice
// the length the last compaction produced.
inline constexpr uint64_t kGcSlackBlocks = 32;

struct FileStat {
  uint64_t size = 0;
  uint64_t blocks = 0;  // 4 KiB blocks mapped (data, including preallocated)
  uint64_t mtime_ns = 0;
};

// State of one thread for one file.
struct ThreadCtx {
  uint32_t slot = kMaxSlots;  // EBR slot in the shared state
  uint64_t tail_claim_id = 0;  // this thread's value of ShmHeader::tail_claim
  ThreadBlocks blocks;
  struct Retired {
    uint64_t epoch;
    uint32_t lblock;
    uint32_t count;
  };
  std::vector<Retired> limbo;  // freed when the epoch has moved on twice
  Effect scratch;
  std::vector<format::Run> runs;
  std::vector<uint32_t> old;  // mapping displaced by the operation
  std::vector<uint64_t> payload;
  std::vector<format::Run> overflow;  // overflow blocks of the pending payload
};

class File {
 public:
  // Builds the engine over an open medium whose header was validated. With
  // `rebuild`, recomputes the shared allocation state from the log.
  static Status Open(std::unique_ptr<Medium> medium, std::unique_ptr<SharedState> shared,
                     bool rebuild, std::unique_ptr<File>* out);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  Status Read(void* buf, size_t n, uint64_t off, size_t* done);
  // Writes at `off`, or at the end of file if `append` (then *at receives
  // the offset written at).
  Status Write(const void* buf, size_t n, uint64_t off, bool append, uint64_t* at);
  Status Truncate(uint64_t len);
  Status Fallocate(int mode, uint64_t off, uint64_t len);
  Status Sync();
  // Waits for background work on the file (growth, huge pages).
  void Settle() { medium_->Settle(); }
  Status Stat(FileStat* st);
  Status Size(uint64_t* size);
  // SEEK_DATA (data = true) / SEEK_HOLE semantics of lseek(2).
  Status SeekDataHole(uint64_t off, bool data, uint64_t* result);
  // Compacts the log if it is past the trigger length (with force: whenever
  // that makes it shorter). Non-blocking: returns at once if another GC is
  // running.
  Status CollectGarbage(bool force);
  // Number of log blocks in the chain from the head to the tail.
  Status LogLength(uint64_t* blocks);

  format::Consistency consistency() const { return consistency_; }
  Medium* medium() const { return medium_.get(); }
  SharedState* shared() const { return shared_.get(); }
  const format::FileHeader* header() const { return hdr_; }

 private:
  File(std::unique_ptr<Medium> medium, std::unique_ptr<SharedState> shared);

  Status Init(bool rebuild);
  Status Ctx(ThreadCtx** out);
  template <typename Fn>
  Status WithTable(Fn fn);
  Status StatLocked(BlockTable* t, FileStat* st);
  Status SeekLocked(BlockTable* t, uint64_t off, bool data, uint64_t* result);
  Status LogLengthLocked(BlockTable* t, uint64_t* blocks);
  Status CatchUp(ThreadCtx* c, BlockTable** out);
  Status RebuildTableLocked();
  Status ReplayHead(BlockTable* table, ReplayResult* res, bool check_tail);
  format::LogBlock* LogAt(uint32_t lblock) const {
    return reinterpret_cast<format::LogBlock*>(access_.AddrUnchecked(lblock));
  }

  // Commit machinery (file_commit.cc).
  template <typename Conflict>
  Status Commit(ThreadCtx* c, LogPos* pos, uint64_t entry, Conflict conflict, bool* conflicted);
  Status ExtendChain(ThreadCtx* c, LogPos* pos);
  void PersistBeforeSlot(format::LogBlock* b, const LogPos& pos);
  Status BuildPayload(ThreadCtx* c, uint32_t vblock, const std::vector<format::Run>& runs,
                      Effect::SizeOp op, uint64_t new_size);
  void DropPayload(ThreadCtx* c);

  Status AppendInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                       bool append, uint64_t* at, bool* done);
  // Releases the tail claim, if held, at the end of a scope.
  struct TailClaimGuard {
    File* f;
    ThreadCtx* c;
    bool held = false;
    ~TailClaimGuard() {
      if (held) f->ReleaseTail(c);
    }
  };
  bool TryClaimTail(ThreadCtx* c);
  // *any: an entry was committed after p.
  Status CommittedSince(ThreadCtx* c, const LogPos& p, bool* any);
  void ClaimTail(ThreadCtx* c);
  void ReleaseTail(ThreadCtx* c);
  Status ZeroTailForGap(ThreadCtx* c, BlockTable* t, const LogPos& p, bool* claimed, bool* stale);
  Status WriteOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                   bool append, uint64_t* at, bool* conflicted);
  Status WriteInPlace(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                      bool* done);
  Status CopyIntoNewBlocks(ThreadCtx* c, const void* buf, size_t n, uint64_t off, uint64_t size,
                           uint64_t vb0);
  Status PunchHole(ThreadCtx* c, BlockTable* t, uint64_t off, uint64_t end);
  Status CommitRangeChange(ThreadCtx* c, BlockTable** t, LogPos* p, uint64_t vb0, uint64_t vb1,
                           const std::vector<format::Run>& runs, Effect::SizeOp op,
                           uint64_t new_size, const std::vector<format::Run>& fresh,
                           const uint32_t* displaced, size_t ndisplaced, bool* retry);
  void ReleaseDisplaced(ThreadCtx* c, const uint32_t* blocks, size_t n);
  void Retire(ThreadCtx* c, uint32_t lblock, uint32_t count);
  void DrainLimbo(ThreadCtx* c, bool force);
  void TouchMtime();
  void MaybeCollectGarbage(ThreadCtx* c);
  Status CompactLocked(ThreadCtx* c, bool force);

  std::unique_ptr<Medium> medium_;
  std::unique_ptr<SharedState> shared_;
  BlockAccess access_;
  Allocator alloc_;
  format::FileHeader* hdr_ = nullptr;
  format::Consistency consistency_ = format::Consistency::kStrict;

  std::atomic<BlockTable*> table_{nullptr};
  std::vector<std::unique_ptr<BlockTable>> tables_;  // current and retired, freed at close
  std::atomic_flag apply_lock_ = ATOMIC_FLAG_INIT;
  std::mutex tables_mu_;

  std::array<std::atomic<ThreadCtx*>, kMaxThreads> ctx_{};
  std::atomic<bool> gc_wanted_{false};
  std::atomic<uint64_t> last_mtime_tick_{0};
};

}  // namespace upfs
