// Concurrency tests of a pool's namespace: threads and processes creating,
// renaming and unlinking in shared directories while others list them.
//
// (1) Tokens (threads; and processes, (3)). N token files, each holding its
//     id, spread over K shared directories; movers rename random names
//     between the directories with plain rename, RENAME_NOREPLACE and
//     RENAME_EXCHANGE. Names are chosen so that no rename may ever destroy
//     a token: a plain rename only targets a "private" name of the mover
//     that it knows to be free (only its owner ever renames *into* a private
//     name, so once seen free it stays free until the owner fills it);
//     NOREPLACE targets shared slot names; EXCHANGE any two names. Every
//     result must be one the kernel could give (ENOENT when a source has
//     gone, EEXIST for an occupied NOREPLACE target, nothing else). Readers
//     of a moved name see either ENOENT or a whole token.
//     Listers scan every directory meanwhile: no name twice in one scan,
//     "." and ".." once, only names of the universe, and the pinned files
//     (never moved) exactly once each; with one directory (K = 1) every
//     scan must also hold exactly N tokens (a rename within one directory
//     is one atomic change of it). At the end every token exists exactly
//     once, with its id, and CheckPool finds nothing wrong and no leak.
// (3) Tokens with processes: child processes mount the pool themselves and
//     move tokens while the parent moves and lists in threads.
// Two tests after them reproduce bugs these tests found (see each).
//
// Knobs: UPFS_TEST_SCALE (operations and rounds), UPFS_TEST_SEED.
// Must stay clean under ThreadSanitizer: test threads share only atomics,
// a mutex-protected error list and the pool.
//
// (2), create/unlink churn, and checkpoints written while threads work are
// in pool_churn_test.cc.

#include "pool_concurrency_util.h"
#include "pool_tokens.h"

namespace {

using namespace pool_conc;

struct TokenParams {
  const char* name;
  TokenLayout layout;
  int movers;
  int listers;
  uint64_t ops;  // per mover, before scaling
};

void PrintTo(const TokenParams& p, std::ostream* os) { *os << p.name; }

class PoolTokenTest : public PoolConcurrencyTest, public ::testing::WithParamInterface<TokenParams> {};

TEST_P(PoolTokenTest, RenamesNeitherLoseNorDuplicateTokens) {
  const TokenParams& tp = GetParam();
  const TokenLayout& L = tp.layout;
  const uint64_t seed = TestSeed(0x70c3e5);
  const uint64_t ops = Scaled(tp.ops, 50);
  std::printf("tokens (%s): %d tokens in %d directories, %d movers x %" PRIu64 " renames, %d listers, seed %" PRIu64
              "\n",
              tp.name, L.tokens, L.dirs, tp.movers, ops, tp.listers, seed);
  ASSERT_EQ(L.owners, tp.movers);
  MakeTokens(mnt_, L);
  if (HasFatalFailure()) return;

  Errors errs;
  std::atomic<bool> stop{false};
  std::vector<MoverStats> ms(tp.movers);
  std::vector<ListerStats> ls(tp.listers);
  std::vector<std::thread> movers, listers;
  for (int l = 0; l < tp.listers; ++l)
    listers.emplace_back([&, l] { RunLister(mnt_, L, seed * 31 + 1000 + l, stop, 3, &errs, &ls[l]); });
  for (int m = 0; m < tp.movers; ++m)
    movers.emplace_back([&, m] {
      RunMover(mnt_, L, m, ops, seed, [&](const std::string& e) { errs.Add("mover " + std::to_string(m) + ": " + e); },
               &ms[m]);
    });
  for (auto& t : movers) t.join();
  stop.store(true, std::memory_order_release);
  for (auto& t : listers) t.join();

  MoverStats total;
  for (const auto& s : ms) total.Add(s);
  ListerStats lt;
  for (const auto& s : ls) lt.scans += s.scans, lt.entries += s.entries, lt.reads += s.reads;
  std::printf("movers: %s\nlisters: %" PRIu64 " scans, %" PRIu64 " entries, %" PRIu64 " reads\n",
              total.Text().c_str(), lt.scans, lt.entries, lt.reads);
  EXPECT_EQ(errs.count(), 0u) << "seed " << seed << ":\n" << errs.Text();
  // Not trivial: every kind of rename did move tokens.
  EXPECT_GT(total.plain.ok, 0u);
  EXPECT_GT(total.noreplace.ok, 0u);
  EXPECT_GT(total.noreplace.eexist, 0u);
  EXPECT_GT(total.exchange.ok, 0u);

  CheckTokens(mnt_, L);
  CheckDetached(uint64_t(L.tokens + L.dirs * L.pinned), uint64_t(L.dirs) + 1);
}

INSTANTIATE_TEST_SUITE_P(
    Threads, PoolTokenTest,
    ::testing::Values(
        // Across directories: a token in flight may be listed in both or in neither.
        TokenParams{"four directories", TokenLayout{4, 96, 48, 4, 6, 4}, 4, 2, 120000},
        // One directory: every scan holds every token exactly once.
        TokenParams{"one directory", TokenLayout{1, 48, 56, 3, 8, 4}, 3, 2, 120000}),
    [](const ::testing::TestParamInfo<TokenParams>& i) {
      return i.param.layout.dirs == 1 ? std::string("OneDirectory") : std::string("ManyDirectories");
    });

// (3) The same with processes: child processes mount the pool themselves
// and move tokens; the parent moves tokens in a thread of its own and lists
// meanwhile, and checks the end.
TEST_F(PoolConcurrencyTest, ProcessesMoveTokensWhileOthersList) {
  const TokenLayout L{3, 72, 48, 4, 6, 4};
  const int children = 3;  // owners 0..2; the parent's mover is owner 3
  const uint64_t seed = TestSeed(0x9a0c);
  const uint64_t ops = Scaled(100000, 50);
  std::printf("processes: %d tokens in %d directories, %d child movers + 1 parent mover x %" PRIu64
              " renames, 2 listers, seed %" PRIu64 "\n",
              L.tokens, L.dirs, children, ops, seed);
  MakeTokens(mnt_, L);
  if (HasFatalFailure()) return;
  // Nothing of the pool is attached across fork: each child attaches itself.
  Umount();
  if (HasFatalFailure()) return;
  std::vector<upfs_test::ReportingChild> kids;
  for (int c = 0; c < children; ++c) {
    kids.push_back(upfs_test::ForkReporting("mover process " + std::to_string(c), {}, [&](int out) {
      if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) {
        upfs_test::PipeWriteString(out, std::string("E mount: ") + upfs_last_error() + "\n");
        _exit(2);
      }
      MoverStats st;
      int nerr = 0;
      RunMover(mnt_, L, c, ops, seed, [&](const std::string& e) {
        if (nerr++ < int(kMaxErrors)) upfs_test::PipeWriteString(out, "E " + e + "\n");
      }, &st);
      upfs_test::PipeWriteString(out, "R " + st.Text() + "\n");
      if (upfs_umount(mnt_.c_str()) != 0) {
        upfs_test::PipeWriteString(out, std::string("E umount: ") + upfs_last_error() + "\n");
        _exit(2);
      }
      _exit(0);
    }));
    ASSERT_GE(kids.back().pid, 0);
  }
  Mount();
  if (HasFatalFailure()) return;
  Errors errs;
  std::atomic<bool> stop{false};
  MoverStats mine;
  std::vector<ListerStats> ls(2);
  std::vector<std::thread> threads;
  for (int l = 0; l < 2; ++l)
    threads.emplace_back([&, l] { RunLister(mnt_, L, seed * 31 + 1000 + l, stop, 3, &errs, &ls[l]); });
  std::thread mover([&] {
    RunMover(mnt_, L, children, ops, seed, [&](const std::string& e) { errs.Add("parent mover: " + e); }, &mine);
  });
  for (auto& k : kids) {
    bool hung;
    std::string how;
    std::string out = upfs_test::CollectReport(k, 300 * 1000, &how, &hung);
    if (hung) ADD_FAILURE() << k.what << " hung";
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("E ", 0) == 0) ADD_FAILURE() << k.what << " (seed " << seed << "): " << line.substr(2);
      if (line.rfind("R ", 0) == 0) std::printf("%s: %s\n", k.what.c_str(), line.c_str() + 2);
    }
    EXPECT_EQ(how, "exit 0") << k.what;
  }
  mover.join();
  stop.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  ListerStats lt;
  for (const auto& s : ls) lt.scans += s.scans, lt.reads += s.reads;
  std::printf("parent mover: %s\nlisters: %" PRIu64 " scans, %" PRIu64 " reads\n", mine.Text().c_str(), lt.scans,
              lt.reads);
  EXPECT_EQ(errs.count(), 0u) << "seed " << seed << ":\n" << errs.Text();
  CheckTokens(mnt_, L);
  // Children detach while the parent lists: their retired blocks are
  // freed all the same (DetachWhileAnotherProcessListsLeaksNoBlocks).
  CheckDetached(uint64_t(L.tokens + L.dirs * L.pinned), uint64_t(L.dirs) + 1);
}

// Threads that close the last descriptors of different files at once, just
// after a mount. It hung (found by the process test below): every engine
// File's destructor called JoinBackground() on its block space
// (src/engine/file.cc, File::~File), and a pool's files share the pool's
// Medium, whose collapse worker runs for the first second or so after a
// mount of a pool of 64 MiB or more on tmpfs: concurrent closes then
// std::thread::join the same worker from several threads
// (Medium::JoinBackground, src/medium/medium.cc), which is undefined and
// here blocked them all for ever. Pool files no longer stop the pool's
// worker (FileStorage::space_outlives_file); it forks so that a hang is a failure after 60 s, not a stuck test.
TEST_F(PoolConcurrencyTest, ConcurrentClosesJustAfterMount) {
  const int threads = 6;
  const uint64_t mounts = Scaled(20, 3);
  for (int t = 0; t < threads; ++t) ASSERT_EQ(CreateFile(P("f" + std::to_string(t)), "x"), 0);
  Umount();
  if (HasFatalFailure()) return;
  upfs_test::ReportingChild kid = upfs_test::ForkReporting("closer process", {}, [&](int out) {
    for (uint64_t m = 0; m < mounts; ++m) {
      if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) {
        upfs_test::PipeWriteString(out, std::string("E mount: ") + upfs_last_error() + "\n");
        _exit(2);
      }
      std::barrier sync(threads);
      std::vector<std::thread> ts;
      std::atomic<int> bad{0};
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          const std::string p = P("f" + std::to_string(t));
          int fd = upfs_open(p.c_str(), O_RDONLY);
          char c;
          if (fd < 0 || upfs_pread(fd, &c, 1, 0) != 1) bad.fetch_add(1);
          sync.arrive_and_wait();
          if (fd >= 0) upfs_close(fd);  // the engine File goes here
        });
      for (auto& th : ts) th.join();
      if (bad.load()) upfs_test::PipeWriteString(out, "E open or read failed\n");
      if (upfs_umount(mnt_.c_str()) != 0) {
        upfs_test::PipeWriteString(out, std::string("E umount: ") + upfs_last_error() + "\n");
        _exit(2);
      }
    }
    _exit(0);
  });
  ASSERT_GE(kid.pid, 0);
  bool hung;
  std::string how;
  std::string out = upfs_test::CollectReport(kid, 60 * 1000, &how, &hung);
  EXPECT_FALSE(hung) << "closing files in several threads at once hung";
  EXPECT_EQ(out, "");
  if (!hung) {
    EXPECT_EQ(how, "exit 0");
  }
  Mount();
}

// Makes `p` a one-byte pool file and runs `call` on it in two threads,
// again and again, while this thread does `rounds` of `remount` (which
// unmounts and mounts the pool again), or until errors pile up.
template <typename Call, typename Remount>
void CallWhileRemounting(const std::string& p, uint64_t rounds, Call call, Remount remount) {
  ASSERT_EQ(CreateFile(p, "x"), 0);
  std::atomic<bool> stop{false};
  Errors errors;
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i)
    ts.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed) && !errors.Many()) call(p, errors);
    });
  for (uint64_t r = 0; r < rounds && !errors.Many(); ++r) {
    remount();
    if (::testing::Test::HasFatalFailure()) break;
  }
  stop.store(true);
  for (auto& th : ts) th.join();
  EXPECT_EQ(errors.count(), 0u) << errors.Text();
}

// Path calls in other threads while the pool is unmounted and mounted
// again. A path call found its Mount under the mount table's lock and
// began its guard only after, so an upfs_umount in between freed the
// Mount (and the pool) under it; ThreadSanitizer saw the free race the
// call's reads. InPool now begins the guard before it reads the table.
TEST_F(PoolConcurrencyTest, UmountWhileOtherThreadsResolvePaths) {
  auto stat_it = [](const std::string& p, Errors& errors) {
    struct stat st;
    // Mounted: the pool's file. Not mounted: the kernel has no such path.
    if (upfs_stat(p.c_str(), &st) == 0) {
      if (st.st_size != 1) errors.Add("stat: size " + std::to_string(st.st_size));
    } else if (errno != ENOENT) {
      errors.Add(std::string("stat: ") + upfs_last_error());
    }
  };
  CallWhileRemounting(P("f"), Scaled(400, 40), stat_it, [&] {
    Umount();
    Mount();
  });
}

// Opens in other threads while the pool is unmounted, the unmount tried
// until it succeeds, and mounted again. An upfs_umount checked the count
// of open descriptors, then took the mount away; an open that had looked
// the mount up before and counted its descriptor only after the check got
// a descriptor of a pool already gone (its memory freed once the open's
// call ended): this test saw it in most of its first 20 rounds. An open
// now counts itself, then looks whether the mount is leaving; an unmount
// marks it leaving, then counts (docs/design.md, "Unmounting").
TEST_F(PoolConcurrencyTest, UmountNeverLeavesAnOpenDescriptor) {
  std::atomic<bool> unmounted{false};
  auto open_it = [&](const std::string& p, Errors& errors) {
    // Mounted: the pool's file. Not mounted: the kernel has no such path.
    const int fd = upfs_open(p.c_str(), O_RDONLY);
    if (fd < 0) {
      if (errno != ENOENT) errors.Add(std::string("open: ") + upfs_last_error());
      return;
    }
    // A descriptor held while the unmount succeeded: the unmount should
    // have failed with EBUSY. (Its pool may be freed: it is not used.)
    if (unmounted.load(std::memory_order_seq_cst)) {
      errors.Add("descriptor " + std::to_string(fd) + " outlived a successful unmount");
      return;
    }
    struct stat st;
    if (upfs_fstat(fd, &st) != 0 || st.st_size != 1) errors.Add("fstat of the pool's file");
    if (upfs_close(fd) != 0) errors.Add(std::string("close: ") + upfs_last_error());
  };
  CallWhileRemounting(P("f"), Scaled(300, 30), open_it, [&] {
    for (int tries = 0; upfs_umount(mnt_.c_str()) != 0;) {
      ASSERT_EQ(errno, EBUSY) << upfs_last_error();
      ASSERT_LT(++tries, 10000000) << "the unmount never found the pool idle";
    }
    mounted_ = false;
    unmounted.store(true, std::memory_order_seq_cst);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    unmounted.store(false, std::memory_order_seq_cst);
    Mount();
  });
}

// Processes that detach while a thread of another process lists. It leaked
// blocks (found by the process test above), most runs: a process whose
// checkpoints retired log and image blocks freed them at detach only if
// the pool's epoch could be advanced past them at once, and dropped the
// rest while the last process to leave still marked the pool clean. ~Pool
// now waits for the readers, and if it cannot, leaves the pool to recovery.
TEST_F(PoolConcurrencyTest, DetachWhileAnotherProcessListsLeaksNoBlocks) {
  const int children = 3, iters = 25000;  // each child writes checkpoints
  ASSERT_EQ(upfs_mkdir(P("d").c_str(), 0755), 0);
  Umount();
  if (HasFatalFailure()) return;
  std::vector<upfs_test::ReportingChild> kids;
  for (int c = 0; c < children; ++c) {
    kids.push_back(upfs_test::ForkReporting("churner " + std::to_string(c), {}, [&](int out) {
      if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) _exit(2);
      for (int i = 0; i < iters; ++i) {
        const std::string p = P("d/c" + std::to_string(c) + "-" + std::to_string(i));
        if (CreateFile(p, "") != 0 || upfs_unlink(p.c_str()) != 0) {
          upfs_test::PipeWriteString(out, "E create or unlink " + p + ": " + upfs_last_error() + "\n");
          _exit(3);
        }
      }
      if (upfs_umount(mnt_.c_str()) != 0) _exit(4);
      _exit(0);
    }));
    ASSERT_GE(kids.back().pid, 0);
  }
  Mount();
  std::atomic<bool> stop{false};
  std::vector<std::thread> listers;
  for (int l = 0; l < 2; ++l)
    listers.emplace_back([&] {
      std::vector<std::string> names;
      int e;
      while (!stop.load(std::memory_order_acquire)) Scan(P("d"), &names, &e);
    });
  for (auto& k : kids) {
    bool hung;
    std::string how;
    EXPECT_EQ(upfs_test::CollectReport(k, 120 * 1000, &how, &hung), "") << k.what;
    EXPECT_EQ(how, "exit 0") << k.what;
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : listers) t.join();
  CheckDetached(0, 2);
}

}  // namespace
