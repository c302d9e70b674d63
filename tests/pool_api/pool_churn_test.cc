// Concurrency tests of a pool's namespace, part two (part one, tokens, is
// pool_concurrency_test.cc):
// (2) Create/unlink churn in one directory by several threads (each with
//     its own names and a model of them, plus shared names raced in rounds
//     with O_CREAT|O_EXCL: exactly one creator wins each, exactly one
//     unlinker wins each) while listers scan it, checking that what whole
//     rounds left (and removed) is there (and not) in every later scan. At
//     the end the directory holds exactly the expected names and contents;
//     CheckPool: no problem, no orphan, no leaked block, no leaked inode.
// Checkpoints written back to back while threads change, read and list.
// Processes racing for the same names (records that reach a process
// through its catch-up, not its own commits).
//
// Knobs: UPFS_TEST_SCALE (operations and rounds), UPFS_TEST_SEED.
// Must stay clean under ThreadSanitizer.
#include <sys/mman.h>

#include <new>

#include "pool_concurrency_util.h"

namespace {

using namespace pool_conc;

// ---------------------------------------------------------------------------
// (2) Create/unlink churn in one directory.

struct Churn {
  int workers = 3;
  int own = 16;      // own names per worker: w<w>-<k>
  int shared = 6;    // shared names per round: r<r>-<j>; odd j are unlinked again
  int own_ops = 24;  // per worker and round
  int pinned = 8;    // keep<x>
  uint64_t rounds = 1;

  static std::string Own(int w, int k) { return "w" + std::to_string(w) + "-" + std::to_string(k); }
  static std::string Shared(uint64_t r, int j) { return "r" + std::to_string(r) + "-" + std::to_string(j); }
  static std::string Keep(int x) { return "keep" + std::to_string(x); }
  static std::string SharedText(uint64_t r, int j, int w) { return Shared(r, j) + " by " + std::to_string(w) + "\n"; }
};

TEST_F(PoolConcurrencyTest, CreateUnlinkChurnWhileOthersList) {
  Churn C;
  C.rounds = Scaled(300, 5);
  const int listers = 2;
  const uint64_t seed = TestSeed(0xc4u);
  std::printf("churn: %d workers x %" PRIu64 " rounds (%d own ops, %d shared names each), %d listers, seed %" PRIu64
              "\n",
              C.workers, C.rounds, C.own_ops, C.shared, listers, seed);
  const std::string dir = P("churn");
  ASSERT_EQ(upfs_mkdir(dir.c_str(), 0755), 0) << upfs_last_error();
  for (int x = 0; x < C.pinned; ++x) ASSERT_EQ(CreateFile(dir + "/" + C.Keep(x), C.Keep(x) + "\n"), 0);

  Errors errs;
  const size_t nshared = size_t(C.rounds) * size_t(C.shared);
  std::vector<std::atomic<int>> created(nshared), unlinked(nshared), winner(nshared);
  for (size_t i = 0; i < nshared; ++i) created[i] = 0, unlinked[i] = 0, winner[i] = -1;
  std::atomic<uint64_t> rounds_done{0};
  std::atomic<bool> stop{false};
  std::barrier sync(C.workers);
  // Per worker: its names and their contents at the end.
  std::vector<std::map<int, std::string>> model(C.workers);
  std::vector<OpStats> own_stats(C.workers);

  auto worker = [&](int w) {
    std::mt19937_64 rng(seed * 131 + uint64_t(w));
    std::map<int, std::string>& m = model[w];
    uint64_t serial = 0;
    auto fail = [&](const std::string& e) { errs.Add("worker " + std::to_string(w) + ": " + e); };
    for (uint64_t r = 0; r < C.rounds; ++r) {
      // Own names, against the model.
      for (int i = 0; i < C.own_ops; ++i) {
        const int k = int(rng() % C.own);
        const std::string p = dir + "/" + C.Own(w, k);
        const bool exists = m.count(k) != 0;
        const unsigned op = unsigned(rng() % 8);
        if (!exists || op == 0) {
          const std::string text = C.Own(w, k) + "#" + std::to_string(serial++) + "\n";
          const int e = CreateFile(p, text);
          own_stats[w].Count(e);
          if (e != (exists ? EEXIST : 0)) fail("create " + p + ": " + ErrnoText(e));
          if (!exists && e == 0) m[k] = text;
        } else if (op <= 3) {
          const int e = upfs_unlink(p.c_str()) == 0 ? 0 : errno;
          own_stats[w].Count(e);
          if (e != 0) fail("unlink " + p + ": " + ErrnoText(e));
          m.erase(k);
        } else if (op <= 5) {
          const int k2 = int(rng() % C.own);
          if (k2 == k) continue;
          const std::string p2 = dir + "/" + C.Own(w, k2);
          const int e = Rename(p, p2, 0);  // over k2 if it exists
          own_stats[w].Count(e);
          if (e != 0) fail("rename " + p + " -> " + p2 + ": " + ErrnoText(e));
          m[k2] = m[k];
          m.erase(k);
        } else {
          std::string s;
          const int e = ReadFile(p, &s);
          if (e != 0 || s != m[k]) fail("read " + p + ": " + (e ? ErrnoText(e) : "'" + s + "'") + ", expected '" + m[k] + "'");
        }
      }
      // Shared names: every worker tries to create each; one must win.
      std::vector<int> order(C.shared);
      for (int j = 0; j < C.shared; ++j) order[j] = j;
      std::shuffle(order.begin(), order.end(), rng);
      sync.arrive_and_wait();
      for (int j : order) {
        const size_t at = size_t(r) * C.shared + j;
        const int e = CreateFile(dir + "/" + C.Shared(r, j), C.SharedText(r, j, w));
        if (e == 0) {
          created[at].fetch_add(1);
          winner[at].store(w);
        } else if (e != EEXIST) {
          fail("create shared " + C.Shared(r, j) + ": " + ErrnoText(e));
        }
      }
      sync.arrive_and_wait();
      // Every worker tries to unlink the odd ones; one must succeed.
      for (int j : order) {
        if (j % 2 == 0) continue;
        const size_t at = size_t(r) * C.shared + j;
        const std::string p = dir + "/" + C.Shared(r, j);
        const int ue = upfs_unlink(p.c_str()) == 0 ? 0 : errno;
        if (ue == 0) {
          unlinked[at].fetch_add(1);
        } else if (ue != ENOENT) {
          fail("unlink shared " + p + ": " + ErrnoText(ue));
        }
      }
      sync.arrive_and_wait();
      if (w == 0) rounds_done.store(r + 1, std::memory_order_release);
    }
  };

  auto lister = [&](int l, uint64_t* scans) {
    std::mt19937_64 rng(seed * 977 + uint64_t(l));
    std::vector<std::string> names;
    for (uint64_t i = 0; (i < 3 || !stop.load(std::memory_order_acquire)) && !errs.Many(); ++i) {
      const uint64_t done = rounds_done.load(std::memory_order_acquire);
      int e;
      if (!Scan(dir, &names, &e)) {
        errs.Add("scan: " + ErrnoText(e));
        continue;
      }
      ++*scans;
      std::set<std::string> seen;
      std::string scan_err;
      for (const auto& n : names) {
        if (!seen.insert(n).second) errs.Add("a scan lists '" + n + "' twice");
        int a, b, used = 0;
        const bool ok = n == "." || n == ".." ||
                        (std::sscanf(n.c_str(), "keep%d%n", &a, &used) == 1 && size_t(used) == n.size() &&
                         a >= 0 && a < C.pinned) ||
                        (std::sscanf(n.c_str(), "w%d-%d%n", &a, &b, &used) == 2 && size_t(used) == n.size() &&
                         a >= 0 && a < C.workers && b >= 0 && b < C.own) ||
                        (std::sscanf(n.c_str(), "r%d-%d%n", &a, &b, &used) == 2 && size_t(used) == n.size() &&
                         a >= 0 && uint64_t(a) < C.rounds && b >= 0 && b < C.shared);
        if (!ok) errs.Add("a scan lists a foreign name '" + n + "'");
      }
      if (!seen.count(".") || !seen.count("..")) errs.Add("a scan misses '.' or '..'");
      for (int x = 0; x < C.pinned; ++x)
        if (!seen.count(C.Keep(x))) errs.Add("a scan misses " + C.Keep(x));
      // What finished rounds left, and what they removed.
      for (uint64_t r = 0; r < done; ++r)
        for (int j = 0; j < C.shared; ++j)
          if (seen.count(C.Shared(r, j)) != (j % 2 == 0 ? 1u : 0u))
            errs.Add("a scan after round " + std::to_string(done - 1) + " finished " +
                     (j % 2 ? "lists " : "misses ") + C.Shared(r, j));
      // Read one listed name of a finished round: it must be whole.
      if (done > 0) {
        const uint64_t r = rng() % done;
        const int j = int(rng() % C.shared) & ~1;
        const size_t at = size_t(r) * C.shared + j;
        std::string s;
        const int re = ReadFile(dir + "/" + C.Shared(r, j), &s);
        if (re != 0 || s != C.SharedText(r, j, winner[at].load()))
          errs.Add("read " + C.Shared(r, j) + ": " + (re ? ErrnoText(re) : "'" + s + "'"));
      }
    }
  };

  std::vector<uint64_t> scans(listers, 0);
  std::vector<std::thread> ts;
  for (int l = 0; l < listers; ++l) ts.emplace_back(lister, l, &scans[l]);
  std::vector<std::thread> ws;
  for (int w = 0; w < C.workers; ++w) ws.emplace_back(worker, w);
  for (auto& t : ws) t.join();
  stop.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();

  OpStats own_total;
  for (const auto& s : own_stats) own_total.Add(s);
  uint64_t total_scans = 0;
  for (uint64_t s : scans) total_scans += s;
  std::printf("own names: %s; listers: %" PRIu64 " scans\n", own_total.Text().c_str(), total_scans);
  EXPECT_EQ(errs.count(), 0u) << "seed " << seed << ":\n" << errs.Text();
  for (size_t i = 0; i < nshared; ++i) {
    const uint64_t r = i / C.shared;
    const int j = int(i % C.shared);
    EXPECT_EQ(created[i].load(), 1) << "creators of " << C.Shared(r, j) << " that won O_EXCL";
    if (j % 2) {
      EXPECT_EQ(unlinked[i].load(), 1) << "unlinkers of " << C.Shared(r, j) << " that succeeded";
    }
  }

  // The directory holds exactly the expected names, with their contents.
  std::map<std::string, std::string> want;
  for (int x = 0; x < C.pinned; ++x) want[C.Keep(x)] = C.Keep(x) + "\n";
  for (int w = 0; w < C.workers; ++w)
    for (const auto& [k, text] : model[w]) want[C.Own(w, k)] = text;
  for (size_t i = 0; i < nshared; ++i)
    if (i % C.shared % 2 == 0) want[C.Shared(i / C.shared, int(i % C.shared))] = C.SharedText(i / C.shared, int(i % C.shared), winner[i].load());
  std::vector<std::string> names;
  int e;
  ASSERT_TRUE(Scan(dir, &names, &e)) << ErrnoText(e);
  std::map<std::string, std::string> got;
  for (const auto& n : names) {
    if (n == "." || n == "..") continue;
    std::string s;
    const int re = ReadFile(dir + "/" + n, &s);
    EXPECT_EQ(re, 0) << n;
    EXPECT_TRUE(got.emplace(n, s).second) << n << " listed twice";
  }
  EXPECT_EQ(names.size(), got.size() + 2);
  for (const auto& [n, text] : want) {
    auto it = got.find(n);
    if (it == got.end()) {
      ADD_FAILURE() << "missing: " << n;
    } else {
      EXPECT_EQ(it->second, text) << n;
    }
  }
  for (const auto& [n, text] : got)
    if (!want.count(n)) ADD_FAILURE() << "unexpected: " << n;
  CheckDetached(want.size(), 2);
}

// A checkpoint is written from a frozen layer of the index while the
// process goes on (docs/design.md, "Checkpoints"): threads changing their
// own names and a thread listing the directory run while another thread
// writes checkpoints back to back. Every answer must be the model's, every
// listing must hold the pinned names once, and the pool must check clean
// and read back the same after a detach.
TEST_F(PoolConcurrencyTest, CheckpointsWrittenWhileThreadsChangeAndLook) {
  const int workers = 2, own = 64, pinned = 32;
  const uint64_t ops = Scaled(20000, 800);
  const uint64_t seed = TestSeed(0xc7u);
  const std::string dir = P("ck");
  ASSERT_EQ(upfs_mkdir(dir.c_str(), 0755), 0) << upfs_last_error();
  for (int x = 0; x < pinned; ++x) ASSERT_EQ(CreateFile(dir + "/pin" + std::to_string(x), "pin\n"), 0);
  upfs::Pool* pool;  // lives while mounted
  {
    // A PoolPath holds a call's guard, which would keep the mount (and the
    // pool) attached past the umount at the end: let go of it at once.
    upfs::PoolPath pp;
    ASSERT_TRUE(upfs::InPool(AT_FDCWD, mnt_.c_str(), &pp));
    pool = pp.mount->pool.get();
  }

  Errors errs;
  std::atomic<int> running{workers};
  std::atomic<uint64_t> checkpoints{0}, listings{0};
  std::vector<std::map<int, std::string>> model(workers);
  auto name = [](int w, int k) { return "w" + std::to_string(w) + "-" + std::to_string(k); };
  auto worker = [&](int w) {
    std::mt19937_64 rng(seed * 977 + uint64_t(w));
    auto& m = model[w];
    for (uint64_t i = 0; i < ops && !errs.Many(); ++i) {
      const int k = int(rng() % own);
      const std::string path = dir + "/" + name(w, k);
      const unsigned op = unsigned(rng() % 6);
      if (!m.count(k)) {
        const std::string text = name(w, k) + "#" + std::to_string(i) + "\n";
        if (int e = CreateFile(path, text); e != 0) errs.Add("create " + path + ": " + ErrnoText(e));
        else m[k] = text;
      } else if (op == 0) {
        if (upfs_unlink(path.c_str()) != 0) errs.Add("unlink " + path + ": " + ErrnoText(errno));
        m.erase(k);
      } else if (op == 1) {
        const int k2 = int(rng() % own);
        if (k2 == k) continue;
        const std::string p2 = dir + "/" + name(w, k2);
        if (upfs_rename(path.c_str(), p2.c_str()) != 0) errs.Add("rename " + path + ": " + ErrnoText(errno));
        m[k2] = m[k];
        m.erase(k);
      } else {
        std::string got;
        const int e = ReadFile(path, &got);
        if (e != 0 || got != m[k]) errs.Add("read " + path + ": " + (e ? ErrnoText(e) : "'" + got + "'"));
      }
    }
    running.fetch_sub(1);
  };
  auto lister = [&] {
    while (running.load() > 0 && !errs.Many()) {
      std::map<std::string, int> seen;
      UPFS_DIR* d = upfs_opendir(dir.c_str());
      if (!d) {
        errs.Add("opendir: " + ErrnoText(errno));
        return;
      }
      while (struct dirent* e = upfs_readdir(d)) ++seen[e->d_name];
      upfs_closedir(d);
      for (auto& [n, c] : seen)
        if (c != 1) errs.Add("listed " + n + " " + std::to_string(c) + " times");
      for (int x = 0; x < pinned; ++x)
        if (!seen.count("pin" + std::to_string(x))) errs.Add("pin" + std::to_string(x) + " missing from a listing");
      listings.fetch_add(1);
    }
  };
  auto checkpointer = [&] {
    while (running.load() > 0 && !errs.Many()) {
      upfs::Status st = pool->Checkpoint();
      if (st.ok()) checkpoints.fetch_add(1);
      else if (st.err() != EBUSY) errs.Add("checkpoint: " + st.ToString());
    }
  };
  std::vector<std::thread> ts;
  for (int w = 0; w < workers; ++w) ts.emplace_back(worker, w);
  ts.emplace_back(lister);
  ts.emplace_back(checkpointer);
  for (auto& t : ts) t.join();
  std::printf("%" PRIu64 " checkpoints and %" PRIu64 " listings during %d x %" PRIu64 " operations\n",
              checkpoints.load(), listings.load(), workers, ops);
  ASSERT_EQ(errs.count(), 0u) << errs.Text();
  EXPECT_GT(checkpoints.load(), 0u);
  uint64_t files = pinned;
  for (auto& m : model) files += m.size();
  CheckDetached(files, 2);
  Mount();
  for (int w = 0; w < workers; ++w)
    for (auto& [k, text] : model[w]) {
      std::string got;
      EXPECT_EQ(ReadFile(dir + "/" + name(w, k), &got), 0);
      EXPECT_EQ(got, text);
    }
}

// Two processes create the same names in the same order with O_EXCL, then
// unlink them in the same order: each name is created once and unlinked
// once, whoever wins. A commit skips its name checks when the index has
// applied nothing since the path was resolved (PoolNamespace::SameView);
// a record of another process arrives through the catch-up just before
// the check, so a catch-up that did not count it let both processes win
// the same name (threads of one process do not show it: their commits
// count themselves). Neither starts unlinking before both have created:
// a racer descheduled in its creates would otherwise, quite rightly,
// create again a name the other had already unlinked.
TEST_F(PoolConcurrencyTest, ProcessesRacingForTheSameNamesWinEachOnce) {
  const int names = int(Scaled(20000, 2000));
  const std::string dir = P("race");
  ASSERT_EQ(upfs_mkdir(dir.c_str(), 0755), 0) << upfs_last_error();
  Umount();
  if (HasFatalFailure()) return;
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* created_all = new (shared) std::atomic<int>(0);  // racers done creating
  std::vector<upfs_test::ReportingChild> kids;
  for (int c = 0; c < 2; ++c) {
    kids.push_back(upfs_test::ForkReporting("racer " + std::to_string(c), {gate[1]}, [&](int out) {
      if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) {
        upfs_test::PipeWriteString(out, std::string("E mount: ") + upfs_last_error() + "\n");
        _exit(2);
      }
      char go;
      if (read(gate[0], &go, 1) != 1) _exit(3);  // both start at once
      int created = 0, unlinked = 0, errors = 0;
      auto name = [&](int i) { return dir + "/n" + std::to_string(i); };
      for (int i = 0; i < names; ++i) {
        const int fd = upfs_open(name(i).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd >= 0) {
          ++created;
          upfs_close(fd);
        } else if (errno != EEXIST && errors++ < 5) {
          upfs_test::PipeWriteString(out, "E create " + name(i) + ": " + ErrnoText(errno) + "\n");
        }
      }
      created_all->fetch_add(1);
      for (int spins = 0; created_all->load() < 2; ++spins) {
        if (spins > 120 * 1000) {  // about two minutes: the other racer died
          upfs_test::PipeWriteString(out, "E the other racer never finished creating\n");
          _exit(2);
        }
        usleep(1000);
      }
      for (int i = 0; i < names; ++i) {
        if (upfs_unlink(name(i).c_str()) == 0) ++unlinked;
        else if (errno != ENOENT && errors++ < 5)
          upfs_test::PipeWriteString(out, "E unlink " + name(i) + ": " + ErrnoText(errno) + "\n");
      }
      upfs_test::PipeWriteString(out, "R " + std::to_string(created) + " " + std::to_string(unlinked) + "\n");
      _exit(upfs_umount(mnt_.c_str()) == 0 ? 0 : 2);
    }));
    ASSERT_GE(kids.back().pid, 0);
  }
  close(gate[0]);
  ASSERT_EQ(write(gate[1], "gg", 2), 2);
  close(gate[1]);
  int created = 0, unlinked = 0;
  for (auto& k : kids) {
    bool hung;
    std::string how;
    std::istringstream in(upfs_test::CollectReport(k, 300 * 1000, &how, &hung));
    if (hung) ADD_FAILURE() << k.what << " hung";
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("E ", 0) == 0) ADD_FAILURE() << k.what << ": " << line.substr(2);
      int c = 0, u = 0;
      if (std::sscanf(line.c_str(), "R %d %d", &c, &u) == 2) {
        std::printf("%s: created %d, unlinked %d of %d names\n", k.what.c_str(), c, u, names);
        created += c;
        unlinked += u;
      }
    }
    EXPECT_EQ(how, "exit 0") << k.what;
  }
  munmap(shared, sizeof(std::atomic<int>));
  EXPECT_EQ(created, names) << "names created twice (or not at all)";
  EXPECT_EQ(unlinked, names) << "names unlinked twice (or not at all)";
  Mount();
  if (HasFatalFailure()) return;
  CheckDetached(0, 2);
}

}  // namespace
