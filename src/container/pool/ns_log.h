// NsLog: the pool's namespace log, as one process reads and extends it.
//
// Every namespace change is one record: its payload is written into slots
// reserved by a kReserve entry, persisted, and then committed by the CAS of
// a kApply entry (naming the reservation and the payload's CRC) into the
// first empty slot at the tail. The kApply's position orders the records;
// a reservation that is never applied (its writer lost a race, or died)
// means nothing. The committer validates its change against every record
// before its kApply (it reads them first), so no lock is ever held across
// processes: a process killed at any instruction leaves either a committed
// record or a dead reservation.
//
// A block is closed by a kReserve that covers its remaining slots before
// its successor is linked, so no entry is ever added to a block that has a
// successor and readers follow the chain in order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "container/pool/ns_record.h"
#include "container/pool/pool_format.h"
#include "engine/log.h"
#include "engine/reclamation.h"
#include "util/function_ref.h"
#include "util/spin_mutex.h"
#include "util/status.h"

namespace upfs {

// Where a process is in the log: the next slot it has not read.
struct NsPos {
  uint32_t lblock = 0;
  uint32_t slot = 0;
  uint64_t seq = 0;  // the block's chain sequence number
  bool operator==(const NsPos&) const = default;
};

// Slots at the end of every log block that only removals (unlink, rmdir)
// may take: room for a few of them, the longest (a 255-byte name) among
// them, so that a full pool can always be emptied (NsLog::Reserve).
inline constexpr uint32_t kRemovalSlots = 48;
static_assert(kRemovalSlots >= format::pool::kRecordHeaderWords + (format::pool::kMaxNameLen + 7) / 8 + 2);

// The cache line of a log block that holds slot `s` (slots start 16 bytes
// into the block).
constexpr uint32_t SlotLine(uint32_t s) { return (s * 8 + 16) / format::kCacheLine; }
// The first slot in line `line`.
constexpr uint32_t LineFirstSlot(uint32_t line) { return line == 0 ? 0 : line * 8 - 2; }
static_assert(SlotLine(LineFirstSlot(1)) == 1 && SlotLine(LineFirstSlot(1) - 1) == 0);
static_assert(offsetof(format::LogBlock, slots) == 16);

// Commits that can be in flight at once (made, not yet returned): one per
// thread, and every thread that commits holds one of the pool's slots.
inline constexpr uint32_t kMaxCommitsInFlight = kMaxSlots;

class NsLog {
 public:
  // Gives the log a block for its next one. `removal`: the record waiting
  // for it is a removal, which may take the pool's reserve when nothing
  // else is free (format::pool::Superblock::nslog_reserve).
  using AllocBlock = std::function<Status(uint32_t*, bool removal)>;
  using FreeBlock = std::function<void(uint32_t)>;

  // Starts reading at the chain's head `head` (the superblock's word).
  Status Init(BlockAccess* ba, uint32_t head, AllocBlock alloc, FreeBlock free);
  // Starts reading at `pos` (where a checkpoint's image ends).
  Status InitAt(BlockAccess* ba, NsPos pos, AllocBlock alloc, FreeBlock free);
  // Moves to `pos` (a reload from a checkpoint).
  Status MoveTo(NsPos pos);
  const NsPos& pos() const { return pos_; }
  // Names the state of the index this process built from the log: a new
  // number with every committed record passed or made here and with every
  // move to another position (a reload), never with a reservation
  // passed. Equal views mean the same index (PoolNamespace::SameView);
  // equal positions are stricter, since a caller's own reservation, which
  // the next catch-up steps over, moves the position.
  uint64_t view() const { return view_; }
  // A recent pos() (what the last change of it, under the index lock,
  // published), read without that lock: a seqlock of three words.
  NsPos PosHint() const;

  // Makes a new, empty log block (for mkfs and for extending the chain).
  static Status InitBlock(BlockAccess* ba, uint32_t lblock, uint64_t seq);

  // Whether anything was committed past the position: one load when not,
  // a few more past reservations not yet committed (which are not records).
  bool AnyNew() const;
  // Reads every record committed past the position, in order, calling
  // fn(record); stops at the first empty slot. A record that fails its
  // checks is damage (EUCLEAN). fn returning an error stops the read with
  // it, the position left at that record.
  Status ReadNew(const std::function<Status(const NsRecord&)>& fn);

  // For crash recovery only (nobody attached, the pool not left clean): a
  // record whose commit a power failure cut short (its kApply reached the
  // media without all of its payload's last line: TornCommit) ends the log
  // instead of being damage. torn_tail() then says where its kApply is;
  // DiscardPastTail clears it with everything after it.
  void AcceptTornTail(bool accept) { accept_torn_tail_ = accept; }
  const std::optional<NsPos>& torn_tail() const { return torn_tail_; }

  // A record's payload written into reserved slots, waiting for its kApply.
  struct Reservation {
    static constexpr uint32_t kNoOpenLine = ~0u;
    uint32_t lblock = 0;
    uint32_t slot = 0;  // of the kReserve
    uint32_t words = 0;
    uint32_t crc = 0;
    uint64_t seq = 0;
    // The payload's last line when Reserve left it to be written back with
    // the kApply (the kApply's slot was to share it); kNoOpenLine if the
    // whole payload is durable.
    uint32_t open_line = kNoOpenLine;
  };
  // Reserves slots at or after `from` for `rec` and persists its payload
  // there. `from` is PosHint(), taken by the caller while pinned
  // (reservations are made without the index lock, so that their fences
  // do not serialize the threads). A `from` whose block is no longer that
  // block of the log (a position that stayed behind while other processes
  // checkpointed, and whose block was freed and made something else) gives
  // ESTALE: the caller catches up and reserves again.
  // `with_payload`, if given, is called once the slots are taken, just
  // before the payload is written: what it writes and flushes (a new
  // inode's image, times) is persisted by the payload's fence.
  Status Reserve(const NsRecord& rec, NsPos from, Reservation* r, FunctionRef<void()> with_payload = {});
  // What a commit leaves to make durable: every slot from `from` (where this
  // process's known-durable prefix ended when the record committed) to
  // `to` (just past the record's kApply).
  struct Pending {
    NsPos from, to;
  };
  // The caller has read every record up to the tail (AnyNew() was false
  // when it validated its change): tries to commit r by a CAS of its kApply
  // into the slot at the position. *committed false: something was
  // committed first (read it, validate again, try again), or r's block
  // filled up (then *lost_reservation: Reserve again). On success the
  // position moves past the kApply (the caller applies its own record),
  // and *pending says what MakeDurable must flush before the call returns.
  Status TryCommit(const Reservation& r, bool* committed, bool* lost_reservation, Pending* pending);
  // Before the index lock: if every slot of r's open line after its
  // payload is taken already (others' records), r's kApply must land past
  // that line, and TryCommit would write the line back and fence under the
  // lock; done here instead, outside it (then r has no open line left).
  // The caller's epoch pin keeps r's block.
  void SettleFilledOpenLine(Reservation* r);
  // Flushes a commit's range and fences: every slot this process has read
  // up to its record, so that no record committed before it (by a process
  // that died before persisting it, or by a thread of this one whose own
  // fence is still to come) can be lost while it survives. Called after the
  // index lock is released, so that the fence does not serialize threads;
  // the caller's epoch pin keeps the range's blocks.
  void MakeDurable(const Pending& p);

  // Version 8 pools (format::pool::kFirstOneWaitPoolVersion): records
  // tagged, and committed with one persistence wait (docs/design.md, "One
  // wait a commit"). Set once, before the log is read.
  void SetOneWait(bool on) { one_wait_ = on; }
  bool one_wait() const { return one_wait_; }
  // Version 9 pools (format::pool::kFirstFreshCreatePoolVersion): a
  // regular file's create record and a mkdir's carry creation words.
  void SetCreations(bool on) { creations_ = on; }
  bool creations() const { return creations_; }

  // Recovery, with nobody else attached: reads to the tail and zeroes, durably,
  // every word past it (in its block and in any block linked after it).
  // Nothing there was committed; a crash can leave there a payload whose
  // reservation word was lost (Reserve persists both with one fence), and
  // the next record reserved over it must not be read together with it.
  Status DiscardPastTail();

  // Counts for `upfs info`: log blocks from the head, and records.
  Status Measure(uint32_t head, uint64_t* blocks, uint64_t* records) const;

 private:
  format::LogBlock* Block(uint32_t l) const {
    return reinterpret_cast<format::LogBlock*>(ba_->AddrUnchecked(l));
  }
  void Bind(BlockAccess* ba, AllocBlock alloc, FreeBlock free);
  // Moves the position over entries that are not records (reservations,
  // and block ends), reading records into fn when given.
  Status Advance(const std::function<Status(const NsRecord&)>* fn, bool* at_tail);
  Status DecodeAt(const format::LogBlock* b, uint32_t apply_slot, uint64_t apply, NsRecord* rec) const;
  // Whether the record at the position, whose kApply `apply` failed to
  // decode, is a commit a crash cut short (see AcceptTornTail).
  bool TornCommit(const format::LogBlock* b, uint64_t apply) const;
  // Whether no commit after the position can have returned: few enough
  // follow it to all be in flight when the crash came.
  bool NothingReturnedAfter() const;
  // Writes back slots [first, end) of block b and, in version 8, what each
  // record committed there needs durable with it (MakeDurable).
  void FlushSegment(format::LogBlock* b, uint32_t first, uint32_t end) const;
  // Records committed after the position, counted up to `limit` + 1.
  uint64_t CommitsAfter(uint64_t limit) const;
  // Closes the block (filling what is left of it) and moves to its
  // successor, linking a new one if needed.
  Status MoveToNextBlock(NsPos* p, bool removal);

  // Publishes pos_ to PosHint's readers (index lock held exclusively: one
  // writer at a time).
  void PublishPos();

  BlockAccess* ba_ = nullptr;
  AllocBlock alloc_;
  FreeBlock free_;
  // Starts a view no NsLog of this process had (views of one position
  // count up from there, 2^40 records apart).
  void NewView();

  NsPos pos_;
  uint64_t view_ = 0;
  bool accept_torn_tail_ = false;
  bool one_wait_ = false;
  bool creations_ = false;
  std::optional<NsPos> torn_tail_;
  std::atomic<uint32_t> hint_version_{0};  // odd while PublishPos writes
  std::atomic<uint64_t> hint_place_{0};    // lblock:32 | slot:32
  std::atomic<uint64_t> hint_seq_{0};
  // Slots before durable_ are durable as far as this process knows. Moved
  // forward after a fence, outside the index lock: its own mutex, on a line
  // of its own (beside the hint, which the committer holding the index
  // lock writes, one thread's fence and the next one's commit shared a
  // line).
  alignas(64) SpinMutex durable_mu_;  // a few instructions under it: see util/spin_mutex.h
  NsPos durable_;
};

}  // namespace upfs
