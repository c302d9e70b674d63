// What the concurrency tests share: a file laid out in slots and partly
// overlapping pair windows, writers that overwrite them with
// self-describing records, readers that check every read against what may
// be there, and the check of the final content.
#pragma once

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

namespace upfs_concurrency {


using upfs_test::ClassifyRegion;
using upfs_test::RegionClass;
using upfs_test::TempDir;
using upfs_test::WriteId;
using Bytes = std::vector<unsigned char>;
using Child = upfs_test::ReportingChild;

inline constexpr size_t kMaxErrors = 20;

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

inline Layout MakeLayout(int nw) {
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

inline void RunWriter(int fd, const Layout& L, int w, uint64_t nwrites, uint64_t seed, WriterResult* out) {
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
inline void RunReader(int fd, const Layout& L, uint64_t seed, uint64_t min_reads, StopFn stop, ReaderCheck* chk) {
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
inline std::vector<std::string> CheckFinal(const Bytes& content, const Layout& L,
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

inline std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += "  " + e + "\n";
  return s;
}

inline void ExpectInspectClean(const std::string& path) {
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(path, true, &r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(r.problems.empty()) << Join(r.problems);
}

}  // namespace upfs_concurrency
