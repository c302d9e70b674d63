// upfs_microbench: 4 KiB pread/pwrite at random block-aligned offsets, on
// upfs (C API) and on the kernel (a plain file in the same directory, every
// write followed by fsync(2) to match upfs's durability on return).
//
//   build/bin/upfs_microbench [--benchmark_filter=pwrite] [--benchmark_min_time=0.5]
//
// The files go to $UPFS_BENCH_DIR (default /dev/shm), in a private directory
// that is removed at exit.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "upfs/upfs.h"

namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kFileSize = 64ull << 20;
constexpr uint64_t kBlocks = kFileSize / kBlock;

struct Target {
  bool upfs;
  int fd = -1;
};

Target g_upfs{true}, g_kernel{false};
std::string g_dir;

uint64_t NextRandom(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "upfs_microbench: %s: %s (%s)\n", what, std::strerror(errno),
               upfs_last_error());
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir);
  std::exit(1);
}

void Setup() {
  const char* base = std::getenv("UPFS_BENCH_DIR");
  std::string tmpl = std::string(base && *base ? base : "/dev/shm") + "/upfs-microbench.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) Die("mkdtemp");
  g_dir = buf.data();

  g_upfs.fd = upfs_open((g_dir + "/data.upfs").c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (g_upfs.fd < 0) Die("upfs_open");
  g_kernel.fd = open((g_dir + "/data.kernel").c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (g_kernel.fd < 0) Die("open");

  std::vector<char> chunk(1 << 20, 'x');
  for (uint64_t off = 0; off < kFileSize; off += chunk.size()) {
    if (upfs_pwrite(g_upfs.fd, chunk.data(), chunk.size(), off_t(off)) != ssize_t(chunk.size())) {
      Die("prefill upfs");
    }
    if (pwrite(g_kernel.fd, chunk.data(), chunk.size(), off_t(off)) != ssize_t(chunk.size())) {
      Die("prefill kernel");
    }
  }
  if (fsync(g_kernel.fd) != 0) Die("fsync");
}

void Teardown() {
  if (g_upfs.fd >= 0) upfs_close(g_upfs.fd);
  if (g_kernel.fd >= 0) close(g_kernel.fd);
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir);
}

void BM_Pread4k(benchmark::State& state, Target* t) {
  alignas(4096) static thread_local char buf[kBlock];
  uint64_t seed = 42;
  for (auto _ : state) {
    off_t off = off_t(NextRandom(&seed) % kBlocks * kBlock);
    ssize_t r = t->upfs ? upfs_pread(t->fd, buf, kBlock, off) : pread(t->fd, buf, kBlock, off);
    if (r != ssize_t(kBlock)) {
      state.SkipWithError("pread failed");
      break;
    }
    benchmark::DoNotOptimize(buf);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * int64_t(kBlock));
}

void BM_Pwrite4k(benchmark::State& state, Target* t) {
  alignas(4096) static thread_local char buf[kBlock];
  std::memset(buf, 'y', sizeof buf);
  uint64_t seed = 42;
  for (auto _ : state) {
    off_t off = off_t(NextRandom(&seed) % kBlocks * kBlock);
    bool ok = t->upfs ? upfs_pwrite(t->fd, buf, kBlock, off) == ssize_t(kBlock)
                      : pwrite(t->fd, buf, kBlock, off) == ssize_t(kBlock) && fsync(t->fd) == 0;
    if (!ok) {
      state.SkipWithError("pwrite failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * int64_t(kBlock));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  Setup();
  benchmark::RegisterBenchmark("pread_4k/upfs", BM_Pread4k, &g_upfs);
  benchmark::RegisterBenchmark("pread_4k/kernel", BM_Pread4k, &g_kernel);
  benchmark::RegisterBenchmark("pwrite_4k/upfs", BM_Pwrite4k, &g_upfs);
  benchmark::RegisterBenchmark("pwrite_4k/kernel+fsync", BM_Pwrite4k, &g_kernel);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Teardown();
  return 0;
}
