// The engine Files of this process: one per host inode, shared by every
// descriptor of it, and kept ("parked") for a moment after the last
// descriptor closes.
//
// One File per inode is an invariant, not an optimization: a second File of
// an inode in the same process would rebuild the shared allocation state
// under the first one (a rebuild happens when no *other* process uses the
// file) and the two would hand out the same blocks. So a File is created,
// parked, taken back and destroyed only under the registry's lock, and an
// opener that finds a File whose last user is just leaving waits for it to
// be parked or destroyed.
//
// Parking: opening a upfs file maps the host file and its shared state and
// replays the log, tens of microseconds where the kernel's open of a tmpfs
// file costs about two. Programs reopen the files they just closed (table
// caches, stat after close, open-read-close loops), so the last close parks
// the File and the next open of the inode takes it back. A parked File is an
// open File nobody uses: writes of other processes are caught up with on
// its next operation, as for any open File. From outside it must look
// closed soon: at most UPFS_PARKED_FILES (default 16, 0 turns parking off)
// stay parked, each for at most a second; a File whose host file has no
// link left is never parked; unlink and rename by this process destroy the
// parked File of the name they remove at once.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <memory>

#include "engine/file.h"
#include "util/status.h"

namespace upfs {

// The File of the inode `host` describes (a fresh fstat of the host file):
// the one this process has open, else its parked one if the file still
// looks as it did (no shorter than mapped, header intact, log readable from
// where it stopped), else a new one made by `open_new`, which runs under
// the registry's lock.
// With `writable` false, the process's writing File if it has one, else
// its read-only one, else a new read-only one.
Status AcquireFile(const struct stat& host, bool writable,
                   const std::function<Status(std::unique_ptr<File>*)>& open_new,
                   std::shared_ptr<File>* out);

// The File of the inode if this process has it open or parked (the writing
// one if there are two); null if not.
std::shared_ptr<File> FindFile(const struct stat& host);
// The same, but only a File that writes.
std::shared_ptr<File> FindWritableFile(const struct stat& host);

// Destroys the parked Files of the inode, if there are any (true if a
// writing one was among them: it removed the shared state if unused).
bool DropParkedFile(dev_t dev, ino_t ino);

// Destroys every parked File.
void DropAllParkedFiles();

// fork(): the registry is locked across it. In the child every File of the
// parent is forgotten (leaked: its blocks and slots belong to the parent),
// and the child adopts the Files it opens again for inherited descriptors.
void LockRegistryForFork();
void UnlockRegistryInParent();
void ForgetRegistryInChild();
std::shared_ptr<File> AdoptFileInChild(std::unique_ptr<File> f);

// What exit does through atexit, for a process that leaves by _exit: the
// shared state of its parked Files and of its open Files without a name
// goes, unless another process uses it. Does nothing in a process the
// registry does not belong to (a vfork child shares its parent's memory,
// and what it would remove its parent uses).
void LeaveFilesBeforeExit();

}  // namespace upfs
