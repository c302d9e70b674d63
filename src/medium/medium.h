// The medium: a host file mapped into a reserved range of address space.
//
// The mapping grows in 2 MiB-aligned extents; the file grows by fallocate of
// the new range only (never the whole file), in steps that grow with the
// file so that long appends cost amortized O(1) kernel calls. Mappings are
// never moved while the Medium lives: when the reservation is outgrown, the
// whole file is mapped again into a larger reservation and the old one stays
// valid (readers holding an old base keep working) until Close.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <mutex>
#include <string>
#include <vector>

#include "medium/block_space.h"
#include "medium/extent_work.h"
#include "medium/huge_page_warmer.h"
#include "medium/mapping_share.h"
#include "util/status.h"

namespace upfs {

enum class MediumKind {
  kDax,        // real persistent memory: MAP_SYNC mapping of a DAX file
  kTmpfs,      // memory file system: survives process crashes, not power loss
  kPageCache,  // ordinary file system: durable only through msync at fsync
};

const char* MediumKindName(MediumKind k);
// What a crash can and cannot take away on this medium, for `upfs info`.
const char* MediumDurability(MediumKind k);

inline constexpr uint64_t kExtentSize = 2u << 20;  // 2 MiB
// Files at least this large have their existing extents collapsed into huge
// pages by a background thread when opened.
inline constexpr uint64_t kCollapseAtOpenBytes = 32 * kExtentSize;  // 64 MiB
// Files at least this large have their mapping populated by a background
// thread when opened for use (Medium::PopulateAhead).
inline constexpr uint64_t kPopulateAtOpenBytes = 2 * kExtentSize;  // 4 MiB
inline constexpr uint64_t kPageSize = 4096;
// Largest host file upfs maps: 16 TiB of blocks plus slack for one extent.
inline constexpr uint64_t kMaxMediumBytes = (uint64_t{1} << 44) + kExtentSize;

// Anonymous memory of `len` bytes (MAP_NORESERVE) whose start is aligned
// to an extent, so that the kernel may back it with huge pages; nullptr
// if it cannot be mapped. Unmapped with munmap(p, len).
char* MapExtentAligned(uint64_t len, int prot);
// Whether any page of [addr, addr + len) is resident (mincore; true when
// mincore cannot tell). len is at most an extent.
bool AnyPageResident(const char* addr, uint64_t len);

class Medium final : public BlockSpace {
 public:
  // Takes ownership of fd (a regular file opened O_RDWR, or O_RDONLY with
  // read_only for inspection: then nothing may be written or grown).
  static Status Open(int fd, const std::string& path, std::unique_ptr<Medium>* out,
                     bool read_only = false);
  ~Medium() override;

  int fd() const { return fd_; }
  // The least address space a writable medium opened from now on reserves
  // (1 GiB, so that growth rarely moves its mapping). Tests make it small,
  // to move a mapping without a file of that size.
  static void SetWriterReserveFloor(uint64_t bytes);
  // In a fork child that will never use this Medium: closes the child's
  // copy of the descriptor, whose open file description (and the OFD locks
  // on it) stays the parent's. The object is then leaked, not destroyed.
  void ForgetDescriptorAfterFork();
  MediumKind kind() const { return kind_; }
  const std::string& path() const { return path_; }

  // Grows the host file to at least `bytes` (rounded up to the growth step)
  // and maps it. Safe to race with other threads and processes.
  Status Grow(uint64_t bytes) override;

  // Asks the background worker to grow the host file to at least `bytes`,
  // so that the kernel's work of growing a file (fallocate, page
  // allocation) happens off the write path. `ready` runs in the worker or
  // a thread in HelpGrow as the step's extents get their pages, bottom up,
  // and in the worker once the space is mapped (BlockSpace::GrowAhead).
  void GrowAhead(uint64_t bytes, ReadyFn ready) override;
  // Waits until background work (growth, and collapsing the mapped file
  // into huge pages, which otherwise starts only after growth has been
  // quiet for a second) is done.
  void Settle() override;
  // Maps the pages of the whole file in the background, from its start,
  // 2 MiB at a time (MADV_POPULATE_READ, or _WRITE on a writable mapping),
  // so that a process that opens an existing file does not take faults on
  // its first accesses (touching a 1 GiB small-page tmpfs file cost ~270 ns
  // per 4 KiB page; reading a fallocated 16 MiB one took a fault per page).
  // Only if the file is in small pages (see the probe), for files of at
  // least kPopulateAtOpenBytes (below that, a thread is not worth it: a
  // judgement, not a measurement), on tmpfs and DAX, where mapping a page
  // costs no I/O. Extents without a page (given back: punched out) stay
  // holes (ExtentHasPages), and are not probed. A container calls it when
  // it opens a file for use, not for inspection.
  void PopulateAhead();
  // The same for some extents of the file only, for a container whose
  // files' blocks lie among others' (a pool). PopulateProbe(at) maps the
  // extent at offset `at` and says whether the rest are worth mapping
  // ahead (this medium populates at all, and that extent was in small
  // pages); PopulateExtents hands the worker their offsets (multiples of
  // kExtentSize), in the order a reader will want them. Both map the
  // pages that hold data (PopulateData), read-only (MADV_POPULATE_READ): a
  // first write to one takes a write-protect fault, as it would take a
  // fault without them.
  bool PopulateProbe(uint64_t at);
  void PopulateExtents(std::vector<uint64_t> extents);
  // True while the background worker has a growth request in hand.
  bool GrowInFlight() const override { return growing_.load(std::memory_order_acquire); }
  // Gives pages to one extent of the growth step in progress, the lowest
  // left (ExtentWork), and publishes what is ready; false if none is left.
  bool HelpGrow() override;
  void CountGrowthWaiter(int delta) override {
    growth_waiters_.fetch_add(delta, std::memory_order_relaxed);
  }
  // Stops the background worker (waits for the step it is in).
  void JoinBackground() override;

  // Makes sure [0, bytes) of the host file is mapped (after another process
  // grew the file). Cheap when already mapped.
  Status EnsureMapped(uint64_t bytes) override;

  // Makes [offset, offset + bytes) durable: a fence on DAX and tmpfs, msync
  // of the pages on a page-cache file system.
  Status Sync(uint64_t offset, uint64_t bytes) override;
  // All of it.
  Status SyncAll() { return Sync(0, mapped_bytes()); }

  // Re-reads the host file size (another process may have grown it).
  Status RefreshCapacity() override;
  Status Provide(uint64_t from, uint64_t to) override;
  // A hole punched over [from, to), the host file's size kept.
  Status Release(uint64_t from, uint64_t to) override;
  // On tmpfs with huge pages wanted, each extent seeded and collapsed into
  // one huge page, as a growth provisions it (faster than 512 small pages,
  // and reads of it miss the TLB less); else Provide.
  Status ProvideExtents(uint64_t from, uint64_t to) override;

 private:
  Medium(int fd, std::string path, MediumKind kind, bool read_only);
  void RaiseCapacity(uint64_t bytes);
  // Maps [0, bytes). `populate`: in ordinary pages on tmpfs, maps the
  // pages too, in one call (growth); false at open, where the file's
  // content is mapped as it is used, or ahead by the worker (PopulateAhead).
  Status MapLocked(uint64_t bytes, bool populate = true);
  Status Reserve(uint64_t bytes, char** out, uint64_t* len);
  Status MapRange(char* base, uint64_t from, uint64_t to, bool populate);
  int PopulateAdvice() const;  // MADV_POPULATE_READ, or _WRITE when writable
  // Whether populating is for this medium at all (kind, UPFS_POPULATE).
  bool PopulateUseful() const;
  // Populates the pages of [at, at + len) that are mapped and that the
  // host file has (in its page cache: mincore) with madvise `advice`,
  // skipping the file's holes: a pool's free space may be holes, and
  // populating one (even MADV_POPULATE_READ, on a shared tmpfs mapping)
  // allocates its pages. False if mincore or madvise failed.
  bool PopulateData(uint64_t at, uint64_t len, int advice);
  // Whether any page of [at, at + len) is in the file (mincore; on tmpfs a
  // page fallocated and never written counts as none, as a hole does).
  bool ExtentHasPages(uint64_t at, uint64_t len);
  // Populates the extent at offset `at` (with `data_only`, its data only:
  // PopulateData) and says whether it was in small pages (mapping them
  // took more faults than huge pages would). A per-file file populates
  // all of it: its pages may be fallocated and not yet written (free
  // space provided so), and mincore reports such pages as absent (tried
  // on files only fallocated: medium_populate_test's reader and writer
  // then took 4,096 faults each).
  bool ProbeSmallPages(uint64_t at, int advice, bool data_only);
  // Extent e (its first kCollapseSeed bytes allocated) made one huge page,
  // unless huge pages are found too dear now (huge_page_choice.h); whether
  // it is one.
  bool TryCollapse(uint64_t e);
  // Gives the extent at offset e its pages: a huge page while collapsing
  // costs less than small pages (huge_page_choice.h), else small pages. Tmpfs,
  // the file already long enough and mapped; run by Grow and HelpGrow.
  // False if it failed (ExtentWork::Fail has the error).
  bool ProvisionExtent(uint64_t e);
  // ProvisionExtent of extent number x of the step, then the step's ready
  // callback (if any) with its bottom as far as it is finished, if that
  // moved.
  void ProvisionAndPublish(uint64_t x);
  // Grow, telling `ready` (if set) how far from the bottom the step's
  // extents have their pages, each time that moves.
  Status GrowStep(uint64_t bytes, const ReadyFn& ready);
  ExtentWork work_;  // the growth step whose extents are being provisioned
  // The open step's ready callback (GrowStep's), for every thread that
  // finishes one of its extents; null when there is none.
  std::atomic<const ReadyFn*> step_ready_{nullptr};

  int fd_;
  std::string path_;
  MediumKind kind_;
  bool read_only_;
  std::mutex grow_mu_;  // serializes mapping changes inside this process
  uint64_t reserved_ = 0;
  struct Region {
    char* addr;
    uint64_t len;
  };
  std::vector<Region> retired_;  // older reservations, unmapped at close
  // Background worker: growth requests and mapping work (below) first,
  // then collapsing mapped 2 MiB extents into huge pages (on tmpfs, where
  // MADV_COLLAPSE costs milliseconds per extent and must stay off every
  // caller's path).
  void StartWorkerLocked();
  void WorkerLoop();
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  bool settle_ = false;
  std::chrono::steady_clock::time_point last_growth_{};
  // Background collapses take at most 1 / (1 + kCollapseRest) of the
  // worker's time: after one of t, the next waits until kCollapseRest * t
  // has passed.
  static constexpr int kCollapseRest = 4;
  std::chrono::steady_clock::time_point next_collapse_{};
  std::unique_ptr<HugePageWarmer> warmer_;  // the worker's, made on its first collapse
  std::thread worker_;
  std::mutex join_mu_;  // serializes joins of worker_
  bool worker_running_ = false;
  bool stopping_ = false;
  uint64_t grow_target_ = 0;
  ReadyFn grow_ready_;
  std::atomic<bool> growing_{false};
  // Threads waiting for the growth in flight (CountGrowthWaiter): mapping
  // work waits for them (MappingShare).
  std::atomic<int> growth_waiters_{0};
  uint64_t collapsed_ = 0;  // extents below this offset were collapsed (or tried)
  uint64_t populated_ = 0;    // [0, populated_) was populated (or tried)
  uint64_t populate_to_ = 0;  // and the worker populates up to here
  std::deque<uint64_t> populate_extents_;  // then these (PopulateExtents)
  // A move to a new reservation (MapLocked) leaves the new mapping without
  // a page table: every page the old one had mapped would fault again, one
  // by one (a writer of random 2 KiB pieces of a 1 GiB file: up to tens
  // of thousands of faults a pass, docs/design.md). The worker maps them
  // again, an extent a step (RemapExtent), before population.
  struct Remapped {
    char* old_base;        // the retired reservation, mapped until close
    uint64_t bytes;        // how much of the file it mapped
    uint64_t done;         // [0, done) is handled
  };
  std::deque<Remapped> remapped_;  // guarded by work_mu_
  // Mapping work (remapping, then population) comes before anything but
  // growth, and while growth is asked for it takes a share of the growth
  // steps' time (mapping_share.h; guarded by work_mu_).
  MappingShare mapping_share_;
  bool HasMappingWorkLocked() const;
  // One step of it, at most an extent, work_mu_ released meanwhile.
  void MappingStepLocked(std::unique_lock<std::mutex>& lk);
  // Hands the worker the pages of [0, bytes) that `old_base` had mapped.
  void NoteRemap(char* old_base, uint64_t bytes);
  // Maps in the current mapping the pages of [at, at + len) that were
  // present in the mapping at `old_base` (its page table, read from
  // /proc/self/pagemap: not mincore or SEEK_DATA, which on tmpfs call a
  // fallocated page never written a hole, and a hole must stay one), then
  // drops them from the old one; false if that page table cannot be read.
  bool RemapExtent(char* old_base, uint64_t at, uint64_t len);
};

// fstat of an open host file, which must be a regular file (EINVAL if not).
Status StatRegular(int fd, const std::string& path, struct stat* st);

// Detects the medium kind of an open file.
Status DetectMedium(int fd, MediumKind* kind);

}  // namespace upfs
