// Writers and readers on one file while a truncator shrinks and grows it,
// and while another thread punches slots out and preallocates.
#include <linux/falloc.h>

#include "concurrency_util.h"
#include "container/pool/pool_check.h"

namespace {

using namespace upfs_concurrency;

// Contiguous slots of irregular lengths, owned in turn by the writers:
// every size the tests produce is a slot boundary, so any read of a slot
// returns nothing or the whole slot. With `small`, a third of them fit in
// a block (sub-block writes: granule flips, tail blocks with pairs).
Layout ContiguousSlots(uint64_t seed, int nw, bool small) {
  Layout L;
  L.nwriters = nw;
  std::mt19937_64 lr(seed);
  uint64_t pos = 0;
  for (int j = 0; j < 40; ++j) {
    uint32_t len = static_cast<uint32_t>(j % 5 == 0 ? 4096 * (1 + lr() % 3) : 100 + lr() % 9000);
    if (small && j % 3 == 1) len = static_cast<uint32_t>(100 + lr() % 1400);
    L.slots.push_back(Slot{pos, len, 1u << (j % nw), -1, "contiguous"});
    pos += len;
  }
  L.end = pos;
  return L;
}

std::vector<uint64_t> Boundaries(const Layout& L) {
  std::vector<uint64_t> bounds{0};
  for (size_t j = 0; j < L.slots.size(); ++j) bounds.push_back(L.End(static_cast<int>(j)));
  return bounds;
}

struct ReaderCounts {
  uint64_t reads = 0, wholes = 0, empties = 0;
  std::vector<std::string> errors;
};

// Reads random slots through a descriptor of its own until the writers
// are done (at least 200 reads): each must be zeros or one whole record
// of its owner.
void ReadSlots(const std::string& path, const Layout& L, const std::atomic<int>& writers_left,
               uint64_t seed, ReaderCounts* out) {
  int rfd = upfs_open(path.c_str(), O_RDONLY);
  if (rfd < 0) {
    out->errors.push_back("open failed");
    return;
  }
  std::mt19937_64 rng(seed);
  Bytes buf;
  const int nw = L.nwriters;
  for (uint64_t i = 0; (i < 200 || writers_left.load() > 0) && out->errors.size() < kMaxErrors; ++i) {
    int s = static_cast<int>(rng() % L.slots.size());
    const Slot& sl = L.slots[s];
    buf.resize(sl.len);
    ssize_t r = upfs_pread(rfd, buf.data(), sl.len, static_cast<off_t>(sl.off));
    ++out->reads;
    if (r < 0) {
      out->errors.push_back(std::string("pread failed: ") + upfs_last_error());
      break;
    }
    if (r == 0) {
      ++out->empties;
      continue;
    }
    if (r != static_cast<ssize_t>(sl.len)) {
      out->errors.push_back("read of slot " + std::to_string(s) + " [" + std::to_string(sl.off) + ", +" +
                            std::to_string(sl.len) + ") returned " + std::to_string(r) +
                            " bytes: the size was not a slot boundary");
      continue;
    }
    RegionClass c = ClassifyRegion(buf.data(), sl.off, sl.len);
    if (c.kind == RegionClass::kBad) {
      out->errors.push_back("slot " + std::to_string(s) + ": " + c.error);
    } else if (c.kind == RegionClass::kWhole) {
      ++out->wholes;
      if (c.w.off != sl.off || c.w.len != sl.len || c.w.writer != s % nw)
        out->errors.push_back("slot " + std::to_string(s) + " holds a foreign write " + c.w.ToString());
    }
  }
  upfs_close(rfd);
}

// Final state: the size is a boundary and every slot inside it holds zeros
// or a whole write of its owner; then the file still works normally.
void CheckFinalState(int fd, const Layout& L, const std::vector<uint64_t>& bounds) {
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
      EXPECT_EQ(c.w.writer, s % L.nwriters) << "slot " << s;
    }
  }
  ASSERT_EQ(upfs_ftruncate(fd, 0), 0);
  ASSERT_EQ(upfs_pwrite(fd, "end", 3, 5000), 3);
  Bytes fin;
  ASSERT_TRUE(upfs_test::UpfsReadAll(fd, &fin));
  EXPECT_EQ(fin.size(), 5003u);
  EXPECT_TRUE(upfs_test::AllZero(fin.data(), 5000));
  upfs_close(fd);
}

// Writers, a truncator to random slot boundaries and a reader; with
// `holes`, one more thread that punches whole slots out (they read as
// zeros after) and grows the file by fallocate to a slot boundary.
void RunWithTruncator(const std::string& path, uint64_t seed, bool small, bool holes) {
  const int nw = 2;
  const Layout L = ContiguousSlots(seed, nw, small);
  const std::vector<uint64_t> bounds = Boundaries(L);

  int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  const uint64_t nwrites = upfs_test::Scaled(20000);
  const uint64_t nchanges = 50;  // at least; the changers run as long as the writers
  std::vector<WriterResult> wres(nw);
  std::atomic<int> left{nw};
  std::vector<std::string> terr, herr;
  uint64_t truncs = 0, punches = 0, grows = 0;
  ReaderCounts rc;
  std::vector<std::thread> th;
  for (int w = 0; w < nw; ++w)
    th.emplace_back([&, w] {
      RunWriter(fd, L, w, nwrites, seed, &wres[w]);
      left.fetch_sub(1);
    });
  th.emplace_back([&] {
    std::mt19937_64 rng(seed + 9);
    for (uint64_t i = 0; i < nchanges || left.load() > 0; ++i) {
      uint64_t to = bounds[rng() % bounds.size()];
      if (upfs_ftruncate(fd, static_cast<off_t>(to)) != 0) {
        terr.push_back(std::string("ftruncate failed: ") + upfs_last_error());
        return;
      }
      ++truncs;
      std::this_thread::yield();
    }
  });
  if (holes)
    th.emplace_back([&] {
      std::mt19937_64 rng(seed + 11);
      for (uint64_t i = 0; i < nchanges || left.load() > 0; ++i) {
        int rc2;
        if (rng() % 2) {
          const Slot& sl = L.slots[rng() % L.slots.size()];
          rc2 = upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(sl.off),
                               static_cast<off_t>(sl.len));
          ++punches;
        } else {
          uint64_t to = bounds[1 + rng() % (bounds.size() - 1)];
          rc2 = upfs_fallocate(fd, 0, 0, static_cast<off_t>(to));
          ++grows;
        }
        if (rc2 != 0) {
          herr.push_back(std::string("fallocate failed: ") + upfs_last_error());
          return;
        }
        std::this_thread::yield();
      }
    });
  th.emplace_back([&] { ReadSlots(path, L, left, seed + 10, &rc); });
  for (auto& t : th) t.join();
  for (int w = 0; w < nw; ++w) EXPECT_TRUE(wres[w].errors.empty()) << Join(wres[w].errors);
  EXPECT_TRUE(terr.empty()) << Join(terr);
  EXPECT_TRUE(herr.empty()) << Join(herr);
  EXPECT_TRUE(rc.errors.empty()) << "reader (seed " << seed << "):\n" << Join(rc.errors);
  std::printf("reader: %" PRIu64 " reads, %" PRIu64 " whole records, %" PRIu64
              " past the end; %" PRIu64 " truncations, %" PRIu64 " punches, %" PRIu64 " growing fallocates\n",
              rc.reads, rc.wholes, rc.empties, truncs, punches, grows);
  CheckFinalState(fd, L, bounds);
}

// ---------------------------------------------------------------------------
// (d) Writers racing with a truncating thread.

TEST(ConcurrencyTruncate, WritersReadersAndTruncator) {
  TempDir dir;
  RunWithTruncator(dir.File("f"), upfs_test::TestSeed(5), false, false);
  ExpectInspectClean(dir.File("f"));
}

// The same with sub-block slots, punched holes and growing fallocates:
// every operation that copies, zeroes or exposes the bytes past the size
// in the tail block (docs/design.md, "The tail claim").
TEST(ConcurrencyTruncate, SmallSlotsHolesAndPreallocation) {
  TempDir dir;
  RunWithTruncator(dir.File("f"), upfs_test::TestSeed(6), true, true);
  ExpectInspectClean(dir.File("f"));
}

// Two files of one pool at once, each as above: the blocks one frees
// (truncated, punched, copied on write) are the pool's, which the other
// file's writers may take at once. Then the pool checks clean: nothing
// leaked, nothing left attached.
TEST(ConcurrencyTruncate, TwoFilesOfOnePoolShareTheirSpace) {
  TempDir dir;
  const std::string pool = dir.File("p.pool");
  const std::string mnt = "/upfs-conctrunc-" + std::to_string(getpid());
  ASSERT_EQ(upfs_mkfs(pool.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  const uint64_t seed = upfs_test::TestSeed(7);
  std::thread other([&] { RunWithTruncator(mnt + "/b", seed + 100, true, true); });
  RunWithTruncator(mnt + "/a", seed, true, true);
  other.join();
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
  upfs::PoolReport r;
  upfs::Status st = upfs::CheckPool(pool, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(r.problems.empty()) << r.problems.size() << " problems, the first: " << r.problems[0];
  EXPECT_TRUE(r.clean);
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_EQ(r.files, 2u);
}

}  // namespace
