// upfs rm FILE...
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

const char kRmHelp[] =
    "usage: upfs rm [--force] FILE...\n"
    "\n"
    "Removes upfs files together with their shared allocation state\n"
    "(/dev/shm/upfs-DEV-INO, which exists while some process has the file\n"
    "open; a damaged file's too), unless a process still uses it.\n"
    "Removing a file that a process still has open works as with rm(1): that\n"
    "process keeps using it. Other files are removed like rm(1) would.\n"
    "\n"
    "options:\n"
    "  --force   ignore files that do not exist\n"
    "\n"
    "Exit status: 0 success, 1 if any FILE could not be removed, 2 bad usage.\n"
    "\n"
    "example:\n"
    "  upfs rm /dev/shm/data.upfs\n";

int RunRm(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {{"force"}});
  if (p.positional.empty()) throw UsageError("expected at least one FILE");
  bool force = p.Has("force");
  int rc = kExitOk;
  for (const std::string& path : p.positional) {
    if (upfs_unlink(path.c_str()) == 0) continue;
    if (force && errno == ENOENT) continue;
    rc = Fail("rm", path + ": " + std::strerror(errno));
  }
  return rc;
}

}  // namespace upfs::cli
