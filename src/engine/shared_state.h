// Shared state of one upfs file: soft state in a POSIX shared-memory file,
// shared by every process that has the file open, and rebuilt from the log
// whenever it is missing, stale, or nobody has the file open.
//
// It holds:
//  - the allocation bitmap (1 bit per logical block, 1 = taken);
//  - the epoch and per-thread slots of epoch-based reclamation (EBR), which
//    decide when a log block retired by GC (or a data block retired by a
//    sync-mode write) can no longer be read by anybody and may be reused;
//  - GC coordination words and the tail claim.
// Liveness of a slot's owner is an OFD lock on one byte of the shm file,
// which the kernel drops when the owning process dies, so a crashed process
// never blocks anybody.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "util/status.h"

namespace upfs {

inline constexpr uint32_t kMaxSlots = 4096;

struct ShmSlot {
  std::atomic<uint64_t> pinned;     // epoch this thread is inside, 0 = idle
  std::atomic<uint32_t> owner_pid;  // informational
  std::atomic<uint32_t> in_use;     // 1 while a thread owns the slot
  unsigned char pad[48];
};
static_assert(sizeof(ShmSlot) == 64);

struct ShmHeader {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> ready;
  uint64_t file_id;
  uint64_t created_ns;
  uint64_t host_dev;
  uint64_t host_ino;
  // Bumped by every chmod and chown through upfs: writers then look at the
  // host file's mode again (S_ISUID/S_ISGID clearing).
  std::atomic<uint64_t> attr_seq;
  unsigned char pad0[8];

  alignas(64) std::atomic<uint64_t> epoch;
  alignas(64) std::atomic<uint64_t> compact_seq;  // blocks with seq below were compacted
  std::atomic<uint64_t> gc_owner;                 // slot + 1 of the running GC, 0 = none
  std::atomic<uint64_t> gc_last_blocks;           // length of the log right after the last GC
  alignas(64) std::atomic<uint64_t> capacity_blocks;  // bitmap valid below this
  std::atomic<uint64_t> alloc_hint;                   // bitmap word to start scanning at
  std::atomic<uint64_t> slots_high;                   // slots at or above are unused
  // Who may write the bytes past the end of file in the tail block (an
  // in-place append, or an operation about to expose them): owner pid << 32
  // | slot + 1, 0 = nobody. See File::AppendInPlace.
  alignas(64) std::atomic<uint64_t> tail_claim;
};
static_assert(sizeof(ShmHeader) <= 512);  // the slots follow at 512
static_assert(offsetof(ShmHeader, attr_seq) == 48);

class SharedState {
 public:
  struct Identity {
    uint64_t file_id, created_ns, dev, ino;
  };
  // Opens (creating if needed, with the owner, group and read/write bits
  // of the host file `host` as far as this user may give them) the shared
  // state of a file and takes the open lock (exclusive, blocking).
  // `*needs_rebuild` tells whether the caller must rebuild the allocation
  // state (then call MarkReady()). Call ReleaseOpenLock when done with
  // open-time work. The state lives while some process has the file open:
  // its last user removes it (RemoveIfNoOtherUser).
  static Status Open(const Identity& id, const struct stat& host, std::unique_ptr<SharedState>* out,
                     bool* needs_rebuild);
  ~SharedState();

  ShmHeader* header() const { return hdr_; }
  std::atomic<uint64_t>* bitmap() const { return bitmap_; }
  ShmSlot* slot(uint32_t i) const { return &slots_[i]; }
  const std::string& name() const { return name_; }

  // In a fork child: lets go of the parent's descriptor (so the parent's
  // liveness locks die with the parent) without touching shared state.
  void DetachAfterFork();

  // Resets everything but the identity; bitmap cleared up to `capacity_blocks`.
  void ResetForRebuild(uint64_t capacity_blocks);
  void MarkReady();
  void ReleaseOpenLock();

  // Claims a free slot for a thread of this process and locks its liveness
  // byte. Returns kMaxSlots if none is free.
  uint32_t ClaimSlot();
  void ReleaseSlot(uint32_t s);

  // True if some other process holds a live slot (the open lock must be held).
  bool AnyOtherProcessLive();
  // Number of processes with live slots, for `upfs info` (approximate).
  uint32_t CountLiveSlots();

  // True if the thread owning slot s (of any process) is alive.
  bool SlotOwnerAlive(uint32_t s);

  // EBR: tries to move the epoch forward; returns the (possibly new) epoch.
  uint64_t TryAdvanceEpoch();

  // Bitmap helpers.
  bool TestBit(uint64_t b) const;
  void SetBit(uint64_t b);
  void ClearBit(uint64_t b);

  // Removes the shared state of a file unless a process has the file open
  // (then its last user removes it). Removing it under a live user would
  // let a later opener rebuild a second, conflicting allocation state.
  // Only the inode of `id` is used. True if it was removed.
  static bool RemoveIfUnused(const Identity& id);
  // The same, by this process's last user of the file, after it released
  // its slots: through the descriptor it already has (no open), and only
  // other processes' slots count.
  void RemoveIfNoOtherUser();
  // After chmod or chown of the host file: gives its shared state, if any,
  // the host file's owner, group and read/write bits, as far as this user
  // may (see Open), and bumps its attribute sequence.
  static Status MirrorAttributes(const Identity& id, const struct stat& host);
  // Removes every shared-state object that no process uses (left by
  // processes that were killed): `upfs sweep`.
  static Status SweepUnused(uint32_t* removed, uint32_t* in_use);
  const Identity& identity() const { return id_; }
  // Takes, through lock_fd (a descriptor of the shared-state file), the
  // lock that one process at a time holds while it has a shared writable
  // map of the file. False if another process holds it.
  static bool TryLockMapByte(int lock_fd);
  // A new descriptor (open file description) of this shared-state file,
  // for locks that belong to a description of the user's (flock, the map
  // lock); -1 with errno on failure.
  int OpenAnotherDescription() const;
  // Named by host inode ("/upfs-DEV-INO", hexadecimal): a copy of a file
  // (same id, other inode) must not share its allocation state.
  static std::string NameFor(const Identity& id);

 private:
  SharedState() = default;
  int fd_ = -1;
  std::string name_;
  Identity id_{};
  char* map_ = nullptr;
  uint64_t map_len_ = 0;
  ShmHeader* hdr_ = nullptr;
  ShmSlot* slots_ = nullptr;
  std::atomic<uint64_t>* bitmap_ = nullptr;
  bool open_locked_ = false;
  // How much of the slots and the bitmap may be nonzero: what a rebuild
  // clears (zero for a region sized just now).
  uint64_t dirty_slots_ = kMaxSlots;
  uint64_t dirty_bitmap_bytes_ = UINT64_MAX;
  // Threads of this process lock slots through one open file description,
  // where the locks do not conflict: claims within the process serialize here.
  std::mutex slot_mu_;
};

// What `upfs info`/`fsck` can tell about a file's shared state without
// changing it.
struct SharedStateView {
  bool present = false;           // exists and belongs to this file
  uint32_t live_processes = 0;    // distinct processes holding live slots
  bool bitmap_readable = false;   // nobody alive: the bitmap is stable
  std::vector<uint64_t> taken;    // bitmap words below the capacity (if readable)
};
Status InspectSharedState(const SharedState::Identity& id, uint64_t capacity_blocks,
                          SharedStateView* view);

}  // namespace upfs
