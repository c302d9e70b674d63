// Multi-process kill torture on one pool.
//
// Rounds. The supervisor (the test process) forks worker processes that
// each mount the pool themselves (the supervisor has nothing of the pool
// attached while they run) and loop over random namespace and data
// operations through the C API in three shared directories: create, write
// (a whole file's bytes in one pwrite), rename within and across
// directories and over an existing file, RENAME_EXCHANGE, link, unlink,
// mkdir, rmdir, rename of a directory with files in it, symlink, chmod. The
// supervisor SIGKILLs each worker at its own random moment (some while
// they are still mounting, that is inside the recovery of the previous
// round's crash), reaps them all, and then, with no process attached,
// attaches the pool itself: recovery runs, and the checks below must hold.
// The next round's workers start from the state the checks found.
//
// Protocol. Every name a worker makes carries its id ("w3-f17", "w3-d4"),
// and a worker touches only its own names (inside the shared directories,
// or inside its own directories), so workers race on the namespace log,
// the inode allocator, the block allocator and the shared directories'
// tables, but the expected state of each worker's names depends on that
// worker alone. Before each call a worker appends an intent record to its
// own host log file, after the call an ack record (one write(2) each,
// O_APPEND: a killed worker's log ends with whole records). A worker
// checks every result against its reference model (pool_tree.h) and stops
// with exit status 3 (and an error record) on any difference.
//
// Checks after each round, from the supervisor's own attach (recovery):
//   - for every worker, the tree of its names (types, modes, link counts,
//     file bytes, link targets) equals its model after every acknowledged
//     operation, with or without the one in flight when it died: no
//     acknowledged operation is lost, nothing is half done;
//   - the shared directories are still there, and nothing else is;
//   - recovery freed the orphans: the inodes in use are exactly those the
//     tree names (plus the root);
//   - after the supervisor detaches, CheckPool finds no problem and no
//     leaked block, and every block free in the bitmap has memory.
//
// Knobs: UPFS_TEST_SCALE multiplies the number of rounds (30 at 1.0);
// UPFS_TORTURE_LONG=1 runs 200 rounds; UPFS_TEST_SEED fixes the workers'
// operation sequences (kill timing is never reproducible).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "pool_api/pool_host_memory.h"
#include "pool_ops.h"
#include "pool_tree.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs::Pool;
using upfs::Status;
using upfs::crashtest::ApplyModel;
using upfs::crashtest::FileType;
using upfs::crashtest::FillBytes;
using upfs::crashtest::NsOp;
using upfs::crashtest::TreeModel;
namespace ct = upfs::crashtest;

constexpr int kWorkers = 4;
constexpr int kSharedDirs = 3;

// One record of a worker's log: fixed size, written with one write(2).
struct Msg {
  static constexpr uint32_t kMagic = 0x7054724d;
  enum Type : uint32_t { kIntent = 1, kAck = 2, kError = 3 };
  uint32_t magic = kMagic;
  uint32_t type = 0;
  uint64_t seq = 0;  // the worker's operation number (names use it too)
  uint32_t kind = 0;
  uint32_t mode = 0;
  uint64_t off = 0, len = 0;
  uint32_t seed = 0;
  int32_t err = 0;  // kAck: the errno the call ended with (0 = success)
  char a[96] = {};
  char b[160] = {};
};
static_assert(sizeof(Msg) <= 512);

NsOp OpOf(const Msg& m) {
  NsOp op = ct::Make(NsOp::Kind(m.kind), m.a, m.b, m.off, m.len, m.seed, mode_t(m.mode));
  return op;
}

Msg MsgOf(Msg::Type t, uint64_t seq, const NsOp& op) {
  Msg m;
  m.type = t;
  m.seq = seq;
  m.kind = uint32_t(op.kind);
  m.mode = uint32_t(op.mode);
  m.off = op.off;
  m.len = op.len;
  m.seed = op.seed;
  std::snprintf(m.a, sizeof(m.a), "%s", op.a.c_str());
  std::snprintf(m.b, sizeof(m.b), "%s", op.b.c_str());
  return m;
}

std::string Shared(int k) { return "/s" + std::to_string(k); }

// Whether `path` is one of worker w's names (or below one).
bool Owns(const std::string& path, int w) {
  // "/sK/wW-..." : the component after the shared directory is the worker's.
  size_t s = path.find('/', 1);
  if (s == std::string::npos) return false;
  const std::string tag = "w" + std::to_string(w) + "-";
  return path.compare(s + 1, tag.size(), tag) == 0;
}

// The lines of a canonical dump (pool_tree.h) that are worker w's.
std::string LinesOf(const std::string& dump, int w) {
  std::string out;
  size_t i = 0;
  while (i < dump.size()) {
    size_t e = dump.find('\n', i);
    const std::string line = dump.substr(i, e - i);
    const std::string path = line.substr(0, line.find(' '));
    if (Owns(path, w)) out += line + "\n";
    i = e + 1;
  }
  return out;
}

// ---------------------------------------------------------------------------
// The worker.

class Worker {
 public:
  Worker(int id, TreeModel model, uint64_t next_seq, std::string pool, std::string mnt, int log_fd,
         uint64_t seed)
      : id_(id), model_(std::move(model)), seq_(next_seq), pool_(std::move(pool)), mnt_(std::move(mnt)),
        log_(log_fd), rng_(seed) {}

  [[noreturn]] void Run() {
    umask(0);
    if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) Die("mount: " + std::string(upfs_last_error()));
    for (;;) {
      HoldOrLetGo();
      NsOp op;
      if (!Next(&op)) continue;
      TreeModel after = model_;
      const int want = ApplyModel(&after, op);
      // Only renames are tried where the model refuses them (into their own
      // subtree, a directory over a file...): the others would only repeat
      // what the semantics tests check.
      if (want != 0 && op.kind != NsOp::kRename) continue;
      const uint64_t seq = seq_++;
      Send(MsgOf(Msg::kIntent, seq, op));
      const int got = Do(op);
      Msg ack = MsgOf(Msg::kAck, seq, op);
      ack.err = got;
      Send(ack);
      if (got != want)
        Die(op.Describe() + ": errno " + std::to_string(got) + ", the model says " + std::to_string(want));
      if (got == 0) model_ = std::move(after);
    }
  }

 private:
  [[noreturn]] void Die(const std::string& why) {
    Msg m;
    m.type = Msg::kError;
    std::snprintf(m.b, sizeof(m.b), "%s", why.c_str());
    Send(m);
    _exit(3);
  }
  void Send(const Msg& m) {
    if (write(log_, &m, sizeof(m)) != ssize_t(sizeof(m))) _exit(4);
  }
  std::string Name(char kind, const std::string& dir) {
    return dir + "/w" + std::to_string(id_) + "-" + kind + std::to_string(seq_);
  }

  // Keeps up to three descriptors open on its files, opened and closed at
  // random: a file unlinked while held has no name but is still in use, and
  // when the worker is killed it is an orphan that recovery must free.
  void HoldOrLetGo() {
    if (rng_() % 8 != 0) return;
    if (!held_.empty() && (held_.size() >= 3 || rng_() % 2)) {
      const size_t i = rng_() % held_.size();
      upfs_close(held_[i]);
      held_.erase(held_.begin() + long(i));
      return;
    }
    std::vector<std::string> files;
    for (const auto& [p, t] : model_.List())
      if (t == FileType::kRegular && Owns(p, id_)) files.push_back(p);
    if (files.empty()) return;
    const int fd = upfs_open((mnt_ + files[rng_() % files.size()]).c_str(), O_RDONLY);
    if (fd < 0) Die("open to hold: " + std::string(upfs_last_error()));
    held_.push_back(fd);
  }

  // Picks the next operation from the worker's own names; false: none fits.
  bool Next(NsOp* op) {
    std::vector<std::string> files, dirs, names;
    for (const auto& [p, t] : model_.List()) {
      if (!Owns(p, id_)) continue;
      names.push_back(p);
      if (t == FileType::kRegular) files.push_back(p);
      if (t == FileType::kDirectory) dirs.push_back(p);
    }
    auto pick = [&](const std::vector<std::string>& v) { return v[rng_() % v.size()]; };
    std::vector<std::string> where;
    for (int k = 0; k < kSharedDirs; ++k) where.push_back(Shared(k));
    for (const std::string& d : dirs) where.push_back(d);
    // A bounded number of names per worker, so that the model's work per
    // operation stays small next to the call's and kills land in calls.
    uint32_t r = rng_() % 100;
    if (names.size() > 40 && r < 16) r = 56 + r % 8;  // an unlink instead of a create
    if (files.empty() || r < 16) {
      *op = ct::Create(Name('f', pick(where)), rng_() % 2 ? 0644 : 0600);
    } else if (r < 36) {
      const std::string f = pick(files);
      uint64_t len = model_.Size(f);
      if (len == 0 || rng_() % 4 == 0) len = 1 + rng_() % 24000;
      // Shorter than the file: the write covers the start only; the model
      // knows what the file then holds.
      *op = ct::Write(f, 0, len, uint32_t(rng_()));
    } else if (r < 46) {
      const std::string f = pick(names);
      if (rng_() % 3 == 0 && files.size() > 1) *op = ct::Rename(f, pick(files));  // over a file
      else *op = ct::Rename(f, Name('r', pick(where)));
    } else if (r < 53) {
      *op = ct::Link(pick(files), Name('f', pick(where)));
    } else if (r < 64) {
      std::vector<std::string> nondirs;
      for (const std::string& n : names)
        if (std::find(dirs.begin(), dirs.end(), n) == dirs.end()) nondirs.push_back(n);
      if (nondirs.empty()) return false;
      *op = ct::Unlink(pick(nondirs));
    } else if (r < 71) {
      if (dirs.size() >= 4) return false;
      *op = ct::Mkdir(Name('d', Shared(int(rng_() % kSharedDirs))), 0755);
    } else if (r < 78) {
      if (dirs.empty()) return false;
      const std::string d = pick(dirs);
      if (model_.IsEmptyDir(d)) *op = ct::Rmdir(d);
      else *op = ct::Rename(d, Name('d', Shared(int(rng_() % kSharedDirs))));  // with its files
    } else if (r < 84) {
      // An attribute change alone: a file's mode, or any name's ctime
      // (utimensat, which seals a new inode's image as a chmod does).
      if (rng_() % 3 != 0) *op = ct::Chmod(pick(files), rng_() % 2 ? 0640 : 0604);
      else *op = ct::Utimens(pick(names));
    } else if (r < 91) {
      *op = ct::Symlink(Name('l', pick(where)), "t-" + std::to_string(id_) + "-" + std::to_string(seq_));
    } else {
      const std::string x = pick(names), y = pick(names);
      // Not a name and one below it: the model has no EINVAL for that.
      if (x == y || x.compare(0, y.size() + 1, y + "/") == 0 || y.compare(0, x.size() + 1, x + "/") == 0)
        return false;
      *op = ct::Exchange(x, y);
    }
    return true;
  }

  // Runs op through the C API; returns 0 or the errno.
  int Do(const NsOp& op) {
    const std::string a = mnt_ + op.a, b = mnt_ + op.b;
    int rc = 0;
    switch (op.kind) {
      case NsOp::kCreate: {
        const int fd = upfs_open(a.c_str(), O_CREAT | O_EXCL | O_WRONLY, op.mode);
        if (fd < 0) return errno;
        upfs_close(fd);
        return 0;
      }
      case NsOp::kWrite: {
        const int fd = upfs_open(a.c_str(), O_WRONLY);
        if (fd < 0) return errno;
        const std::string data = FillBytes(op.len, op.seed);
        const ssize_t n = upfs_pwrite(fd, data.data(), data.size(), off_t(op.off));
        const int e = errno;
        upfs_close(fd);
        return n == ssize_t(data.size()) ? 0 : (n < 0 ? e : EIO);
      }
      case NsOp::kMkdir: rc = upfs_mkdir(a.c_str(), op.mode); break;
      case NsOp::kSymlink: rc = upfs_symlink(op.b.c_str(), a.c_str()); break;
      case NsOp::kLink: rc = upfs_link(a.c_str(), b.c_str()); break;
      case NsOp::kUnlink: rc = upfs_unlink(a.c_str()); break;
      case NsOp::kRmdir: rc = upfs_rmdir(a.c_str()); break;
      case NsOp::kRename: rc = upfs_rename(a.c_str(), b.c_str()); break;
      case NsOp::kExchange:
        rc = upfs_renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
        break;
      case NsOp::kChmod: rc = upfs_chmod(a.c_str(), op.mode); break;
      case NsOp::kUtimens: rc = upfs_utimensat(AT_FDCWD, a.c_str(), upfs::crashtest::kUtimensTimes, AT_SYMLINK_NOFOLLOW); break;
      default: return EINVAL;
    }
    return rc == 0 ? 0 : errno;
  }

  int id_;
  TreeModel model_;
  uint64_t seq_;
  std::string pool_, mnt_;
  int log_;
  std::mt19937_64 rng_;
  std::vector<int> held_;
};

// ---------------------------------------------------------------------------
// The supervisor's checks.

// Reads a worker's log: the acknowledged operations in order, and the one
// in flight (intent without ack), if any.
struct WorkerLog {
  std::vector<Msg> acked;
  bool in_flight = false;
  Msg flight;
  std::string error;
  uint64_t max_seq = 0;
};

WorkerLog ReadLog(const std::string& path) {
  WorkerLog l;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return l;
  Msg m;
  while (read(fd, &m, sizeof(m)) == ssize_t(sizeof(m))) {
    if (m.magic != Msg::kMagic) {
      l.error = "damaged log record";
      break;
    }
    if (m.type == Msg::kError) l.error = m.b;
    if (m.type == Msg::kIntent) {
      l.in_flight = true;
      l.flight = m;
      l.max_seq = std::max(l.max_seq, m.seq);
    }
    if (m.type == Msg::kAck) {
      l.in_flight = false;
      l.acked.push_back(m);
    }
  }
  close(fd);
  return l;
}

// Counts the inodes in use in the pool's inode blocks.
Status InodesInUse(Pool* pool, uint64_t* n) {
  *n = 0;
  return pool->inodes()->ForEachBlock([&](uint32_t l) -> Status {
    for (uint32_t s = 1; s < upfs::format::pool::kInodesPerBlock; ++s) {
      upfs::format::pool::Inode* in;
      UPFS_RETURN_IF_ERROR(pool->InodeAt(upfs::format::pool::InodeNumber(l, s), &in));
      if (upfs::format::pool::IdentKind(in->ident.load()) != FileType::kFree) ++*n;
    }
    return Status::OK();
  });
}

// Distinct inodes the tree names, plus the root, from a walk.
Status InodesNamed(Pool* pool, uint64_t* n) {
  upfs::Credentials who;
  who.uid = 0;
  who.gid = 0;
  upfs::PoolNamespace ns(pool, &who);
  std::set<uint64_t> seen{pool->root_ino()};
  std::vector<uint64_t> todo{pool->root_ino()};
  while (!todo.empty()) {
    const uint64_t d = todo.back();
    todo.pop_back();
    upfs::Listing list;
    UPFS_RETURN_IF_ERROR(ns.List(d, &list));
    for (const auto& e : list) {
      if (e.name == "." || e.name == "..") continue;
      seen.insert(e.ino);
      if (e.type == FileType::kDirectory) todo.push_back(e.ino);
    }
  }
  *n = seen.size();
  return Status::OK();
}

uint64_t Rounds() {
  if (const char* e = std::getenv("UPFS_TORTURE_LONG"); e && std::string(e) == "1") return 200;
  return upfs_test::Scaled(30, 2);
}

TEST(PoolTorture, KilledWorkersLoseNothingAcknowledged) {
  upfs_test::TempDir dir;
  const std::string pool_path = dir.File("pool");
  const std::string mnt = "/upfs-pool-torture-" + std::to_string(getpid());
  const uint64_t seed = upfs_test::TestSeed(0x9e3779b9);
  std::printf("seed %llu (UPFS_TEST_SEED)\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  ASSERT_EQ(upfs_mkfs(pool_path.c_str(), 0), 0) << upfs_last_error();

  // The shared directories, made before any worker runs.
  std::vector<TreeModel> models(kWorkers);
  {
    ASSERT_EQ(upfs_mount(pool_path.c_str(), mnt.c_str()), 0) << upfs_last_error();
    for (int k = 0; k < kSharedDirs; ++k) {
      ASSERT_EQ(upfs_mkdir((mnt + Shared(k)).c_str(), 0777), 0) << upfs_last_error();
      for (TreeModel& m : models) m.Mkdir(Shared(k), 0777);
    }
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
  }
  std::vector<uint64_t> next_seq(kWorkers, 1);
  uint64_t total_acked = 0, total_in_flight_applied = 0, total_in_flight = 0;
  const uint64_t rounds = Rounds();
  for (uint64_t round = 0; round < rounds; ++round) {
    std::vector<pid_t> pids(kWorkers);
    std::vector<std::string> logs(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      logs[w] = dir.File("w" + std::to_string(w) + ".log." + std::to_string(round));
      const int fd = open(logs[w].c_str(), O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
      ASSERT_GE(fd, 0);
      const uint64_t wseed = rng();
      pids[w] = fork();
      ASSERT_GE(pids[w], 0);
      if (pids[w] == 0) {
        Worker(w, models[w], next_seq[w], pool_path, mnt, fd, wseed).Run();
      }
      close(fd);
    }
    // Each worker dies at its own moment: a few early (inside mount and
    // recovery), most after some hundreds of operations.
    std::vector<std::pair<int, int>> kills;  // (ms, worker)
    for (int w = 0; w < kWorkers; ++w)
      kills.emplace_back(rng() % 8 == 0 ? int(rng() % 5) : 20 + int(rng() % 400), w);
    std::sort(kills.begin(), kills.end());
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& [ms, w] : kills) {
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(ms));
      kill(pids[w], SIGKILL);
    }
    for (int w = 0; w < kWorkers; ++w) {
      int status = 0;
      ASSERT_EQ(waitpid(pids[w], &status, 0), pids[w]);
      WorkerLog l = ReadLog(logs[w]);
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "round " << round << " worker " << w << " exited with status " << status << ": " << l.error;
    }

    // Recovery: the first attach with nobody else attached.
    std::unique_ptr<Pool> pool;
    Status st = Pool::Attach(pool_path, &pool);
    ASSERT_TRUE(st.ok()) << "round " << round << ": recovery failed: " << st.ToString();
    std::string dump;
    st = ct::DumpPool(pool.get(), &dump);
    ASSERT_TRUE(st.ok()) << "round " << round << ": the recovered tree cannot be walked: " << st.ToString();
    for (int w = 0; w < kWorkers; ++w) {
      WorkerLog l = ReadLog(logs[w]);
      ASSERT_TRUE(l.error.empty()) << "round " << round << " worker " << w << ": " << l.error;
      TreeModel acked = models[w];
      for (const Msg& m : l.acked)
        if (m.err == 0) ApplyModel(&acked, OpOf(m));
      total_acked += l.acked.size();
      const std::string got = LinesOf(dump, w);
      const std::string without = LinesOf(acked.Dump(), w);
      if (got == without) {
        models[w] = acked;
        if (l.in_flight) ++total_in_flight;
      } else {
        ASSERT_TRUE(l.in_flight) << "round " << round << " worker " << w
                                 << ": an acknowledged operation is missing or changed: "
                                 << ct::DumpDiff(got, without) << " (" << l.acked.size() << " acknowledged)";
        TreeModel with = acked;
        const NsOp op = OpOf(l.flight);
        ApplyModel(&with, op);
        ASSERT_EQ(got, LinesOf(with.Dump(), w))
            << "round " << round << " worker " << w << ": neither before nor after the operation in flight ("
            << op.Describe() << "): " << ct::DumpDiff(got, without);
        models[w] = with;
        ++total_in_flight;
        ++total_in_flight_applied;
      }
      next_seq[w] = std::max(next_seq[w], l.max_seq + 1);
    }
    // Nothing but the shared directories and the workers' names.
    {
      size_t i = 0;
      while (i < dump.size()) {
        const size_t e = dump.find('\n', i);
        const std::string path = dump.substr(i, dump.find(' ', i) - i);
        bool known = path == "/";
        for (int k = 0; k < kSharedDirs; ++k) known = known || path == Shared(k);
        for (int w = 0; w < kWorkers; ++w) known = known || Owns(path, w);
        ASSERT_TRUE(known) << "round " << round << ": a name nobody made: " << dump.substr(i, e - i);
        i = e + 1;
      }
      for (int k = 0; k < kSharedDirs; ++k)
        ASSERT_NE(dump.find("\n" + Shared(k) + " d "), std::string::npos) << "shared directory gone";
    }
    // Recovery freed every orphan (a killed worker's inode made but never
    // named, a file unlinked while open).
    uint64_t in_use = 0, named = 0;
    ASSERT_TRUE(InodesInUse(pool.get(), &in_use).ok());
    ASSERT_TRUE(InodesNamed(pool.get(), &named).ok());
    EXPECT_EQ(in_use, named) << "round " << round << ": inodes in use that no name reaches";
    pool.reset();
    upfs::PoolReport rep;
    st = upfs::CheckPool(pool_path, &rep);
    ASSERT_TRUE(st.ok()) << "round " << round << ": fsck: " << st.ToString();
    std::string problems;
    for (const std::string& p : rep.problems) problems += "\n  " + p;
    ASSERT_TRUE(rep.problems.empty()) << "round " << round << ": fsck found" << problems;
    EXPECT_EQ(rep.orphans, 0u);
    EXPECT_LE(rep.leaked_blocks, 0) << "round " << round;
    // Recovery gave back what was wholly free beyond what it keeps, and
    // gave memory to what it kept (holes of a growth a kill cut short, of
    // extents given back before): a store to a free block never faults.
    EXPECT_EQ(upfs_test::FreeBlocksWithoutMemory(pool_path), 0u) << "round " << round;
  }
  std::printf("%llu rounds, %llu operations acknowledged, %llu in flight at a kill (%llu of them done)\n",
              (unsigned long long)rounds, (unsigned long long)total_acked,
              (unsigned long long)total_in_flight, (unsigned long long)total_in_flight_applied);
  EXPECT_GT(total_acked, rounds) << "the workers made no progress";
}

}  // namespace
