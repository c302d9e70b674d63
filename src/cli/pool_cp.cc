// upfs cp [-r] SRC... DST: copies into, out of and between pools.
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
    "usage: upfs cp [-r] [--progress] SRC... DST\n"
    "\n"
    "Copies SRC to DST, where any of them may be POOL:PATH (PATH inside pool\n"
    "file POOL; see 'upfs mkfs') and the others are host paths; at least one\n"
    "must be in a pool. As 'cp -a' does, it keeps modes, access and\n"
    "modification times, owners (when run as root), symbolic links as links,\n"
    "hard links within what it copies as links, and holes of sparse files.\n"
    "If DST is an existing directory, each SRC is copied into it under its\n"
    "own name (with several SRCs it must be one); an existing file or link\n"
    "is replaced. A failed entry is reported and the copy goes on.\n"
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

// An operand with its side: the host, or the pool it names (mounted).
struct Side {
  Operand op;
  Fs fs;
};

// The last component of `path` ("" for a root).
std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path == "/" ? "" : std::filesystem::path(path).filename().string();
}

bool SamePool(const Operand& a, const Operand& b) {
  std::error_code ec;
  return a.in_pool && b.in_pool && std::filesystem::equivalent(a.pool, b.pool, ec) && !ec;
}

// Whether pool path `inner` is `outer` or below it.
bool IsWithin(const std::string& inner, const std::string& outer) {
  std::string o = std::filesystem::path(outer).lexically_normal().string();
  std::string i = std::filesystem::path(inner).lexically_normal().string();
  while (o.size() > 1 && o.back() == '/') o.pop_back();
  return o == "/" || i == o || i.rfind(o + "/", 0) == 0;
}

std::string NotInPoolMessage(const std::vector<Operand>& ops) {
  std::string m = "no operand is in a pool: write POOL:PATH, POOL a pool file made by 'upfs mkfs'";
  for (const Operand& o : ops) {
    size_t colon = o.text.find(':');
    if (colon != std::string::npos && colon > 0 && std::filesystem::exists(o.text.substr(0, colon))) {
      m += " ('" + o.text.substr(0, colon) + "' is not a pool)";
    }
  }
  return m;
}

// Each operand with its side; false (message printed) if a pool would not mount.
bool Sides(const std::vector<std::string>& args, PoolMounts* mounts, std::vector<Side>* out) {
  for (const std::string& a : args) {
    Side s{ParseOperand(a, false), Fs()};
    if (s.op.in_pool) {
      std::string dir;
      if (Status st = mounts->Mount(s.op.pool, &dir); !st.ok()) {
        Fail("cp", st.message());
        return false;
      }
      s.fs = Fs(s.op.pool, dir);
    }
    out->push_back(std::move(s));
  }
  return true;
}

// Copies one SRC to DST (into it if it is a directory).
bool CopyOne(TreeCopy* copy, const Side& src, const Side& dst, bool dst_is_dir) {
  struct stat st;
  if (src.fs.Lstat(src.op.path, &st) != 0) {
    std::fprintf(stderr, "upfs cp: %s\n", src.fs.Error(src.op.path).c_str());
    return false;
  }
  const std::string target = dst_is_dir ? JoinPath(dst.op.path, BaseName(src.op.path)) : dst.op.path;
  if (S_ISDIR(st.st_mode) && SamePool(src.op, dst.op) && IsWithin(target, src.op.path)) {
    std::fprintf(stderr, "upfs cp: cannot copy %s into itself (%s)\n", src.op.text.c_str(),
                 dst.fs.Display(target).c_str());
    return false;
  }
  return copy->CopyFrom(src.fs, src.op.path, st, target);
}

}  // namespace

int RunCp(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(ExpandShortFlags(args, {{'r', "recursive"}, {'R', "recursive"}}),
                           {{"recursive"}, {"progress"}});
  if (p.positional.size() < 2) throw UsageError("expected SRC... and DST");
  PoolMounts mounts;  // outlives every descriptor: unmounting needs them closed
  std::vector<Side> sides;
  if (!Sides(p.positional, &mounts, &sides)) return kExitFailure;
  std::vector<Operand> ops;
  for (const Side& s : sides) ops.push_back(s.op);
  bool any_pool = false;
  for (const Operand& o : ops) any_pool = any_pool || o.in_pool;
  if (!any_pool) return Fail("cp", NotInPoolMessage(ops));
  const Side& dst = sides.back();
  struct stat dst_st;
  const bool dst_is_dir = dst.fs.Stat(dst.op.path, &dst_st) == 0 && S_ISDIR(dst_st.st_mode);
  if (sides.size() > 2 && !dst_is_dir) {
    return Fail("cp", dst.fs.Display(dst.op.path) + ": not a directory (several SRCs go into one)");
  }

  const bool want_progress = p.Has("progress") || isatty(STDERR_FILENO);
  uint64_t total = 0;
  for (size_t i = 0; want_progress && i + 1 < sides.size(); i++) {
    total += TreeCopy::BytesBelow(sides[i].fs, sides[i].op.path);
  }
  Progress progress("copying", total, p.Has("progress") || total >= kProgressFrom);
  TreeCopy copy(dst.fs, p.Has("recursive"), &progress);
  bool ok = true;
  for (size_t i = 0; i + 1 < sides.size(); i++) ok = CopyOne(&copy, sides[i], dst, dst_is_dir) && ok;
  if (ok) progress.Finish();
  return ok ? kExitOk : kExitFailure;
}

}  // namespace upfs::cli
