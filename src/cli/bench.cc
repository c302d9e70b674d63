// upfs bench: upfs (through the C API) against the kernel file system on the
// same medium, workload by workload, with the rounds of the two sides
// interleaved so that drift (frequency scaling, other load) hits both alike.
//
// Durability equivalence: a upfs write on DAX or tmpfs is durable when it
// returns, so the kernel side follows every write with fsync(2). On a
// page-cache medium upfs needs fsync too, and then both sides get one.
#include <fcntl.h>
#include <libpmem.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli.h"
#include "medium/medium.h"
#include "upfs/upfs.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

namespace upfs::cli {

const char kBenchHelp[] =
    "usage: upfs bench [--dir D] [--json FILE] [--quick] [--seconds S] [--rounds R]\n"
    "                  [--filter NAME[,NAME...]] [--size BYTES] [--mode strict|sync]\n"
    "                  [--verbose]\n"
    "\n"
    "Runs each workload on upfs (C API) and on the kernel (a plain file in the\n"
    "same directory, open(2)/pread(2)/pwrite(2)). After one unrecorded warm-up\n"
    "round per side, the rounds alternate: upfs, kernel, upfs, kernel, ...\n"
    "Every kernel write is followed by fsync(2), the kernel's way to make it\n"
    "as durable as a upfs write is when it returns (on a page-cache medium,\n"
    "where upfs writes need fsync too, both sides fsync).\n"
    "Prints the median ops/s of each side over the rounds and upfs/kernel.\n"
    "\n"
    "First it prints the physical reference: the median time of a 4 KiB\n"
    "non-temporal copy + drain (libpmem) and of a 4 KiB memcpy into a random\n"
    "spot of a mapped file on the same medium.\n"
    "\n"
    "workloads (4 KiB = one block):\n"
    "  read-seq-4k        sequential 4 KiB preads\n"
    "  read-rand-4k       random block-aligned 4 KiB preads\n"
    "  overwrite-seq-4k   sequential 4 KiB pwrites over existing data\n"
    "  overwrite-rand-4k  random block-aligned 4 KiB pwrites over existing data\n"
    "  append-4k          4 KiB writes at the end of a new, empty file\n"
    "  append-100         100-byte writes at the end of a new, empty file (a\n"
    "                     write-ahead log's records)\n"
    "  overwrite-128      128-byte pwrites inside random blocks\n"
    "  overwrite-1k       1 KiB pwrites inside random blocks\n"
    "  overwrite-2k       2 KiB pwrites inside random blocks\n"
    "  mixed-2t-4k        2 threads on one file, random 4 KiB, half reads\n"
    "  create-512         create a file, write 512 bytes, close it, remove it (a\n"
    "                     rollback journal's life)\n"
    "  open-close         open and close a 4 KiB file not otherwise open\n"
    "\n"
    "options:\n"
    "  --dir D            where the files go (default /dev/shm); a private\n"
    "                     directory is made in D and removed at the end\n"
    "  --json FILE        also write the results as a JSON array of\n"
    "                     {\"name\",\"upfs_ops\",\"kernel_ops\",\"ratio\"}\n"
    "  --quick            short run: 5 rounds of 0.1 s, 256 MiB files\n"
    "  --seconds S        length of one round of one side (default 0.25)\n"
    "  --rounds R         rounds per side (default 7; 5 with --quick)\n"
    "  --filter LIST      run only workloads whose name contains one of the\n"
    "                     comma-separated words (e.g. --filter rand,append)\n"
    "  --size BYTES       size of the prefilled files (default 1G; 256M with\n"
    "                     --quick); suffixes K, M, G\n"
    "  --mode strict|sync consistency mode of the upfs files (default strict)\n"
    "  --verbose          also print every round's ops/s on stderr\n"
    "\n"
    "Random offsets come from a fixed-seed generator; round r of both sides\n"
    "uses the same sequence. See bench/README.md for how to read the ratios.\n"
    "\n"
    "examples:\n"
    "  upfs bench --quick\n"
    "  upfs bench --filter overwrite --json results.json\n";

namespace {

// ---------------------------------------------------------------------------
// Stop on SIGINT/SIGTERM, cleaning up.
volatile std::sig_atomic_t g_interrupted = 0;
void OnSignal(int) { g_interrupted = 1; }

Status Interrupted() { return Status::Error(EINTR, "interrupted"); }

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

constexpr uint64_t kSeed = 0x75706673'62656e63ull;  // "upfsbenc"
constexpr uint64_t kBlock = 4096;

uint64_t SeedFor(size_t workload, int round, int thread) {
  return kSeed ^ (uint64_t(workload) << 40) ^ (uint64_t(round) << 20) ^ uint64_t(thread);
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, AlignedFree>;

Buffer RandomBuffer(size_t n, uint64_t seed) {
  char* p = static_cast<char*>(std::aligned_alloc(4096, n));
  if (!p) throw std::bad_alloc();
  Rng r(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = r.Next() | 0x0101010101010101ull;  // never all zero
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
  return Buffer(p);
}

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
    return !fsync_writes_ || Fsync();
  }

  bool Append(const char* buf, size_t n) {
    ssize_t r = upfs_ ? upfs_write(fd_, buf, n) : write(fd_, buf, n);
    if (r != ssize_t(n)) {
      if (r >= 0) errno = EIO;
      return false;
    }
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
    if (upfs_ && upfs_settle(fd_) != 0) return Error("settle");
    return Status::OK();
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

 private:
  bool upfs_ = false;
  bool fsync_writes_ = false;
  int fd_ = -1;
  std::string path_;
};

// ---------------------------------------------------------------------------
enum class Kind {
  kReadSeq,
  kReadRand,
  kWriteSeq,
  kWriteRand,
  kAppend,
  kWriteSub,
  kMixed,
  kCreate,     // create, write `io` bytes, (kernel: fsync,) close, remove
  kOpenClose,  // open and close a small existing file
};

struct Workload {
  const char* name;
  Kind kind;
  size_t io;
};

const std::vector<Workload>& AllWorkloads() {
  static const std::vector<Workload> w = {
      {"read-seq-4k", Kind::kReadSeq, 4096},       {"read-rand-4k", Kind::kReadRand, 4096},
      {"overwrite-seq-4k", Kind::kWriteSeq, 4096}, {"overwrite-rand-4k", Kind::kWriteRand, 4096},
      {"append-4k", Kind::kAppend, 4096},          {"append-100", Kind::kAppend, 100},
      {"overwrite-128", Kind::kWriteSub, 128},
      {"overwrite-1k", Kind::kWriteSub, 1024},     {"overwrite-2k", Kind::kWriteSub, 2048},
      {"mixed-2t-4k", Kind::kMixed, 4096},
      {"create-512", Kind::kCreate, 512},          {"open-close", Kind::kOpenClose, 4096},
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
};

struct Result {
  std::string name;
  std::vector<double> upfs_ops, kernel_ops;  // per round
};

// Everything one side needs: the shared prefilled file (created lazily) and
// the append file.
struct SideState {
  bool upfs = false;
  bool fsync_writes = false;
  std::string data_path, append_path, small_path;
  File data;
  File append;
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
  Status RunMixed(size_t wi, SideState* s, int round, double* ops_per_s);
  Status RunMetadata(const Workload& w, SideState* s, double* ops_per_s);
  void PrintTable(const std::vector<Result>& results) const;
  Status WriteJson(const std::vector<Result>& results) const;

  Config cfg_;
  std::string bench_dir_;
  MediumKind medium_ = MediumKind::kTmpfs;
  SideState sides_[2];  // 0 = upfs, 1 = kernel
  Buffer wbuf_, rbuf_[2], prefill_;
  StatusLine status_;
  static constexpr size_t kPrefillChunk = 4u << 20;
};

Status Bench::Setup() {
  struct stat st;
  if (stat(cfg_.dir.c_str(), &st) != 0) return Status::FromErrno("--dir " + cfg_.dir);
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "--dir " + cfg_.dir + " is not a directory");
  std::string tmpl = cfg_.dir + "/upfs-bench.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return Status::FromErrno("create a directory in " + cfg_.dir);
  bench_dir_ = buf.data();

  // Medium kind of the directory, from a probe file.
  std::string probe = bench_dir_ + "/probe";
  int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("create " + probe);
  if (posix_fallocate(fd, 0, 4096) != 0) {
    close(fd);
    return Status::Error(ENOSPC, "no space in " + cfg_.dir);
  }
  Status s = DetectMedium(fd, &medium_);
  close(fd);
  unlink(probe.c_str());
  UPFS_RETURN_IF_ERROR(s);

  for (int i = 0; i < 2; i++) {
    SideState& side = sides_[i];
    side.upfs = i == 0;
    // The kernel always fsyncs; upfs only where its writes are not durable
    // on return (page cache).
    side.fsync_writes = !side.upfs || medium_ == MediumKind::kPageCache;
    std::string tag = side.upfs ? "upfs" : "kernel";
    side.data_path = bench_dir_ + "/data." + tag;
    side.append_path = bench_dir_ + "/append." + tag;
    side.small_path = bench_dir_ + "/small." + tag;
  }
  wbuf_ = RandomBuffer(4096, kSeed + 1);
  rbuf_[0] = RandomBuffer(4096, kSeed + 2);
  rbuf_[1] = RandomBuffer(4096, kSeed + 3);
  prefill_ = RandomBuffer(kPrefillChunk, kSeed + 4);
  return Status::OK();
}

void Bench::Cleanup() {
  status_.Clear();
  for (SideState& s : sides_) {
    s.data.Close();
    s.append.Close();
    // The upfs files' shared state lives outside the directory.
    if (s.upfs && !bench_dir_.empty()) {
      upfs_unlink(s.data_path.c_str());
      upfs_unlink(s.append_path.c_str());
      upfs_unlink(s.small_path.c_str());  // left by a metadata round that failed
    }
  }
  if (!bench_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(bench_dir_, ec);
    bench_dir_.clear();
  }
}

// The physical reference: 4 KiB non-temporal copy + drain, and 4 KiB
// memcpy, into random spots of a mapped file on the same medium.
Status Bench::Reference() {
  status_.Show("reference: mapping " + HumanBytes(cfg_.file_size));
  std::string path = bench_dir_ + "/reference";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("create " + path);
  uint64_t size = cfg_.file_size;
  int rc = posix_fallocate(fd, 0, off_t(size));
  if (rc != 0) {
    close(fd);
    unlink(path.c_str());
    return Status::Error(rc, "allocate " + HumanBytes(size) + " for " + path);
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
  if (map == MAP_FAILED) map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    Status s = Status::FromErrno("mmap " + path);
    close(fd);
    unlink(path.c_str());
    return s;
  }
  char* base = static_cast<char*>(map);
  for (uint64_t off = 0; off < size; off += kBlock) base[off] = 1;  // fault every page in

  const uint64_t nblocks = size / kBlock;
  const char* src = wbuf_.get();
  constexpr int kBatch = 256;
  std::vector<double> nt_ns, mc_ns;
  Status result;
  for (int round = 0; round < cfg_.rounds && result.ok(); round++) {
    for (int which = 0; which < 2; which++) {
      if (g_interrupted) {
        result = Interrupted();
        break;
      }
      Rng rng(SeedFor(99, round, 0));
      double end = NowSeconds() + std::min(cfg_.seconds, 0.1);
      std::vector<double>& out = which == 0 ? nt_ns : mc_ns;
      do {
        double t0 = NowSeconds();
        for (int i = 0; i < kBatch; i++) {
          char* dst = base + rng.Below(nblocks) * kBlock;
          if (which == 0) {
            pmem_memcpy(dst, src, kBlock, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
            pmem_drain();
          } else {
            std::memcpy(dst, src, kBlock);
            asm volatile("" ::: "memory");
          }
        }
        out.push_back((NowSeconds() - t0) * 1e9 / kBatch);
      } while (NowSeconds() < end);
    }
  }
  munmap(map, size);
  close(fd);
  unlink(path.c_str());
  UPFS_RETURN_IF_ERROR(result);
  status_.Clear();

  double nt = Median(nt_ns), mc = Median(mc_ns);
  std::printf("physical reference: 4 KiB into a random spot of a %s mapping on %s (median)\n",
              HumanBytes(size).c_str(), MediumKindName(medium_));
  std::printf("  %-32s %8.0f ns   %7.2f GB/s   %s ops/s ceiling\n",
              "non-temporal copy + drain:", nt, 4096.0 / nt, WithCommas(uint64_t(1e9 / nt)).c_str());
  std::printf("  %-32s %8.0f ns   %7.2f GB/s   %s ops/s ceiling\n", "memcpy:", mc, 4096.0 / mc,
              WithCommas(uint64_t(1e9 / mc)).c_str());
  std::printf("\n");
  return Status::OK();
}

Status Bench::EnsureData(SideState* s) {
  if (s->data.is_open()) return Status::OK();
  status_.Show(std::string("prefilling ") + HumanBytes(cfg_.file_size) + " (" +
               (s->upfs ? "upfs" : "kernel") + ")");
  UPFS_RETURN_IF_ERROR(s->data.Open(s->upfs, s->data_path, true, cfg_.mode, s->fsync_writes));
  return s->data.Prefill(cfg_.file_size, prefill_.get(), kPrefillChunk);
}

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

Status Bench::RunRound(size_t wi, const Workload& w, SideState* s, int round, double* ops_per_s) {
  if (w.kind == Kind::kMixed) return RunMixed(wi, s, round, ops_per_s);
  if (w.kind == Kind::kCreate || w.kind == Kind::kOpenClose) return RunMetadata(w, s, ops_per_s);
  const uint64_t size = cfg_.file_size;
  const uint64_t nblocks = size / kBlock;
  const size_t io = w.io;
  char* rbuf = rbuf_[0].get();
  const char* wbuf = wbuf_.get();
  Rng rng(SeedFor(wi, round, 0));
  uint64_t ops = 0;
  double elapsed = 0;
  Status st;

  if (w.kind == Kind::kAppend) {
    // A new, empty file each round; at the bound, again a new file, made
    // outside the timed part. (Recreating rather than truncating makes both
    // sides pay for space allocation: a truncated upfs file would keep its
    // host file's blocks and reuse them.)
    if (!s->append.is_open()) {
      UPFS_RETURN_IF_ERROR(
          s->append.Open(s->upfs, s->append_path, true, cfg_.mode, s->fsync_writes));
    } else {
      UPFS_RETURN_IF_ERROR(s->append.Recreate(cfg_.mode));
    }
    const uint64_t bound = std::max<uint64_t>(size / 4, 16 * kBlock) / io;
    File& f = s->append;
    uint64_t in_file = 0;
    double start = NowSeconds();
    double end = start + cfg_.seconds;
    double paused = 0;
    double now = start;
    for (;;) {
      for (int k = 0; k < 16 && in_file < bound; k++, in_file++, ops++) {
        if (!f.Append(wbuf, io)) return f.Error(w.name);
      }
      now = NowSeconds();
      if (now - paused >= end) break;
      if (g_interrupted) return Interrupted();
      if (in_file == bound) {
        UPFS_RETURN_IF_ERROR(f.Recreate(cfg_.mode));
        in_file = 0;
        paused += NowSeconds() - now;
      }
    }
    elapsed = now - paused - start;
    *ops_per_s = double(ops) / elapsed;
    return Status::OK();
  }

  UPFS_RETURN_IF_ERROR(EnsureData(s));
  File& f = s->data;
  switch (w.kind) {
    case Kind::kReadSeq:
      st = TimedLoop(
          cfg_.seconds, [&](uint64_t i) { return f.Pread(rbuf, io, (i % nblocks) * kBlock); },
          &ops, &elapsed);
      break;
    case Kind::kReadRand:
      st = TimedLoop(
          cfg_.seconds, [&](uint64_t) { return f.Pread(rbuf, io, rng.Below(nblocks) * kBlock); },
          &ops, &elapsed);
      break;
    case Kind::kWriteSeq:
      st = TimedLoop(
          cfg_.seconds, [&](uint64_t i) { return f.Pwrite(wbuf, io, (i % nblocks) * kBlock); },
          &ops, &elapsed);
      break;
    case Kind::kWriteRand:
      st = TimedLoop(
          cfg_.seconds, [&](uint64_t) { return f.Pwrite(wbuf, io, rng.Below(nblocks) * kBlock); },
          &ops, &elapsed);
      break;
    case Kind::kWriteSub: {
      const uint64_t per_block = kBlock / io;
      st = TimedLoop(
          cfg_.seconds,
          [&](uint64_t) {
            uint64_t r = rng.Next();
            uint64_t block = ((r >> 32) * nblocks) >> 32;
            uint64_t slot = (r & 0xffff) % per_block;
            return f.Pwrite(wbuf, io, block * kBlock + slot * io);
          },
          &ops, &elapsed);
      break;
    }
    default:
      return Status::Error(EINVAL, "unknown workload");
  }
  if (!st.ok()) {
    if (st.err() == EINTR && g_interrupted) return st;
    errno = st.err();
    return f.Error(w.name);
  }
  *ops_per_s = double(ops) / elapsed;
  return Status::OK();
}

// Whole-file operations on small files: what a program that keeps its
// files open never pays, and a rollback journal pays per transaction.
Status Bench::RunMetadata(const Workload& w, SideState* s, double* ops_per_s) {
  const std::string& path = s->small_path;
  auto remove = [&] { return s->upfs ? upfs_unlink(path.c_str()) : unlink(path.c_str()); };
  if (w.kind == Kind::kOpenClose) {
    File f;
    UPFS_RETURN_IF_ERROR(f.Open(s->upfs, path, true, cfg_.mode, s->fsync_writes));
    if (!f.Append(wbuf_.get(), w.io)) return f.Error(w.name);
  }
  File f;
  Status opened;
  uint64_t ops = 0;
  double elapsed = 0;
  Status st = TimedLoop(
      cfg_.seconds,
      [&](uint64_t) {
        opened = f.Open(s->upfs, path, w.kind == Kind::kCreate, cfg_.mode, s->fsync_writes);
        if (!opened.ok()) {
          errno = opened.err();
          return false;
        }
        if (w.kind == Kind::kCreate && !f.Append(wbuf_.get(), w.io)) return false;
        f.Close();
        return w.kind != Kind::kCreate || remove() == 0;
      },
      &ops, &elapsed);
  f.Close();
  if (w.kind == Kind::kOpenClose) remove();
  if (!st.ok()) {
    if (st.err() == EINTR && g_interrupted) return st;
    if (!opened.ok()) return opened;
    errno = st.err();
    return f.Error(w.name);
  }
  *ops_per_s = double(ops) / elapsed;
  return Status::OK();
}

// Two threads, each with its own descriptor on the shared prefilled file,
// random 4 KiB operations, half of them reads.
Status Bench::RunMixed(size_t wi, SideState* s, int round, double* ops_per_s) {
  UPFS_RETURN_IF_ERROR(EnsureData(s));
  constexpr int kThreads = 2;
  File files[kThreads];
  for (File& f : files) {
    UPFS_RETURN_IF_ERROR(f.Open(s->upfs, s->data_path, false, cfg_.mode, s->fsync_writes));
  }
  const uint64_t nblocks = cfg_.file_size / kBlock;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  uint64_t counts[kThreads] = {};
  double elapsed[kThreads] = {};
  Status errors[kThreads];
  std::vector<std::thread> threads;
  // Each worker watches the clock itself (every 16 operations) so that no
  // third thread competes for the cores while the round runs.
  const double seconds = cfg_.seconds;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Rng rng(SeedFor(wi, round, t + 1));
      char* rbuf = rbuf_[t].get();
      const char* wbuf = wbuf_.get();
      File& f = files[t];
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      errors[t] = TimedLoop(
          seconds,
          [&](uint64_t) {
            uint64_t r = rng.Next();
            uint64_t off = (((r >> 32) * nblocks) >> 32) * kBlock;
            return (r & 1) ? f.Pread(rbuf, kBlock, off) : f.Pwrite(wbuf, kBlock, off);
          },
          &counts[t], &elapsed[t]);
      if (!errors[t].ok() && !g_interrupted) {
        errno = errors[t].err();
        errors[t] = f.Error("mixed I/O");
      }
    });
  }
  while (ready.load() < kThreads) {
  }
  go.store(true, std::memory_order_release);
  for (std::thread& th : threads) th.join();
  if (g_interrupted) return Interrupted();
  for (const Status& e : errors) UPFS_RETURN_IF_ERROR(e);
  *ops_per_s = double(counts[0] + counts[1]) / std::max(elapsed[0], elapsed[1]);
  return Status::OK();
}

double Spread(const std::vector<double>& v) {
  if (v.empty()) return 0;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  double m = Median(v);
  return m > 0 ? (*hi - *lo) / 2 / m * 100 : 0;
}

void Bench::PrintTable(const std::vector<Result>& results) const {
  std::printf("%-18s %14s %6s %14s %6s %12s\n", "workload", "upfs ops/s", "+-%", "kernel ops/s",
              "+-%", "upfs/kernel");
  for (const Result& r : results) {
    double u = Median(r.upfs_ops), k = Median(r.kernel_ops);
    std::printf("%-18s %14s %6.1f %14s %6.1f %11.2fx\n", r.name.c_str(),
                WithCommas(uint64_t(u)).c_str(), Spread(r.upfs_ops),
                WithCommas(uint64_t(k)).c_str(), Spread(r.kernel_ops), k > 0 ? u / k : 0.0);
  }
  std::printf("\nops/s: median over %d rounds of %.2f s per side; +-%%: half the range of the "
              "rounds, in %% of the median.\n",
              cfg_.rounds, cfg_.seconds);
  if (medium_ == MediumKind::kPageCache) {
    std::printf("medium is a page-cache file system: both sides fsync after every write.\n");
  } else {
    std::printf("kernel writes are each followed by fsync(2); upfs writes are durable on "
                "return (%s).\n",
                MediumKindName(medium_));
  }
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Status Bench::WriteJson(const std::vector<Result>& results) const {
  std::string text = "[\n";
  for (size_t i = 0; i < results.size(); i++) {
    const Result& r = results[i];
    double u = Median(r.upfs_ops), k = Median(r.kernel_ops);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "  {\"name\": %s, \"upfs_ops\": %.1f, \"kernel_ops\": %.1f, \"ratio\": %.4f}%s\n",
                  JsonString(r.name).c_str(), u, k, k > 0 ? u / k : 0.0,
                  i + 1 < results.size() ? "," : "");
    text += buf;
  }
  text += "]\n";
  FILE* f = std::fopen(cfg_.json->c_str(), "w");
  if (!f) return Status::FromErrno("open " + *cfg_.json);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Status::FromErrno("write " + *cfg_.json);
  return Status::OK();
}

std::vector<std::pair<size_t, const Workload*>> Chosen(const std::vector<std::string>& filters) {
  std::vector<std::pair<size_t, const Workload*>> chosen;
  const auto& all = AllWorkloads();
  for (size_t i = 0; i < all.size(); i++) {
    bool take = filters.empty();
    for (const std::string& f : filters) {
      if (std::string(all[i].name).find(f) != std::string::npos) take = true;
    }
    if (take) chosen.push_back({i, &all[i]});
  }
  return chosen;
}

Status Bench::Run() {
  std::vector<std::pair<size_t, const Workload*>> chosen = Chosen(cfg_.filters);

  UPFS_RETURN_IF_ERROR(Setup());
  std::printf("upfs bench: %s on %s, %s files, %s mode, %d rounds x %.2f s per side\n\n",
              cfg_.dir.c_str(), MediumKindName(medium_), HumanBytes(cfg_.file_size).c_str(),
              cfg_.mode == UPFS_STRICT ? "strict" : "sync", cfg_.rounds, cfg_.seconds);
  std::fflush(stdout);
  UPFS_RETURN_IF_ERROR(Reference());
  std::fflush(stdout);

  std::vector<Result> results;
  for (auto [wi, w] : chosen) {
    Result r;
    r.name = w->name;
    // Prefill outside the rounds.
    if (w->kind != Kind::kAppend) {
      for (SideState& s : sides_) UPFS_RETURN_IF_ERROR(EnsureData(&s));
    }
    // One unrecorded warm-up round per side (round index -1 is never used
    // for a recorded round, so its offsets differ from theirs).
    for (int side = 0; side < 2; side++) {
      status_.Show(std::string(w->name) + ": warm-up " + (side == 0 ? "upfs" : "kernel"));
      double ops = 0;
      UPFS_RETURN_IF_ERROR(RunRound(wi, *w, &sides_[side], -1, &ops));
    }
    for (int round = 0; round < cfg_.rounds; round++) {
      for (int side = 0; side < 2; side++) {
        status_.Show(std::string(w->name) + ": round " + std::to_string(round + 1) + "/" +
                     std::to_string(cfg_.rounds) + " " + (side == 0 ? "upfs" : "kernel"));
        double ops = 0;
        UPFS_RETURN_IF_ERROR(RunRound(wi, *w, &sides_[side], round, &ops));
        (side == 0 ? r.upfs_ops : r.kernel_ops).push_back(ops);
      }
    }
    if (w->kind == Kind::kAppend) {
      for (SideState& s : sides_) {
        s.append.Close();
        if (s.upfs) {
          upfs_unlink(s.append_path.c_str());
        } else {
          unlink(s.append_path.c_str());
        }
      }
    }
    if (cfg_.verbose) {
      status_.Clear();
      for (int side = 0; side < 2; side++) {
        std::fprintf(stderr, "%-18s %-6s", w->name, side == 0 ? "upfs" : "kernel");
        for (double v : side == 0 ? r.upfs_ops : r.kernel_ops) {
          std::fprintf(stderr, " %10.0f", v);
        }
        std::fprintf(stderr, "\n");
      }
    }
    results.push_back(std::move(r));
  }
  status_.Clear();
  PrintTable(results);
  if (cfg_.json) UPFS_RETURN_IF_ERROR(WriteJson(results));
  return Status::OK();
}

uint64_t ParseSize(const std::string& s) {
  if (s.empty()) throw UsageError("--size: empty");
  uint64_t mult = 1;
  std::string digits = s;
  switch (s.back()) {
    case 'k': case 'K': mult = 1ull << 10; break;
    case 'm': case 'M': mult = 1ull << 20; break;
    case 'g': case 'G': mult = 1ull << 30; break;
    default: break;
  }
  if (mult != 1) digits.pop_back();
  uint64_t v = ParseUint(digits, "--size");
  if (v > (1ull << 44) / mult) throw UsageError("--size: too large");
  return v * mult;
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {{"dir", true}, {"json", true}, {"quick"}, {"seconds", true},
                                  {"rounds", true}, {"filter", true}, {"size", true},
                                  {"mode", true}, {"verbose"}});
  if (!p.positional.empty()) throw UsageError("unexpected argument '" + p.positional[0] + "'");
  Config cfg;
  if (p.Has("quick")) {
    cfg.quick = true;
    cfg.seconds = 0.1;
    cfg.rounds = 5;
    cfg.file_size = 256ull << 20;
  }
  if (auto v = p.Value("dir")) cfg.dir = *v;
  if (cfg.dir.empty()) throw UsageError("--dir: empty");
  cfg.json = p.Value("json");
  if (auto v = p.Value("seconds")) {
    cfg.seconds = ParseDouble(*v, "--seconds");
    if (cfg.seconds <= 0 || cfg.seconds > 60) throw UsageError("--seconds must be in (0, 60]");
  }
  if (auto v = p.Value("rounds")) {
    uint64_t r = ParseUint(*v, "--rounds");
    if (r < 1 || r > 1000) throw UsageError("--rounds must be in [1, 1000]");
    cfg.rounds = int(r);
  }
  if (auto v = p.Value("filter")) {
    size_t start = 0;
    while (start <= v->size()) {
      size_t comma = v->find(',', start);
      if (comma == std::string::npos) comma = v->size();
      std::string word = v->substr(start, comma - start);
      if (!word.empty()) cfg.filters.push_back(word);
      start = comma + 1;
    }
    if (cfg.filters.empty()) throw UsageError("--filter: empty");
    if (Chosen(cfg.filters).empty()) {
      throw UsageError("--filter matches no workload (see 'upfs help bench')");
    }
  }
  if (auto v = p.Value("size")) {
    cfg.file_size = ParseSize(*v);
    if (cfg.file_size < (1u << 20) || cfg.file_size % 4096 != 0) {
      throw UsageError("--size must be a multiple of 4 KiB and at least 1M");
    }
  }
  cfg.verbose = p.Has("verbose");
  if (auto v = p.Value("mode")) {
    if (*v == "strict") {
      cfg.mode = UPFS_STRICT;
    } else if (*v == "sync") {
      cfg.mode = UPFS_SYNC;
    } else {
      throw UsageError("--mode must be strict or sync, not '" + *v + "'");
    }
  }

  struct sigaction sa = {}, old_int = {}, old_term = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  Status st;
  {
    Bench bench(cfg);
    st = bench.Run();
  }  // files removed here
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!st.ok()) {
    if (g_interrupted) {
      std::fprintf(stderr, "upfs bench: interrupted; files removed\n");
      return 130;
    }
    std::string msg = st.message();
    if (msg.find(std::strerror(st.err())) == std::string::npos) msg = st.ToString();
    return Fail("bench", msg);
  }
  return kExitOk;
}

}  // namespace upfs::cli
