// Concurrency tests on one strict-mode file: writers and readers in threads
// and in separate processes, concurrent appenders, and writers racing with
// a truncating thread.
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
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/inspect.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::ClassifyRegion;
using upfs_test::RegionClass;
using upfs_test::TempDir;
using upfs_test::WriteId;
using Bytes = std::vector<unsigned char>;

constexpr size_t kMaxErrors = 20;

// A place in the file that writers overwrite as a whole.
struct Slot {
  uint64_t off;
  uint32_t len;
  uint32_t owners;  // bit mask of writer ids
  int pair = -1;    // index into Layout::pairs if part of a partial overlap
  std::string kind;
};

// Two slots that overlap partially: A = [a.off, a.end) owned by one writer,
// B = [b.off, b.end) owned by another, a.off < b.off < a.end < b.end.
struct PairWin {
  int a, b;
};

struct Layout {
  std::vector<Slot> slots;
  std::vector<PairWin> pairs;
  uint64_t end = 0;
  int nwriters = 0;

  uint64_t End(int i) const { return slots[i].off + slots[i].len; }
  std::vector<int> SlotsOf(int w) const {
    std::vector<int> v;
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].owners & (1u << w)) v.push_back(static_cast<int>(i));
    return v;
  }
};

Layout MakeLayout(int nw) {
  Layout L;
  L.nwriters = nw;
  uint32_t all = (1u << nw) - 1;
  uint64_t pos = 0;
  auto add = [&](uint64_t off, uint32_t len, uint32_t owners, const char* kind) {
    L.slots.push_back(Slot{off, len, owners, -1, kind});
  };
  // 1. Disjoint, block aligned: single blocks and multi-block ranges.
  for (int w = 0; w < nw; ++w) {
    for (int k = 0; k < 5; ++k, pos += 4096) add(pos, 4096, 1u << w, "disjoint-aligned");
    for (int k = 0; k < 2; ++k, pos += 8192) add(pos, 8192, 1u << w, "disjoint-aligned-2");
    add(pos, 16384, 1u << w, "disjoint-aligned-4");
    pos += 16384;
  }
  // 2. Disjoint, unaligned, adjacent: pieces of different writers share the
  //    partial blocks at their edges (copy-on-write must not lose either).
  for (int g = 0; g < 12; ++g, pos += 12288) {
    uint64_t start = pos + 100 + 37 * g, stop = pos + 12288 - 50 - 13 * g;
    uint64_t piece = (stop - start) / nw;
    for (int i = 0; i < nw; ++i) {
      uint64_t a = start + i * piece + (i ? 7 * i : 0);
      uint64_t b = i == nw - 1 ? stop : start + (i + 1) * piece + 7 * (i + 1);
      add(a, static_cast<uint32_t>(b - a), 1u << ((i + g) % nw), "disjoint-unaligned-adjacent");
    }
  }
  // 3. Shared by all writers, aligned.
  for (int k = 0; k < 5; ++k, pos += 4096) add(pos, 4096, all, "shared-aligned");
  for (int k = 0; k < 2; ++k, pos += 8192) add(pos, 8192, all, "shared-aligned-2");
  add(pos, 65536 + 8192, all, "shared-aligned-18");  // more than one inline entry
  pos += 65536 + 8192;
  // 4. Shared by all writers, unaligned.
  for (int k = 0; k < 6; ++k, pos += 16384)
    add(pos + 1000 + 17 * k, 5000 + 611 * k, all, "shared-unaligned");
  add(pos + 333, 70001, all, "shared-unaligned-large");
  pos += 73728;
  // 5. Partial overlaps between writer 0 and writer 1.
  for (int k = 0; k < 6; ++k, pos += 16384) {
    int a = static_cast<int>(L.slots.size());
    add(pos + 1000 + k, 6000, 1u << 0, "pair-a");
    add(pos + 4000 + 3 * k, 6000 + 5 * k, 1u << 1, "pair-b");
    L.slots[a].pair = L.slots[a + 1].pair = static_cast<int>(L.pairs.size());
    L.pairs.push_back(PairWin{a, a + 1});
  }
  L.end = pos;
  return L;
}

// ---------------------------------------------------------------------------
// Writers.

struct WriterResult {
  std::vector<WriteId> last;  // per slot: last write by this writer (seq 0 = none)
  std::vector<std::string> errors;
  uint64_t writes = 0;
};

void RunWriter(int fd, const Layout& L, int w, uint64_t nwrites, uint64_t seed, WriterResult* out) {
  out->last.assign(L.slots.size(), WriteId{});
  std::vector<int> mine = L.SlotsOf(w);
  std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(w));
  Bytes buf;
  for (uint64_t i = 0; i < nwrites; ++i) {
    int s = mine[rng() % mine.size()];
    const Slot& sl = L.slots[s];
    WriteId id{static_cast<uint16_t>(w), static_cast<uint32_t>(i + 1), sl.off, sl.len};
    buf.resize(sl.len);
    upfs_test::FillPositional(id, buf.data());
    ssize_t r = upfs_pwrite(fd, buf.data(), sl.len, static_cast<off_t>(sl.off));
    if (r != static_cast<ssize_t>(sl.len)) {
      out->errors.push_back("writer " + std::to_string(w) + ": pwrite " + id.ToString() + " returned " +
                            std::to_string(r) + ": " + upfs_last_error());
      return;
    }
    out->last[s] = id;
    ++out->writes;
  }
}

// ---------------------------------------------------------------------------
// Readers.

class ReaderCheck {
 public:
  explicit ReaderCheck(const Layout& L) : L_(L), seen_(L.slots.size()) {}

  std::vector<std::string> errors;
  uint64_t reads = 0, nonzero = 0;

  void Error(const std::string& e) {
    if (errors.size() < kMaxErrors) errors.push_back(e);
  }

  // Checks one read of slot s (data = bytes returned, n of them).
  void CheckSlot(int s, const unsigned char* data, size_t n) {
    const Slot& sl = L_.slots[s];
    ++reads;
    if (n < sl.len && !upfs_test::AllZero(data, n)) {
      Error("short read of " + Describe(s) + " returned " + std::to_string(n) + " bytes with data");
      return;
    }
    if (n < sl.len) {
      Observe(s, RegionClass{RegionClass::kZero, {}, ""}, "");
      return;
    }
    Observe(s, ClassifyRegion(data, sl.off, sl.len), "");
  }

  // Checks one read of the window [a.off, b.end) of a partial overlap.
  void CheckPair(int p, const unsigned char* data, size_t n) {
    const Slot& A = L_.slots[L_.pairs[p].a];
    const Slot& B = L_.slots[L_.pairs[p].b];
    ++reads;
    uint64_t base = A.off, aend = A.off + A.len, bend = B.off + B.len;
    Bytes padded;
    if (n < bend - base) {
      // The file ends inside the window (no write of B has committed yet):
      // what lies past the end reads as zeros.
      padded.assign(data, data + n);
      padded.resize(bend - base, 0);
      data = padded.data();
    }
    RegionClass cp = ClassifyRegion(data, base, B.off - base);
    RegionClass cm = ClassifyRegion(data + (B.off - base), B.off, aend - B.off);
    RegionClass cs = ClassifyRegion(data + (aend - base), aend, bend - aend);
    std::string where = " in pair window " + std::to_string(p) + " [" + std::to_string(base) + ", " +
                        std::to_string(bend) + ")";
    // The parts only one slot covers must each be whole writes of that slot.
    RegionClass ca = cp, cb = cs;
    if (cp.kind == RegionClass::kWhole && (cp.w.off != A.off || cp.w.len != A.len))
      ca = RegionClass{RegionClass::kBad, {}, "A part holds " + cp.w.ToString()};
    if (cs.kind == RegionClass::kWhole && (cs.w.off != B.off || cs.w.len != B.len))
      cb = RegionClass{RegionClass::kBad, {}, "B part holds " + cs.w.ToString()};
    if (ca.kind == RegionClass::kBad || cb.kind == RegionClass::kBad || cm.kind == RegionClass::kBad) {
      Error("torn or foreign data" + where + ": A part: " + Kind(ca) + ", overlap: " + Kind(cm) +
            ", B part: " + Kind(cb));
      return;
    }
    // The overlap belongs to the write seen in A's part or in B's part.
    bool ok;
    if (cm.kind == RegionClass::kZero) {
      ok = ca.kind == RegionClass::kZero && cb.kind == RegionClass::kZero;
    } else {
      ok = (ca.kind == RegionClass::kWhole && cm.w == ca.w) || (cb.kind == RegionClass::kWhole && cm.w == cb.w);
    }
    if (!ok) {
      Error("torn write" + where + ": A part " + Kind(ca) + ", overlap " + Kind(cm) + ", B part " + Kind(cb));
      return;
    }
    Observe(L_.pairs[p].a, ca, " (pair A part)");
    Observe(L_.pairs[p].b, cb, " (pair B part)");
  }

 private:
  struct Seen {
    std::map<int, uint32_t> max_seq;  // writer -> highest seq seen here
    WriteId last;                      // last observed write
    bool any = false;                  // some write was observed here
  };

  static std::string Kind(const RegionClass& c) {
    if (c.kind == RegionClass::kZero) return "zeros";
    if (c.kind == RegionClass::kWhole) return c.w.ToString();
    return "BAD (" + c.error + ")";
  }

  std::string Describe(int s) const {
    const Slot& sl = L_.slots[s];
    return "slot " + std::to_string(s) + " (" + sl.kind + ", [" + std::to_string(sl.off) + ", " +
           std::to_string(sl.off + sl.len) + "))";
  }

  void Observe(int s, const RegionClass& c, const std::string& note) {
    const Slot& sl = L_.slots[s];
    Seen& st = seen_[s];
    if (c.kind == RegionClass::kBad) {
      Error("torn or foreign data in " + Describe(s) + note + ": " + c.error);
      return;
    }
    if (c.kind == RegionClass::kZero) {
      if (st.any) Error(Describe(s) + note + " reads as zeros after " + st.last.ToString() + " was seen there");
      return;
    }
    ++nonzero;
    const WriteId& w = c.w;
    if (w.off != sl.off || w.len != sl.len || w.writer >= 32 || !(sl.owners & (1u << w.writer))) {
      Error(Describe(s) + note + " holds a write that does not belong there: " + w.ToString());
      return;
    }
    auto it = st.max_seq.find(w.writer);
    if (it != st.max_seq.end()) {
      if (w.seq < it->second) {
        Error("reordering in " + Describe(s) + note + ": saw " + w.ToString() + " after seq " +
              std::to_string(it->second) + " of the same writer");
        return;
      }
      if (w.seq == it->second && w != st.last) {
        Error("resurrection in " + Describe(s) + note + ": " + w.ToString() + " reappeared after " +
              st.last.ToString());
        return;
      }
    }
    st.max_seq[w.writer] = w.seq;
    st.last = w;
    st.any = true;
  }

  const Layout& L_;
  std::vector<Seen> seen_;
};

// Reads random slots and pair windows until `stop` says so; at least
// `min_reads` reads (so a reader that starts late still checks something).
template <typename StopFn>
void RunReader(int fd, const Layout& L, uint64_t seed, uint64_t min_reads, StopFn stop, ReaderCheck* chk) {
  std::mt19937_64 rng(seed);
  Bytes buf;
  std::vector<int> singles;
  for (size_t i = 0; i < L.slots.size(); ++i)
    if (L.slots[i].pair < 0) singles.push_back(static_cast<int>(i));
  for (uint64_t i = 0; i < min_reads || !stop(); ++i) {
    if (chk->errors.size() >= kMaxErrors) return;
    if (!L.pairs.empty() && rng() % 5 == 0) {
      int p = static_cast<int>(rng() % L.pairs.size());
      const Slot& A = L.slots[L.pairs[p].a];
      const Slot& B = L.slots[L.pairs[p].b];
      size_t n = B.off + B.len - A.off;
      buf.resize(n);
      ssize_t r = upfs_pread(fd, buf.data(), n, static_cast<off_t>(A.off));
      if (r < 0) {
        chk->Error(std::string("pread failed: ") + upfs_last_error());
        return;
      }
      chk->CheckPair(p, buf.data(), static_cast<size_t>(r));
    } else {
      int s = singles[rng() % singles.size()];
      const Slot& sl = L.slots[s];
      buf.resize(sl.len);
      ssize_t r = upfs_pread(fd, buf.data(), sl.len, static_cast<off_t>(sl.off));
      if (r < 0) {
        chk->Error(std::string("pread failed: ") + upfs_last_error());
        return;
      }
      chk->CheckSlot(s, buf.data(), static_cast<size_t>(r));
    }
  }
}

// The final content: every location holds the last write of one of its
// writers; single-owner locations exactly their owner's last write.
std::vector<std::string> CheckFinal(const Bytes& content, const Layout& L,
                                    const std::vector<std::vector<WriteId>>& last, bool presized) {
  std::vector<std::string> errs;
  auto err = [&](const std::string& e) {
    if (errs.size() < kMaxErrors) errs.push_back(e);
  };
  uint64_t expect_size = presized ? L.end : 0;
  for (size_t s = 0; s < L.slots.size(); ++s)
    for (size_t w = 0; w < last.size(); ++w)
      if (last[w][s].seq != 0) expect_size = std::max<uint64_t>(expect_size, L.End(static_cast<int>(s)));
  if (content.size() != expect_size)
    err("final size " + std::to_string(content.size()) + ", expected " + std::to_string(expect_size));
  auto region = [&](uint64_t off, uint64_t len) -> RegionClass {
    if (off + len > content.size()) return RegionClass{RegionClass::kBad, {}, "beyond the end of the file"};
    return ClassifyRegion(content.data() + off, off, len);
  };
  auto expect_one_of = [&](uint64_t off, uint64_t len, const std::vector<WriteId>& cands, const std::string& what) {
    RegionClass c = region(off, len);
    if (cands.empty()) {
      if (c.kind != RegionClass::kZero) err(what + ": never written but holds data");
      return;
    }
    if (c.kind != RegionClass::kWhole) {
      err(what + ": " + (c.kind == RegionClass::kZero ? std::string("zeros (lost write)") : c.error));
      return;
    }
    for (const WriteId& w : cands)
      if (c.w == w) return;
    std::string s = what + ": holds " + c.w.ToString() + ", expected the last write of a writer:";
    for (const WriteId& w : cands) s += " " + w.ToString();
    err(s);
  };
  for (size_t s = 0; s < L.slots.size(); ++s) {
    const Slot& sl = L.slots[s];
    if (sl.pair >= 0) continue;
    std::vector<WriteId> cands;
    for (size_t w = 0; w < last.size(); ++w)
      if (last[w][s].seq != 0) cands.push_back(last[w][s]);
    expect_one_of(sl.off, sl.len, cands,
                  "slot " + std::to_string(s) + " (" + sl.kind + ", [" + std::to_string(sl.off) + ", " +
                      std::to_string(sl.off + sl.len) + "))");
  }
  for (size_t p = 0; p < L.pairs.size(); ++p) {
    const Slot& A = L.slots[L.pairs[p].a];
    const Slot& B = L.slots[L.pairs[p].b];
    int wa = __builtin_ctz(A.owners), wb = __builtin_ctz(B.owners);
    const WriteId& la = last[wa][L.pairs[p].a];
    const WriteId& lb = last[wb][L.pairs[p].b];
    std::vector<WriteId> ca, cb, cm;
    if (la.seq) ca.push_back(la), cm.push_back(la);
    if (lb.seq) cb.push_back(lb), cm.push_back(lb);
    std::string pw = "pair " + std::to_string(p);
    expect_one_of(A.off, B.off - A.off, ca, pw + " A part");
    expect_one_of(B.off, A.off + A.len - B.off, cm, pw + " overlap");
    expect_one_of(A.off + A.len, B.off + B.len - A.off - A.len, cb, pw + " B part");
  }
  return errs;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += "  " + e + "\n";
  return s;
}

void ExpectInspectClean(const std::string& path) {
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(path, true, &r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
}

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

using Child = upfs_test::ReportingChild;

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


// Threads open, write, stat and close a few files over and over while
// another drops the parked ones: the last close of one thread races with
// another thread's open of the same file, which must get the File back (or
// a fresh one) and never lose a write.
TEST(ConcurrencyParked, OpenCloseRacesWithParkingAndDropping) {
  TempDir d;
  constexpr int kFiles = 3, kThreads = 4;
  const int rounds = upfs_test::Scaled(1500);
  std::vector<std::string> paths;
  for (int f = 0; f < kFiles; ++f) paths.push_back(d.File("p" + std::to_string(f)));
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::string> first_error(kThreads + 1);
  // Thread t owns bytes [8t, 8t + 8) of every file and writes its round there.
  auto worker = [&](int t) {
    std::mt19937 rng(t);
    for (int r = 1; r <= rounds; ++r) {
      const std::string& path = paths[rng() % kFiles];
      int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
      if (fd < 0) {
        if (errors++ == 0) first_error[t] = std::string("open: ") + upfs_last_error();
        continue;
      }
      uint64_t v = uint64_t(r);
      uint64_t back = 0;
      if (upfs_pwrite(fd, &v, 8, off_t(8 * t)) != 8 || upfs_pread(fd, &back, 8, off_t(8 * t)) != 8 ||
          back != v) {
        if (errors++ == 0) first_error[t] = "write/read back failed: " + std::string(upfs_last_error());
      }
      upfs_close(fd);
      if (r % 7 == 0) {
        struct stat host, st;
        if (::stat(path.c_str(), &host) == 0) upfs_stat_if_open(&host, &st);
      }
    }
  };
  std::thread dropper([&] {
    while (!stop.load()) {
      upfs_drop_closed_files();
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(worker, t);
  for (auto& t : ts) t.join();
  stop = true;
  dropper.join();
  EXPECT_EQ(errors.load(), 0) << first_error[0] << first_error[1] << first_error[2] << first_error[3];
  upfs_drop_closed_files();
  for (const std::string& path : paths) ExpectInspectClean(path);
}

}  // namespace
