// upfs_shared_dir_table_bench: the next namespace's shared directory table
// (src/container/pool/shared_dir_table.h) alone: a name made (claimed, published)
// and an older one removed per iteration, by one thread and by two, in one
// shared table or in a table each. No dentry is written and nothing is
// persisted: this is the table's own share of a create, and whether two
// threads in one directory scale (docs/design.md, "The next namespace").
//
//   build/bin/upfs_shared_dir_table_bench [--benchmark_filter=shared]
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "container/pool/shared_dir_table.h"

namespace {

using upfs::SharedDirTable;
using upfs::Status;

// Bump-allocated memory, never reused (a retired table stays readable).
class Arena final : public upfs::TableMemory {
 public:
  // Populated up front: a table's growth faulting fresh pages in made the
  // kernel shoot the other thread's TLB down (a third of the samples).
  Arena() {
    base_ = static_cast<char*>(
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    if (base_ == MAP_FAILED) {
      std::perror("upfs_shared_dir_table_bench: mmap");
      std::exit(1);
    }
  }
  Status Allocate(uint64_t bytes, uint64_t* handle) override {
    *handle = next_.fetch_add((bytes + 63) / 64 * 64);
    if (*handle + bytes > kBytes) return Status::Error(ENOMEM, "bench arena full");
    return Status::OK();
  }
  char* At(uint64_t handle) const override { return base_ + handle; }
  void Retire(uint64_t) override {}
  uint32_t Self() const override { return self_; }
  bool Alive(uint32_t) override { return true; }
  static thread_local uint32_t self_;

 private:
  static constexpr uint64_t kBytes = uint64_t{2} << 30;  // what the runs' growths take, with room
  char* base_;
  std::atomic<uint64_t> next_{64};
};
thread_local uint32_t Arena::self_ = 0;

// Ref r names "n<r>"; its hash is a mix of r (the names are never compared
// but by ref here: every ref is a different name).
class Names final : public upfs::DentryView {
 public:
  uint64_t HashOf(uint64_t ref) override { return Mix(ref); }
  uint32_t OwnerOf(uint64_t ref) override { return uint32_t(ref >> 32); }
  static uint64_t Mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

Arena g_arena;
Names g_names;
std::atomic<uint64_t> g_anchors[3];  // [0] shared, [1..2] one per thread

// Each iteration makes a name and removes the one made kLive iterations
// before, so that a thread keeps kLive names in the table.
void BM_CreateRemove(benchmark::State& state) {
  constexpr uint64_t kLive = 4096;
  const bool shared = state.range(0) == 1;
  const uint32_t thread = uint32_t(state.thread_index());
  Arena::self_ = thread + 1;
  SharedDirTable table(&g_arena, &g_names, &g_anchors[shared ? 0 : 1 + thread]);
  // Refs: owner in the high word, a counter below (never 0 or 1).
  const uint64_t base = (uint64_t(thread + 1) << 32) + 2;
  uint64_t i = 0;
  for (auto _ : state) {
    const uint64_t ref = base + (i % (1u << 30));
    const uint64_t h = Names::Mix(ref);
    bool claimed;
    uint64_t existing;
    if (!table.Claim(h, ref, [&](uint64_t r) { return r == ref; }, &claimed, &existing).ok() || !claimed) {
      state.SkipWithError("claim failed");
      break;
    }
    table.Publish(h, ref);
    if (i >= kLive) {
      const uint64_t old = base + ((i - kLive) % (1u << 30));
      if (!table.Remove(Names::Mix(old), old)) {
        state.SkipWithError("remove failed");
        break;
      }
    }
    ++i;
  }
  // The names left go, so that the next run starts from an empty table.
  for (uint64_t k = i > kLive ? i - kLive : 0; k < i; ++k) {
    const uint64_t old = base + (k % (1u << 30));
    table.Remove(Names::Mix(old), old);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}

BENCHMARK(BM_CreateRemove)->ArgName("shared")->Arg(1)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_CreateRemove)->ArgName("shared")->Arg(0)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
