// upfs bench --pool: pool-create-2t, two threads creating files in one
// directory, against one thread alone and (upfs) against two threads that
// share nothing of the namespace.
//
// Both threads create a batch at once (each its own names), timed from the
// first thread's start of the batch until the last one is done, by the
// threads' own clocks: the coordinating thread, a third on two cores, could
// be scheduled late and read its clock after much of the batch was made,
// which made rounds of one build measure from 0.53 to 1.48 million creates
// a second. Each batch is removed off the clock, so that the directory
// stays as small as pool-create's and the rates compare. A thread that
// fails stops creating and keeps meeting the others at each phase, so that
// the round ends.
//
// After each such batch the first thread alone creates a batch of the same
// size (4096 files) and removes it, timed apart (SideState::one_thread_ops):
// the two threads' rate against one thread's, measured moments apart in the
// same round. On a two-vCPU virtual machine whose speed drifts by a third
// within seconds, pool-create's own rounds, run a workload earlier, made
// that ratio swing from 0.73 to 1.52 for one build (four runs).
//
// On the upfs side the two threads then create a batch once more, the
// second in a pool of its own (SideState::two_pools_ops): what two threads
// of this process reach on this machine when they share no namespace
// structure (no log, index, lock or directory), the ceiling of what the
// shared pool could give them. It tells the machine's limit from the
// pool's: on an Intel VM (2026-12-07) threads started afresh for each
// batch measured that ceiling at 1.31-1.43x one thread, threads kept as
// here 1.72-2.05x (docs/design.md, "What pools do not do yet").
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_internal.h"
#include "cli/bench_ns.h"

namespace upfs::cli::bench {

namespace {

constexpr int kThreads = 2;
constexpr uint64_t kBatch = 2048;  // per thread: 4096 a batch, as pool-create's

// A batch one thread made: how many files, between which clock readings.
struct Batch {
  uint64_t made = 0;
  double began = 0, ended = 0;
};

// One thread's batches in a round (with the other thread in one directory,
// and, upfs only, each in a pool of its own), and the first failure it met.
struct ThreadBatches {
  Batch shared, apart;
  int err = 0;
  std::string failed;

  // Creates names(0) to names(n - 1), stopping at the first failure, into
  // *b.
  void Create(const Ns& ns, Names& names, uint64_t n, Batch* b) {
    uint64_t i = 0;
    b->began = NowSeconds();
    for (; i < n && !err; i++) {
      if (!ns.Create(names(i))) {
        err = errno;
        failed = std::string("pool-create-2t ") + names(i);
        break;
      }
    }
    b->ended = NowSeconds();
    b->made = i;
  }
  void Remove(const Ns& ns, Names& names, uint64_t n) {
    for (uint64_t i = 0; i < n && !err; i++) {
      if (ns.Unlink(names(i)) != 0) {
        err = errno;
        failed = std::string("remove ") + names(i);
      }
    }
  }
};

// The time from the first thread's start of a batch to the last one's end.
double Span(const Batch& a, const Batch& b) { return std::max(a.ended, b.ended) - std::min(a.began, b.began); }

}  // namespace

Status Bench::RunCreate2t(SideState* s, double* ops_per_s) {
  const bool two_pools = s->upfs;
  if (two_pools) UPFS_RETURN_IF_ERROR(SetupSecondPool());
  const Ns ns{s->upfs};
  std::barrier phase(kThreads + 1);
  std::atomic<bool> stop{false};
  ThreadBatches tb[kThreads];
  Batch alone;  // the first thread's, alone
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      const char* prefix = t == 0 ? "p" : "q";
      Names names(s->ns_dir, prefix);
      Names apart(t == 1 && two_pools ? second_mount_dir_ + "/ns" : s->ns_dir, prefix);
      ThreadBatches& mine = tb[t];
      for (;;) {
        phase.arrive_and_wait();  // a batch starts, or the round ends
        if (stop.load()) return;
        mine.Create(ns, names, kBatch, &mine.shared);
        phase.arrive_and_wait();  // the batch is made
        mine.Remove(ns, names, mine.shared.made);
        phase.arrive_and_wait();
        // One thread's batch of the same size.
        if (t == 0 && !tb[0].err && !tb[1].err) {
          mine.Create(ns, names, kThreads * kBatch, &alone);
          mine.Remove(ns, names, alone.made);
        }
        phase.arrive_and_wait();
        if (!two_pools) continue;
        mine.Create(ns, apart, kBatch, &mine.apart);
        phase.arrive_and_wait();  // the batch in two pools is made
        mine.Remove(ns, apart, mine.apart.made);
        phase.arrive_and_wait();
      }
    });
  }
  double timed = 0, timed_alone = 0, timed_apart = 0;
  uint64_t ops = 0, ops_alone = 0, ops_apart = 0;
  while (timed + timed_alone < cfg_.seconds && !g_interrupted && !tb[0].err && !tb[1].err) {
    phase.arrive_and_wait();
    phase.arrive_and_wait();
    timed += Span(tb[0].shared, tb[1].shared);
    ops += tb[0].shared.made + tb[1].shared.made;
    phase.arrive_and_wait();
    phase.arrive_and_wait();
    timed_alone += alone.ended - alone.began;
    ops_alone += alone.made;
    if (!two_pools) continue;
    phase.arrive_and_wait();
    timed_apart += Span(tb[0].apart, tb[1].apart);
    ops_apart += tb[0].apart.made + tb[1].apart.made;
    phase.arrive_and_wait();
  }
  stop.store(true);
  phase.arrive_and_wait();
  for (std::thread& th : threads) th.join();
  if (g_interrupted) return Interrupted();
  for (const ThreadBatches& t : tb) {
    if (t.err) return SideError(s->upfs, t.failed + " in " + s->ns_dir, t.err);
  }
  *ops_per_s = double(ops) / timed;
  s->one_thread_ops = double(ops_alone) / timed_alone;
  s->two_pools_ops = two_pools ? double(ops_apart) / timed_apart : 0;
  return Status::OK();
}

}  // namespace upfs::cli::bench
