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

#include "cli/bench_internal.h"
#include "cli/cli.h"
#include "medium/medium.h"
#include "medium/mman_compat.h"
#include "medium/persist_counter.h"
#include "upfs/upfs.h"

namespace upfs::cli {

const char kBenchHelp[] =
    "usage: upfs bench [--dir D] [--json FILE] [--quick] [--seconds S] [--rounds R]\n"
    "                  [--filter NAME[,NAME...]] [--size BYTES] [--mode strict|sync]\n"
    "                  [--verbose] [--pool]\n"
    "\n"
    "Runs each workload on upfs (C API) and on the kernel (a plain file in the\n"
    "same directory, open(2)/pread(2)/pwrite(2)). After one unrecorded warm-up\n"
    "round per side, the rounds alternate: upfs, kernel, upfs, kernel, ...\n"
    "Every kernel write is followed by fsync(2), the kernel's way to make it\n"
    "as durable as a upfs write is when it returns (on a page-cache medium,\n"
    "where upfs writes need fsync too, both sides fsync).\n"
    "Prints the median ops/s of each side over the rounds and upfs/kernel,\n"
    "and for workloads that write, \"pm B/B\": the bytes upfs wrote back to\n"
    "the medium per byte written (one more, untimed, upfs round with the\n"
    "persistence primitives counted; JSON field pm_bytes_per_byte).\n"
    "\n"
    "First it prints the physical reference: the median time of a 4 KiB\n"
    "non-temporal copy + drain (libpmem) and of a 4 KiB memcpy into a random\n"
    "spot of a mapped file on the same medium, and of one persisted line (an\n"
    "8-byte store, its line flushed, drained), which every durable write\n"
    "waits for at least once.\n"
    "\n"
    "workloads (4 KiB = one block):\n"
    "  read-seq-4k        sequential 4 KiB preads\n"
    "  read-seq-4k-cold   the same from the file's start, each round in a new\n"
    "                     process that opens the file (a program reading a file\n"
    "                     it did not write: the open and every first mapping\n"
    "                     of a page count)\n"
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
    "pool workloads (--pool; upfs: a pool in D, mounted in the process;\n"
    "kernel: a directory in D; namespace operations are not followed by an\n"
    "fsync of the directory on either side):\n"
    "  pool-create            create a new file and close it\n"
    "  pool-stat              stat a random file of 1,000 in a directory\n"
    "  pool-stat-data         the same, files of 4 KiB (their size is in their log)\n"
    "  pool-open-close        open and close a random 4 KiB file of 1,000\n"
    "  pool-unlink            remove a file (made off the clock)\n"
    "  pool-rename            rename a file within its directory of 1,000\n"
    "  pool-mkdir-rmdir       make a directory and remove it\n"
    "  pool-readdir-10k       list a directory of 10,000 entries\n"
    "  pool-create-512        create, write 512 bytes, fsync, close, remove\n"
    "  pool-create-2t         2 threads creating files in one directory (batches),\n"
    "                         and one thread's batches between theirs: the\n"
    "                         two threads' rate against one thread's\n"
    "  pool-stat-100k         stat a random file of 100,000 in a directory\n"
    "  pool-read-seq-4k-cold, pool-read-rand-4k, pool-overwrite-rand-4k,\n"
    "  pool-append-4k         the file workloads, on a file in the pool (the\n"
    "                         cold reader mounts the pool off the clock)\n"
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
    "  --pool             run the pool workloads instead (--filter picks among\n"
    "                     them)\n"
    "  --cold-reader FILE --seconds S [--kernel] [--pool POOL --mount DIR]\n"
    "                     (internal, as the first option) one read-seq-4k-cold\n"
    "                     round in this process: open FILE (in POOL mounted at\n"
    "                     DIR, the mount off the clock), read it from its\n"
    "                     start, print \"<reads> <seconds>\"\n"
    "\n"
    "Random offsets come from a fixed-seed generator; round r of both sides\n"
    "uses the same sequence. See bench/README.md for how to read the ratios.\n"
    "\n"
    "examples:\n"
    "  upfs bench --quick\n"
    "  upfs bench --filter overwrite --json results.json\n"
    "  upfs bench --pool --quick\n";

namespace bench {

volatile std::sig_atomic_t g_interrupted = 0;
std::atomic<bool> g_counting_writes{false};
std::atomic<uint64_t> g_bytes_written{0};

namespace {
void OnSignal(int) { g_interrupted = 1; }
}  // namespace

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
  if (cfg_.pool) UPFS_RETURN_IF_ERROR(SetupPool());
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
  CleanupPool();  // after every pool descriptor is closed
  if (!bench_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(bench_dir_, ec);
    bench_dir_.clear();
  }
}

// The physical reference: 4 KiB non-temporal copy + drain, 4 KiB memcpy,
// and one persisted line (store, flush, drain), into random spots of a
// mapped file on the same medium. The line is the floor of any durable
// write, upfs's or not: a small write that waits for the medium once
// cannot beat the kernel by more than the kernel's time over it.
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
  std::vector<double> nt_ns, mc_ns, line_ns;
  Status result;
  for (int round = 0; round < cfg_.rounds && result.ok(); round++) {
    for (int which = 0; which < 3; which++) {
      if (g_interrupted) {
        result = Interrupted();
        break;
      }
      Rng rng(SeedFor(99, round, 0));
      double end = NowSeconds() + std::min(cfg_.seconds, 0.1);
      std::vector<double>& out = which == 0 ? nt_ns : which == 1 ? mc_ns : line_ns;
      do {
        double t0 = NowSeconds();
        for (int i = 0; i < kBatch; i++) {
          char* dst = base + rng.Below(nblocks) * kBlock;
          if (which == 0) {
            pmem_memcpy(dst, src, kBlock, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
            pmem_drain();
          } else if (which == 2) {
            // A random line of the block: a commit's line is rarely in the cache.
            char* line = dst + rng.Below(kBlock / 64) * 64;
            *reinterpret_cast<volatile uint64_t*>(line) = uint64_t(i) + 1;
            pmem_flush(line, 8);
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

  double nt = Median(nt_ns), mc = Median(mc_ns), line = Median(line_ns);
  std::printf("physical reference: 4 KiB into a random spot of a %s mapping on %s (median)\n",
              HumanBytes(size).c_str(), MediumKindName(medium_));
  std::printf("  %-32s %8.0f ns   %7.2f GB/s   %s ops/s ceiling\n",
              "non-temporal copy + drain:", nt, 4096.0 / nt, WithCommas(uint64_t(1e9 / nt)).c_str());
  std::printf("  %-32s %8.0f ns   %7.2f GB/s   %s ops/s ceiling\n", "memcpy:", mc, 4096.0 / mc,
              WithCommas(uint64_t(1e9 / mc)).c_str());
  std::printf("  %-32s %8.0f ns                  %s ops/s ceiling of a durable write\n",
              "a persisted line:", line, WithCommas(uint64_t(1e9 / line)).c_str());
  std::printf("\n");
  return Status::OK();
}

// What a workload needs before its rounds: the prefilled file, or the
// namespace rounds' directory with its files.
Status Bench::Prepare(const Workload& w) {
  for (SideState& s : sides_) {
    if (IsNamespace(w.kind)) {
      UPFS_RETURN_IF_ERROR(PrepareNamespace(w, &s));
    } else if (w.kind != Kind::kAppend) {
      UPFS_RETURN_IF_ERROR(EnsureData(&s));
    }
  }
  return Status::OK();
}

// Removes what only this workload used, so that the next starts afresh.
Status Bench::Finish(const Workload& w) {
  for (SideState& s : sides_) {
    if (IsNamespace(w.kind)) UPFS_RETURN_IF_ERROR(FinishNamespace(&s));
    if (w.kind != Kind::kAppend) continue;
    s.append.Close();
    if (s.upfs) {
      upfs_unlink(s.append_path.c_str());
    } else {
      unlink(s.append_path.c_str());
    }
  }
  return Status::OK();
}

// One more round on the upfs side, untimed, with the persistence primitives
// counted: the bytes written back to media per byte the workload wrote.
// (Counting takes a lock per primitive, so it never runs in a timed round.)
Status Bench::CountAmplification(size_t wi, const Workload& w, Result* r) {
  if (!Writes(w.kind)) return Status::OK();
  status_.Show(std::string(w.name) + ": counting bytes written back (upfs)");
  const double seconds = cfg_.seconds;
  cfg_.seconds = std::min(seconds, 0.05);
  uint64_t media = 0;
  Status st;
  {
    // The timed rounds' GCs are over (Run settles after every upfs round);
    // the ones this round starts are its write amplification too, counted
    // until they end.
    PersistCounter counter;
    g_bytes_written.store(0);
    g_counting_writes.store(true);
    double ops = 0;
    st = RunRound(wi, w, &sides_[0], cfg_.rounds, &ops);
    g_counting_writes.store(false);
    if (st.ok()) st = SettleUpfs();
    media = counter.bytes();
  }
  cfg_.seconds = seconds;
  UPFS_RETURN_IF_ERROR(st);
  const uint64_t written = g_bytes_written.load();
  if (written > 0) r->pm_bytes_per_byte = double(media) / double(written);
  return Status::OK();
}

Status Bench::SettleUpfs() {
  UPFS_RETURN_IF_ERROR(sides_[0].data.Settle());
  UPFS_RETURN_IF_ERROR(sides_[0].append.Settle());
  // In a pool, what the namespace rounds grew (inode and log blocks) is
  // collapsed into huge pages in the background too: not during the
  // kernel's round, nor the next upfs round's.
  if (pool_settle_fd_ >= 0 && upfs_settle(pool_settle_fd_) != 0)
    return Status::Error(errno, "upfs: " + ApiError("settle " + mount_dir_ + "/settle"));
  return Status::OK();
}

std::vector<std::pair<size_t, const Workload*>> Chosen(const std::vector<std::string>& filters,
                                                       bool pool) {
  std::vector<std::pair<size_t, const Workload*>> chosen;
  const auto& all = pool ? PoolWorkloads() : AllWorkloads();
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
  std::vector<std::pair<size_t, const Workload*>> chosen = Chosen(cfg_.filters, cfg_.pool);

  UPFS_RETURN_IF_ERROR(Setup());
  std::printf("upfs bench: %s on %s, %s files, %s mode, %d rounds x %.2f s per side%s\n\n",
              cfg_.dir.c_str(), MediumKindName(medium_), HumanBytes(cfg_.file_size).c_str(),
              cfg_.mode == UPFS_STRICT ? "strict" : "sync", cfg_.rounds, cfg_.seconds,
              cfg_.pool ? ";\n            upfs: files in a pool there; kernel: files in a directory there" : "");
  std::fflush(stdout);
  UPFS_RETURN_IF_ERROR(Reference());
  std::fflush(stdout);

  std::vector<Result> results;
  for (auto [wi, w] : chosen) {
    Result r;
    r.name = w->name;
    r.kind = w->kind;
    UPFS_RETURN_IF_ERROR(Prepare(*w));  // outside the rounds
    // One unrecorded warm-up round per side (round index -1 is never used
    // for a recorded round, so its offsets differ from theirs).
    for (int side = 0; side < 2; side++) {
      status_.Show(std::string(w->name) + ": warm-up " + (side == 0 ? "upfs" : "kernel"));
      double ops = 0;
      UPFS_RETURN_IF_ERROR(RunRound(wi, *w, &sides_[side], -1, &ops));
      if (side == 0) UPFS_RETURN_IF_ERROR(SettleUpfs());
    }
    for (int round = 0; round < cfg_.rounds; round++) {
      for (int side = 0; side < 2; side++) {
        status_.Show(std::string(w->name) + ": round " + std::to_string(round + 1) + "/" +
                     std::to_string(cfg_.rounds) + " " + (side == 0 ? "upfs" : "kernel"));
        double ops = 0;
        UPFS_RETURN_IF_ERROR(RunRound(wi, *w, &sides_[side], round, &ops));
        if (side == 0) UPFS_RETURN_IF_ERROR(SettleUpfs());
        (side == 0 ? r.upfs_ops : r.kernel_ops).push_back(ops);
        if (w->kind == Kind::kNsCreate2t) {
          (side == 0 ? r.upfs_one_thread : r.kernel_one_thread).push_back(sides_[side].one_thread_ops);
          if (side == 0) r.upfs_two_pools.push_back(sides_[side].two_pools_ops);
        }
      }
    }
    UPFS_RETURN_IF_ERROR(CountAmplification(wi, *w, &r));
    UPFS_RETURN_IF_ERROR(Finish(*w));
    if (cfg_.verbose) {
      status_.Clear();
      for (int side = 0; side < 2; side++) {
        std::fprintf(stderr, "%-18s %-6s", w->name, side == 0 ? "upfs" : "kernel");
        for (double v : side == 0 ? r.upfs_ops : r.kernel_ops) {
          std::fprintf(stderr, " %10.0f", v);
        }
        std::fprintf(stderr, "\n");
        const std::vector<double>& one = side == 0 ? r.upfs_one_thread : r.kernel_one_thread;
        if (one.empty()) continue;
        std::fprintf(stderr, "%-18s %-6s", "  one thread", side == 0 ? "upfs" : "kernel");
        for (double v : one) std::fprintf(stderr, " %10.0f", v);
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

}  // namespace bench

using namespace bench;

int RunBench(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "--cold-reader") return RunColdReader(args);
  ParsedArgs p = ParseArgs(args, {{"dir", true}, {"json", true}, {"quick"}, {"seconds", true},
                                  {"rounds", true}, {"filter", true}, {"size", true},
                                  {"mode", true}, {"verbose"}, {"pool"}});
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
    if (Chosen(cfg.filters, p.Has("pool")).empty()) {
      throw UsageError("--filter matches no workload (see 'upfs help bench')");
    }
  }
  if (auto v = p.Value("size")) {
    cfg.file_size = ParseSize(*v, "--size");
    if (cfg.file_size < (1u << 20) || cfg.file_size % 4096 != 0) {
      throw UsageError("--size must be a multiple of 4 KiB and at least 1M");
    }
  }
  cfg.verbose = p.Has("verbose");
  cfg.pool = p.Has("pool");
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
