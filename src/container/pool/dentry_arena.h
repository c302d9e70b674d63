// Where the next namespace's dentries live (docs/design.md, "The next
// namespace"; docs/format.md, "Dentries"): arena blocks chained from one
// durable word, each a header line and 63 dentry lines, and one thread
// slot's allocator of runs of lines in them. The allocator's lists are
// soft (recovery finds the free lines again by a scan of the chain); a
// line reused keeps a generation above its last dentry's. Not used by the
// pool yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "container/pool/dentry.h"
#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

namespace format::pool {
// Line 0 of an arena block.
struct DentryBlockHeader {
  uint32_t magic;  // kDentryBlockMagic
  uint32_t zero;
  uint64_t next;  // the previous arena block of the chain, 0 = none
  uint64_t reserved[6];
};
static_assert(sizeof(DentryBlockHeader) == 64);
inline constexpr uint32_t kDentryBlockMagic = 0x424e4544;  // "DENB"
inline constexpr uint32_t kLinesPerBlock = 64;
inline constexpr uint32_t kDentryLinesPerBlock = kLinesPerBlock - 1;
}  // namespace format::pool

// What the pool lends the arenas.
class DentryStore {
 public:
  // A block of zeros, written back, that no structure references yet.
  virtual Status NewBlock(uint32_t* block) = 0;
  // The 8 words of line `line` (block * 64 + index).
  virtual uint64_t* Line(uint64_t line) = 0;
  // The durable word naming the newest arena block (0: none).
  virtual std::atomic<uint64_t>* ChainHead() = 0;
  virtual void WriteBack(const void* p, size_t bytes) = 0;  // no fence
  virtual void Fence() = 0;
  // Blocks of the pool: a block number at or past it is damage.
  virtual uint64_t Blocks() const = 0;

 protected:
  ~DentryStore() = default;
};

// One thread slot's allocator (not shared: each thread slot has its own).
class DentryArena {
 public:
  explicit DentryArena(DentryStore* store) : s_(store) {}

  // A run of `lines` free lines (1 to 6) for a new dentry: *head its
  // first line, *gen the generation the dentry takes there: above every
  // generation any of the run's lines kept, so that each line's only rise.
  Status Take(uint32_t lines, uint64_t* head, uint32_t* gen);
  // The run of a dentry of generation `gen` that is durably dead, that no
  // reader can still hold (epochs) and whose own claims no longer matter
  // (what it superseded is durably dead): zeroed but for the generation
  // each line keeps, and written back. Taken again only after Settle.
  void Give(uint64_t head, uint32_t lines, uint32_t gen);
  // Fences the zeroing of the runs given since: a crash cannot bring
  // their old words back under a new dentry's lost ones.
  void Settle();

  // Free lines this arena holds (settled runs and the current block's
  // rest), for tests and statistics.
  uint64_t FreeLines() const;

 private:
  Status AddBlock();
  void Free(uint64_t head, uint32_t lines);

  DentryStore* s_;
  uint64_t bump_ = 0, bump_end_ = 0;  // the current block's unused lines
  std::vector<uint64_t> free_[format::pool::kDentryMaxLines + 1];  // settled runs, by length
  std::vector<std::pair<uint64_t, uint32_t>> given_;               // zeroed, not fenced yet
};

// Every line of every block on the chain, in chain order (recovery, fsck):
// fn(line, lines the answer covers, what ReadDentry made of it, the
// dentry when kValid). A damaged block header, a chain that loops or
// leaves the pool, or a damaged dentry ends the scan with EUCLEAN naming
// it.
Status ScanDentries(DentryStore* store,
                    FunctionRef<void(uint64_t line, uint32_t lines, DentryRead got, const Dentry& d)> fn);

}  // namespace upfs
