// The per-file container behind the Container interface: each upfs file a
// host file (perfile.h), its shared state (shared_state.h), its lock
// object (lock_object.h) and inspection (inspect.h).
#include <unistd.h>

#include "container/container.h"
#include "container/perfile/inspect.h"
#include "container/perfile/lock_object.h"
#include "container/perfile/perfile.h"
#include "container/perfile/shared_state.h"
#include "format/header.h"

namespace upfs {

namespace {

SharedState::Identity ByInode(const HostIdentity& id) {
  // The shared state is named by the inode alone (SharedState::NameFor).
  return SharedState::Identity{0, 0, id.dev, id.ino};
}

class HostFiles final : public Container {
 public:
  bool Holds(int host_fd) override { return LooksLikeUpfs(host_fd); }
  bool Marked(const struct stat& st) override { return IsMarkedUpfs(st); }
  bool MaybeHolds(const struct stat& st) override {
    return S_ISREG(st.st_mode) &&
           (IsMarkedUpfs(st) || (st.st_size >= off_t(format::kBlockSize) &&
                                 st.st_size % off_t(format::kBlockSize) == 0));
  }
  mode_t MarkerBits() const override { return kMarkerBit; }
  Status Damaged(const std::string& path) override { return MarkedWithoutMagic(path); }

  Status Open(int host_fd, const std::string& path, const OpenOptions& o,
              std::unique_ptr<File>* out) override {
    if (!o.writable) return OpenPerFileReadOnly(host_fd, path, out);
    return OpenPerFile(host_fd, path, o.create, o.consistency, o.new_mode, out);
  }
  Status StatClosed(int host_fd, const std::string& path, FileStat* out) override {
    return PeekStat(host_fd, path, out);
  }
  void Unlinked(const HostIdentity& id) override { SharedState::RemoveIfUnused(ByInode(id)); }
  void AttributesChanged(const HostIdentity& id, const struct stat& host) override {
    (void)SharedState::MirrorAttributes(ByInode(id), host);
  }
  Status Sweep(uint32_t* removed, uint32_t* in_use) override {
    UPFS_RETURN_IF_ERROR(SharedState::SweepUnused(removed, in_use));
    return SweepLockObjects(removed, in_use);
  }

  int HostFd(const File& f) override { return PerFile(f)->medium()->fd(); }
  uint64_t AttributeSequence(const File& f) override {
    SharedState* sh = PerFile(f)->shared();
    return sh ? sh->header()->attr_seq.load(std::memory_order_acquire) : 0;
  }
  Status WriteThroughKernel(const File& f) override {
    // The header's first byte never changes: rewriting it is a write that
    // changes nothing but what the kernel's write path does to the inode.
    if (pwrite(HostFd(f), format::kMagic, 1, 0) != 1)
      return Status::FromErrno("write through the kernel");
    return Status::OK();
  }
  bool StillCurrent(const File& f, const struct stat& host) override {
    const Medium* m = PerFile(f)->medium();
    return uint64_t(host.st_size) >= m->capacity() &&
           format::ValidateHeader(m->base(), m->capacity()).ok();
  }
  void ForkedAway(File& f) override {
    if (SharedState* sh = PerFile(f)->shared()) sh->DetachAfterFork();
  }
  void Leaving(File& f) override {
    if (SharedState* sh = PerFile(f)->shared()) sh->RemoveIfNoOtherUser();
  }
  int LockForSharedMap(const File& f) override {
    SharedState* sh = PerFile(f)->shared();
    if (!sh) {
      errno = EBADF;
      return -1;
    }
    int fd = sh->OpenAnotherDescription();
    if (fd < 0) return -1;
    if (!SharedState::TryLockMapByte(fd)) {
      close(fd);
      errno = EAGAIN;
      return -1;
    }
    return fd;
  }
  int Flock(const HostIdentity& id, int* lock_fd, int op) override {
    return FlockLockObject(dev_t(id.dev), ino_t(id.ino), lock_fd, op);
  }
  void ReleaseFlock(const HostIdentity& id, int lock_fd) override {
    ReleaseLockObject(dev_t(id.dev), ino_t(id.ino), lock_fd);
  }
};

}  // namespace

Container& HostFileContainer() {
  static Container* c = new HostFiles();  // never destroyed: used at exit
  return *c;
}

}  // namespace upfs
