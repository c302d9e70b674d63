// Paths that leave a pool: a symbolic link with an absolute target, or
// ".." above the pool's root. The kernel follows such a path wherever it
// leads (another file system, or back into the same one); so does the C
// API: the pool call that met the escape notes where the path goes on
// (NoteEscape, inside the call), fails with EXDEV, and the C API function
// that dispatched it starts again from that absolute path (FollowEscape),
// in another pool, the same one, or the kernel. Forty restarts in one call
// give ELOOP, as the kernel's limit on links followed.
#pragma once

#include <cerrno>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

#include "posix/pool_mounts.h"

namespace upfs {

// Called by a pool call when resolving `which` (0, or 1 for the second
// path of rename and link) failed with EXDEV and escape `rest` (as
// PoolNamespace::Resolve gives it) from mount `m`.
void NoteEscape(const Mount& m, std::string_view rest, int which);
// Forgets any escape noted (before a pool call whose escape is wanted).
void ClearEscape();
// The escape the last pool call noted, if any (and forgets it).
bool TakeEscape(std::string* path, int* which);

// Counts the restarts of one call (thread-local): false beyond the limit.
class EscapeHop {
 public:
  EscapeHop();
  ~EscapeHop();
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// Runs pool call `call`; if it failed because its path left the pool, runs
// `again(path, which)` with the absolute path to go on with and returns
// what that returns. `paths`: the call's PoolPaths, whose guards end
// before `again` (which does not use them): a kernel call there that
// blocks, an open of a FIFO, must not hold back what waits for the
// guards (a mount, closed descriptors).
template <typename Call, typename Again>
auto FollowEscape(std::initializer_list<PoolPath*> paths, Call call, Again again) -> decltype(call()) {
  using R = decltype(call());
  ClearEscape();
  R r = call();
  bool failed;
  if constexpr (std::is_pointer_v<R>) failed = r == nullptr;
  else failed = r == -1;
  if (!failed || errno != EXDEV) return r;
  std::string path;
  int which;
  if (!TakeEscape(&path, &which)) return r;
  for (auto it = std::rbegin(paths); it != std::rend(paths); ++it) (*it)->guard.reset();
  EscapeHop hop;
  if (!hop.ok()) {
    errno = ELOOP;
    if constexpr (std::is_pointer_v<R>) return nullptr;
    else return R(-1);
  }
  return again(path, which);
}

}  // namespace upfs
