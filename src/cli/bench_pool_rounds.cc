// upfs bench --pool: one round of a namespace workload on one side.
#include <algorithm>
#include <cerrno>
#include <string>

#include "cli/bench_internal.h"
#include "cli/bench_ns.h"

namespace upfs::cli::bench {

Status Bench::RunNamespace(size_t wi, const Workload& w, SideState* s, int round,
                           double* ops_per_s) {
  if (w.kind == Kind::kNsCreate || w.kind == Kind::kNsUnlink) return RunBatched(w, s, ops_per_s);
  if (w.kind == Kind::kNsCreate2t) return RunCreate2t(s, ops_per_s);
  const Ns ns{s->upfs};
  const char* dir = s->ns_dir.c_str();
  const uint64_t n = w.io;
  Rng rng(SeedFor(wi, round, 0));
  Names files(s->ns_dir, "f"), a(s->ns_dir, "a"), b(s->ns_dir, "b");
  const std::string one = s->ns_dir + "/x";
  const char* x = one.c_str();
  const char* wbuf = wbuf_.get();
  struct stat st;
  auto op = [&](uint64_t) -> bool {
    switch (w.kind) {
      case Kind::kNsStat:
      case Kind::kNsStatData:
        return ns.Stat(files(rng.Below(n)), &st) == 0;
      case Kind::kNsOpenClose: {
        const int fd = ns.Open(files(rng.Below(n)), O_RDONLY);
        return fd >= 0 && ns.Close(fd) == 0;
      }
      case Kind::kNsRename: {
        // Every file goes a -> b on even passes over the directory, b -> a
        // on odd ones: the directory keeps its size, rounds run on.
        const uint64_t k = s->renamed++, j = k % n;
        return (k / n) % 2 ? ns.Rename(b(j), a(j)) == 0 : ns.Rename(a(j), b(j)) == 0;
      }
      case Kind::kNsMkdirRmdir:
        return ns.Mkdir(x) == 0 && ns.Rmdir(x) == 0;
      case Kind::kNsReaddir: {
        const long got = ns.Count(dir);
        if (got >= 0 && got != long(n)) errno = EIO;  // an entry lost or doubled
        return got == long(n);
      }
      case Kind::kNsCreate512: {
        const int fd = ns.Open(x, O_WRONLY | O_CREAT | O_EXCL);
        if (fd < 0) return false;
        const bool ok = ns.Write(fd, wbuf, 512) && ns.Fsync(fd) == 0;
        return ns.Close(fd) == 0 && ok && ns.Unlink(x) == 0;
      }
      default:
        errno = EINVAL;
        return false;
    }
  };
  uint64_t ops = 0;
  double elapsed = 0;
  Status looped = TimedLoop(cfg_.seconds, op, &ops, &elapsed);
  if (!looped.ok()) {
    if (looped.err() == EINTR && g_interrupted) return looped;
    return SideError(s->upfs, std::string(w.name) + " in " + s->ns_dir, looped.err());
  }
  *ops_per_s = double(ops) / elapsed;
  return Status::OK();
}

// Operations that make or consume files, in batches: create (the batch's
// files removed off the clock, so that the directory stays small) and
// unlink (the batch's files made off the clock).
Status Bench::RunBatched(const Workload& w, SideState* s, double* ops_per_s) {
  constexpr uint64_t kBatch = 4096;
  const bool unlinking = w.kind == Kind::kNsUnlink;
  const Ns ns{s->upfs};
  Names names(s->ns_dir, "c");
  uint64_t ops = 0;
  double timed = 0;
  while (timed < cfg_.seconds) {
    if (g_interrupted) return Interrupted();
    for (uint64_t j = 0; unlinking && j < kBatch; j++) {
      if (!ns.Create(names(j))) return SideError(s->upfs, std::string("create ") + names(j), errno);
    }
    uint64_t j = 0;
    bool ok = true;
    const double start = NowSeconds();
    double now = start;
    while (ok && j < kBatch) {
      for (int k = 0; k < 16 && j < kBatch; k++, j++) {
        if (!(ok = unlinking ? ns.Unlink(names(j)) == 0 : ns.Create(names(j)))) break;
      }
      now = NowSeconds();
      if (timed + (now - start) >= cfg_.seconds) break;
    }
    if (!ok) return SideError(s->upfs, std::string(w.name) + " " + names(j), errno);
    timed += now - start;
    ops += j;
    // Off the clock: create removes what it made, unlink what it left.
    for (uint64_t k = unlinking ? j : 0; k < (unlinking ? kBatch : j); k++) {
      if (ns.Unlink(names(k)) != 0) return SideError(s->upfs, std::string("remove ") + names(k), errno);
    }
  }
  *ops_per_s = double(ops) / timed;
  return Status::OK();
}

}  // namespace upfs::cli::bench
