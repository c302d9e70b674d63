// upfs bench: one round of one workload on one side.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_internal.h"
#include "upfs/upfs.h"

namespace upfs::cli::bench {

Status Bench::EnsureData(SideState* s) {
  if (s->data.is_open()) return Status::OK();
  status_.Show(std::string("prefilling ") + HumanBytes(cfg_.file_size) + " (" +
               (s->upfs ? "upfs" : "kernel") + ")");
  UPFS_RETURN_IF_ERROR(s->data.Open(s->upfs, s->data_path, true, cfg_.mode, s->fsync_writes));
  return s->data.Prefill(cfg_.file_size, prefill_.get(), kPrefillChunk);
}

// A new, empty file each round; at the bound, again a new file, made
// outside the timed part. (Recreating rather than truncating makes both
// sides pay for space allocation: a truncated upfs file would keep its
// host file's blocks and reuse them.)
Status Bench::RunAppend(const Workload& w, SideState* s, double* ops_per_s) {
  const uint64_t size = cfg_.file_size;
  const size_t io = w.io;
  const char* wbuf = wbuf_.get();
  uint64_t ops = 0;
  double elapsed = 0;
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

Status Bench::RunRound(size_t wi, const Workload& w, SideState* s, int round, double* ops_per_s) {
  if (w.kind == Kind::kMixed) return RunMixed(wi, s, round, ops_per_s);
  if (w.kind == Kind::kReadSeqCold) return RunColdRead(s, ops_per_s);
  if (IsNamespace(w.kind)) return RunNamespace(wi, w, s, round, ops_per_s);
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

  if (w.kind == Kind::kAppend) return RunAppend(w, s, ops_per_s);

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

}  // namespace upfs::cli::bench
