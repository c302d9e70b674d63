// A directory's name table, shared and soft (docs/design.md, "The next
// namespace"): open addressing over 8-byte slots in memory the pool lends,
// read and changed in place by every thread of every process that maps it,
// and never written back: the durable truth is the dentries, from which
// recovery builds the tables again. A name's slot holds a reference to its
// dentry (the caller's) and a tag of its hash; the table compares names
// through the caller, which reads the dentries.
//
// No lock: a name is claimed by a CAS of a free slot, made visible by a
// second store (pending -> live), removed by a CAS to a tombstone. Growth
// freezes the table, copies it into a successor twice as big and switches
// the directory's anchor word; writers wait for it meanwhile, and take it
// over when the thread growing it is dead. Readers never wait. Retired
// tables are freed by the lender once no reader can hold them (epochs).
#pragma once

#include <atomic>
#include <cstdint>

#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

// What the container lends tables: zeroed memory that every process maps,
// named by a handle (never an address), and the identity and liveness of
// the threads that use them.
class TableMemory {
 public:
  // `bytes` of zeroed memory, 64-byte aligned; *handle is never 0.
  virtual Status Allocate(uint64_t bytes, uint64_t* handle) = 0;
  virtual char* At(uint64_t handle) const = 0;
  // Frees `handle` once no thread that may hold it is reading it.
  virtual void Retire(uint64_t handle) = 0;
  // The calling thread's identity (its thread slot; below 2^32 - 1).
  virtual uint32_t Self() const = 0;
  // Whether thread `owner` is alive (the process holding its slot is).
  virtual bool Alive(uint32_t owner) = 0;

 protected:
  ~TableMemory() = default;
};

// A slot word: tag:25 | frozen:1 | state:2 | ref:36. Zero: never used (it
// ends a probe run); kTombstone: used and freed (it does not).
namespace dir_slot {
inline constexpr uint64_t kRefBits = 36;
inline constexpr uint64_t kRefMask = (uint64_t{1} << kRefBits) - 1;
inline constexpr uint64_t kStateShift = 36;
inline constexpr uint64_t kPending = uint64_t{1} << kStateShift;
inline constexpr uint64_t kLive = uint64_t{2} << kStateShift;
inline constexpr uint64_t kStateMask = uint64_t{3} << kStateShift;
inline constexpr uint64_t kFrozen = uint64_t{1} << 38;
inline constexpr uint64_t kTagShift = 39;
inline constexpr uint64_t kTombstone = 1;
// Refs 0 and 1 are never a dentry's (they would read as a free slot).
inline constexpr uint64_t kFirstRef = 2;

inline uint64_t Tag(uint64_t hash) { return hash & ((uint64_t{1} << (64 - kTagShift)) - 1); }
inline uint64_t Make(uint64_t hash, uint64_t state, uint64_t ref) { return Tag(hash) << kTagShift | state | ref; }
inline uint64_t RefOf(uint64_t w) { return w & kRefMask; }
inline uint64_t StateOf(uint64_t w) { return w & kStateMask; }
inline uint64_t TagOf(uint64_t w) { return w >> kTagShift; }
// Whether a word (frozen or not) holds no name: never used, or a tombstone.
inline bool Free(uint64_t w) { return StateOf(w) == 0; }
}  // namespace dir_slot

// What the table asks the caller about a slot's dentry.
class DentryView {
 public:
  // The 64-bit hash of the dentry's name (a growth places it by it, a
  // scan orders by it).
  virtual uint64_t HashOf(uint64_t ref) = 0;
  // The thread that made the dentry (whose liveness decides a pending
  // slot's fate when its claimer stops answering).
  virtual uint32_t OwnerOf(uint64_t ref) = 0;

 protected:
  ~DentryView() = default;
};

class SharedDirTable {
 public:
  // `anchor`: the directory's word naming its table (0: none yet; the
  // first claim makes one). Shared by every process; the SharedDirTable object
  // is a view of it and holds nothing.
  SharedDirTable(TableMemory* mem, DentryView* view, std::atomic<uint64_t>* anchor)
      : mem_(mem), view_(view), anchor_(anchor) {}

  // The live slot's ref for which same(ref) holds among names of hash
  // `hash`, or 0. Pending slots are not seen.
  uint64_t Find(uint64_t hash, FunctionRef<bool(uint64_t ref)> same) const;

  // Claims the name of hash `hash` (same() tells it apart) for dentry
  // `ref`: returns true with a pending slot that only Publish or Abandon
  // ends, or false with *existing the live name's ref. Waits for a pending
  // claim of the same name made before it to end. ENOMEM if the table
  // cannot grow.
  Status Claim(uint64_t hash, uint64_t ref, FunctionRef<bool(uint64_t ref)> same, bool* claimed,
               uint64_t* existing);
  // Makes a won claim live (counted in Entries).
  void Publish(uint64_t hash, uint64_t ref);
  // Gives a won claim up: the slot becomes a tombstone.
  void Abandon(uint64_t hash, uint64_t ref);
  // Removes the live name of dentry `ref`; false if it is not there.
  bool Remove(uint64_t hash, uint64_t ref);

  // Live names: the sum of the table's stripes (exact when nothing
  // changes meanwhile).
  int64_t Entries() const;

  // Live names in increasing order of hash, from the first hash above
  // `after` (all of them with `from_start`): fn(hash, refs, n) gets every
  // name of one hash at once and returns false to stop before taking them.
  // A name live for the whole of a scan made of calls whose `after` is the
  // last hash the previous call took is seen exactly once.
  void Scan(uint64_t after, bool from_start,
            FunctionRef<bool(uint64_t hash, const uint64_t* refs, size_t n)> fn) const;

  // Slots of the current table (0 if none), for tests and statistics.
  uint64_t SlotCount() const;

  // Test points (util/test_hook.h): fn(arg) runs in a grower after it
  // froze and copied the table and before it switches the anchor (a grower
  // that stops there, as a killed one would), and in a claim after it chose
  // its free slot and before its CAS there (another claim that chose an
  // earlier one).
  static void BeforeSwitchForTest(void (*fn)(void*), void* arg);
  static void BeforeClaimCasForTest(void (*fn)(void*), void* arg);

 private:
  struct Table;
  static Status AllocateTable(TableMemory* mem, uint64_t log2_slots, uint64_t* handle, Table** out);
  Table* Current(uint64_t* handle) const;
  Status Ensure(uint64_t* handle, Table** t);
  // Waits until the table behind `handle` is replaced (taking a dead
  // grower's work over), or grows it when `start` and nobody else does.
  Status GrowOrWait(uint64_t handle, Table* t, bool start);
  Status Grow(uint64_t handle, Table* t);
  // Settles a claim made by a CAS against others of the same name.
  Status Contest(uint64_t hash, uint64_t ref, FunctionRef<bool(uint64_t ref)> same, bool* won,
                 uint64_t* winner);
  // Waits for the pending slot `w` at index i of t to end; false when the
  // table froze meanwhile.
  bool WaitPending(Table* t, uint64_t i, uint64_t w);
  // The index of `want` in the current table's probe run of `hash`.
  bool Locate(uint64_t hash, uint64_t want, uint64_t* handle, Table** t, uint64_t* index) const;
  void AddToStripe(Table* t, int64_t live, int64_t used);

  TableMemory* mem_;
  DentryView* view_;
  std::atomic<uint64_t>* anchor_;
};

}  // namespace upfs
