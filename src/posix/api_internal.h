// What the files of the C API (src/posix/api*.cc) share: errors and the
// attributes upfs reports over the host file's.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <memory>

#include "engine/file.h"
#include "util/status.h"

namespace upfs {

// Set errno and the thread's last error; return -1.
int Fail(const Status& st);
int FailErrno(int err, const char* msg);

// The engine File of upfs descriptor fd and its open flags (O_ACCMODE |
// O_APPEND); null if fd is not a upfs descriptor.
std::shared_ptr<File> ApiFileOf(int fd, int* flags);

// Fills the attributes upfs keeps itself (size, blocks, mtime, and its part
// of ctime) into *out, which holds the host file's; hides the marker.
void SetUpfsAttributes(const FileStat& fs, struct stat* out);

// A regular host file that may be a upfs file: marked, or block-sized.
bool MaybeUpfs(const struct stat& st);

// Before a write or truncate of the upfs file `file` (writing) whose host
// attributes are `host`: if S_ISUID or S_ISGID is set, has the kernel clear
// them by its own rule and the caller's credentials (see api.cc,
// ClearPrivileges).
Status ClearPrivilegesOf(File* file, const struct stat& host);

// The engine File of a descriptor, opened now if it is a pool file's
// first data call (EISDIR for a pool directory).
struct OpenFile;
Status EnsureEngine(OpenFile* of);
// Before a write or truncate through a pool descriptor: S_ISUID and
// S_ISGID cleared as the kernel's write path does.
Status ClearPoolPrivileges(OpenFile* of);
// Truncates the file of `of` to `length` as a truncate does (set-ID bits
// first), whatever the descriptor's access mode: ftruncate checks that
// first; an open with O_RDONLY | O_TRUNC of a pool file comes here too.
Status TruncateOpenFile(OpenFile* of, uint64_t length);
// The flags an open with O_PATH keeps, as the kernel's open(2) does
// (build_open_how): the others are ignored.
inline constexpr int kOPathFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
bool IsPoolDescriptor(const OpenFile* of);
bool IsPoolDirectory(const OpenFile* of);
// lseek of a pool directory's descriptor (pool_dirs.cc): the position is
// the count of entries its scan has given (getdents64's d_off), 0 starts
// a new scan; SEEK_END is EINVAL, as for the kernel's tmpfs directories.
off_t PoolDirSeek(OpenFile* of, off_t offset, int whence);
// Pool descriptors' close and fstat (pool_api.cc).
int PoolClose(int fd, OpenFile* of);
int PoolFstat(OpenFile* of, struct stat* out);
int PoolSync(OpenFile* of);

// In a fork child: re-opens every inherited upfs file (api_fork.cc).
void ReopenAfterFork();
// The fork's prepare handler takes these leaf locks last, the parent's
// and the child's handlers let them go first (api_fork.cc).
void LockLeafLocksForFork();
void UnlockLeafLocksAfterFork();

}  // namespace upfs
