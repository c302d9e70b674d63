// upfs mkfs POOL [--size BYTES]
#include <cerrno>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

const char kMkfsHelp[] =
    "usage: upfs mkfs POOL [--size BYTES]\n"
    "\n"
    "Makes POOL a new, empty pool: one file that holds a whole namespace of\n"
    "directories, files, symbolic links and hard links (see 'upfs ls' and\n"
    "'upfs cp'). POOL must not exist. Put it on /dev/shm, a DAX file system\n"
    "or a page-cache file system.\n"
    "\n"
    "options:\n"
    "  --size BYTES   space to map up front (suffixes K, M, G); the pool\n"
    "                 grows past it as needed (default: upfs's)\n"
    "\n"
    "Exit status: 0 success, 1 failure (POOL exists, no space, ...), 2 bad usage.\n"
    "\n"
    "example:\n"
    "  upfs mkfs /dev/shm/tree.pool --size 64M\n";

int RunMkfs(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {{"size", true}});
  if (p.positional.size() != 1) throw UsageError("expected exactly one POOL");
  const std::string& pool = p.positional[0];
  uint64_t size = 0;
  if (auto v = p.Value("size")) size = ParseSize(*v, "--size");
  if (upfs_mkfs(pool.c_str(), size) != 0) {
    if (errno == EEXIST) return Fail("mkfs", pool + ": already exists (remove it first to make a new pool)");
    return Fail("mkfs", pool + ": " + ApiError("make a pool"));
  }
  return kExitOk;
}

}  // namespace upfs::cli
