#include "engine/shared_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <memory>

#include "engine/shm_access.h"
#include "format/format.h"

namespace upfs {

namespace {

constexpr uint64_t kShmMagic = 0x4d48535346505555ULL;  // "UUPFSSHM"
constexpr char kNamePrefix[] = "/upfs-";
// Where glibc's shm_open keeps its objects (for calls shm_open lacks:
// chmod and chown by name, listing).
constexpr char kShmDir[] = "/dev/shm";
// 2: tail_claim; 3: slots in the header's page; 4: named by inode alone,
// attr_seq, removed by the last user.
constexpr uint32_t kShmVersion = 4;
constexpr uint64_t kPageBytes = 4096;
// The first slots share the header's page: every new file touches (and the
// kernel allocates and zeroes) one shared page less.
constexpr uint64_t kSlotsOffset = 512;
static_assert(sizeof(ShmHeader) <= kSlotsOffset);
constexpr uint64_t kBitmapOffset =
    (kSlotsOffset + uint64_t(kMaxSlots) * sizeof(ShmSlot) + kPageBytes - 1) / kPageBytes * kPageBytes;
constexpr uint64_t kBitmapBytes = format::kMaxBlocks / 8;
constexpr uint64_t kShmBytes = kBitmapOffset + kBitmapBytes;
// Lock bytes live far beyond the data so they never overlap it.
constexpr off_t kOpenLockByte = off_t{1} << 40;
constexpr off_t kSlotLockBase = kOpenLockByte + 1;
constexpr off_t kMapLockByte = kOpenLockByte - 1;

int OfdLock(int fd, short type, off_t start, bool wait) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = 1;
  int rc;
  do {
    rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

// Whether slot i's liveness lock is held through another open file
// description than fd (unknown counts as held).
bool SlotLockHeldElsewhere(int fd, uint32_t i) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = kSlotLockBase + i;
  fl.l_len = 1;
  return fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
}

// Bumps the attribute sequence of the shared state `name`, if this user
// may write it.
void BumpAttrSeq(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && uint64_t(st.st_size) >= kPageBytes) {
    void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      static_cast<ShmHeader*>(p)->attr_seq.fetch_add(1, std::memory_order_release);
      munmap(p, kPageBytes);
    }
  }
  close(fd);
}

}  // namespace

std::string SharedState::NameFor(const Identity& id) {
  // By host inode alone, so that the state of a file whose header is
  // damaged can still be found and removed; the identity inside the state
  // tells a stale object of an earlier file on a reused inode apart.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%" PRIx64 "-%" PRIx64, kNamePrefix, id.dev, id.ino);
  return buf;
}

int SharedState::OpenAnotherDescription() const {
  return shm_open(name_.c_str(), O_RDWR | O_CLOEXEC, 0);
}

bool SharedState::TryLockMapByte(int lock_fd) {
  return OfdLock(lock_fd, F_WRLCK, kMapLockByte, false) == 0;
}

bool SharedState::RemoveIfUnused(const Identity& id) {
  std::string name = NameFor(id);
  // Whoever removes a file need not be able to write its shared state: a
  // read lock on the open byte excludes openers just as well.
  short lock = F_WRLCK;
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0 && errno == EACCES) {
    fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    lock = F_RDLCK;
  }
  if (fd < 0) return false;
  // Under the open lock nobody can be half-way through opening the file.
  if (OfdLock(fd, lock, kOpenLockByte, true) != 0) {
    close(fd);
    return false;
  }
  // Read, not mapped: mapping the whole region and tearing it down costs
  // more than the few slots a file ever has. An object too short to hold
  // a header was left by a creator that died before sizing it (a live one
  // would hold the open lock).
  bool live = false;
  alignas(ShmHeader) unsigned char hbuf[sizeof(ShmHeader)];
  if (pread(fd, hbuf, sizeof(hbuf), 0) == ssize_t(sizeof(hbuf))) {
    const auto* h = reinterpret_cast<const ShmHeader*>(hbuf);
    uint64_t hi = std::min<uint64_t>(h->slots_high.load(), kMaxSlots);
    alignas(ShmSlot) unsigned char sbuf[64 * sizeof(ShmSlot)];
    for (uint64_t first = 0; first < hi && !live; first += 64) {
      uint64_t n = std::min<uint64_t>(64, hi - first);
      ssize_t want = ssize_t(n * sizeof(ShmSlot));
      if (pread(fd, sbuf, size_t(want), off_t(kSlotsOffset + first * sizeof(ShmSlot))) != want) {
        live = true;  // unknown counts as live
        break;
      }
      const auto* slots = reinterpret_cast<const ShmSlot*>(sbuf);
      // Every holder, this process included, holds its slot locks through
      // another open file description than fd: all of them conflict.
      for (uint64_t i = 0; i < n && !live; ++i)
        live = slots[i].in_use.load() && SlotLockHeldElsewhere(fd, uint32_t(first + i));
    }
  }
  bool removed = !live && shm_unlink(name.c_str()) == 0;
  close(fd);
  return removed;
}

Status SharedState::MirrorAttributes(const Identity& id, const struct stat& host) {
  std::string path = std::string(kShmDir) + NameFor(id);
  struct stat st;
  if (fstatat(AT_FDCWD, path.c_str(), &st, 0) != 0) return Status::OK();  // nobody has the file open
  UPFS_RETURN_IF_ERROR(GiveHostAccess(path, host));
  BumpAttrSeq(NameFor(id));
  return Status::OK();
}

Status SharedState::SweepUnused(uint32_t* removed, uint32_t* in_use) {
  *removed = *in_use = 0;
  DIR* d = opendir(kShmDir);
  if (!d) return Status::FromErrno(std::string("opendir ") + kShmDir);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kNamePrefix + 1, sizeof(kNamePrefix) - 2) == 0)
      names.push_back(std::string("/") + e->d_name);
  }
  closedir(d);
  for (const std::string& name : names) {
    // Only objects of our shape: "upfs-" HEX "-" HEX.
    uint64_t dev, ino;
    char tail;
    if (std::sscanf(name.c_str() + sizeof(kNamePrefix) - 1, "%" SCNx64 "-%" SCNx64 "%c", &dev, &ino,
                    &tail) != 2)
      continue;
    Identity id{0, 0, dev, ino};
    if (RemoveIfUnused(id))
      ++*removed;
    else
      ++*in_use;
  }
  return Status::OK();
}

void SharedState::RemoveIfNoOtherUser() {
  if (fd_ < 0) return;  // a fork child's copy: the state is the parent's
  if (OfdLock(fd_, F_WRLCK, kOpenLockByte, true) != 0) return;
  bool live = false;
  uint64_t hi = std::min<uint64_t>(hdr_->slots_high.load(), kMaxSlots);
  for (uint32_t i = 0; i < hi && !live; ++i)
    live = slots_[i].in_use.load() && SlotLockHeldElsewhere(fd_, i);
  if (!live) shm_unlink(name_.c_str());
  OfdLock(fd_, F_UNLCK, kOpenLockByte, false);
}

SharedState::~SharedState() {
  if (map_) munmap(map_, map_len_);
  if (fd_ >= 0) close(fd_);  // drops every OFD lock of this process
}

namespace {

// Opens the shared-state object `name`, creating it (with the host file's
// attributes) if there is none. *created tells which.
int OpenOrCreate(const std::string& name, const struct stat& host, bool* created) {
  for (;;) {
    *created = false;
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      *created = true;
      (void)GiveHostAccessAtCreation(fd, std::string(kShmDir) + name, host);
      return fd;
    }
    if (errno != EEXIST) return -1;
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0 || errno != ENOENT) return fd;
    // Removed between the two calls by its last user: create it.
  }
}

Status RefusedAccess(const std::string& name) {
  int err = errno;
  struct stat st;
  std::string who;
  if (fstatat(AT_FDCWD, (std::string(kShmDir) + name).c_str(), &st, 0) == 0) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), " (owner uid %u, group %u, mode %03o)", unsigned(st.st_uid),
                  unsigned(st.st_gid), unsigned(st.st_mode & 0777));
    who = buf;
  }
  return Status::Error(err, "shared state " + std::string(kShmDir) + name + who +
                                " does not admit this user (uid " + std::to_string(geteuid()) +
                                "); it was made by another user of the file and goes when the "
                                "last process using the file closes it");
}

}  // namespace

Status SharedState::Open(const Identity& id, const struct stat& host,
                         std::unique_ptr<SharedState>* out, bool* needs_rebuild) {
  std::unique_ptr<SharedState> s(new SharedState());
  s->name_ = NameFor(id);
  s->id_ = id;
  struct stat st;
  for (;;) {
    bool created;
    s->fd_ = OpenOrCreate(s->name_, host, &created);
    if (s->fd_ < 0) return RefusedAccess(s->name_);
    if (OfdLock(s->fd_, F_WRLCK, kOpenLockByte, true) != 0)
      return Status::FromErrno("lock shared state " + s->name_);
    // The last user of the file may have removed the object while we
    // waited for its lock: a state nobody else can find is no state.
    if (fstat(s->fd_, &st) != 0) return Status::FromErrno("fstat " + s->name_);
    if (st.st_nlink > 0) break;
    close(s->fd_);
    s->fd_ = -1;
  }
  s->open_locked_ = true;

  if (uint64_t(st.st_size) != kShmBytes) {
    // Sparse: only touched pages of the bitmap take memory. Sized from
    // empty, it reads as zeros everywhere: a rebuild need not clear it.
    if ((st.st_size != 0 && ftruncate(s->fd_, 0) != 0) || ftruncate(s->fd_, off_t(kShmBytes)) != 0)
      return Status::FromErrno("size shared state " + s->name_);
    s->dirty_slots_ = 0;
    s->dirty_bitmap_bytes_ = 0;
  }
  s->map_len_ = kShmBytes;
  void* p = mmap(nullptr, kShmBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, s->fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap " + s->name_);
  s->map_ = static_cast<char*>(p);
  s->hdr_ = reinterpret_cast<ShmHeader*>(s->map_);
  s->slots_ = reinterpret_cast<ShmSlot*>(s->map_ + kSlotsOffset);
  s->bitmap_ = reinterpret_cast<std::atomic<uint64_t>*>(s->map_ + kBitmapOffset);

  ShmHeader* h = s->hdr_;
  bool valid = h->magic == kShmMagic && h->version == kShmVersion &&
               h->ready.load(std::memory_order_acquire) == 1 && h->file_id == id.file_id &&
               h->created_ns == id.created_ns && h->host_dev == id.dev && h->host_ino == id.ino;
  if (valid && s->dirty_slots_ != 0) {
    // Bits are only ever set below the capacity, which only grows until a
    // rebuild: what a rebuild must clear is bounded by both high marks.
    s->dirty_slots_ = std::min<uint64_t>(h->slots_high.load(), kMaxSlots);
    s->dirty_bitmap_bytes_ =
        std::min<uint64_t>((h->capacity_blocks.load() + 7) / 8 + sizeof(uint64_t), kBitmapBytes);
  }
  if (!valid) {
    h->ready.store(0, std::memory_order_relaxed);
    h->magic = kShmMagic;
    h->version = kShmVersion;
    h->file_id = id.file_id;
    h->created_ns = id.created_ns;
    h->host_dev = id.dev;
    h->host_ino = id.ino;
  }
  // Nobody else alive: whatever the state says may include blocks leaked by
  // crashed processes, so rebuild it from the log.
  *needs_rebuild = !valid || !s->AnyOtherProcessLive();
  *out = std::move(s);
  return Status::OK();
}

void SharedState::ResetForRebuild(uint64_t capacity_blocks) {
  hdr_->ready.store(0, std::memory_order_relaxed);
  // Dropping the pages zeroes the slots without faulting them all in.
  auto drop = [](void* from, uint64_t bytes) {
    if (bytes) madvise(from, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes, MADV_REMOVE);
  };
  // The slots in the header's page are cleared by hand (dropping that page
  // would drop the header), the others by dropping their pages.
  const uint64_t slot_bytes = dirty_slots_ * sizeof(ShmSlot);
  const uint64_t in_header_page = std::min<uint64_t>(slot_bytes, kPageBytes - kSlotsOffset);
  std::memset(static_cast<void*>(slots_), 0, in_header_page);
  drop(reinterpret_cast<char*>(slots_) + (kPageBytes - kSlotsOffset), slot_bytes - in_header_page);
  hdr_->epoch.store(1, std::memory_order_relaxed);
  hdr_->compact_seq.store(0, std::memory_order_relaxed);
  hdr_->gc_owner.store(0, std::memory_order_relaxed);
  hdr_->gc_last_blocks.store(0, std::memory_order_relaxed);
  hdr_->alloc_hint.store(0, std::memory_order_relaxed);
  hdr_->slots_high.store(0, std::memory_order_relaxed);
  hdr_->tail_claim.store(0, std::memory_order_relaxed);
  // Clear the bitmap by dropping its pages (they read back as zero).
  drop(bitmap_, std::min<uint64_t>(dirty_bitmap_bytes_, kBitmapBytes));
  dirty_slots_ = kMaxSlots;
  dirty_bitmap_bytes_ = kBitmapBytes;
  hdr_->capacity_blocks.store(capacity_blocks, std::memory_order_relaxed);
}

void SharedState::DetachAfterFork() {
  if (fd_ >= 0) close(fd_);  // the parent's locks stay with the parent's descriptor
  fd_ = -1;
}

void SharedState::MarkReady() { hdr_->ready.store(1, std::memory_order_release); }

void SharedState::ReleaseOpenLock() {
  if (!open_locked_) return;
  OfdLock(fd_, F_UNLCK, kOpenLockByte, false);
  open_locked_ = false;
}

bool SharedState::SlotOwnerAlive(uint32_t s) {
  // A conflicting lock held by another open file description means a live
  // owner. Our own slots are held through fd_, which does not conflict with
  // itself, so check those through in_use alone.
  if (SlotLockHeldElsewhere(fd_, s)) return true;
  return slots_[s].owner_pid.load(std::memory_order_relaxed) == uint32_t(getpid()) &&
         slots_[s].in_use.load(std::memory_order_relaxed) == 1;
}

bool SharedState::AnyOtherProcessLive() {
  uint32_t me = uint32_t(getpid());
  uint64_t hi = std::min<uint64_t>(hdr_->slots_high.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < hi; ++i) {
    if (slots_[i].in_use.load(std::memory_order_acquire) == 0) continue;
    if (slots_[i].owner_pid.load(std::memory_order_relaxed) == me) continue;
    if (SlotOwnerAlive(i)) return true;
  }
  return false;
}

uint32_t SharedState::CountLiveSlots() {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kMaxSlots; ++i)
    if (slots_[i].in_use.load(std::memory_order_acquire) && SlotOwnerAlive(i)) ++n;
  return n;
}

uint32_t SharedState::ClaimSlot() {
  // The liveness byte is locked first: holding its write lock proves that
  // no live thread of another process owns the slot, so a slot is never
  // owned twice, and one whose owner died is simply taken over.
  // The lock keeps threads of this process apart (for them the byte lock
  // always succeeds).
  std::lock_guard<std::mutex> g(slot_mu_);
  uint32_t me = uint32_t(getpid());
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    ShmSlot& sl = slots_[i];
    if (sl.in_use.load(std::memory_order_acquire) != 0 &&
        sl.owner_pid.load(std::memory_order_relaxed) == me)
      continue;  // ours (our own locks do not conflict with us)
    if (OfdLock(fd_, F_WRLCK, kSlotLockBase + i, false) != 0) continue;
    sl.pinned.store(0, std::memory_order_relaxed);
    sl.owner_pid.store(me, std::memory_order_relaxed);
    sl.in_use.store(1, std::memory_order_release);
    uint64_t hi = hdr_->slots_high.load();
    while (hi < i + 1 && !hdr_->slots_high.compare_exchange_weak(hi, i + 1)) {
    }
    return i;
  }
  return kMaxSlots;
}

void SharedState::ReleaseSlot(uint32_t s) {
  std::lock_guard<std::mutex> g(slot_mu_);
  slots_[s].pinned.store(0, std::memory_order_release);
  slots_[s].owner_pid.store(0, std::memory_order_relaxed);
  slots_[s].in_use.store(0, std::memory_order_release);
  OfdLock(fd_, F_UNLCK, kSlotLockBase + s, false);
}

uint64_t SharedState::TryAdvanceEpoch() {
  uint64_t e = hdr_->epoch.load(std::memory_order_seq_cst);
  uint64_t hi = std::min<uint64_t>(hdr_->slots_high.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < hi; ++i) {
    ShmSlot& sl = slots_[i];
    if (sl.in_use.load(std::memory_order_acquire) == 0) continue;
    uint64_t p = sl.pinned.load(std::memory_order_seq_cst);
    if (p == 0 || p == e) continue;
    // Pinned in an older epoch: alive means we must wait for it.
    if (SlotOwnerAlive(i)) return e;
    // Dead owner: its pin is void.
    sl.pinned.compare_exchange_strong(p, 0);
  }
  hdr_->epoch.compare_exchange_strong(e, e + 1, std::memory_order_seq_cst);
  return hdr_->epoch.load(std::memory_order_seq_cst);
}

bool SharedState::TestBit(uint64_t b) const {
  return (bitmap_[b >> 6].load(std::memory_order_relaxed) >> (b & 63)) & 1;
}
void SharedState::SetBit(uint64_t b) {
  bitmap_[b >> 6].fetch_or(uint64_t{1} << (b & 63), std::memory_order_relaxed);
}
void SharedState::ClearBit(uint64_t b) {
  bitmap_[b >> 6].fetch_and(~(uint64_t{1} << (b & 63)), std::memory_order_release);
}

Status InspectSharedState(const SharedState::Identity& id, uint64_t capacity_blocks,
                          SharedStateView* view) {
  *view = SharedStateView();
  std::string name = SharedState::NameFor(id);
  int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return errno == ENOENT ? Status::OK() : Status::FromErrno("shm_open " + name);
  struct stat st;
  if (fstat(fd, &st) != 0 || uint64_t(st.st_size) != kShmBytes) {
    close(fd);
    return Status::OK();
  }
  void* p = mmap(nullptr, kShmBytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return Status::FromErrno("mmap " + name);
  }
  auto* h = static_cast<const ShmHeader*>(p);
  auto* slots = reinterpret_cast<const ShmSlot*>(static_cast<char*>(p) + kSlotsOffset);
  auto* bm = reinterpret_cast<const std::atomic<uint64_t>*>(static_cast<char*>(p) + kBitmapOffset);
  view->present = h->magic == kShmMagic && h->version == kShmVersion && h->file_id == id.file_id &&
                  h->created_ns == id.created_ns && h->host_dev == id.dev && h->host_ino == id.ino;
  if (view->present) {
    std::vector<uint32_t> pids;
    uint64_t hi = std::min<uint64_t>(h->slots_high.load(), kMaxSlots);
    for (uint32_t i = 0; i < hi; ++i) {
      if (!slots[i].in_use.load() || !SlotLockHeldElsewhere(fd, i)) continue;
      uint32_t pid = slots[i].owner_pid.load();
      if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
    }
    view->live_processes = uint32_t(pids.size());
    view->bitmap_readable = pids.empty() && h->ready.load() == 1;
    if (view->bitmap_readable) {
      uint64_t words = (std::min<uint64_t>(capacity_blocks, h->capacity_blocks.load()) + 63) / 64;
      view->taken.resize(words);
      for (uint64_t w = 0; w < words; ++w) view->taken[w] = bm[w].load();
    }
  }
  munmap(p, kShmBytes);
  close(fd);
  return Status::OK();
}

}  // namespace upfs
