// Concurrency tests on one strict-mode file: writers and readers in threads
// and in separate processes (appenders, truncation and parking have files
// of their own, concurrency_*_test.cc; the harness is concurrency_util.h).
//
// Every write is a self-describing record (test_util.h). Readers check that
// what they see is whole (no torn write), that per writer and location the
// sequence numbers never go back (no reordering, no resurrection), and at
// the end the file must hold the last write of a writer at every location
// (exactly the owner's last write where only one writer writes: no lost
// write). Outcomes never depend on timing: readers simply run until the
// writers are done.
//
// Must stay clean under ThreadSanitizer: test threads share only atomics
// and the upfs descriptors; results are collected after join.
#include "concurrency_util.h"

namespace {

using namespace upfs_concurrency;

// ---------------------------------------------------------------------------
// (a) Threads.

struct ThreadParams {
  int writers;
  int readers;
  bool presize;
  bool shared_fd;  // all threads on one descriptor (else one each)
};

void RunThreads(const ThreadParams& tp) {
  TempDir dir;
  const std::string path = dir.File("f");
  const uint64_t seed = upfs_test::TestSeed(1);
  const Layout L = MakeLayout(tp.writers);
  const uint64_t nwrites = upfs_test::Scaled(20000);
  std::printf("threads: %d writers x %" PRIu64 " writes, %d readers, %zu slots, file %" PRIu64 " bytes, seed %" PRIu64 "\n",
              tp.writers, nwrites, tp.readers, L.slots.size(), L.end, seed);

  int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  if (tp.presize) {
    ASSERT_EQ(upfs_ftruncate(fd, static_cast<off_t>(L.end)), 0);
  }
  auto open_fd = [&]() { return tp.shared_fd ? fd : upfs_open(path.c_str(), O_RDWR); };

  std::vector<WriterResult> wres(tp.writers);
  std::vector<ReaderCheck> rchk(tp.readers, ReaderCheck(L));
  std::atomic<int> writers_left{tp.writers};
  std::vector<std::thread> threads;
  std::vector<int> fds;
  for (int i = 0; i < tp.writers + tp.readers; ++i) {
    int f = open_fd();
    ASSERT_GE(f, 0) << upfs_last_error();
    fds.push_back(f);
  }
  for (int w = 0; w < tp.writers; ++w)
    threads.emplace_back([&, w] {
      RunWriter(fds[w], L, w, nwrites, seed, &wres[w]);
      writers_left.fetch_sub(1, std::memory_order_release);
    });
  for (int r = 0; r < tp.readers; ++r)
    threads.emplace_back([&, r] {
      RunReader(fds[tp.writers + r], L, seed * 77 + r, 200,
                [&] { return writers_left.load(std::memory_order_acquire) == 0; }, &rchk[r]);
    });
  for (auto& t : threads) t.join();
  if (!tp.shared_fd) {
    for (int f : fds) EXPECT_EQ(upfs_close(f), 0);
  }

  std::vector<std::vector<WriteId>> last;
  for (int w = 0; w < tp.writers; ++w) {
    EXPECT_TRUE(wres[w].errors.empty()) << Join(wres[w].errors);
    last.push_back(wres[w].last);
  }
  for (int r = 0; r < tp.readers; ++r) {
    EXPECT_TRUE(rchk[r].errors.empty()) << "reader " << r << " (seed " << seed << "):\n" << Join(rchk[r].errors);
    std::printf("reader %d: %" PRIu64 " reads, %" PRIu64 " non-zero slot observations\n", r, rchk[r].reads,
                rchk[r].nonzero);
  }
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content)) << upfs_last_error();
  std::vector<std::string> errs = CheckFinal(content, L, last, tp.presize);
  EXPECT_TRUE(errs.empty()) << "final state (seed " << seed << "):\n" << Join(errs);
  ASSERT_EQ(upfs_close(fd), 0);

  // Same after reopening (the log replays to the same state).
  fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  Bytes again;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &again));
  EXPECT_TRUE(again == content) << "content changed across close and reopen";
  upfs_close(fd);
  ExpectInspectClean(path);
}

TEST(ConcurrencyThreads, TwoWritersTwoReadersSharedFd) { RunThreads({2, 2, true, true}); }

TEST(ConcurrencyThreads, FourWritersTwoReadersOwnFds) { RunThreads({4, 2, true, false}); }

// Writers extend an empty file concurrently: no size update may be lost.
TEST(ConcurrencyThreads, ThreeWritersExtendingFile) { RunThreads({3, 1, false, false}); }

// ---------------------------------------------------------------------------
// (b) Processes: each child opens the file itself.

// Child side: runs a writer and reports "L <slot> <seq>" per slot and
// "E <text>" per error on `out`, then exits.
[[noreturn]] void WriterChild(const std::string& path, const Layout& L, int w, uint64_t n, uint64_t seed, int out) {
  int fd = upfs_open(path.c_str(), O_RDWR);
  if (fd < 0) {
    upfs_test::PipeWriteString(out, std::string("E open failed: ") + upfs_last_error() + "\n");
    _exit(1);
  }
  WriterResult res;
  RunWriter(fd, L, w, n, seed, &res);
  std::string msg;
  for (size_t s = 0; s < res.last.size(); ++s)
    if (res.last[s].seq) msg += "L " + std::to_string(s) + " " + std::to_string(res.last[s].seq) + "\n";
  for (const auto& e : res.errors) msg += "E " + e + "\n";
  if (upfs_close(fd) != 0) msg += std::string("E close failed: ") + upfs_last_error() + "\n";
  upfs_test::PipeWriteString(out, msg);
  _exit(res.errors.empty() ? 0 : 1);
}

[[noreturn]] void ReaderChild(const std::string& path, const Layout& L, uint64_t seed, int stop_fd, int out) {
  int fd = upfs_open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    upfs_test::PipeWriteString(out, std::string("E open failed: ") + upfs_last_error() + "\n");
    _exit(1);
  }
  ReaderCheck chk(L);
  RunReader(fd, L, seed, 200,
            [&] {
              struct pollfd p{stop_fd, POLLIN, 0};
              return ::poll(&p, 1, 0) > 0;  // readable (EOF) once the parent closes it
            },
            &chk);
  std::string msg = "R " + std::to_string(chk.reads) + " " + std::to_string(chk.nonzero) + "\n";
  for (const auto& e : chk.errors) msg += "E " + e + "\n";
  upfs_close(fd);
  upfs_test::PipeWriteString(out, msg);
  _exit(chk.errors.empty() ? 0 : 1);
}


TEST(ConcurrencyProcesses, WritersAndReaders) {
  TempDir dir;
  const std::string path = dir.File("f");
  const int nw = 3, nr = 2;
  const uint64_t seed = upfs_test::TestSeed(2);
  const Layout L = MakeLayout(nw);
  const uint64_t nwrites = upfs_test::Scaled(15000);
  {
    int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_ftruncate(fd, static_cast<off_t>(L.end)), 0);
    ASSERT_EQ(upfs_close(fd), 0);
  }
  int stop[2];
  ASSERT_EQ(::pipe(stop), 0);
  std::vector<Child> writers, readers;
  for (int i = 0; i < nw + nr; ++i) {
    Child c = upfs_test::ForkReporting((i < nw ? "writer " : "reader ") + std::to_string(i), {stop[1]},
                                       [&](int out) {
                                         if (i < nw) WriterChild(path, L, i, nwrites, seed, out);
                                         ReaderChild(path, L, seed * 31 + i, stop[0], out);
                                       });
    ASSERT_GE(c.pid, 0);
    (i < nw ? writers : readers).push_back(c);
  }
  ::close(stop[0]);

  std::vector<std::vector<WriteId>> last(nw, std::vector<WriteId>(L.slots.size()));
  auto collect = [&](Child& c, int w) {
    bool hung;
    std::string how;
    std::string out = upfs_test::CollectReport(c, 600 * 1000, &how, &hung);
    if (hung) ADD_FAILURE() << c.what << " hung";
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("L ", 0) == 0 && w >= 0) {
        unsigned s, seq;
        if (std::sscanf(line.c_str(), "L %u %u", &s, &seq) == 2 && s < L.slots.size())
          last[w][s] = WriteId{static_cast<uint16_t>(w), seq, L.slots[s].off, L.slots[s].len};
      } else if (line.rfind("E ", 0) == 0) {
        ADD_FAILURE() << c.what << " (seed " << seed << "): " << line.substr(2);
      } else if (line.rfind("R ", 0) == 0) {
        std::printf("%s: %s\n", c.what.c_str(), line.c_str() + 2);
      }
    }
    EXPECT_EQ(how, "exit 0") << c.what;
  };
  for (int w = 0; w < nw; ++w) collect(writers[w], w);
  ::close(stop[1]);  // readers stop
  for (auto& r : readers) collect(r, -1);

  int fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content));
  upfs_close(fd);
  std::vector<std::string> errs = CheckFinal(content, L, last, true);
  EXPECT_TRUE(errs.empty()) << "final state (seed " << seed << "):\n" << Join(errs);
  ExpectInspectClean(path);
}

// Threads and processes at the same time on one file.
TEST(ConcurrencyProcesses, ThreadsInsideTwoProcesses) {
  TempDir dir;
  const std::string path = dir.File("f");
  const uint64_t seed = upfs_test::TestSeed(3);
  const Layout L = MakeLayout(4);
  const uint64_t nwrites = upfs_test::Scaled(10000);
  {
    int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  // The child runs writers 2 and 3 in two threads; the parent writers 0, 1
  // and a reader after the fork.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    int fd = upfs_open(path.c_str(), O_RDWR);
    if (fd < 0) _exit(3);
    WriterResult r2, r3;
    std::thread t2([&] { RunWriter(fd, L, 2, nwrites, seed, &r2); });
    std::thread t3([&] { RunWriter(fd, L, 3, nwrites, seed, &r3); });
    t2.join();
    t3.join();
    std::string msg;
    for (int w : {2, 3}) {
      const WriterResult& r = w == 2 ? r2 : r3;
      for (size_t s = 0; s < r.last.size(); ++s)
        if (r.last[s].seq) msg += "L " + std::to_string(w) + " " + std::to_string(s) + " " + std::to_string(r.last[s].seq) + "\n";
      for (const auto& e : r.errors) msg += "E " + e + "\n";
    }
    upfs_close(fd);
    upfs_test::PipeWriteString(p[1], msg);
    _exit(r2.errors.empty() && r3.errors.empty() ? 0 : 1);
  }
  ::close(p[1]);
  int fd = upfs_open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  WriterResult r0, r1;
  ReaderCheck chk(L);
  std::atomic<int> left{2};
  std::thread t0([&] {
    RunWriter(fd, L, 0, nwrites, seed, &r0);
    left.fetch_sub(1);
  });
  std::thread t1([&] {
    RunWriter(fd, L, 1, nwrites, seed, &r1);
    left.fetch_sub(1);
  });
  std::thread tr([&] { RunReader(fd, L, seed + 5, 200, [&] { return left.load() == 0; }, &chk); });
  t0.join();
  t1.join();
  tr.join();
  bool to = false;
  std::string out = upfs_test::DrainFd(p[0], 600 * 1000, &to);
  ::close(p[0]);
  if (to) ::kill(pid, SIGKILL);
  EXPECT_EQ(upfs_test::WaitChild(pid), "exit 0") << out;
  EXPECT_TRUE(r0.errors.empty()) << Join(r0.errors);
  EXPECT_TRUE(r1.errors.empty()) << Join(r1.errors);
  EXPECT_TRUE(chk.errors.empty()) << "reader (seed " << seed << "):\n" << Join(chk.errors);

  std::vector<std::vector<WriteId>> last = {r0.last, r1.last, std::vector<WriteId>(L.slots.size()),
                                            std::vector<WriteId>(L.slots.size())};
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    unsigned w, s, seq;
    if (std::sscanf(line.c_str(), "L %u %u %u", &w, &s, &seq) == 3 && w < 4 && s < L.slots.size())
      last[w][s] = WriteId{static_cast<uint16_t>(w), seq, L.slots[s].off, L.slots[s].len};
    else if (line.rfind("E ", 0) == 0)
      ADD_FAILURE() << "child: " << line;
  }
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content));
  upfs_close(fd);
  std::vector<std::string> errs = CheckFinal(content, L, last, false);
  EXPECT_TRUE(errs.empty()) << "final state (seed " << seed << "):\n" << Join(errs);
  ExpectInspectClean(path);
}

// A process opens, reads and closes the file over and over while another
// process overwrites it (growing the log, which GC compacts): every open
// must succeed and see whole records.
TEST(ConcurrencyProcesses, OpenWhileAnotherProcessWrites) {
  TempDir dir;
  const std::string path = dir.File("f");
  const uint64_t seed = upfs_test::TestSeed(6);
  const Layout L = MakeLayout(2);
  const uint64_t nwrites = upfs_test::Scaled(60000);
  {
    int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_ftruncate(fd, static_cast<off_t>(L.end)), 0);
    ASSERT_EQ(upfs_close(fd), 0);
  }
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    int fd = upfs_open(path.c_str(), O_RDWR);
    if (fd < 0) {
      upfs_test::PipeWriteString(p[1], std::string("E open failed: ") + upfs_last_error() + "\n");
      _exit(1);
    }
    WriterResult r0, r1;
    RunWriter(fd, L, 0, nwrites / 2, seed, &r0);
    RunWriter(fd, L, 1, nwrites / 2, seed, &r1);
    std::string msg;
    for (int w = 0; w < 2; ++w) {
      const WriterResult& r = w == 0 ? r0 : r1;
      for (size_t s = 0; s < r.last.size(); ++s)
        if (r.last[s].seq) msg += "L " + std::to_string(w) + " " + std::to_string(s) + " " + std::to_string(r.last[s].seq) + "\n";
      for (const auto& e : r.errors) msg += "E " + e + "\n";
    }
    upfs_close(fd);
    upfs_test::PipeWriteString(p[1], msg);
    _exit(0);
  }
  ::close(p[1]);
  // Opener: until the writer closes its pipe (it does so only by exiting).
  ReaderCheck chk(L);
  uint64_t opens = 0;
  std::vector<std::string> oerr;
  auto writer_done = [&] {
    struct pollfd q{p[0], POLLIN, 0};
    return ::poll(&q, 1, 0) > 0;
  };
  for (uint64_t i = 0; (i < 20 || !writer_done()) && oerr.size() < kMaxErrors && chk.errors.size() < kMaxErrors; ++i) {
    int fd = upfs_open(path.c_str(), i % 2 ? O_RDONLY : O_RDWR);
    if (fd < 0) {
      oerr.push_back("open #" + std::to_string(i) + " failed while another process writes: " + upfs_last_error() +
                     " " + upfs_test::ErrnoText(errno));
      continue;
    }
    ++opens;
    RunReader(fd, L, seed + i, 5, [] { return true; }, &chk);
    if (upfs_close(fd) != 0) oerr.push_back(std::string("close failed: ") + upfs_last_error());
  }
  bool to = false;
  std::string out = upfs_test::DrainFd(p[0], 600 * 1000, &to);
  ::close(p[0]);
  if (to) ::kill(pid, SIGKILL);
  EXPECT_EQ(upfs_test::WaitChild(pid), "exit 0") << out;
  EXPECT_TRUE(oerr.empty()) << oerr.size() << " failures in " << opens + oerr.size() << " opens (seed " << seed
                            << "):\n" << Join(oerr);
  EXPECT_TRUE(chk.errors.empty()) << "reads after open (seed " << seed << "):\n" << Join(chk.errors);
  std::printf("%" PRIu64 " opens while the other process wrote\n", opens);
  std::vector<std::vector<WriteId>> last(2, std::vector<WriteId>(L.slots.size()));
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    unsigned w, s, seq;
    if (std::sscanf(line.c_str(), "L %u %u %u", &w, &s, &seq) == 3 && w < 2 && s < L.slots.size())
      last[w][s] = WriteId{static_cast<uint16_t>(w), seq, L.slots[s].off, L.slots[s].len};
    else if (line.rfind("E ", 0) == 0)
      ADD_FAILURE() << "writer: " << line;
  }
  int fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << upfs_last_error();
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content));
  upfs_close(fd);
  std::vector<std::string> errs = CheckFinal(content, L, last, true);
  EXPECT_TRUE(errs.empty()) << "final state (seed " << seed << "):\n" << Join(errs);
  ExpectInspectClean(path);
}

}  // namespace
