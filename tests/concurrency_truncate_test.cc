// Writers and readers on one file while a truncator shrinks and grows it.
#include "concurrency_util.h"

namespace {

using namespace upfs_concurrency;

// ---------------------------------------------------------------------------
// (d) Writers racing with a truncating thread.

TEST(ConcurrencyTruncate, WritersReadersAndTruncator) {
  TempDir dir;
  const std::string path = dir.File("f");
  const uint64_t seed = upfs_test::TestSeed(5);
  const int nw = 2;
  // Contiguous slots of irregular lengths: every size the test produces is a
  // slot boundary, so any read of a slot returns nothing or the whole slot.
  Layout L;
  L.nwriters = nw;
  std::mt19937_64 lr(seed);
  uint64_t pos = 0;
  for (int j = 0; j < 40; ++j) {
    uint32_t len = static_cast<uint32_t>(j % 5 == 0 ? 4096 * (1 + lr() % 3) : 100 + lr() % 9000);
    L.slots.push_back(Slot{pos, len, 1u << (j % nw), -1, "contiguous"});
    pos += len;
  }
  L.end = pos;
  std::vector<uint64_t> bounds{0};
  for (size_t j = 0; j < L.slots.size(); ++j) bounds.push_back(L.End(static_cast<int>(j)));

  int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const uint64_t nwrites = upfs_test::Scaled(20000);
  const uint64_t ntrunc = 50;  // at least; the truncator runs as long as the writers
  std::vector<WriterResult> wres(nw);
  std::atomic<int> left{nw};
  std::vector<std::string> terr, rerr;
  uint64_t reads = 0, wholes = 0, empties = 0, truncs = 0;
  std::vector<std::thread> th;
  for (int w = 0; w < nw; ++w)
    th.emplace_back([&, w] {
      RunWriter(fd, L, w, nwrites, seed, &wres[w]);
      left.fetch_sub(1);
    });
  th.emplace_back([&] {
    std::mt19937_64 rng(seed + 9);
    for (uint64_t i = 0; i < ntrunc || left.load() > 0; ++i) {
      uint64_t to = bounds[rng() % bounds.size()];
      if (upfs_ftruncate(fd, static_cast<off_t>(to)) != 0) {
        terr.push_back(std::string("ftruncate failed: ") + upfs_last_error());
        return;
      }
      ++truncs;
      std::this_thread::yield();
    }
  });
  th.emplace_back([&] {
    int rfd = upfs_open(path.c_str(), O_RDONLY);
    if (rfd < 0) {
      rerr.push_back("open failed");
      return;
    }
    std::mt19937_64 rng(seed + 10);
    Bytes buf;
    for (uint64_t i = 0; (i < 200 || left.load() > 0) && rerr.size() < kMaxErrors; ++i) {
      int s = static_cast<int>(rng() % L.slots.size());
      const Slot& sl = L.slots[s];
      buf.resize(sl.len);
      ssize_t r = upfs_pread(rfd, buf.data(), sl.len, static_cast<off_t>(sl.off));
      ++reads;
      if (r < 0) {
        rerr.push_back(std::string("pread failed: ") + upfs_last_error());
        break;
      }
      if (r == 0) {
        ++empties;
        continue;
      }
      if (r != static_cast<ssize_t>(sl.len)) {
        rerr.push_back("read of slot " + std::to_string(s) + " [" + std::to_string(sl.off) + ", +" +
                       std::to_string(sl.len) + ") returned " + std::to_string(r) +
                       " bytes: the size was not a slot boundary");
        continue;
      }
      RegionClass c = ClassifyRegion(buf.data(), sl.off, sl.len);
      if (c.kind == RegionClass::kBad) {
        rerr.push_back("slot " + std::to_string(s) + ": " + c.error);
      } else if (c.kind == RegionClass::kWhole) {
        ++wholes;
        if (c.w.off != sl.off || c.w.len != sl.len || c.w.writer != s % nw)
          rerr.push_back("slot " + std::to_string(s) + " holds a foreign write " + c.w.ToString());
      }
    }
    upfs_close(rfd);
  });
  for (auto& t : th) t.join();
  for (int w = 0; w < nw; ++w) EXPECT_TRUE(wres[w].errors.empty()) << Join(wres[w].errors);
  EXPECT_TRUE(terr.empty()) << Join(terr);
  EXPECT_TRUE(rerr.empty()) << "reader (seed " << seed << "):\n" << Join(rerr);
  std::printf("reader: %" PRIu64 " reads, %" PRIu64 " whole records, %" PRIu64 " past the end; %" PRIu64 " truncations\n",
              reads, wholes, empties, truncs);

  // Final state: the size is a boundary and every slot inside it holds
  // zeros or a whole write of its owner.
  Bytes content;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &content));
  EXPECT_TRUE(std::find(bounds.begin(), bounds.end(), content.size()) != bounds.end())
      << "final size " << content.size() << " is not a slot boundary";
  for (size_t s = 0; s < L.slots.size(); ++s) {
    const Slot& sl = L.slots[s];
    if (sl.off + sl.len > content.size()) break;
    RegionClass c = ClassifyRegion(content.data() + sl.off, sl.off, sl.len);
    EXPECT_NE(c.kind, RegionClass::kBad) << "slot " << s << ": " << c.error;
    if (c.kind == RegionClass::kWhole) {
      EXPECT_EQ(c.w.writer, s % nw) << "slot " << s;
    }
  }
  // The file still works normally afterwards.
  ASSERT_EQ(upfs_ftruncate(fd, 0), 0);
  ASSERT_EQ(upfs_pwrite(fd, "end", 3, 5000), 3);
  Bytes fin;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &fin));
  EXPECT_EQ(fin.size(), 5003u);
  EXPECT_TRUE(upfs_test::AllZero(fin.data(), 5000));
  upfs_close(fd);
  ExpectInspectClean(path);
}

}  // namespace
