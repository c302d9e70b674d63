// Concurrent appenders, in threads and in processes, on one O_APPEND file:
// every acknowledged record whole, once, and nothing between them.
#include "concurrency_util.h"

namespace {

using namespace upfs_concurrency;

// ---------------------------------------------------------------------------
// (c) Concurrent appenders: 2 threads and 2 processes through O_APPEND.

uint32_t AppendLen(std::mt19937_64& rng) {
  uint64_t r = rng() % 100;
  if (r < 70) return upfs_test::kRecSize * static_cast<uint32_t>(1 + rng() % 64);       // <= 2 KiB
  if (r < 95) return upfs_test::kRecSize * static_cast<uint32_t>(1 + rng() % 256);      // <= 8 KiB
  return upfs_test::kRecSize * static_cast<uint32_t>(128 * (1 + rng() % 4));            // 4..16 KiB aligned
}

// Appends n records as writer w; returns "" or an error.
std::string RunAppender(const std::string& path, int w, uint64_t n, uint64_t seed, uint64_t* bytes) {
  int fd = upfs_open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return std::string("open failed: ") + upfs_last_error();
  std::mt19937_64 rng(seed * 100 + static_cast<uint64_t>(w));
  Bytes buf;
  *bytes = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t len = AppendLen(rng);
    WriteId id{static_cast<uint16_t>(w), static_cast<uint32_t>(i), 0, len};
    buf.resize(len);
    upfs_test::FillAppend(id, buf.data());
    ssize_t r = upfs_write(fd, buf.data(), len);
    if (r != static_cast<ssize_t>(len)) {
      upfs_close(fd);
      return "append " + id.ToString() + " returned " + std::to_string(r) + ": " + upfs_last_error();
    }
    *bytes += len;
  }
  if (upfs_close(fd) != 0) return std::string("close failed: ") + upfs_last_error();
  return "";
}

TEST(ConcurrencyAppend, TwoThreadsAndTwoProcesses) {
  TempDir dir;
  const std::string path = dir.File("log");
  const uint64_t seed = upfs_test::TestSeed(4);
  const uint64_t n = upfs_test::Scaled(6000);
  {
    int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  // Processes first (writers 2, 3), then threads (writers 0, 1) and a reader
  // thread in this process.
  std::vector<Child> kids;
  for (int w = 2; w < 4; ++w) {
    Child c = upfs_test::ForkReporting("appender process " + std::to_string(w), {}, [&](int out) {
      uint64_t bytes = 0;
      std::string e = RunAppender(path, w, n, seed, &bytes);
      upfs_test::PipeWriteString(out, e.empty() ? "B " + std::to_string(bytes) + "\n" : "E " + e + "\n");
      _exit(e.empty() ? 0 : 1);
    });
    ASSERT_GE(c.pid, 0);
    kids.push_back(c);
  }
  std::string terr[2];
  uint64_t tbytes[2] = {0, 0};
  std::atomic<int> left{2};
  std::vector<std::string> rerr;
  uint64_t snapshots = 0;
  std::thread t0([&] {
    terr[0] = RunAppender(path, 0, n, seed, &tbytes[0]);
    left.fetch_sub(1);
  });
  std::thread t1([&] {
    terr[1] = RunAppender(path, 1, n, seed, &tbytes[1]);
    left.fetch_sub(1);
  });
  std::thread reader([&] {
    // Every snapshot parses into whole records and extends the previous one.
    int fd = upfs_open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      rerr.push_back("reader open failed");
      return;
    }
    std::vector<WriteId> prev;
    Bytes buf;
    for (uint64_t i = 0; (i < 20 || left.load() > 0) && rerr.empty(); ++i) {
      off_t size = upfs_test::UpfsSize(fd);
      buf.resize(static_cast<size_t>(size));
      ssize_t r = upfs_test::UpfsPreadFull(fd, buf.data(), buf.size(), 0);
      if (r != size) {
        rerr.push_back("snapshot read returned " + std::to_string(r) + " of " + std::to_string(size));
        break;
      }
      std::vector<WriteId> recs;
      std::string e = upfs_test::ParseAppends(buf.data(), buf.size(), [&](const WriteId& w) { recs.push_back(w); });
      if (!e.empty()) {
        rerr.push_back("snapshot " + std::to_string(i) + " of " + std::to_string(size) + " bytes: " + e);
        break;
      }
      if (recs.size() < prev.size() || !std::equal(prev.begin(), prev.end(), recs.begin()))
        rerr.push_back("snapshot " + std::to_string(i) + " does not extend the previous one");
      prev.swap(recs);
      ++snapshots;
    }
    upfs_close(fd);
  });
  t0.join();
  t1.join();
  reader.join();
  uint64_t total = tbytes[0] + tbytes[1];
  for (auto& k : kids) {
    bool hung;
    std::string how;
    std::string out = upfs_test::CollectReport(k, 600 * 1000, &how, &hung);
    EXPECT_EQ(how, "exit 0") << k.what << ": " << out;
    unsigned long long b = 0;
    if (std::sscanf(out.c_str(), "B %llu", &b) == 1) total += b;
    else ADD_FAILURE() << k.what << ": " << out;
  }
  EXPECT_EQ(terr[0], "");
  EXPECT_EQ(terr[1], "");
  EXPECT_TRUE(rerr.empty()) << Join(rerr);
  std::printf("reader took %" PRIu64 " snapshots\n", snapshots);

  int fd = upfs_open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content));
  upfs_close(fd);
  EXPECT_EQ(content.size(), total) << "size is the sum of all appends";
  std::vector<std::vector<uint32_t>> seqs(4);
  std::string e = upfs_test::ParseAppends(content.data(), content.size(), [&](const WriteId& w) {
    if (w.writer < 4) seqs[w.writer].push_back(w.seq);
  });
  EXPECT_EQ(e, "") << "(seed " << seed << ")";
  for (int w = 0; w < 4; ++w) {
    // Each append exactly once, and one writer's appends in its own order.
    bool ok = seqs[w].size() == n;
    for (size_t i = 0; ok && i < seqs[w].size(); ++i) ok = seqs[w][i] == i;
    if (!ok) {
      std::set<uint32_t> uniq(seqs[w].begin(), seqs[w].end());
      ADD_FAILURE() << "writer " << w << ": " << seqs[w].size() << " records (" << uniq.size() << " distinct) of "
                    << n << ", or out of order (seed " << seed << ")";
    }
  }
  ExpectInspectClean(path);
}

}  // namespace
