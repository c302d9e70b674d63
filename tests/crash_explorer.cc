// upfs-crashtest: crash-state explorer.
//
// Runs workloads on a upfs file with a pm::Recorder installed, so that it
// sees every store, non-temporal copy, flush and fence to the mapped file.
// A cache-line model of persistence (x86 with clwb and NT stores) keeps the
// bytes that are certainly durable and the lines still in flight. At every
// fence, and at the end of every operation, it builds crash images: the
// durable bytes plus a subset of the in-flight lines (all subsets when there
// are few, a random sample otherwise). Each image is recovered by a fresh
// engine instance (open = replay) and checked:
//   strict: the file equals the state before or after the interrupted
//           operation; every operation that returned is present;
//   sync:   every operation that returned is present; an interrupted write
//           may mix old and new bytes only inside its own range;
//   both:   fsck finds nothing.
// A violation prints the operation, the fence, the lines chosen and the
// first difference, with the seed to replay it.
//
// Model limits (docs/design.md, "Crash testing"): a line persists whole, at
// its latest value; a cached store is durable only after a flush and a
// fence, a non-temporal copy after a fence.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "engine/gc_worker.h"
#include "container/perfile/inspect.h"
#include "format/format.h"
#include "medium/pm.h"
#include "label_version.h"
#include "crash_workloads.h"
#include "pm_line_model.h"
#include "upfs/upfs.h"

namespace upfs::crashtest {

using format::kBlockSize;

// ---------------------------------------------------------------------------
// The reference model (the workloads: crash_workloads.h).

struct State {
  std::string bytes;  // the file's content; size = bytes.size()
};

void Fill(std::string* out, uint64_t n, uint32_t seed) {
  out->resize(n);
  std::mt19937 r(seed);
  for (uint64_t i = 0; i < n; ++i) (*out)[i] = char('A' + r() % 26);
}

State ApplyModel(const State& s, const Op& op) {
  State t = s;
  std::string data;
  switch (op.kind) {
    case Op::kWrite:
      Fill(&data, op.len, op.seed);
      if (t.bytes.size() < op.off + op.len) t.bytes.resize(op.off + op.len, '\0');
      t.bytes.replace(op.off, op.len, data);
      break;
    case Op::kAppend:
      Fill(&data, op.len, op.seed);
      t.bytes += data;
      break;
    case Op::kTruncate:
      t.bytes.resize(op.len, '\0');
      break;
    case Op::kFallocate:
      if (op.mode & FALLOC_FL_PUNCH_HOLE) {
        uint64_t end = std::min<uint64_t>(op.off + op.len, t.bytes.size());
        for (uint64_t i = op.off; i < end; ++i) t.bytes[i] = '\0';
      } else if (!(op.mode & FALLOC_FL_KEEP_SIZE) && t.bytes.size() < op.off + op.len) {
        t.bytes.resize(op.off + op.len, '\0');
      }
      break;
    case Op::kGc:
    case Op::kQuietFold:
      break;
  }
  return t;
}

Status RunOp(File* f, const Op& op) {
  std::string data;
  uint64_t at;
  switch (op.kind) {
    case Op::kWrite:
      Fill(&data, op.len, op.seed);
      return f->Write(data.data(), data.size(), op.off, false, &at);
    case Op::kAppend:
      Fill(&data, op.len, op.seed);
      return f->Write(data.data(), data.size(), 0, true, &at);
    case Op::kTruncate:
      return f->Truncate(op.len);
    case Op::kFallocate:
      return f->Fallocate(op.mode, op.off, op.len);
    case Op::kGc:
      return f->CollectGarbage(true);
    case Op::kQuietFold: {
      // The GC worker's run for a file gone quiet, called as the worker
      // does, with every pair idle for the idle age (10 ms against 1).
      File::SetPairIdleMsForTest(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      (void)f->FoldWhenQuiet();
      File::SetPairIdleMsForTest(0);
      return Status::OK();
    }
  }
  return Status::OK();
}


// ---------------------------------------------------------------------------
// Checking crash images.

struct Options {
  uint32_t max_exhaustive_lines = 12;
  uint32_t samples = 48;
  uint64_t seed = 1;
  bool verbose = false;
  std::string only;
};

class Explorer {
 public:
  Explorer(const Options& o, std::string dir) : opt_(o), dir_(std::move(dir)), rng_(o.seed) {}

  // Returns the number of violations.
  uint64_t Run(const Workload& w) {
    checked_ = 0;
    violations_ = 0;
    std::string path = dir_ + "/" + w.name + ".upfs";
    upfs_unlink(path.c_str());
    int host = open(path.c_str(), O_RDWR | O_CREAT, 0644);
    std::unique_ptr<File> f;
    Status st = OpenPerFile(host, path, true, w.mode, nullptr, &f);
    if (st.ok() && w.version) {
      f.reset();
      st = upfs_test::RelabelVersion(path, w.version) ? OpenPerFile(host, path, false, w.mode, nullptr, &f)
                                                      : Status::Error(EIO, "relabel");
    }
    if (!st.ok()) {
      std::printf("%s: cannot create: %s\n", w.name.c_str(), st.ToString().c_str());
      return 1;
    }
    State state;
    for (const Op& op : w.setup) {
      st = RunOp(f.get(), op);
      if (!st.ok()) {
        std::printf("%s: setup %s: %s\n", w.name.c_str(), op.Describe().c_str(), st.ToString().c_str());
        return 1;
      }
      state = ApplyModel(state, op);
    }
    model_.Reset(path);
    model_.Attach(PerFile(*f)->medium());
    pm::g_recorder.store(&model_);
    for (size_t i = 0; i < w.ops.size(); ++i) {
      const Op& op = w.ops[i];
      // Allowed recovered states: before, after; with a race also the
      // other operation alone and both in either order.
      std::vector<State> allowed{state, ApplyModel(state, op)};
      std::vector<State> done_states{allowed[1]};
      std::vector<State> racer_returned;  // the racer's effect is there
      if (op.race) {
        State b = ApplyModel(state, *op.race);
        State ab = ApplyModel(allowed[1], *op.race), ba = ApplyModel(b, op);
        allowed.insert(allowed.end(), {b, ab, ba});
        done_states = {ab, ba};
        racer_returned = {b, ab, ba};
      }
      bool explore = i >= w.explore_from;
      int fence = 0;
      bool raced = false;
      Status race_st;
      auto race_now = [&] {
        raced = true;
        // Hold this operation here; the racer runs to completion in
        // another thread.
        std::thread t([&] { race_st = RunOp(f.get(), *op.race); });
        t.join();
        // The racer returned; this operation has yet to fence what it
        // flushed, which the racer's fences do not make durable: a crash
        // now must keep the racer's effect (whatever it committed after
        // this operation's entries made those durable first).
        if (explore && race_st.ok()) Explore(w, i, fence, racer_returned, /*op_done=*/false);
      };
      model_.SetCrashPoint([&](const char*) {
        ++fence;
        if (explore) Explore(w, i, fence, allowed, /*op_done=*/false);
        if (op.race && !op.race_store && !raced && fence == op.race_fence) race_now();
      });
      int stores = 0;
      if (op.race && op.race_store)
        model_.SetStorePoint([&] {
          if (!raced && ++stores == op.race_store) race_now();
        });
      st = RunOp(f.get(), op);
      model_.SetCrashPoint(nullptr);
      model_.SetStorePoint(nullptr);
      if (st.ok() && op.race && !raced) race_st = RunOp(f.get(), *op.race);  // fewer fences than asked
      if (!st.ok() || !race_st.ok()) {
        std::printf("%s: op %zu %s failed: %s %s\n", w.name.c_str(), i, op.Describe().c_str(),
                    st.ToString().c_str(), race_st.ToString().c_str());
        violations_++;
        break;
      }
      // The recorded run itself must end in one of the completed states.
      uint64_t size = 0;
      std::string content;
      pm::Recorder* saved = pm::g_recorder.exchange(nullptr);
      if (f->Size(&size).ok()) {
        content.resize(size);
        size_t n = 0;
        if (size) (void)f->Read(content.data(), size, 0, &n);
      }
      pm::g_recorder.store(saved);
      bool matched = false;
      for (const State& d : done_states)
        if (d.bytes == content) {
          state = d;
          matched = true;
        }
      if (!matched) {
        std::printf("VIOLATION %s: op %zu (%s) left a state that is no linearization\n",
                    w.name.c_str(), i, op.Describe().c_str());
        violations_++;
        break;
      }
      if (explore) Explore(w, i, fence + 1, {state}, /*op_done=*/true);
    }
    pm::g_recorder.store(nullptr);
    f.reset();
    close(host);
    upfs_unlink(path.c_str());
    std::printf("%s: crash states checked: %" PRIu64 ", violations: %" PRIu64 "\n",
                w.name.c_str(), checked_, violations_);
    std::fflush(stdout);
    return violations_;
  }

 private:
  void Explore(const Workload& w, size_t op, int fence, const std::vector<State>& allowed,
               bool op_done) {
    std::vector<uint64_t> inflight = model_.InFlight();
    auto check = [&](const std::vector<uint64_t>& chosen) {
      Check(w, op, fence, chosen, allowed, op_done);
    };
    size_t n = inflight.size();
    if (n <= opt_.max_exhaustive_lines) {
      for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
        std::vector<uint64_t> chosen;
        for (size_t b = 0; b < n; ++b)
          if (mask >> b & 1) chosen.push_back(inflight[b]);
        check(chosen);
      }
      return;
    }
    // Always the two extremes, then random subsets.
    check({});
    check(inflight);
    for (uint32_t s = 0; s < opt_.samples; ++s) {
      std::vector<uint64_t> chosen;
      uint32_t density = rng_() % 4;  // vary how many lines make it
      for (uint64_t l : inflight)
        if (rng_() % 4 <= density) chosen.push_back(l);
      check(chosen);
    }
  }

  void Check(const Workload& w, size_t op, int fence, const std::vector<uint64_t>& chosen,
             const std::vector<State>& allowed, bool op_done) {
    ++checked_;
    pm::Recorder* saved = pm::g_recorder.exchange(nullptr);
    std::vector<char> img = model_.Image(chosen);
    std::string ipath = dir_ + "/image.upfs";
    std::string problem = Recover(img, ipath, w, op, allowed, op_done);
    pm::g_recorder.store(saved);
    if (problem.empty()) return;
    ++violations_;
    if (violations_ > 5) return;
    std::printf("VIOLATION %s: op %zu (%s), %s %d, in-flight lines persisted:", w.name.c_str(), op,
                w.ops[op].Describe().c_str(), op_done ? "end of operation" : "fence", fence);
    for (uint64_t l : chosen) std::printf(" %" PRIu64, l);
    std::printf("\n  %s\n  replay: upfs-crashtest --workload %s --seed %" PRIu64 "\n",
                problem.c_str(), w.name.c_str(), opt_.seed);
  }

  // Recovers a crash image and returns what is wrong with it ("" if fine).
  std::string Recover(const std::vector<char>& img, const std::string& ipath, const Workload& w,
                      size_t op, const std::vector<State>& allowed, bool op_done) {
    const State& before = allowed.front();
    const State& after = allowed.size() > 1 ? allowed[1] : allowed.front();
    upfs_unlink(ipath.c_str());
    int fd = open(ipath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, img.data(), img.size(), 0) != ssize_t(img.size())) return "cannot write image";
    std::string content;
    std::string err;
    {
      std::unique_ptr<File> f;
      Status st = OpenPerFile(fd, ipath, false, w.mode, nullptr, &f);
      if (!st.ok()) {
        err = "recovery (open) failed: " + st.ToString();
      } else {
        uint64_t size = 0;
        st = f->Size(&size);
        content.resize(size);
        size_t done = 0;
        if (st.ok() && size) st = f->Read(content.data(), size, 0, &done);
        if (!st.ok()) err = "reading the recovered file failed: " + st.ToString();
      }
    }
    close(fd);
    if (!err.empty()) {
      upfs_unlink(ipath.c_str());
      return err;
    }
    FileReport rep;
    Status fs = InspectFile(ipath, true, &rep);
    upfs_unlink(ipath.c_str());
    if (!fs.ok()) return "fsck: " + fs.message();
    const bool strict = w.mode == format::Consistency::kStrict;
    if (op_done) return Diff(content, before.bytes, "completed state");
    for (const State& a : allowed)
      if (content == a.bytes) return "";
    if (strict) {
      return "neither before nor after the operation: " + Diff(content, after.bytes, "after") +
             "; " + Diff(content, before.bytes, "before");
    }
    // Sync mode: an in-place write may be partial inside its own range.
    const Op& o = w.ops[op];
    if (o.kind == Op::kWrite && content.size() == before.bytes.size() &&
        content.size() == after.bytes.size()) {
      for (uint64_t i = 0; i < content.size(); ++i) {
        bool inside = i >= o.off && i < o.off + o.len;
        if (content[i] == before.bytes[i] || (inside && content[i] == after.bytes[i])) continue;
        return "byte " + std::to_string(i) + " is neither old nor (inside the write) new";
      }
      return "";
    }
    return "sync mode, not a write: " + Diff(content, after.bytes, "after");
  }

  static std::string Diff(const std::string& got, const std::string& want, const char* what) {
    if (got == want) return "";
    if (got.size() != want.size())
      return std::string("size ") + std::to_string(got.size()) + " != " + what + " size " +
             std::to_string(want.size());
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i])
        return std::string("first difference from ") + what + " at byte " + std::to_string(i);
    return "";
  }

  Options opt_;
  std::string dir_;
  std::mt19937_64 rng_;
  PersistenceModel model_;
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
      opt.max_exhaustive_lines = 14;
      opt.samples = 400;
    } else if (a == "--seed" && i + 1 < argc) {
      opt.seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--workload" && i + 1 < argc) {
      opt.only = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: upfs-crashtest [--long] [--seed N] [--workload NAME]\n"
          "Explores crash states of upfs workloads at every fence and checks recovery.\n"
          "Bounded by default (CI); --long explores more subsets of in-flight lines.\n");
      return 0;
    } else {
      std::fprintf(stderr, "upfs-crashtest: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  char tmpl[] = "/dev/shm/upfs-crashtest-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  uint64_t total_checked = 0, total_violations = 0;
  bool matched = false;
  for (const Workload& w : MakeWorkloads()) {
    if (!opt.only.empty() && w.name != opt.only) continue;
    matched = true;
    Explorer e(opt, tmpl);
    total_violations += e.Run(w);
  }
  std::filesystem::remove_all(tmpl);
  if (!matched) {
    std::fprintf(stderr, "upfs-crashtest: no workload named %s\n", opt.only.c_str());
    return 2;
  }
  std::printf("upfs-crashtest: %s\n", total_violations ? "VIOLATIONS FOUND" : "all crash states recovered");
  (void)total_checked;
  return total_violations ? 1 : 0;
}
