#include "container/perfile/perfile.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "format/header.h"
#include "engine/alloc_bitmap.h"
#include "medium/medium.h"
#include "medium/pm.h"
#include "medium/provide.h"
#include "util/crc32c.h"
#include "util/time_ns.h"

namespace upfs {

using namespace format;

namespace {

// Initial size of a new file: header, first log block, and room for a few
// data blocks; it grows from there (Medium::Grow).
constexpr uint64_t kInitialBytes = 16 * 1024;
// An interrupted creation never grew past its initial size, which was one
// extent in earlier versions.
constexpr uint64_t kMaxInterruptedCreationBytes = kExtentSize;
constexpr uint32_t kFirstLogBlock = 1;
// Blocks the container keeps for itself: block 0, the header.
constexpr uint32_t kHeaderBlocks = 1;

class FlockGuard {
 public:
  FlockGuard(int fd, int op) : fd_(fd) {
    while (flock(fd_, op) != 0 && errno == EINTR) {
    }
  }
  ~FlockGuard() { Unlock(); }
  // Before the descriptor is closed: unlocking a closed number could
  // unlock a file another thread has just opened under it.
  void Unlock() {
    if (fd_ >= 0) flock(fd_, LOCK_UN);
    fd_ = -1;
  }
  // The descriptor was closed by someone else (which dropped the lock).
  void Forget() { fd_ = -1; }

 private:
  int fd_;
};


// Writes header and first log block. The magic goes last, in its own
// persisted store, so an interrupted creation leaves a file whose first
// blocks are zero (recognised and initialized again by the next creator).
Status InitNewFile(Medium* m, Consistency consistency) {
  UPFS_RETURN_IF_ERROR(m->Grow(kInitialBytes));
  char* base = m->base();
  alignas(64) static thread_local unsigned char img[kBlockSize];
  std::memset(img, 0, sizeof(img));
  auto* lb = reinterpret_cast<LogBlock*>(img);
  lb->next.store(NextWord(0), std::memory_order_relaxed);
  lb->seq = 1;
  pm::CopyNT(base + kFirstLogBlock * kBlockSize, img, kBlockSize);

  std::memset(img, 0, sizeof(img));
  auto* h = reinterpret_cast<FileHeader*>(img);
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->format_version = kFormatVersion;
  h->block_size = kBlockSize;
  h->consistency = uint32_t(consistency);
  h->flags = 0;
  if (getrandom(&h->file_id, sizeof(h->file_id), 0) != sizeof(h->file_id))
    return Status::FromErrno("getrandom");
  h->created_ns = ClockNs(CLOCK_REALTIME);
  h->header_crc = Crc32c(img, offsetof(FileHeader, header_crc));
  h->log_head.store(kFirstLogBlock, std::memory_order_relaxed);
  // The times from the clock the kernel and later writes use (coarse, a
  // few ms behind created_ns), so that they never go back.
  h->times.mtime_ns.store(ClockNs(CLOCK_REALTIME_COARSE), std::memory_order_relaxed);
  h->times.data_ctime_ns.store(h->times.mtime_ns.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
  pm::CopyNT(base + sizeof(kMagic), img + sizeof(kMagic), kBlockSize - sizeof(kMagic));
  pm::Fence();
  pm::CopyNT(base, img, sizeof(kMagic));
  pm::Fence();
  return m->SyncAll();
}

// Our own description of the file behind host_fd, with `access` (O_RDWR to
// write: the caller's may be write-only, and a writable mapping needs
// both; O_RDONLY for a read-only File). O_NOATIME
// where the kernel allows it (the owner, or CAP_FOWNER), so that mapping
// and reading the header never change the file's atime.
int OpenForMapping(int host_fd, const std::string& path, int access) {
  std::string self = "/proc/self/fd/" + std::to_string(host_fd);
  for (const std::string& name : {self, path}) {
    int fd = open(name.c_str(), access | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = open(name.c_str(), access | O_CLOEXEC);
    if (fd >= 0 || errno == EACCES) return fd;
  }
  return -1;
}

Status MappingRefused(const std::string& path) {
  if (errno != EACCES) return Status::FromErrno("open " + path + " for mapping");
  return Status::Error(EACCES, path +
                                   ": upfs needs read and write permission on a upfs file to "
                                   "write it (it reads its own metadata to write)");
}

// A new upfs file gets its marker, and the mode it was created with if the
// caller gave one (the host file was created with owner read and write
// added, so that it could be opened for mapping).
void MarkNewFile(int fd, struct stat* st, const mode_t* new_mode) {
  mode_t mode = (new_mode ? *new_mode : st->st_mode & 07777) | kMarkerBit;
  if (fchmod(fd, mode) == 0) st->st_mode = (st->st_mode & S_IFMT) | mode;
}

}  // namespace

Status MarkedWithoutMagic(const std::string& path) {
  return Status::Corrupt("file header", path +
                                            ": marked as a upfs file but the upfs magic is gone "
                                            "(overwritten by a program that bypassed upfs?)");
}

bool LooksLikeUpfs(int fd) {
  unsigned char magic[sizeof(kMagic)];
  return pread(fd, magic, sizeof(magic), 0) == ssize_t(sizeof(magic)) &&
         std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
}

PerFileStorage::PerFileStorage(std::unique_ptr<Medium> medium, std::unique_ptr<SharedState> shared)
    : medium_(std::move(medium)), shared_(std::move(shared)) {
  if (shared_)
    source_ = std::make_unique<BlockSource>(medium_.get(), shared_->bitmap(), shared_->epochs(),
                                            kHeaderBlocks);
}

PerFileStorage::~PerFileStorage() {
  // The File has given back its blocks and slots. The shared state lives
  // while some process has the file open: the last one removes it (the
  // next opener rebuilds it from the log anyway), and says, durably, that
  // the file was left with no commit in flight (format.h, `in_use`).
  if (!shared_) return;
  bool last = false;
  shared_->RemoveIfNoOtherUser([&] {
    last = true;
    auto* h = reinterpret_cast<FileHeader*>(medium_->base());
    pm::Store64(&h->in_use, 0);
    pm::PersistWord(&h->in_use);
  });
  // What this process gave back to the host: the next rebuild adopts the
  // holes again, or the others get the extents, provided, to use.
  source_->SettlePunchedAtClose(last);
}

FileStorage PerFileStorage::storage() {
  auto* h = reinterpret_cast<FileHeader*>(medium_->base());
  LogRoot root;
  root.head = &h->log_head;
  root.times = &h->times;
  root.created_ns = h->created_ns;
  root.consistency = Consistency(h->consistency);
  root.words = shared_ ? shared_->log_words() : nullptr;
  root.patches = h->format_version >= kFirstPatchVersion;
  root.checked_appends = h->format_version >= kFirstCheckedAppendVersion;
  root.granules = h->format_version >= kFirstGranuleVersion;
  root.anywhere_shadows = h->format_version >= kFirstAnywhereShadowVersion;
  FileStorage s{medium_.get(), source_.get(), root};
  s.may_have_crashed = h->in_use.load(std::memory_order_acquire) != 0;
  s.give_back_free_space = source_ != nullptr;
  return s;
}

bool IsMarkedUpfs(const struct stat& st) {
  // Block-sized too: a plain file that someone gave S_ISVTX is almost
  // never a whole number of blocks, and stays a plain file.
  return S_ISREG(st.st_mode) && (st.st_mode & kMarkerBit) != 0 &&
         st.st_size >= off_t(kBlockSize) && st.st_size % off_t(kBlockSize) == 0;
}

namespace {

// After a rebuild, the host file's holes below its capacity: whole 2 MiB
// extents the rebuilt bitmap has free are what an earlier open gave back
// to the host while the file was quiet (BlockSource::PunchFreeExtents),
// adopted as punched again; the rest of each hole gets memory (a growth
// that failed or died half-way leaves holes too, above every block in
// use). On tmpfs, pages allocated ahead but never written count as holes:
// providing them again costs a lookup, adopting them a second (no-op)
// fallocate when the allocator takes them back.
Status ProvideOrAdoptHoles(Medium* m, BlockSource* source, uint64_t capacity_blocks) {
  constexpr uint64_t kExtent = kPartitionBlocks << kBlockShift;
  return ForEachHole(m->fd(), uint64_t(kHeaderBlocks) << kBlockShift, capacity_blocks << kBlockShift, m->path(),
                     [&](uint64_t hole, uint64_t end) {
                       uint64_t pos = hole;
                       for (uint64_t e = (hole + kExtent - 1) / kExtent * kExtent; e + kExtent <= end; e += kExtent) {
                         if (!source->AdoptPunched(e >> kBlockShift)) continue;
                         if (pos < e) UPFS_RETURN_IF_ERROR(m->Provide(pos, e));
                         pos = e + kExtent;
                       }
                       return pos < end ? m->Provide(pos, end) : Status::OK();
                     });
}

// Judges the host file behind fd, under its open lock: a upfs file, or
// (with create) one to initialize (*fresh), or refused with the reason.
Status JudgeHostFile(int fd, const std::string& path, bool create, struct stat* st, bool* fresh) {
  UPFS_RETURN_IF_ERROR(StatRegular(fd, path, st));
  *fresh = st->st_size == 0;
  bool upfs = !*fresh && LooksLikeUpfs(fd);
  if (!*fresh && !upfs && create && uint64_t(st->st_size) <= kMaxInterruptedCreationBytes) {
    char buf[2 * kBlockSize];
    ssize_t r = pread(fd, buf, sizeof(buf), 0);
    *fresh = r == ssize_t(sizeof(buf)) && IsInterruptedCreation(buf);
  }
  if (st->st_size == 0 && !create)
    return Status::Error(EMEDIUMTYPE, path + ": empty file, not a upfs file");
  if (!*fresh && !upfs && IsMarkedUpfs(*st)) return MarkedWithoutMagic(path);
  if (!*fresh && !upfs)
    return Status::Error(EMEDIUMTYPE, path + ": not a upfs file (no upfs magic)");
  return Status::OK();
}

}  // namespace

Status OpenPerFile(int host_fd, const std::string& path, bool create, Consistency consistency,
                   const mode_t* new_mode, std::unique_ptr<File>* out) {
  int fd = OpenForMapping(host_fd, path, O_RDWR);
  if (fd < 0) return MappingRefused(path);
  struct stat st;
  std::unique_ptr<Medium> medium;
  {
    // Creation holds the file exclusively; everybody else waits for it
    // while checking the header.
    FlockGuard lock(fd, create ? LOCK_EX : LOCK_SH);
    bool fresh;
    if (Status s = JudgeHostFile(fd, path, create, &st, &fresh); !s.ok()) {
      lock.Unlock();
      close(fd);
      return s;
    }
    if (Status s = Medium::Open(fd, path, &medium); !s.ok()) {
      lock.Forget();  // Medium::Open closed fd
      return s;
    }
    if (fresh) {
      UPFS_RETURN_IF_ERROR(InitNewFile(medium.get(), consistency));
      MarkNewFile(medium->fd(), &st, new_mode);
    }
    UPFS_RETURN_IF_ERROR(ValidateHeader(medium->base(), medium->capacity()));
  }
  Medium* m = medium.get();
  const auto* h = reinterpret_cast<const FileHeader*>(medium->base());
  SharedState::Identity id{h->file_id, h->created_ns, uint64_t(st.st_dev), uint64_t(st.st_ino)};
  std::unique_ptr<SharedState> shared;
  bool rebuild = false;
  UPFS_RETURN_IF_ERROR(SharedState::Open(id, st, &shared, &rebuild));
  // Under the shared state's open lock (held since SharedState::Open): a
  // rebuild of the allocation state from the log, and the opening thread's
  // slot, happen before anybody else can open the file.
  SharedState* sh = shared.get();
  const uint64_t capacity =
      std::min<uint64_t>(medium->capacity() >> kBlockShift, kMaxBlocks - 1);
  auto lease = std::make_unique<PerFileStorage>(std::move(medium), std::move(shared));
  const FileStorage storage = lease->storage();
  BlockMarker marker(sh->bitmap());
  if (rebuild) {
    // Memory behind the bitmap before the rebuild stores to it
    // (medium/provide.h); the file's own free end, once the blocks in use
    // are known (below).
    UPFS_RETURN_IF_ERROR(BlockSource::ProvideBitmap(*sh->bitmap(), 0, capacity));
    sh->ResetForRebuild(capacity);
    for (uint32_t b = 0; b < kHeaderBlocks; ++b) marker.Mark(b, "header");
  }
  std::unique_ptr<File> f;
  UPFS_RETURN_IF_ERROR(File::Open(storage, rebuild ? &marker : nullptr, std::move(lease), &f));
  if (rebuild) UPFS_RETURN_IF_ERROR(ProvideOrAdoptHoles(m, storage.source, capacity));
  if (rebuild) {
    // In use from now until the last user leaves: a crash before then may
    // cut a commit short, which the next rebuild then clears.
    auto* hw = reinterpret_cast<FileHeader*>(m->base());
    pm::Store64(&hw->in_use, 1);
    pm::PersistWord(&hw->in_use);
  }
  if (rebuild) sh->MarkReady();
  sh->ReleaseOpenLock();
  m->PopulateAhead();
  *out = std::move(f);
  return Status::OK();
}

Status OpenPerFileReadOnly(int host_fd, const std::string& path, std::unique_ptr<File>* out) {
  int fd = OpenForMapping(host_fd, path, O_RDONLY);
  if (fd < 0) return Status::FromErrno("open " + path + " for mapping");
  struct stat st;
  std::unique_ptr<Medium> medium;
  {
    FlockGuard lock(fd, LOCK_SH);  // a creation in progress finishes first
    bool fresh;
    if (Status s = JudgeHostFile(fd, path, false, &st, &fresh); !s.ok()) {
      lock.Unlock();
      close(fd);
      return s;
    }
    if (Status s = Medium::Open(fd, path, &medium, /*read_only=*/true); !s.ok()) {
      lock.Forget();  // Medium::Open closed fd
      return s;
    }
    UPFS_RETURN_IF_ERROR(ValidateHeader(medium->base(), medium->capacity()));
  }
  Medium* m = medium.get();
  auto lease = std::make_unique<PerFileStorage>(std::move(medium), nullptr);
  const FileStorage storage = lease->storage();
  UPFS_RETURN_IF_ERROR(File::OpenReadOnly(storage, std::move(lease), out));
  m->PopulateAhead();  // after the log is read: population's locks would slow that down
  return Status::OK();
}

}  // namespace upfs
