// A pool's files in one process: the engine File of each regular file
// (made on first use, shared by every descriptor of it, its first log
// block made then too unless its create took one), the log blocks of
// released files kept for new files' logs, the blocks a closed File could
// not free yet, and its pages mapped ahead of its first reads.
//
// Mapping ahead: a process that attaches a pool maps the pool file but
// none of its pages. In small pages, a first sequential read of a pool
// file took a fault per 16 pages (fault-around), 1.50-1.72x the kernel
// (`upfs bench --pool --filter pool-read-seq-4k-cold` with
// UPFS_HUGEPAGES=0), 2.01-2.25x with the pages mapped ahead; in huge
// pages, where a fault maps 2 MiB, about 3x either way. A per-file file
// populates its whole mapping (Medium::PopulateAhead); a pool file's
// blocks lie among other files' blocks, so only the extents that hold its
// data are populated (docs/design.md, "Populating a file's mapping").
#include <cstring>

#include "container/pool/fresh_inode.h"
#include "container/pool/pool.h"
#include "engine/stat_hint.h"
#include "medium/medium.h"
#include "medium/pm.h"
#include "util/assert.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {
constexpr size_t kFileSweepMin = 1024;

// The engine's hold on a pool file: it names the inode, and hands the
// pool what the File could not free before it closed (the pool outlives
// every File of it). Before, those blocks were dropped with the File's
// thread contexts and stayed taken in a pool marked clean, so no recovery
// ever freed them (1,967 blocks after 60 patched files were closed).
class PoolFileLease final : public StorageLease {
 public:
  PoolFileLease(Pool* pool, uint64_t ino) : pool_(pool), ino_(ino) {}
  uint64_t ino() const { return ino_; }
  void KeepRetired(std::vector<ThreadBlocks::Retired>* limbo) override { pool_->AdoptRetired(limbo); }

 private:
  Pool* pool_;
  uint64_t ino_;
};

// Released files' logs kept per process for new files' (RecycleFileLog):
// enough for a burst of removals followed by creates; in a full pool, each
// attached process holds this many blocks back from files' data.
constexpr size_t kRecycledLogsMax = 32;
// A log with more lines written than this is not kept: rewriting them
// would cost about what zeroing a new block does. A fresh image that names
// a kept log is written back with this many of its lines (fresh_inode.h).
constexpr uint32_t kRecycleMaxLines = kKeptLogLinesMax;

// The first line of an empty file log: its block's header (a chain of
// one block, sequence 1) and zero slots.
struct EmptyLogLine {
  alignas(64) unsigned char bytes[64] = {};
  EmptyLogLine() {
    // (Words at their offsets: a LogBlock is a whole block, not 64 bytes.)
    const uint64_t next = format::NextWord(0), seq = 1;
    static_assert(offsetof(LogBlock, next) + 8 <= sizeof(bytes) && offsetof(LogBlock, seq) + 8 <= sizeof(bytes));
    std::memcpy(bytes + offsetof(LogBlock, next), &next, 8);
    std::memcpy(bytes + offsetof(LogBlock, seq), &seq, 8);
  }
};
const EmptyLogLine kEmptyLogLine;

// That line and the rest of a file's first `lines` lines zero, written
// back (or only stored, for a caller that writes them back later): with
// the block's other lines zero, an empty file log once a fence has
// ordered them.
void WriteEmptyLogLines(char* p, uint32_t lines, bool write_back = true) {
  alignas(64) static const unsigned char kZeros[kRecycleMaxLines * 64] = {};
  UPFS_ASSERT(lines >= 1 && lines <= kRecycleMaxLines);
  const auto copy = write_back ? pm::CopyFlush : pm::StoreCopy;
  copy(p, kEmptyLogLine.bytes, sizeof(kEmptyLogLine.bytes));
  if (lines > 1) copy(p + 64, kZeros, (lines - 1) * 64);
}

// Whether a kept log's lines already are what WriteEmptyLogLines writes:
// the released file never wrote to it (a file created and removed unused).
// They were made durable so when this block last became an empty log, and
// a log's slots are written once, so nothing is left to write or wait for.
bool IsEmptyLog(const char* p, uint32_t lines) {
  return lines == 1 && std::memcmp(p, kEmptyLogLine.bytes, sizeof(kEmptyLogLine.bytes)) == 0;
}

}  // namespace

bool Pool::PopRecycled(RecycledLog* r) {
  // A push racing this load is missed: that create makes a new log.
  if (recycled_count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> g(recycled_mu_);
  if (recycled_.empty()) return false;
  *r = recycled_.back();
  recycled_.pop_back();
  recycled_count_.store(uint32_t(recycled_.size()), std::memory_order_relaxed);
  return true;
}

bool Pool::TakeRecycledLog(uint32_t* l, char** addr, uint32_t* stored_lines) {
  RecycledLog r;
  char* p;
  if (!PopRecycled(&r)) return false;
  if (!access_.Addr(r.block, &p).ok()) {
    FreeBlock(r.block);
    return false;
  }
#if defined(UPFS_ASSERTIONS)
  // What the released file's replay found: nothing written past its end.
  for (uint64_t i = uint64_t(r.dirty_lines) * 64; i < kBlockSize; ++i) UPFS_ASSERT(p[i] == 0);
#endif
  const bool rewrite = !IsEmptyLog(p, r.dirty_lines);
  if (rewrite) WriteEmptyLogLines(p, r.dirty_lines, /*write_back=*/!stored_lines);
  if (stored_lines) *stored_lines = rewrite ? r.dirty_lines : 0;
  *l = r.block;
  if (addr) *addr = p;
  return true;
}

Status Pool::NewFileLogBlock(uint32_t* l) {
  char* p;
  if (!TakeRecycledLog(l, &p)) {
    UPFS_RETURN_IF_ERROR(AllocBlock(l));
    if (Status st = access_.Addr(*l, &p); !st.ok()) {
      FreeBlock(*l);
      return st;
    }
    // A new block: zeroed in place with non-temporal stores (no 4 KiB
    // image to clear and read for every new file), its header line after.
    pm::ZeroNT(p + 64, kBlockSize - 64);
    WriteEmptyLogLines(p, 1);
  }
  pm::Fence();
  // The write-back takes the line out of the cache on the CPUs measured
  // (without this prefetch perf put 57% of ReplayChain's samples on the
  // instruction after its first load: a miss inferred), and the File made
  // next reads it first (its replay, then its first commit's slot):
  // fetched now, while the inode's log head is swapped and the File built.
  __builtin_prefetch(p, 1);
  return Status::OK();
}

bool Pool::RecycleFileLog(const ReplayResult& res) {
  // The released file's log ends in its one block at res.tail: entries
  // (and payloads) in the slots before it, zero after (a log is zeroed
  // before it is a log, and written only at its tail).
  if (res.log_blocks.size() != 1) return false;
  UPFS_ASSERT(res.tail.lblock == res.log_blocks[0]);
  const uint64_t bytes = offsetof(LogBlock, slots) + uint64_t(res.tail.slot) * 8;
  const uint32_t lines = uint32_t((bytes + 63) / 64);
  if (lines > kRecycleMaxLines) return false;
  std::lock_guard<std::mutex> g(recycled_mu_);
  if (recycled_.size() >= kRecycledLogsMax) return false;
  recycled_.push_back(RecycledLog{res.log_blocks[0], lines});
  recycled_count_.store(uint32_t(recycled_.size()), std::memory_order_relaxed);
  return true;
}

bool Pool::TakeRecycledBlock(uint32_t* l) {
  RecycledLog r;
  if (!PopRecycled(&r)) return false;
  *l = r.block;
  return true;
}

void Pool::FreeRecycledLogs() {
  std::lock_guard<std::mutex> g(recycled_mu_);
  for (const RecycledLog& r : recycled_) FreeBlock(r.block);
  recycled_.clear();
  recycled_count_.store(0, std::memory_order_relaxed);
}

size_t Pool::RecycledLogsForTest() {
  std::lock_guard<std::mutex> g(recycled_mu_);
  return recycled_.size();
}

Status Pool::FileOf(uint64_t ino, std::shared_ptr<File>* out, bool for_use) {
  bool map_ahead = false;
  {
    std::lock_guard<std::mutex> g(files_mu_);
    FileEntry* e;
    UPFS_RETURN_IF_ERROR(FileOfLocked(ino, out, &e));
    map_ahead = for_use && !e->mapped;
    e->mapped = e->mapped || for_use;
  }
  if (map_ahead) MapAhead(out->get());
  return Status::OK();
}

Status Pool::FileOfLocked(uint64_t ino, std::shared_ptr<File>* out, FileEntry** entry) {
  auto it = files_.find(ino);
  if (it != files_.end() && (*out = it->second.file.lock())) {
    *entry = &it->second;
    return Status::OK();
  }
  Inode* in;
  UPFS_RETURN_IF_ERROR(InodeAt(ino, &in));
  const uint64_t id = in->ident.load(std::memory_order_acquire);
  if (IdentKind(id) != FileType::kRegular)
    return Status::Corrupt("inode", std::to_string(ino) + " is not a regular file");
  // Version 9 (fresh_inode.h): the engine changes durable words of the
  // inode (its log head, its times) from any thread, and a fresh image
  // must be durable first; a fresh bit's clear that its creator left
  // unwritten goes with the File's first commit or head swap.
  SealIfFresh(in, access_);
  bool empty = false;
  if (in->log_head.load(std::memory_order_acquire) == 0) {
    // The first log block, made on first use so that creating a file
    // costs no block. The inode's line was written back (and so left this
    // CPU's cache) when the file was made: its miss overlaps the zeroing.
    __builtin_prefetch(&in->log_head, 1);
    uint32_t l;
    UPFS_RETURN_IF_ERROR(NewFileLogBlock(&l));
    uint64_t expected = 0;
    if (!pm::Cas64(&in->log_head, expected, l)) {
      FreeBlock(l);
    } else {
      // Not written back here: the File's first commit does it before its
      // fence (LogRoot::head_persisted_by_commit), a fence and a write-back
      // round less for a file's first write. A crash before it loses only
      // the empty log, whose block recovery takes back.
      empty = true;
    }
  }
  LogRoot root;
  root.head = &in->log_head;
  root.times = &in->times;
  root.created_ns = in->created_ns;
  root.consistency = Consistency(in->consistency);
  root.words = &in->words;
  root.patches = super()->version >= kFirstPatchPoolVersion;
  root.checked_appends = super()->version >= kFirstCheckedAppendPoolVersion;
  root.granules = super()->version >= kFirstGranulePoolVersion;
  root.anywhere_shadows = super()->version >= kFirstAnywhereShadowPoolVersion;
  root.stat_hints = true;
  // Whoever made the log (this call, another thread or process), the word
  // may not be durable yet.
  root.head_persisted_by_commit = true;
  if (super()->version >= kFirstFreshCreatePoolVersion) root.persist_with_head = &in->ident;
  if (root.consistency != Consistency::kStrict && root.consistency != Consistency::kSync)
    return Status::Corrupt("inode", std::to_string(ino) + " has no consistency mode");
  std::unique_ptr<File> f;
  // A pool's recovery, at its first attach after a crash, cleared any
  // commit cut short in a file's log (Pool::Recover): one now is damage.
  UPFS_RETURN_IF_ERROR(File::Open(FileStorage{medium_.get(), source_.get(), root, true, false}, nullptr,
                                  std::make_unique<PoolFileLease>(this, ino), &f));
  std::shared_ptr<File> sf(std::move(f));
  if (files_.size() >= next_file_sweep_) {
    // An entry outlives its File (closed); without a sweep, the map kept
    // one for every file this process ever wrote or stat'ed with data.
    std::erase_if(files_, [](const auto& e) { return e.second.file.expired(); });
    next_file_sweep_ = std::max(kFileSweepMin, 2 * files_.size());
  }
  FileEntry& e = files_[ino];
  e.file = sf;
  // A file whose log this call made holds no data: nothing to map ahead
  // (and a create + write need not ask the engine for a size to know it).
  e.mapped = e.mapped || empty;
  *entry = &e;
  *out = std::move(sf);
  return Status::OK();
}

void Pool::AdoptRetired(std::vector<ThreadBlocks::Retired>* limbo) {
  std::lock_guard<std::mutex> g(retired_mu_);
  retired_.limbo.insert(retired_.limbo.end(), limbo->begin(), limbo->end());
  limbo->clear();
  // Entries keep their epochs: the oldest may be free to go already.
  source_->DrainLimbo(&retired_, false);
  source_->ReturnAll(&retired_);
}

bool Pool::StatFromHint(uint64_t ino, uint64_t ident, FileStat* out) {
  Inode* in;
  if (!InodeAt(ino, &in).ok() || in->ident.load(std::memory_order_acquire) != ident) return false;
  if (!ReadStatHint(in->words, access_, in->log_head.load(std::memory_order_acquire), &out->size,
                    &out->blocks))
    return false;
  out->mtime_ns = ReportedMtime(in->times, in->created_ns);
  out->data_ctime_ns = ReportedDataCtime(in->times, in->created_ns);
  return in->ident.load(std::memory_order_acquire) == ident;
}

size_t Pool::FileEntriesForTest() {
  std::lock_guard<std::mutex> g(files_mu_);
  return files_.size();
}

void Pool::MapAhead(File* f) {
  uint64_t size = 0;
  if (!f->Size(&size).ok() || size < kPopulateAtOpenBytes) return;
  constexpr uint64_t kExtentBlocks = kExtentSize / kBlockSize;
  // The probe first, on the extent of the file's first block: in huge
  // pages (a fault or two per extent), the reader's own faults cost as
  // little as populating would, and the file's table is not walked.
  uint32_t first = 0;
  if (!f->FirstDataBlock(&first).ok() || first == 0) return;
  if (!medium_->PopulateProbe(first / kExtentBlocks * kExtentSize)) return;
  std::vector<uint64_t> extents;
  if (!f->DataExtents(kExtentBlocks, &extents).ok() || extents.size() < 2) return;
  // The first is the first block's (the walk goes in file order): probed.
  extents.erase(extents.begin());
  for (uint64_t& e : extents) e *= kExtentSize;
  medium_->PopulateExtents(std::move(extents));
}

}  // namespace upfs
