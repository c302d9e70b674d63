#include "container/perfile/shared_state.h"

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

#include "container/ofd_lock.h"
#include "container/perfile/shm_access.h"
#include "format/format.h"
#include "medium/provide.h"

namespace upfs {

namespace {

constexpr uint64_t kShmMagic = 0x4d48535346505555ULL;  // "UUPFSSHM"
constexpr char kNamePrefix[] = "/upfs-";
// Where glibc's shm_open keeps its objects (for calls shm_open lacks:
// chmod and chown by name, listing).
constexpr char kShmDir[] = "/dev/shm";
// 2: tail_claim; 3: slots in the header's page; 4: named by inode alone,
// attr_seq, removed by the last user; 5: words grouped by what the engine
// borrows (EpochWords, LogWords, BitmapWords).
constexpr uint32_t kShmVersion = 5;
constexpr uint64_t kPageBytes = 4096;
// The first slots share the header's page: every new file touches (and the
// kernel allocates and zeroes) one shared page less.
constexpr uint64_t kSlotsOffset = 512;
static_assert(sizeof(ShmHeader) <= kSlotsOffset);
constexpr uint64_t kBitmapOffset =
    (kSlotsOffset + uint64_t(kMaxSlots) * sizeof(ReclaimSlot) + kPageBytes - 1) / kPageBytes * kPageBytes;
constexpr uint64_t kBitmapBytes = format::kMaxBlocks / 8;
constexpr uint64_t kShmBytes = kBitmapOffset + kBitmapBytes;
// Lock bytes live far beyond the data so they never overlap it.
constexpr off_t kOpenLockByte = off_t{1} << 40;
constexpr off_t kSlotLockBase = kOpenLockByte + 1;
constexpr off_t kMapLockByte = kOpenLockByte - 1;

// Whether slot i's liveness lock is held through another open file
// description than fd (unknown counts as held).
bool SlotLockHeldElsewhere(int fd, uint32_t i) { return OfdByteHeldElsewhere(fd, kSlotLockBase + i); }

// Slot liveness through a descriptor of somebody else's object, for the
// scans of a state this process does not use (removal, inspection).
class LookingSlotLocks final : public SlotLiveness {
 public:
  explicit LookingSlotLocks(int fd) : fd_(fd) {}
  bool TryLock(uint32_t) override { return false; }
  void Unlock(uint32_t) override {}
  bool HeldElsewhere(uint32_t s) override { return SlotLockHeldElsewhere(fd_, s); }

 private:
  int fd_;
};

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
  return OfdLockByte(lock_fd, F_WRLCK, kMapLockByte, false) == 0;
}

namespace {

// With the open lock held on fd: removes object `name` if no live thread
// of any process holds a slot in it.
bool UnlinkIfNoLiveSlot(int fd, const std::string& name) {
  // Read, not mapped: mapping the whole region and tearing it down costs
  // more than the few slots a file ever has. An object too short to hold
  // a header was left by a creator that died before sizing it (a live one
  // would hold the open lock).
  bool live = false;
  alignas(ShmHeader) unsigned char hbuf[sizeof(ShmHeader)];
  if (pread(fd, hbuf, sizeof(hbuf), 0) == ssize_t(sizeof(hbuf))) {
    const auto* h = reinterpret_cast<const ShmHeader*>(hbuf);
    const uint64_t hi = std::min<uint64_t>(h->epochs.slots_high.load(), kMaxSlots);
    // Every holder, this process included, holds its slot locks through
    // another open file description than fd: all of them conflict.
    std::vector<ReclaimSlot> slots(hi);
    const ssize_t want = ssize_t(hi * sizeof(ReclaimSlot));
    LookingSlotLocks locks(fd);
    if (hi && pread(fd, slots.data(), size_t(want), off_t(kSlotsOffset)) != want)
      live = true;  // unknown counts as live
    else
      ForEachLiveSlot(slots.data(), hi, locks, [&](uint32_t, const ReclaimSlot&) {
        live = true;
        return false;
      });
  }
  return !live && shm_unlink(name.c_str()) == 0;
}

}  // namespace

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
  if (OfdLockByte(fd, lock, kOpenLockByte, true) != 0) {
    close(fd);
    return false;
  }
  const bool removed = UnlinkIfNoLiveSlot(fd, name);
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

void SharedState::RemoveIfNoOtherUser(const std::function<void()>& last_user) {
  if (fd_ < 0) return;  // a fork child's copy: the state is the parent's
  if (OfdLockByte(fd_, F_WRLCK, kOpenLockByte, true) != 0) return;
  // Our own slots are released by now, and our locks do not conflict with
  // us anyway: only other processes' slots count.
  if (!epochs_->AnyOtherProcessLive()) {
    if (last_user) last_user();
    shm_unlink(name_.c_str());
  }
  OfdLockByte(fd_, F_UNLCK, kOpenLockByte, false);
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
    if (OfdLockByte(s->fd_, F_WRLCK, kOpenLockByte, true) != 0)
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
  // The header page is stored to now; the slots' pages as slots are
  // claimed, the bitmap's as capacity is published (medium/provide.h).
  if (Status ps = ProvideMemory(s->map_, kSlotsOffset, "shared state"); !ps.ok()) {
    UnlinkIfNoLiveSlot(s->fd_, s->name_);  // made just now, most likely: no litter
    return ps;
  }
  s->hdr_ = reinterpret_cast<ShmHeader*>(s->map_);
  s->slots_ = reinterpret_cast<ReclaimSlot*>(s->map_ + kSlotsOffset);
  s->bits_ = reinterpret_cast<std::atomic<uint64_t>*>(s->map_ + kBitmapOffset);
  s->epochs_.emplace(&s->hdr_->epochs, s->slots_, &s->locks_);
  s->bitmap_.emplace(&s->hdr_->bitmap, s->bits_);

  ShmHeader* h = s->hdr_;
  // The epoch too, as in a pool's volatile area: a damaged one made every
  // pin look idle.
  bool valid = h->magic == kShmMagic && h->version == kShmVersion &&
               h->ready.load(std::memory_order_acquire) == 1 && h->file_id == id.file_id &&
               h->created_ns == id.created_ns && h->host_dev == id.dev && h->host_ino == id.ino &&
               h->epochs.Plausible();
  if (valid && s->dirty_slots_ != 0) {
    // Bits are only ever set below the capacity, which only grows until a
    // rebuild: what a rebuild must clear is bounded by both high marks.
    s->dirty_slots_ = std::min<uint64_t>(h->epochs.slots_high.load(), kMaxSlots);
    s->dirty_bitmap_bytes_ = std::min<uint64_t>(
        (h->bitmap.capacity_blocks.load() + 7) / 8 + sizeof(uint64_t), kBitmapBytes);
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
  *needs_rebuild = !valid || !s->epochs_->AnyOtherProcessLive();
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
  const uint64_t slot_bytes = dirty_slots_ * sizeof(ReclaimSlot);
  const uint64_t in_header_page = std::min<uint64_t>(slot_bytes, kPageBytes - kSlotsOffset);
  std::memset(static_cast<void*>(slots_), 0, in_header_page);
  drop(reinterpret_cast<char*>(slots_) + (kPageBytes - kSlotsOffset), slot_bytes - in_header_page);
  hdr_->epochs.Reset();
  hdr_->log.Reset();
  // Clear the bitmap by dropping its pages (they read back as zero).
  drop(bits_, std::min<uint64_t>(dirty_bitmap_bytes_, kBitmapBytes));
  dirty_slots_ = kMaxSlots;
  dirty_bitmap_bytes_ = kBitmapBytes;
  hdr_->bitmap.Reset(capacity_blocks);
}

void SharedState::DetachAfterFork() {
  if (fd_ >= 0) close(fd_);  // the parent's locks stay with the parent's descriptor
  fd_ = -1;
}

void SharedState::MarkReady() { hdr_->ready.store(1, std::memory_order_release); }

void SharedState::ReleaseOpenLock() {
  if (!open_locked_) return;
  OfdLockByte(fd_, F_UNLCK, kOpenLockByte, false);
  open_locked_ = false;
}

bool SharedState::SlotLocks::TryLock(uint32_t s) {
  return OfdLockByte(*fd_, F_WRLCK, kSlotLockBase + s, false) == 0;
}

void SharedState::SlotLocks::Unlock(uint32_t s) { OfdLockByte(*fd_, F_UNLCK, kSlotLockBase + s, false); }

bool SharedState::SlotLocks::HeldElsewhere(uint32_t s) {
  // A fork child's copy has no descriptor: unknown counts as held.
  return SlotLockHeldElsewhere(*fd_, s);
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
  auto* slots = reinterpret_cast<const ReclaimSlot*>(static_cast<char*>(p) + kSlotsOffset);
  auto* bm = reinterpret_cast<const std::atomic<uint64_t>*>(static_cast<char*>(p) + kBitmapOffset);
  view->present = h->magic == kShmMagic && h->version == kShmVersion && h->file_id == id.file_id &&
                  h->created_ns == id.created_ns && h->host_dev == id.dev && h->host_ino == id.ino;
  if (view->present) {
    std::vector<uint32_t> pids;
    LookingSlotLocks locks(fd);
    ForEachLiveSlot(slots, h->epochs.slots_high.load(), locks, [&](uint32_t, const ReclaimSlot& sl) {
      uint32_t pid = sl.owner_pid.load();
      if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
      return true;
    });
    view->live_processes = uint32_t(pids.size());
    view->bitmap_readable = pids.empty() && h->ready.load() == 1;
    if (view->bitmap_readable) {
      uint64_t words = (std::min<uint64_t>(capacity_blocks, h->bitmap.capacity_blocks.load()) + 63) / 64;
      view->taken.resize(words);
      for (uint64_t w = 0; w < words; ++w) view->taken[w] = bm[w].load();
    }
  }
  munmap(p, kShmBytes);
  close(fd);
  return Status::OK();
}

}  // namespace upfs
