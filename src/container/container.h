// Container: how the POSIX layer reaches the storage of upfs files,
// whatever holds them. The per-file container (perfile/) is the one there
// is: each upfs file a host file whose name, directory and permissions the
// kernel keeps. A pool container answers the same calls for the files of a
// pool (docs/design.md, "Adding a container").
//
// The POSIX layer names a file by a host descriptor or a host inode
// (HostIdentity); what the container does with them (headers, shared
// state, lock objects) is its own business.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/file.h"
#include "format/format.h"
#include "util/status.h"

namespace upfs {

// The kernel's identity of a host file.
struct HostIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
};

class Container {
 public:
  struct OpenOptions {
    bool writable = true;  // false: a read-only File, which writes nothing
    bool create = false;   // an empty host file becomes a new upfs file
    format::Consistency consistency = format::Consistency::kStrict;  // of a new file
    const mode_t* new_mode = nullptr;  // the mode a new file gets, if given
  };

  virtual ~Container() = default;

  // --- Recognising a upfs file.
  // The host file behind `host_fd` holds a upfs file.
  virtual bool Holds(int host_fd) = 0;
  // Its stat alone says it is a upfs file (for callers who may not read it).
  virtual bool Marked(const struct stat& st) = 0;
  // Its stat does not rule out a upfs file (marked, or shaped like one).
  virtual bool MaybeHolds(const struct stat& st) = 0;
  // The mode bits that mark a host file as a upfs file: kept by chmod,
  // hidden from stat.
  virtual mode_t MarkerBits() const = 0;
  // What to report for a marked file that does not hold a upfs file.
  virtual Status Damaged(const std::string& path) = 0;

  // --- Whole files.
  // Opens (or creates) the upfs file behind `host_fd` (kept by the caller;
  // `path` names it in messages).
  virtual Status Open(int host_fd, const std::string& path, const OpenOptions& options,
                      std::unique_ptr<File>* out) = 0;
  // The size, blocks and times of a upfs file this process does not have
  // open, without joining its users. EAGAIN: try again, or open it.
  virtual Status StatClosed(int host_fd, const std::string& path, FileStat* out) = 0;
  // The last name of the file `id` is gone (unlink, or rename over it):
  // whatever the container keeps for it beside the host file goes too,
  // unless a process still uses it.
  virtual void Unlinked(const HostIdentity& id) = 0;
  // chmod or chown changed the host file `id` (now `host`).
  virtual void AttributesChanged(const HostIdentity& id, const struct stat& host) = 0;
  // Removes what killed processes left behind: `upfs sweep`.
  virtual Status Sweep(uint32_t* removed, uint32_t* in_use) = 0;

  // --- A File this container opened.
  // The container's own descriptor of the host file (record locks, the
  // kernel's checks on writes by name), valid while the File lives.
  virtual int HostFd(const File& f) = 0;
  // Changes whenever AttributesChanged ran for the file, in any process.
  virtual uint64_t AttributeSequence(const File& f) = 0;
  // Has the kernel apply what its write path does to the host inode (clear
  // S_ISUID/S_ISGID, with the caller's credentials) by a write through it
  // that changes no byte.
  virtual Status WriteThroughKernel(const File& f) = 0;
  // Whether f still is the file `host` (stat of the host file) describes:
  // its header intact and its space not shrunk behind upfs's back.
  virtual bool StillCurrent(const File& f, const struct stat& host) = 0;
  // In a fork child, about to abandon f (the parent's): let go of what
  // would outlive the parent in the child.
  virtual void ForkedAway(File& f) = 0;
  // This process is done with f for good (exit, or the file lost its last
  // name) though f itself may not be destroyed: let the next user rebuild.
  virtual void Leaving(File& f) = 0;
  // A descriptor holding the lock one process at a time holds while it
  // has a shared writable map of the file; -1 with errno (EAGAIN: another
  // process holds it).
  virtual int LockForSharedMap(const File& f) = 0;
  // flock(2) on the file `id`, through *lock_fd (this description's own,
  // opened on first use), and its release when the description goes.
  virtual int Flock(const HostIdentity& id, int* lock_fd, int op) = 0;
  virtual void ReleaseFlock(const HostIdentity& id, int lock_fd) = 0;
};

// The container of upfs files that are host files (container/perfile/).
Container& HostFileContainer();

}  // namespace upfs
