// upfs bench: read-seq-4k-cold, a fresh process reading a file it did not
// write. Every round runs in a new process (this program again, with
// --cold-reader), so that nothing of the file is mapped in it yet: the
// round pays for the open and for every page the reads map, as a program
// that opens an existing file does.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/bench_internal.h"
#include "cli/bench_ns.h"
#include "upfs/upfs.h"

extern char** environ;

namespace upfs::cli {
namespace bench {

namespace {

// What a reader prints: "<reads> <seconds>\n".
Status ParseReaderOutput(const std::string& out, double* ops_per_s) {
  unsigned long long reads = 0;
  double seconds = 0;
  if (std::sscanf(out.c_str(), "%llu %lf", &reads, &seconds) != 2 || seconds <= 0)
    return Status::Error(EIO, "cold reader: unexpected output '" + out + "'");
  *ops_per_s = double(reads) / seconds;
  return Status::OK();
}

}  // namespace

Status Bench::RunColdRead(SideState* s, double* ops_per_s) {
  UPFS_RETURN_IF_ERROR(EnsureData(s));
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", cfg_.seconds);
  std::vector<std::string> args = {"upfs", "bench", "--cold-reader", s->data_path, "--seconds",
                                   seconds};
  if (!s->upfs) args.push_back("--kernel");
  // A pool file: the reader attaches the pool, as a new program would.
  if (s->upfs && !mount_dir_.empty()) args.insert(args.end(), {"--pool", pool_file_, "--mount", mount_dir_});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  pid_t pid;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return Status::Error(rc, "start the cold reader");
  }
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (g_interrupted) return Interrupted();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::Error(EIO, std::string(s->upfs ? "upfs" : "kernel") +
                                  ": the cold reader failed (its message is above)");
  return ParseReaderOutput(out, ops_per_s);
}

}  // namespace bench

namespace {

// Reads `path` 4 KiB at a time from its start until `seconds` have passed
// or the file ends; the open is in the time, the close is not.
Status ReadFromStart(const bench::Ns& side, const std::string& path, double seconds,
                     uint64_t* reads, double* elapsed) {
  bench::Buffer buf(static_cast<char*>(std::aligned_alloc(bench::kBlock, bench::kBlock)));
  const double start = NowSeconds();
  const int fd = side.Open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    const int err = errno;
    return bench::SideError(side.upfs, "open " + path, err);
  }
  double now = start;
  for (bool more = true; more && now - start < seconds;) {
    for (int k = 0; k < 16; k++) {
      const off_t off = off_t(*reads * bench::kBlock);
      const ssize_t r = side.upfs ? upfs_pread(fd, buf.get(), bench::kBlock, off)
                                  : pread(fd, buf.get(), bench::kBlock, off);
      if (r < 0) {
        const int err = errno;
        side.Close(fd);
        return bench::SideError(side.upfs, "read " + path, err);
      }
      if (r < ssize_t(bench::kBlock)) {
        more = false;
        break;
      }
      ++*reads;
    }
    now = NowSeconds();
  }
  side.Close(fd);
  *elapsed = now - start;
  return Status::OK();
}

}  // namespace

// `upfs bench --cold-reader FILE --seconds S [--kernel]`: one round of
// read-seq-4k-cold in this new process. Opens FILE (through upfs, or the
// kernel with --kernel), reads it 4 KiB at a time from its start until S
// seconds have passed or the file ends, and prints "<reads> <seconds>",
// the open included in the time. With --pool POOL --mount DIR, FILE is a
// path in POOL, which the reader mounts at DIR first, off the clock (the
// attach is a program's once, and is measured on its own: docs/design.md,
// "Attach, liveness and recovery").
int RunColdReader(const std::vector<std::string>& args) {
  std::string path, pool, mount;
  double seconds = 0;
  bool kernel = false;
  for (size_t i = 1; i < args.size(); i++) {
    if (args[i] == "--seconds" && i + 1 < args.size()) {
      seconds = ParseDouble(args[++i], "--seconds");
    } else if (args[i] == "--kernel") {
      kernel = true;
    } else if (args[i] == "--pool" && i + 1 < args.size()) {
      pool = args[++i];
    } else if (args[i] == "--mount" && i + 1 < args.size()) {
      mount = args[++i];
    } else if (path.empty() && args[i][0] != '-') {
      path = args[i];
    } else {
      return Fail("bench --cold-reader", "unexpected argument '" + args[i] + "'");
    }
  }
  if (path.empty() || seconds <= 0) return Fail("bench --cold-reader", "needs FILE and --seconds S");
  if (pool.empty() != mount.empty() || (kernel && !pool.empty()))
    return Fail("bench --cold-reader", "--pool and --mount go together, and not with --kernel");
  if (!pool.empty() && upfs_mount(pool.c_str(), mount.c_str()) != 0)
    return Fail("bench --cold-reader", ApiError("mount " + pool + " at " + mount));
  uint64_t reads = 0;
  double elapsed = 0;
  const Status read = ReadFromStart(bench::Ns{!kernel}, path, seconds, &reads, &elapsed);
  // Unmounted whatever the reads did: a reader that fails leaves no
  // attachment for the next attach to find dead and recover.
  const bool unmounted = pool.empty() || upfs_umount(mount.c_str()) == 0;
  if (!read.ok()) return Fail("bench --cold-reader", read.message());
  if (!unmounted) return Fail("bench --cold-reader", ApiError("unmount " + mount));
  std::printf("%llu %.9f\n", static_cast<unsigned long long>(reads), elapsed);
  return kExitOk;
}

}  // namespace upfs::cli
