// upfs cp [-r] SRC DST: copies into, out of and between pools.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/pool_copy.h"
#include "cli/pool_fs.h"
#include "cli/pool_operand.h"

namespace upfs::cli {

const char kCpHelp[] =
    "usage: upfs cp [-r] [--progress] SRC DST\n"
    "\n"
    "Copies SRC to DST, where one or both are POOL:PATH (PATH inside pool\n"
    "file POOL; see 'upfs mkfs') and any other is a host path. As 'cp -a'\n"
    "does, it keeps modes, access and modification times, owners (when run\n"
    "as root), symbolic links as links, hard links within SRC as links, and\n"
    "holes of sparse files. If DST is an existing directory, SRC is copied\n"
    "into it under its own name; an existing file or link is replaced.\n"
    "A failed entry is reported and the copy goes on.\n"
    "\n"
    "options:\n"
    "  -r, -R, --recursive   copy directories and everything below them\n"
    "  --progress            show progress on stderr even when it is not a\n"
    "                        terminal or the copy is small (a terminal shows\n"
    "                        it for copies of 64 MiB or more)\n"
    "\n"
    "Exit status: 0 success, 1 if anything could not be copied, 2 bad usage.\n"
    "\n"
    "examples:\n"
    "  upfs cp -r /etc /dev/shm/tree.pool:/\n"
    "  upfs cp -r /dev/shm/tree.pool:/etc /tmp/etc-copy\n"
    "  upfs cp /dev/shm/a.pool:/big.bin /dev/shm/b.pool:/big.bin\n";

namespace {

constexpr uint64_t kProgressFrom = 64ull << 20;

// The last component of `path` ("" for a root).
std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path == "/" ? "" : std::filesystem::path(path).filename().string();
}

bool SamePool(const Operand& a, const Operand& b) {
  std::error_code e1, e2;
  return a.in_pool && b.in_pool &&
         std::filesystem::equivalent(a.pool, b.pool, e1) && !e1 && !e2;
}

// Whether `inner` is `outer` or below it (both normalised pool paths).
bool IsWithin(const std::string& inner, const std::string& outer) {
  std::string o = std::filesystem::path(outer).lexically_normal().string();
  std::string i = std::filesystem::path(inner).lexically_normal().string();
  while (o.size() > 1 && o.back() == '/') o.pop_back();
  if (o == "/") return true;
  return i == o || i.rfind(o + "/", 0) == 0;
}

std::string NotInPoolMessage(const Operand& src, const Operand& dst) {
  std::string m = "neither SRC nor DST is in a pool: write POOL:PATH, POOL a pool file made by 'upfs mkfs'";
  for (const Operand* o : {&src, &dst}) {
    size_t colon = o->text.find(':');
    if (colon != std::string::npos && colon > 0 && std::filesystem::exists(o->text.substr(0, colon))) {
      m += " ('" + o->text.substr(0, colon) + "' is not a pool)";
    }
  }
  return m;
}

}  // namespace

int RunCp(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(ExpandShortFlags(args, {{'r', "recursive"}, {'R', "recursive"}}),
                           {{"recursive"}, {"progress"}});
  if (p.positional.size() != 2) throw UsageError("expected SRC and DST");
  const Operand src = ParseOperand(p.positional[0], false);
  const Operand dst = ParseOperand(p.positional[1], false);
  if (!src.in_pool && !dst.in_pool) return Fail("cp", NotInPoolMessage(src, dst));
  PoolMounts mounts;  // outlives every descriptor below: unmounting needs them closed
  std::string sdir, ddir;
  if (src.in_pool) {
    if (Status st = mounts.Mount(src.pool, &sdir); !st.ok()) return Fail("cp", st.message());
  }
  if (dst.in_pool) {
    if (Status st = mounts.Mount(dst.pool, &ddir); !st.ok()) return Fail("cp", st.message());
  }
  const Fs sfs = src.in_pool ? Fs(src.pool, sdir) : Fs();
  const Fs dfs = dst.in_pool ? Fs(dst.pool, ddir) : Fs();

  struct stat st, dst_st;
  if (sfs.Lstat(src.path, &st) != 0) return Fail("cp", sfs.Error(src.path));
  std::string target = dst.path;
  if (dfs.Stat(target, &dst_st) == 0 && S_ISDIR(dst_st.st_mode)) {
    target = JoinPath(target, BaseName(src.path));
  }
  if (S_ISDIR(st.st_mode) && SamePool(src, dst) && IsWithin(target, src.path)) {
    return Fail("cp", "cannot copy " + src.text + " into itself (" + dfs.Display(target) + ")");
  }

  const bool want_progress = p.Has("progress") || isatty(STDERR_FILENO);
  const uint64_t total = want_progress ? TreeCopy::BytesBelow(sfs, src.path) : 0;
  Progress progress("copying", total, p.Has("progress") || total >= kProgressFrom);
  TreeCopy copy(sfs, dfs, p.Has("recursive"), &progress);
  const bool ok = copy.Copy(src.path, st, target);
  if (ok) progress.Finish();
  return ok ? kExitOk : kExitFailure;
}

}  // namespace upfs::cli
