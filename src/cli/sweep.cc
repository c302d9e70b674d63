// upfs sweep
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

const char kSweepHelp[] =
    "usage: upfs sweep\n"
    "\n"
    "Removes the shared state that no process uses. A upfs file's shared\n"
    "allocation state (/dev/shm/upfs-DEV-INO) lives while some process has the\n"
    "file open and goes with the last of them; a process that was killed with\n"
    "upfs files open leaves it behind. It is harmless (the next user of the\n"
    "file rebuilds it from the file's log), but takes a little memory.\n"
    "Objects of other users are removed only when run as root.\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 bad usage.\n";

int RunSweep(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {});
  if (!p.positional.empty()) throw UsageError("sweep takes no arguments");
  unsigned removed = 0, in_use = 0;
  if (upfs_sweep(&removed, &in_use) != 0) return Fail("sweep", upfs_last_error());
  std::printf("removed %u unused shared-state object%s; %u in use or not ours to remove\n",
              removed, removed == 1 ? "" : "s", in_use);
  return kExitOk;
}

}  // namespace upfs::cli
