// upfs-crashtest-pool: crash-state explorer for pools.
//
// The per-file explorer (crash_explorer.cc) follows one upfs file; this one
// follows a whole pool: the namespace log, inode blocks, the superblock's
// words and every file's log and data, all in the pool file's one mapping
// (Pool::medium()). It runs workloads (crash_pool_workloads.cc) of
// namespace operations (create, mkdir, symlink, link, unlink, rmdir,
// rename within and across directories and over an existing file,
// RENAME_EXCHANGE, chmod), alone and mixed with data writes to pool
// files, with a pm::Recorder installed. At every fence (before it takes
// effect) and at the end of every operation it builds crash images from
// a cache-line persistence model (pm_sparse_model.h): the durable
// bytes plus a subset of the lines in
// flight, all subsets when there are few, else both extremes and a random
// sample; and images where one in-flight line persisted only in some of its
// 8-byte words (the media's failure atomicity; --no-torn leaves them out).
// Each image is written to a file and attached (the first attach after a
// crash recovers: rebuilds the volatile area, frees orphans), then:
//   - the tree (names, types, link counts, modes, file bytes, link
//     targets) must equal the state before or after the interrupted
//     operation (with a racing operation, any linearization of the two),
//     and at an operation's end the state after it: every operation that
//     returned is present;
//   - every directory's mtime and ctime, and every other inode's own
//     ctime (renames, links, attribute changes), are at least what the
//     last operation that returned had left them (times are not in the
//     tree: an interrupted operation may have moved them or not); a
//     file's data times (its writes' mtime and ctime), durable only at an
//     fsync, are at least what the last fsync of it that returned saw;
//   - the process that recovered must commit a record (create, unlink);
//   - fsck (CheckPool) must find nothing, once the pool has been detached;
//   - the recovered pool must take new records: a probe creates and
//     removes a name, then the tree is walked again. A crash that leaves
//     stray words after the end of the namespace log passes recovery (the
//     reader stops at the first empty slot) but breaks the next commit;
//     the probe is what finds that.
// The recorded run itself is compared with the reference model after each
// operation (pool_tree.h), so the workloads also check the semantics.
//
// Races are explored as in the per-file explorer: an operation can be held
// at its k-th fence, or its k-th 8-byte store, while a second thread runs
// another one to completion (whose own fences are explored too), and the
// state right after the racer returns is explored with the racer's effect
// required. Only points outside the namespace log's commit are used for
// that (the commit holds the index lock).
//
// Model limits: those of the per-file explorer (docs/design.md, "Crash
// testing") but for the torn lines. A fence persists only its own
// thread's flushes (the held operation and its racer are two actors).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "engine/gc_worker.h"
#include "medium/pm.h"
#include "pm_sparse_model.h"
#include "crash_pool_runner.h"
#include "crash_pool_workloads.h"
#include "label_version.h"
#include "pool_ops.h"
#include "pool_tree.h"

#if __has_include("container/pool/pool_check.h")
#include "container/pool/pool_check.h"
#define UPFS_HAVE_POOL_CHECK 1
#else
#define UPFS_HAVE_POOL_CHECK 0
#endif

namespace upfs::crashtest {

using format::pool::FileType;

// ---------------------------------------------------------------------------
// Exploration.

struct Options {
  uint32_t max_exhaustive_lines = 10;
  uint32_t samples = 48;
  uint64_t seed = 1;
  bool long_mode = false;
  bool verbose = false;
  // Also images where one in-flight line persisted word by word (8-byte
  // failure atomicity), with either none or all of the others.
  bool torn = true;
  std::string only;
};

class Explorer {
 public:
  Explorer(const Options& o, std::string dir) : opt_(o), dir_(std::move(dir)), rng_(o.seed) {}

  uint64_t Run(const Workload& w) {
    checked_ = 0;
    violations_ = 0;
    w_ = &w;
    const std::string path = dir_ + "/" + w.name + ".pool";
    unlink(path.c_str());
    Status st = Pool::Create(path, 2 << 20);
    if (st.ok() && w.pool_version != 0 && !upfs_test::RelabelPoolVersion(path, w.pool_version))
      st = Status::Error(EIO, "cannot label the pool version " + std::to_string(w.pool_version));
    std::unique_ptr<Pool> pool;
    if (st.ok()) st = Pool::Attach(path, &pool);
    if (!st.ok()) {
      std::printf("%s: cannot make the pool: %s\n", w.name.c_str(), st.ToString().c_str());
      return 1;
    }
    Runner runner(pool.get());
    TreeModel model;
    for (const NsOp& op : w.setup) {
      st = runner.Run(op);
      if (!st.ok() || ApplyModel(&model, op) != 0) {
        std::printf("%s: setup %s: %s\n", w.name.c_str(), op.Describe().c_str(), st.ToString().c_str());
        return 1;
      }
    }
    pool->medium()->Settle();  // no growth in flight while the durable bytes are read
    {
      std::string ignored;
      st = DumpPool(pool.get(), &ignored, &floors_);
      if (!st.ok()) {
        std::printf("%s: walking the set-up pool: %s\n", w.name.c_str(), st.ToString().c_str());
        return 1;
      }
    }
    model_.Reset(path);
    model_.Attach(pool->medium());
    pm::g_recorder.store(&model_);
    for (size_t i = 0; i < w.ops.size() && violations_ == 0; ++i) {
      const NsOp& op = w.ops[i];
      // Allowed recovered states: before, after; with a race also the other
      // operation alone and both in either order.
      TreeModel after = model;
      const int want_err = ApplyModel(&after, op);
      std::vector<std::string> allowed{model.Dump(), after.Dump()};
      // The outcomes the run may end in: this op alone, or with a race
      // both orders (which one depends on where the race was run: a
      // racer that changes a name this op already resolved commits first,
      // one that changes only the file this op holds does not).
      struct Outcome {
        TreeModel tree;
        int err, race_err;
      };
      std::vector<Outcome> outcomes{{after, want_err, 0}};
      std::vector<std::string> racer_returned;  // the racer's effect is there
      if (op.race) {
        TreeModel b = model, ab = after, ba;
        const int race_alone = ApplyModel(&b, *op.race);
        const int race_after = ApplyModel(&ab, *op.race);
        ba = b;
        const int ba_err = ApplyModel(&ba, op);
        allowed.insert(allowed.end(), {b.Dump(), ab.Dump(), ba.Dump()});
        racer_returned = {b.Dump(), ab.Dump(), ba.Dump()};
        outcomes = {{ba, ba_err, race_alone}, {ab, want_err, race_after}};
      }
      op_ = i;
      const bool explore = i >= w.explore_from;
      int fence = 0, racer_fences = 0;
      bool raced = false, in_race = false, race_under_lock = false;
      Status race_st;
      auto race_now = [&] {
        raced = true;
        // A racer run while this thread holds the index lock would spin
        // on it for ever: name the point instead of hanging.
        if (!pool->index_mu().try_lock_shared()) {
          race_under_lock = true;
          return;
        }
        pool->index_mu().unlock_shared();
        in_race = true;
        model_.SetActor(2);
        std::thread t([&] { race_st = runner.Run(*op.race); });
        t.join();
        model_.SetActor(1);
        in_race = false;
        // The racer returned; what this operation flushed and has yet to
        // fence is still in flight (the racer's fences do not persist it),
        // and a crash now must keep the racer's effect.
        if (explore) Explore(racer_returned, "after the racer returned", false);
      };
      model_.SetCrashPoint([&] {
        if (in_race) {
          ++racer_fences;
          if (explore) Explore(allowed, "racer fence " + std::to_string(racer_fences), false);
          return;
        }
        ++fence;
        if (explore) Explore(allowed, "fence " + std::to_string(fence), false);
        if (op.race && !op.race_store && !raced && fence == op.race_fence) race_now();
      });
      int stores = 0;
      if (op.race && op.race_store)
        model_.SetStorePoint([&] {
          if (!in_race && !raced && ++stores == op.race_store) race_now();
        });
      st = runner.Run(op);
      model_.SetCrashPoint(nullptr);
      model_.SetStorePoint(nullptr);
      if (race_under_lock) {
        std::printf("%s: op %zu (%s): that point is under the index lock; race it at another\n",
                    w.name.c_str(), i, op.Describe().c_str());
        ++violations_;
        break;
      }
      if (op.race && !raced) {
        std::printf("%s: op %zu (%s) has fewer fences or stores than that\n", w.name.c_str(), i,
                    op.Describe().c_str());
        ++violations_;
        break;
      }
      // The recorded run itself must end in one of the outcomes of the
      // reference model, with the errors that outcome implies. The walk is
      // recorded too (no crash point is set): a stat of a new file may
      // seal its image (stores, write-backs and a fence: fresh_inode.h),
      // and a model that missed them would hold as lost what is durable.
      std::string live;
      InodeTimes live_times;
      Status dst = DumpPool(pool.get(), &live, &live_times);
      const Outcome* matched = nullptr;
      for (const Outcome& o : outcomes)
        if (dst.ok() && live == o.tree.Dump() && st.err() == o.err && race_st.err() == o.race_err)
          matched = &o;
      if (!matched) {
        std::printf("VIOLATION %s: op %zu (%s) returned %s (racer: %s) and left the live pool %s\n",
                    w.name.c_str(), i, op.Describe().c_str(), st.ToString().c_str(),
                    race_st.ToString().c_str(),
                    dst.ok() ? DumpDiff(live, outcomes[0].tree.Dump()).c_str() : dst.ToString().c_str());
        for (const Outcome& o : outcomes)
          std::printf("  expected outcome: errno %d, racer errno %d\n", o.err, o.race_err);
        ++violations_;
        break;
      }
      model = matched->tree;
      // What returned is durable, its durable times too: a crash from here
      // on may move them forward (a later operation), never back. An
      // inode number now of another kind (freed and made again) starts
      // its floor anew.
      // A file's data times join its floor only at an fsync of it.
      uint64_t synced = 0;
      if (op.kind == NsOp::kFsync && st.ok()) {
        Credentials root;  // uid and gid 0
        Resolved r;
        if (PoolNamespace(pool.get(), &root).Resolve(op.a, false, &r).ok()) synced = r.ino;
      }
      for (const auto& [ino, t] : live_times) {
        auto [f, fresh] = floors_.emplace(ino, DurableTimes{});
        DurableTimes& floor = f->second;
        if (fresh || floor.dir != t.dir) floor = DurableTimes{t.dir};
        floor.mtime_ns = std::max(floor.mtime_ns, t.mtime_ns);
        floor.ctime_ns = std::max(floor.ctime_ns, t.ctime_ns);
        if (ino == synced && t.data) {
          floor.data = true;
          floor.data_mtime_ns = t.data_mtime_ns;
          floor.data_ctime_ns = t.data_ctime_ns;
        }
      }
      if (opt_.verbose)
        std::printf("  op %zu %s: %d fences (racer %d), namespace log at block %u slot %u\n", i,
                    op.Describe().c_str(), fence, racer_fences, pool->log()->pos().lblock,
                    pool->log()->pos().slot);
      const std::vector<std::string> done{live};
      if (explore) Explore(done, "end of operation", true);
    }
    pm::g_recorder.store(nullptr);
    model_.Attach(nullptr);
    pool.reset();
    unlink(path.c_str());
    std::printf("%s: crash states checked: %" PRIu64 ", violations: %" PRIu64 "\n", w.name.c_str(),
                checked_, violations_);
    std::fflush(stdout);
    return violations_;
  }

 private:
  void Explore(const std::vector<std::string>& allowed, const std::string& where, bool op_done) {
    const std::vector<uint64_t> inflight = model_.InFlight();
    const size_t n = inflight.size();
    auto check = [&](const std::vector<uint64_t>& chosen) { Check(chosen, allowed, where, op_done); };
    if (opt_.torn) ExploreTorn(inflight, allowed, where, op_done);
    if (n <= opt_.max_exhaustive_lines) {
      for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
        std::vector<uint64_t> chosen;
        for (size_t b = 0; b < n; ++b)
          if (mask >> b & 1) chosen.push_back(inflight[b]);
        check(chosen);
      }
      return;
    }
    check({});
    check(inflight);
    for (uint32_t s = 0; s < opt_.samples; ++s) {
      std::vector<uint64_t> chosen;
      const uint32_t density = rng_() % 4;  // vary how many lines make it
      for (uint64_t l : inflight)
        if (rng_() % 4 <= density) chosen.push_back(l);
      check(chosen);
    }
  }

  // Every in-flight line that took a cached store and has two or more words
  // written, persisted in part: each proper, nonempty subset of those words
  // (a sample of them when there are many), beside none and beside all of
  // the other lines.
  void ExploreTorn(const std::vector<uint64_t>& inflight, const std::vector<std::string>& allowed,
                   const std::string& where, bool op_done) {
    for (uint64_t l : inflight) {
      if (!model_.Cached(l)) continue;
      const uint8_t dirty = model_.DirtyWords(l);
      std::vector<uint32_t> words;
      for (uint32_t w = 0; w < 8; ++w)
        if (dirty >> w & 1) words.push_back(w);
      if (words.size() < 2) continue;
      std::vector<uint64_t> others;
      for (uint64_t o : inflight)
        if (o != l) others.push_back(o);
      const uint32_t subsets = (1u << words.size()) - 2;
      const uint32_t tries = std::min<uint32_t>(subsets, 14);
      for (uint32_t t = 0; t < tries; ++t) {
        const uint32_t pick = subsets <= 14 ? t + 1 : 1 + uint32_t(rng_() % subsets);
        uint8_t mask = 0;
        for (size_t i = 0; i < words.size(); ++i)
          if (pick >> i & 1) mask |= uint8_t(1u << words[i]);
        const SparsePersistenceModel::Torn torn{l, mask};
        Check({}, allowed, where, op_done, &torn);
        if (!others.empty()) Check(others, allowed, where, op_done, &torn);
      }
    }
  }

  void Check(const std::vector<uint64_t>& chosen, const std::vector<std::string>& allowed,
             const std::string& where, bool op_done, const SparsePersistenceModel::Torn* torn = nullptr) {
    ++checked_;
    pm::Recorder* saved = pm::g_recorder.exchange(nullptr);
    const std::string ipath = dir_ + "/image.pool";
    std::string problem =
        model_.WriteImage(chosen, ipath, torn) ? Recover(ipath, allowed) : "cannot write the image";
    unlink(ipath.c_str());
    pm::g_recorder.store(saved);
    if (problem.empty()) return;
    ++violations_;
    if (violations_ > 5) return;
    std::printf("VIOLATION %s: op %zu (%s), %s, in-flight lines persisted:", w_->name.c_str(), op_,
                w_->ops[op_].Describe().c_str(), where.c_str());
    for (uint64_t l : chosen) std::printf(" %" PRIu64, l);
    if (torn) std::printf("; line %" PRIu64 " torn, words persisted 0x%02x", torn->line, torn->words);
    std::printf("\n  %s\n  replay: upfs-crashtest-pool --workload %s --seed %" PRIu64 "%s\n",
                problem.c_str(), w_->name.c_str(), opt_.seed, opt_.long_mode ? " --long" : "");
    std::fflush(stdout);
    (void)op_done;
  }

  // Recovers an image; returns what is wrong with it ("" if nothing).
  std::string Recover(const std::string& ipath, const std::vector<std::string>& allowed) {
    std::string tree;
    {
      std::unique_ptr<Pool> p;
      Status st = Pool::Attach(ipath, &p);
      if (!st.ok()) return "recovery (attach) failed: " + st.ToString();
      InodeTimes times;
      st = DumpPool(p.get(), &tree, &times);
      if (!st.ok()) return "walking the recovered tree failed: " + st.ToString();
      bool match = false;
      for (const std::string& a : allowed) match = match || tree == a;
      if (!match) {
        std::string d = "the recovered tree is no allowed state: vs after: " +
                        DumpDiff(tree, allowed.size() > 1 ? allowed[1] : allowed[0]);
        if (allowed.size() > 1) d += "; vs before: " + DumpDiff(tree, allowed[0]);
        return d;
      }
      if (std::string back = TimesWentBack(times); !back.empty()) return back;
      // The process that recovered must go on committing (its log reader
      // kept what recovery left it).
      Runner r(p.get());
      st = r.Run(Create("/~"));
      if (st.ok()) st = r.Run(Unlink("/~"));
      if (!st.ok()) return "the recovering process could not commit: " + st.ToString();
    }
#if UPFS_HAVE_POOL_CHECK
    {
      PoolReport rep;
      Status st = CheckPool(ipath, &rep);
      if (!st.ok()) return "fsck failed: " + st.ToString();
      if (!rep.problems.empty()) {
        std::string d = "fsck: " + std::to_string(rep.problems.size()) + " problem(s): " + rep.problems[0];
        if (rep.problems.size() > 1) d += "; " + rep.problems[1];
        return d;
      }
    }
#endif
    // The probe: the recovered pool must take new records at its tail.
    {
      std::unique_ptr<Pool> p;
      Status st = Pool::Attach(ipath, &p);
      if (!st.ok()) return "attach after recovery failed: " + st.ToString();
      Runner r(p.get());
      st = r.Run(Create("/~"));
      if (st.ok()) st = r.Run(Unlink("/~"));
      if (!st.ok()) return "the recovered pool refused a new record: " + st.ToString();
      std::string again;
      st = DumpPool(p.get(), &again);
      if (!st.ok() || again != tree)
        return "after the probe: " + (st.ok() ? DumpDiff(again, tree) : st.ToString());
    }
    return "";
  }

  // An inode whose durable times in a recovered image are older than an
  // operation that returned had left them ("" if none): the times a
  // namespace operation stores in its directories, and the ctime of a
  // file it renames, links or changes the attributes of, are written back
  // before it returns, as everything else it changed (DumpPool says which
  // times are durable).
  std::string TimesWentBack(const InodeTimes& times) const {
    for (const auto& [ino, t] : times) {
      auto f = floors_.find(ino);
      // Another kind of inode: another life of the number, made after the
      // one the floor is of (which a returned operation removed).
      if (f == floors_.end() || f->second.dir != t.dir) continue;
      const DurableTimes& floor = f->second;
      if (floor.data && t.data && (t.data_mtime_ns < floor.data_mtime_ns || t.data_ctime_ns < floor.data_ctime_ns))
        return "file inode " + std::to_string(ino) + ": data mtime/ctime " + std::to_string(t.data_mtime_ns) + "/" +
               std::to_string(t.data_ctime_ns) + " ns, older than the " + std::to_string(floor.data_mtime_ns) +
               "/" + std::to_string(floor.data_ctime_ns) + " an fsync that returned left";
      if (t.mtime_ns >= floor.mtime_ns && t.ctime_ns >= floor.ctime_ns) continue;
      const bool dir = t.dir;  // a structured binding: not capturable by a lambda in clang 14
      const std::string what = dir ? "directory inode " + std::to_string(ino) + ": mtime/ctime "
                                   : "inode " + std::to_string(ino) + ": ctime ";
      auto shown = [dir](const DurableTimes& x) {
        return (dir ? std::to_string(x.mtime_ns) + "/" : std::string()) + std::to_string(x.ctime_ns);
      };
      return what + shown(t) + " ns, older than the " + shown(floor) + " an operation that returned left";
    }
    return "";
  }

  Options opt_;
  std::string dir_;
  InodeTimes floors_;  // each inode's latest durable times after an operation returned
  std::mt19937_64 rng_;
  SparsePersistenceModel model_;
  const Workload* w_ = nullptr;
  size_t op_ = 0;
  uint64_t checked_ = 0, violations_ = 0;
};

}  // namespace upfs::crashtest

int main(int argc, char** argv) {
  using namespace upfs::crashtest;
  // Every fence must happen in the operation the recorder follows: GC runs
  // inline, where the workload triggers it.
  upfs::GcWorker::SetBackground(false);
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--long") {
      opt.long_mode = true;
      opt.max_exhaustive_lines = 14;
      opt.samples = 400;
    } else if (a == "--seed" && i + 1 < argc) {
      opt.seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--workload" && i + 1 < argc) {
      opt.only = argv[++i];
    } else if (a == "--no-torn") {
      opt.torn = false;
    } else if (a == "--verbose" || a == "-v") {
      opt.verbose = true;
    } else if (a == "--list") {
      for (const Workload& w : MakeWorkloads()) std::printf("%s\n", w.name.c_str());
      return 0;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: upfs-crashtest-pool [--long] [--no-torn] [--seed N] [--workload NAME] [--list] [--verbose]\n"
          "Explores crash states of pool workloads (namespace operations and file writes)\n"
          "at every fence and checks recovery. Bounded by default (CI); --long explores\n"
          "more subsets of in-flight lines; --no-torn leaves out the images where a\n"
          "line persisted only in some of its 8-byte words.\n");
      return 0;
    } else {
      std::fprintf(stderr, "upfs-crashtest-pool: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  char tmpl[] = "/dev/shm/upfs-crashtest-pool-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  uint64_t violations = 0;
  bool matched = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Workload& w : MakeWorkloads()) {
    if (!opt.only.empty() && w.name != opt.only) continue;
    if (w.long_only && !opt.long_mode && opt.only.empty()) continue;
    matched = true;
    Explorer e(opt, tmpl);
    violations += e.Run(w);
  }
  std::filesystem::remove_all(tmpl);
  if (!matched) {
    std::fprintf(stderr, "upfs-crashtest-pool: no workload named %s\n", opt.only.c_str());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("upfs-crashtest-pool: %s (%.1f s)%s\n",
              violations ? "VIOLATIONS FOUND" : "all crash states recovered", secs,
              UPFS_HAVE_POOL_CHECK ? "" : " [no CheckPool in this tree: fsck not run]");
  return violations ? 1 : 0;
}
