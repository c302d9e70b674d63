// Shared state of one upfs file (per-file container): soft state in a POSIX
// shared-memory object, shared by every process that has the file open,
// rebuilt from the log whenever it is missing, stale, or nobody has the file
// open, and removed by its last user.
//
// It lays out what the engine borrows for the file's one allocation and
// reclamation domain and its one log: the epoch words and slots
// (EpochDomain), the allocation bitmap (AllocationBitmap) and the log's
// coordination words (LogWords). It owns what is per-file: the object's
// name and identity, the open lock, removal, and the liveness of slot owners
// (an OFD lock on one byte per slot, which the kernel drops when the owning
// process dies, so a crashed process never blocks anybody).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/alloc_bitmap.h"
#include "engine/log_root.h"
#include "engine/reclamation.h"
#include "util/status.h"

namespace upfs {

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

  EpochWords epochs;
  LogWords log;
  BitmapWords bitmap;
};
static_assert(sizeof(ShmHeader) <= 512);  // the slots follow at 512
static_assert(offsetof(ShmHeader, attr_seq) == 48);
static_assert(offsetof(ShmHeader, epochs) == 64);
static_assert(offsetof(ShmHeader, log) == 128);
static_assert(offsetof(ShmHeader, bitmap) == 256);
static_assert(sizeof(ShmHeader) == 320);

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
  // What the engine borrows.
  EpochDomain* epochs() { return &*epochs_; }
  AllocationBitmap* bitmap() { return &*bitmap_; }
  LogWords* log_words() const { return &hdr_->log; }
  const std::string& name() const { return name_; }

  // In a fork child: lets go of the parent's descriptor (so the parent's
  // liveness locks die with the parent) without touching shared state.
  void DetachAfterFork();

  // Resets everything but the identity; bitmap cleared up to `capacity_blocks`.
  void ResetForRebuild(uint64_t capacity_blocks);
  void MarkReady();
  void ReleaseOpenLock();


  // Removes the shared state of a file unless a process has the file open
  // (then its last user removes it). Removing it under a live user would
  // let a later opener rebuild a second, conflicting allocation state.
  // Only the inode of `id` is used. True if it was removed.
  static bool RemoveIfUnused(const Identity& id);
  // The same, by this process's last user of the file, after it released
  // its slots: through the descriptor it already has (no open), and only
  // other processes' slots count. `last_user` runs first, under the open
  // lock, when the state is removed (no opener can come between).
  void RemoveIfNoOtherUser(const std::function<void()>& last_user = nullptr);
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
  // Slot liveness: OFD locks on bytes of the object, through one
  // descriptor (this process's locks never conflict with each other).
  class SlotLocks final : public SlotLiveness {
   public:
    explicit SlotLocks(const int* fd) : fd_(fd) {}
    bool TryLock(uint32_t s) override;
    void Unlock(uint32_t s) override;
    bool HeldElsewhere(uint32_t s) override;

   private:
    const int* fd_;  // the owner's, which a fork child closes
  };

  SharedState() = default;
  int fd_ = -1;
  std::string name_;
  Identity id_{};
  char* map_ = nullptr;
  uint64_t map_len_ = 0;
  ShmHeader* hdr_ = nullptr;
  ReclaimSlot* slots_ = nullptr;
  std::atomic<uint64_t>* bits_ = nullptr;
  SlotLocks locks_{&fd_};
  std::optional<EpochDomain> epochs_;
  std::optional<AllocationBitmap> bitmap_;
  bool open_locked_ = false;
  // How much of the slots and the bitmap may be nonzero: what a rebuild
  // clears (zero for a region sized just now).
  uint64_t dirty_slots_ = kMaxSlots;
  uint64_t dirty_bitmap_bytes_ = UINT64_MAX;
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
