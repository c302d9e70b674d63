// upfs bench: what its files share. bench.cc holds the command, setup, the
// physical reference and the run; bench_rounds.cc one round of each kind of
// workload; bench_report.cc the table and the JSON.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_written.h"
#include "cli/cli.h"
#include "medium/medium.h"
#include "upfs/upfs.h"

namespace upfs::cli::bench {

// Set by SIGINT/SIGTERM: every loop stops, and the files are removed.
extern volatile std::sig_atomic_t g_interrupted;
inline Status Interrupted() { return Status::Error(EINTR, "interrupted"); }

// splitmix64: small, fast, and the same sequence everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n < 2^32.
  uint64_t Below(uint64_t n) { return ((Next() >> 32) * n) >> 32; }

 private:
  uint64_t s_;
};

inline constexpr uint64_t kSeed = 0x75706673'62656e63ull;  // "upfsbenc"
inline constexpr uint64_t kBlock = 4096;

inline uint64_t SeedFor(size_t workload, int round, int thread) {
  return kSeed ^ (uint64_t(workload) << 40) ^ (uint64_t(round) << 20) ^ uint64_t(thread);
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, AlignedFree>;

// n bytes (4 KiB aligned) of a fixed-seed sequence, none of them zero.
Buffer RandomBuffer(size_t n, uint64_t seed);

template <class T>
T Median(std::vector<T> v) {
  if (v.empty()) return T();
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// ---------------------------------------------------------------------------
// One open file of one side. The hot calls return false with errno set.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { Close(); }

  // Creates (or, with create=false, opens) `path` on side `upfs`.
  Status Open(bool upfs, const std::string& path, bool create, upfs_consistency mode,
              bool fsync_writes) {
    upfs_ = upfs;
    path_ = path;
    fsync_writes_ = fsync_writes;
    int flags = O_RDWR | (create ? O_CREAT | O_EXCL : 0);
    fd_ = upfs ? upfs_open_mode(path.c_str(), flags, 0600, mode)
               : open(path.c_str(), flags | O_CLOEXEC, 0600);
    if (fd_ < 0) return Error("open");
    return Status::OK();
  }

  bool Pread(char* buf, size_t n, uint64_t off) {
    ssize_t r = upfs_ ? upfs_pread(fd_, buf, n, off_t(off)) : pread(fd_, buf, n, off_t(off));
    if (r == ssize_t(n)) return true;
    if (r >= 0) errno = EIO;  // short read: the prefill is missing
    return false;
  }

  bool Pwrite(const char* buf, size_t n, uint64_t off) {
    ssize_t r = upfs_ ? upfs_pwrite(fd_, buf, n, off_t(off)) : pwrite(fd_, buf, n, off_t(off));
    if (r != ssize_t(n)) {
      if (r >= 0) errno = EIO;
      return false;
    }
    CountWritten(n);
    return !fsync_writes_ || Fsync();
  }

  bool Append(const char* buf, size_t n) {
    ssize_t r = upfs_ ? upfs_write(fd_, buf, n) : write(fd_, buf, n);
    if (r != ssize_t(n)) {
      if (r >= 0) errno = EIO;
      return false;
    }
    CountWritten(n);
    return !fsync_writes_ || Fsync();
  }

  bool Fsync() { return (upfs_ ? upfs_fsync(fd_) : fsync(fd_)) == 0; }

  // Removes the file and creates it anew, empty (upfs: with a new shared
  // state and a host file that starts small again).
  Status Recreate(upfs_consistency mode) {
    Close();
    int rc = upfs_ ? upfs_unlink(path_.c_str()) : unlink(path_.c_str());
    if (rc != 0 && errno != ENOENT) return Error("remove");
    return Open(upfs_, path_, true, mode, fsync_writes_);
  }

  // Sequential prefill with non-zero data, then fsync.
  Status Prefill(uint64_t size, const char* pattern, size_t chunk) {
    for (uint64_t off = 0; off < size; off += chunk) {
      if (g_interrupted) return Interrupted();
      size_t n = size_t(std::min<uint64_t>(chunk, size - off));
      ssize_t r = upfs_ ? upfs_pwrite(fd_, pattern, n, off_t(off))
                        : pwrite(fd_, pattern, n, off_t(off));
      if (r != ssize_t(n)) {
        if (r >= 0) errno = EIO;
        return Error("prefill");
      }
    }
    if (!Fsync()) return Error("fsync");
    // Measure the steady state: let upfs finish its background work on the
    // new file (on tmpfs, collapsing it into huge pages), as the kernel side
    // has its pages allocated by the prefill too.
    return Settle();
  }

  Status Error(const std::string& what) const {
    int err = errno;
    std::string side = upfs_ ? "upfs" : "kernel";
    if (upfs_) return Status::Error(err, side + ": " + ApiError(what + " " + path_));
    return Status::Error(err, side + ": " + what + " " + path_ + ": " + std::strerror(err));
  }

  void Close() {
    if (fd_ >= 0) {
      if (upfs_) {
        upfs_close(fd_);
      } else {
        close(fd_);
      }
    }
    fd_ = -1;
  }

  bool is_open() const { return fd_ >= 0; }
  // Waits for upfs's background work on the file (a GC of its log, growth).
  Status Settle() const {
    if (upfs_ && is_open() && upfs_settle(fd_) != 0) return Error("settle");
    return Status::OK();
  }

 private:
  bool upfs_ = false;
  bool fsync_writes_ = false;
  int fd_ = -1;
  std::string path_;
};

// ---------------------------------------------------------------------------
enum class Kind {
  kReadSeq,
  kReadSeqCold,  // read-seq-4k in a new process per round (bench_cold.cc)
  kReadRand,
  kWriteSeq,
  kWriteRand,
  kAppend,
  kWriteSub,
  kMixed,
  kCreate,     // create, write `io` bytes, (kernel: fsync,) close, remove
  kOpenClose,  // open and close a small existing file
  // Namespace operations (bench_pool.cc), on a pool against a kernel
  // directory; `io` is the number of files the workload's directory holds.
  kNsCreate,        // create + close
  kNsStat,          // stat of a random empty file
  kNsStatData,      // stat of a random 4 KiB file (its size is in its log)
  kNsOpenClose,     // open + close of a random 4 KiB file
  kNsUnlink,        // unlink of a file made off the clock
  kNsRename,        // rename within the directory
  kNsMkdirRmdir,    // mkdir + rmdir
  kNsReaddir,       // a whole listing
  kNsCreate512,     // create, write 512 B, fsync, close, unlink
  kNsCreate2t,      // create + close, two threads, one directory
};

inline bool IsNamespace(Kind k) { return k >= Kind::kNsCreate; }

// Workloads whose operations write data: they get a write amplification.
inline bool Writes(Kind k) {
  switch (k) {
    case Kind::kWriteSeq:
    case Kind::kWriteRand:
    case Kind::kAppend:
    case Kind::kWriteSub:
    case Kind::kMixed:
    case Kind::kCreate:
    case Kind::kNsCreate512:
      return true;
    default:
      return false;
  }
}

struct Workload {
  const char* name;
  Kind kind;
  size_t io;
};

inline const std::vector<Workload>& AllWorkloads() {
  static const std::vector<Workload> w = {
      {"read-seq-4k", Kind::kReadSeq, 4096},       {"read-seq-4k-cold", Kind::kReadSeqCold, 4096},
      {"read-rand-4k", Kind::kReadRand, 4096},
      {"overwrite-seq-4k", Kind::kWriteSeq, 4096}, {"overwrite-rand-4k", Kind::kWriteRand, 4096},
      {"append-4k", Kind::kAppend, 4096},          {"append-100", Kind::kAppend, 100},
      {"overwrite-128", Kind::kWriteSub, 128},
      {"overwrite-1k", Kind::kWriteSub, 1024},     {"overwrite-2k", Kind::kWriteSub, 2048},
      {"mixed-2t-4k", Kind::kMixed, 4096},
      {"create-512", Kind::kCreate, 512},          {"open-close", Kind::kOpenClose, 4096},
  };
  return w;
}

// The rounds of `upfs bench --pool`: namespace operations, and the file
// workloads of the same kind on files in a pool.
inline const std::vector<Workload>& PoolWorkloads() {
  static const std::vector<Workload> w = {
      {"pool-create", Kind::kNsCreate, 0},
      {"pool-stat", Kind::kNsStat, 1000},
      {"pool-stat-data", Kind::kNsStatData, 1000},
      {"pool-open-close", Kind::kNsOpenClose, 1000},
      {"pool-unlink", Kind::kNsUnlink, 0},
      {"pool-rename", Kind::kNsRename, 1000},
      {"pool-mkdir-rmdir", Kind::kNsMkdirRmdir, 0},
      {"pool-readdir-10k", Kind::kNsReaddir, 10000},
      {"pool-create-512", Kind::kNsCreate512, 0},
      {"pool-create-2t", Kind::kNsCreate2t, 0},
      {"pool-stat-100k", Kind::kNsStat, 100000},
      {"pool-read-seq-4k-cold", Kind::kReadSeqCold, 4096},
      {"pool-read-rand-4k", Kind::kReadRand, 4096},
      {"pool-overwrite-rand-4k", Kind::kWriteRand, 4096},
      {"pool-append-4k", Kind::kAppend, 4096},
  };
  return w;
}

struct Config {
  std::string dir = "/dev/shm";
  std::optional<std::string> json;
  bool quick = false;
  double seconds = 0.25;
  int rounds = 7;
  std::vector<std::string> filters;
  uint64_t file_size = 1ull << 30;
  upfs_consistency mode = UPFS_STRICT;
  bool verbose = false;
  bool pool = false;  // the pool rounds instead of the per-file ones
};

struct Result {
  std::string name;
  Kind kind{};
  std::vector<double> upfs_ops, kernel_ops;  // per round
  // Bytes written back to media per byte the program wrote (upfs side;
  // workloads that write), from one untimed counting pass.
  std::optional<double> pm_bytes_per_byte;
  // pool-create-2t: one thread's creates a second, per round, measured
  // between the two threads' batches (Bench::RunCreate2t).
  std::vector<double> upfs_one_thread, kernel_one_thread;
  // pool-create-2t, upfs: two threads' creates a second when each creates
  // in a pool of its own (nothing of the namespace shared), per round.
  std::vector<double> upfs_two_pools;
};

// Everything one side needs: the shared prefilled file (created lazily) and
// the append file.
struct SideState {
  bool upfs = false;
  bool fsync_writes = false;
  std::string data_path, append_path, small_path;
  File data;
  File append;
  std::string ns_dir;    // the namespace rounds' directory
  uint64_t renamed = 0;  // renames so far in ns_dir (which name each file has)
  double one_thread_ops = 0;  // the last pool-create-2t round's one-thread rate
  double two_pools_ops = 0;   // and (upfs) its two threads' rate in two pools
};

// A status line on a terminal, erased before the table is printed.
class StatusLine {
 public:
  StatusLine() : tty_(isatty(STDERR_FILENO)) {}
  ~StatusLine() { Clear(); }
  void Show(const std::string& s) {
    if (!tty_) return;
    std::fprintf(stderr, "\r%s\033[K", s.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void Clear() {
    if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  bool tty_;
  bool shown_ = false;
};

class Bench {
 public:
  explicit Bench(Config cfg) : cfg_(std::move(cfg)) {}
  ~Bench() { Cleanup(); }

  Status Run();

 private:
  Status Setup();
  void Cleanup();
  Status Reference();
  Status EnsureData(SideState* s);
  Status RunRound(size_t wi, const Workload& w, SideState* s, int round, double* ops_per_s);
  Status RunAppend(const Workload& w, SideState* s, double* ops_per_s);
  Status RunMixed(size_t wi, SideState* s, int round, double* ops_per_s);
  Status RunColdRead(SideState* s, double* ops_per_s);  // bench_cold.cc
  Status RunMetadata(const Workload& w, SideState* s, double* ops_per_s);
  // bench_pool.cc
  Status SetupPool();
  void CleanupPool();
  Status PrepareNamespace(const Workload& w, SideState* s);
  Status FinishNamespace(SideState* s);
  Status RunNamespace(size_t wi, const Workload& w, SideState* s, int round, double* ops_per_s);
  Status RunBatched(const Workload& w, SideState* s, double* ops_per_s);
  Status RunCreate2t(SideState* s, double* ops_per_s);
  Status SetupSecondPool();
  Status Prepare(const Workload& w);
  Status CountAmplification(size_t wi, const Workload& w, Result* r);
  // After a upfs round, untimed: a GC the round started must not run during
  // the kernel's round that follows (nor be counted in the next one).
  Status SettleUpfs();
  Status Finish(const Workload& w);
  void PrintTable(const std::vector<Result>& results) const;
  Status WriteJson(const std::vector<Result>& results) const;

  Config cfg_;
  std::string bench_dir_;
  MediumKind medium_ = MediumKind::kTmpfs;
  std::string pool_file_, mount_dir_;  // --pool: the pool and where it is mounted
  // pool-create-2t: a second pool, where one of the two threads creates
  // while the other creates in the first (made at the workload's first
  // round, unmounted with the first).
  std::string second_pool_file_, second_mount_dir_;
  // --pool: a file of the pool kept open, through which SettleUpfs waits for
  // the pool's own background work (growth, huge-page collapses).
  int pool_settle_fd_ = -1;
  SideState sides_[2];  // 0 = upfs, 1 = kernel
  Buffer wbuf_, rbuf_[2], prefill_;
  StatusLine status_;
  static constexpr size_t kPrefillChunk = 4u << 20;
};

// Runs `op(i)` for i = 0, 1, ... until `seconds` have passed. `op` returns
// false on an I/O error. Reads the clock every 16 operations.
template <class Op>
Status TimedLoop(double seconds, Op&& op, uint64_t* ops, double* elapsed) {
  uint64_t n = 0;
  double start = NowSeconds();
  double end = start + seconds;
  double now;
  for (;;) {
    for (int k = 0; k < 16; k++, n++) {
      if (!op(n)) return Status::FromErrno("I/O");  // errno: the failed call's
    }
    now = NowSeconds();
    if (now >= end) break;
    if (g_interrupted) return Interrupted();
  }
  *ops = n;
  *elapsed = now - start;
  return Status::OK();
}

// The workloads (pool ones with `pool`) whose names contain one of
// `filters` (all if none).
std::vector<std::pair<size_t, const Workload*>> Chosen(const std::vector<std::string>& filters,
                                                       bool pool);

}  // namespace upfs::cli::bench

namespace upfs::cli {
// `upfs bench --cold-reader ...`: one read-seq-4k-cold round in a new
// process (bench_cold.cc).
int RunColdReader(const std::vector<std::string>& args);
}  // namespace upfs::cli
