// Crash tests: a child process writes self-describing records to a upfs
// file and acknowledges every completed call through a pipe; the parent
// kills it with SIGKILL at a random moment, reopens the file and checks:
//   strict mode: every acknowledged operation is present, the one in flight
//                is entirely present or entirely absent (no torn write), and
//                the file passes a full InspectFile check;
//   sync mode:   every acknowledged operation is present (durability) and
//                InspectFile is clean; the in-flight write may be partial.
// The parent keeps an exact model of the file content; after each iteration
// the model becomes the verified content and the next child continues.
//
// Reproduce with UPFS_TEST_SEED=<seed> (kill timing is not reproducible,
// but the operation sequences are).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "container/perfile/inspect.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::TempDir;
using upfs_test::WriteId;
using Bytes = std::vector<unsigned char>;

enum class OpKind : uint8_t { kAligned, kUnaligned, kAppend, kTruncUp, kTruncDown };

struct CrashOp {
  OpKind kind;
  WriteId id;         // for writes (id.off/id.len = range)
  uint64_t new_size;  // for truncates
  std::string ToString() const {
    switch (kind) {
      case OpKind::kAligned: return "aligned pwrite " + id.ToString();
      case OpKind::kUnaligned: return "unaligned pwrite " + id.ToString();
      case OpKind::kAppend: return "O_APPEND write " + id.ToString();
      case OpKind::kTruncUp: return "ftruncate up to " + std::to_string(new_size);
      case OpKind::kTruncDown: return "ftruncate down to " + std::to_string(new_size);
    }
    return "?";
  }
};

constexpr uint64_t kBlock = 4096;

// Where a child may write: overwrites in [lo, hi); appends and truncates
// only when `size_ops`.
struct Region {
  uint64_t lo, hi;
  bool size_ops;
};

constexpr uint64_t kSlots = 300;                   // 4 KiB slots of the single-writer tests
constexpr uint64_t kSizeCap = 2 * kSlots * kBlock;  // appends push the size up to about here

std::vector<CrashOp> GenerateOps(uint64_t seed, uint16_t writer, uint32_t seq_base, uint64_t start_size,
                                 const Region& r, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<CrashOp> ops;
  uint64_t size = start_size;
  for (size_t i = 0; i < n; ++i) {
    CrashOp op{};
    op.id.writer = writer;
    op.id.seq = seq_base + static_cast<uint32_t>(i) + 1;
    unsigned k = static_cast<unsigned>(rng() % 100);
    if (!r.size_ops) k = k % 70;
    uint64_t alo = (r.lo + kBlock - 1) / kBlock * kBlock, ahi = r.hi / kBlock * kBlock;
    if (k < 45 && ahi >= alo + 2 * kBlock) {
      uint64_t nb = (ahi - alo) / kBlock;
      uint64_t blocks = rng() % 5 == 0 ? 2 : 1;
      op.kind = OpKind::kAligned;
      op.id.off = alo + (rng() % (nb - blocks + 1)) * kBlock;
      op.id.len = static_cast<uint32_t>(blocks * kBlock);
    } else if (k < 70) {
      op.kind = OpKind::kUnaligned;
      uint64_t len = 1 + rng() % (rng() % 2 ? 200 : 9000);
      len = std::min<uint64_t>(len, r.hi - r.lo);
      op.id.off = r.lo + rng() % (r.hi - r.lo - len + 1);
      op.id.len = static_cast<uint32_t>(len);
    } else if (k < 92 || size > kSizeCap) {
      if (size > kSizeCap) {
        op.kind = OpKind::kTruncDown;
        op.new_size = r.hi / 2 + rng() % (size - r.hi / 2);
      } else {
        op.kind = OpKind::kAppend;
        op.id.off = size;
        op.id.len = static_cast<uint32_t>(1 + rng() % (rng() % 2 ? 300 : 12000));
      }
    } else {
      op.kind = OpKind::kTruncUp;
      op.new_size = size + 1 + rng() % 20000;
    }
    if (op.kind == OpKind::kTruncUp || op.kind == OpKind::kTruncDown) {
      size = op.new_size;
    } else {
      size = std::max<uint64_t>(size, op.id.off + op.id.len);
    }
    ops.push_back(op);
  }
  return ops;
}

void Apply(Bytes* m, const CrashOp& op) {
  if (op.kind == OpKind::kTruncUp || op.kind == OpKind::kTruncDown) {
    m->resize(op.new_size, 0);
    return;
  }
  if (m->size() < op.id.off + op.id.len) m->resize(op.id.off + op.id.len, 0);
  upfs_test::FillPositional(op.id, m->data() + op.id.off);
}

// Acknowledgement protocol on the pipe: u32 index of each completed op, or
// kAckError followed by a u32 length and a message.
constexpr uint32_t kAckError = 0xffffffffu;

[[noreturn]] void ChildFail(int out, const std::string& msg) {
  uint32_t h[2] = {kAckError, static_cast<uint32_t>(msg.size())};
  upfs_test::PipeWriteAll(out, h, sizeof h);
  upfs_test::PipeWriteString(out, msg);
  _exit(2);
}

[[noreturn]] void RunChild(const std::string& path, const std::vector<CrashOp>& ops, int out) {
  int fd = upfs_open(path.c_str(), O_RDWR);
  if (fd < 0) ChildFail(out, std::string("open failed: ") + upfs_last_error());
  int afd = -1;
  Bytes buf;
  for (size_t i = 0; i < ops.size(); ++i) {
    const CrashOp& op = ops[i];
    bool ok;
    if (op.kind == OpKind::kTruncUp || op.kind == OpKind::kTruncDown) {
      ok = upfs_ftruncate(fd, static_cast<off_t>(op.new_size)) == 0;
    } else {
      buf.resize(op.id.len);
      upfs_test::FillPositional(op.id, buf.data());
      if (op.kind == OpKind::kAppend) {
        if (afd < 0) afd = upfs_open(path.c_str(), O_WRONLY | O_APPEND);
        ok = afd >= 0 && upfs_write(afd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size());
      } else {
        ok = upfs_pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(op.id.off)) ==
             static_cast<ssize_t>(buf.size());
      }
    }
    if (!ok) ChildFail(out, op.ToString() + " failed: " + upfs_last_error() + " " + upfs_test::ErrnoText(errno));
    uint32_t idx = static_cast<uint32_t>(i);
    upfs_test::PipeWriteAll(out, &idx, sizeof idx);
  }
  upfs_close(fd);
  if (afd >= 0) upfs_close(afd);
  _exit(0);
}

struct ChildRun {
  pid_t pid = -1;
  int rd = -1;
  std::string buf;       // bytes read so far
  size_t acked = 0;      // acknowledged ops (a prefix of the list)
  std::string error;     // error reported by the child
  std::string end;       // how it ended
};

ChildRun Spawn(const std::string& path, const std::vector<CrashOp>& ops) {
  ChildRun c;
  int p[2];
  if (::pipe(p) != 0) return c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::close(p[0]);
    RunChild(path, ops, p[1]);
  }
  ::close(p[1]);
  c.rd = p[0];
  return c;
}

// Parses the acknowledgements in c->buf.
void ParseAcks(ChildRun* c) {
  size_t pos = 0;
  size_t acked = 0;
  while (pos + 4 <= c->buf.size()) {
    uint32_t v;
    std::memcpy(&v, c->buf.data() + pos, 4);
    if (v == kAckError) {
      if (pos + 8 <= c->buf.size()) {
        uint32_t len;
        std::memcpy(&len, c->buf.data() + pos + 4, 4);
        c->error = c->buf.substr(pos + 8, len);
      } else {
        c->error = "(truncated error report)";
      }
      break;
    }
    if (v != acked) {
      c->error = "acknowledgements out of order";
      break;
    }
    ++acked;
    pos += 4;
  }
  c->acked = acked;
}

// Reads acknowledgements until at least `n` ops are acknowledged or the
// child closes the pipe. Returns false on a hang (no progress for minutes).
bool WaitForAcks(ChildRun* c, size_t n) {
  while (c->buf.size() / 4 < n) {
    struct pollfd p{c->rd, POLLIN, 0};
    int r = ::poll(&p, 1, 300 * 1000);
    if (r == 0) return false;
    if (r < 0) continue;
    char tmp[4096];
    ssize_t k = ::read(c->rd, tmp, sizeof tmp);
    if (k <= 0) return true;
    c->buf.append(tmp, static_cast<size_t>(k));
  }
  return true;
}

void KillAndCollect(ChildRun* c) {
  ::kill(c->pid, SIGKILL);
  c->end = upfs_test::WaitChild(c->pid);
  bool to = false;
  c->buf += upfs_test::DrainFd(c->rd, 60 * 1000, &to);
  ::close(c->rd);
  ParseAcks(c);
}

void SleepMicros(uint64_t us) {
  struct timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>((us % 1000000) * 1000)};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// How long the child runs before the kill: immediately, after a random
// delay of up to a few ms, or after a random number of acknowledged ops
// (which keeps kills landing inside operations even on slow builds).
struct KillPlan {
  int mode;  // 0 immediate, 1 delay, 2 after acks
  uint64_t micros;
  size_t acks;
};

KillPlan PlanKill(std::mt19937_64& rng) {
  unsigned r = static_cast<unsigned>(rng() % 100);
  if (r < 8) return {0, 0, 0};
  if (r < 50) return {1, rng() % (r < 30 ? 1000 : 5000), 0};
  return {2, 0, 1 + static_cast<size_t>(rng() % (rng() % 4 == 0 ? 400 : 60))};
}

// Stops the child according to the plan. False if it hung.
bool RunPlan(ChildRun* c, const KillPlan& plan) {
  if (plan.mode == 1) SleepMicros(plan.micros);
  if (plan.mode == 2 && !WaitForAcks(c, plan.acks)) return false;
  return true;
}

bool ReadUpfsFile(const std::string& path, Bytes* out, std::string* err) {
  int fd = upfs_open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    *err = std::string("reopen after the crash failed: ") + upfs_last_error() + " " + upfs_test::ErrnoText(errno);
    return false;
  }
  bool ok = upfs_test::UpfsReadAll(fd, out);
  if (!ok) *err = std::string("read after the crash failed: ") + upfs_last_error();
  if (upfs_close(fd) != 0 && ok) {
    *err = std::string("close failed: ") + upfs_last_error();
    ok = false;
  }
  return ok;
}

std::string InspectProblems(const std::string& path) {
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(path, true, &r);
  std::string s;
  if (!st.ok()) s += "InspectFile: " + st.ToString() + "\n";
  for (const auto& p : r.problems) s += "  problem: " + p + "\n";
  return s;
}

// Describes the first difference between the file and the expected states.
std::string Diff(const Bytes& got, const Bytes& want, const char* name) {
  char b[512];
  if (got.size() != want.size()) {
    std::snprintf(b, sizeof b, "%s: size %zu, file %zu; ", name, want.size(), got.size());
  } else {
    b[0] = 0;
  }
  std::string s = b;
  size_t n = std::min(got.size(), want.size());
  size_t i = 0;
  while (i < n && got[i] == want[i]) ++i;
  if (i < n) {
    size_t j = i;
    while (j < n && got[j] != want[j]) ++j;
    s += std::string(name) + ": first differing bytes [" + std::to_string(i) + ", " + std::to_string(j) +
         "): file has " + upfs_test::DescribeAt(got.data(), 0, got.size(), i) + ", expected " +
         upfs_test::DescribeAt(want.data(), 0, want.size(), i);
  } else if (got.size() == want.size()) {
    s += std::string(name) + ": equal";
  }
  return s;
}

std::string Context(uint64_t seed, int iter, const ChildRun& c, const std::vector<CrashOp>& ops) {
  std::string s = "seed " + std::to_string(seed) + ", iteration " + std::to_string(iter) + ", child " + c.end +
                  ", " + std::to_string(c.acked) + " ops acknowledged";
  if (c.acked > 0) s += ", last acknowledged: " + ops[c.acked - 1].ToString();
  if (c.acked < ops.size()) s += ", in flight: " + ops[c.acked].ToString();
  return s;
}

// ---------------------------------------------------------------------------

void CreateFile(const std::string& path, upfs_consistency mode, uint64_t size) {
  int fd = upfs_open_mode(path.c_str(), O_CREAT | O_RDWR, 0644, mode);
  ASSERT_GE(fd, 0) << upfs_last_error();
  if (size) {
    ASSERT_EQ(upfs_ftruncate(fd, static_cast<off_t>(size)), 0);
  }
  ASSERT_EQ(upfs_close(fd), 0);
}

// Single child; strict (exact atomicity check) or sync (durability only).
// With `observer`, the parent keeps the file open (read-only) across all
// kills and checks that this long-lived descriptor sees the same content as
// a fresh open: the dead children's shared state must not confuse a live
// process.
void RunSingleChild(upfs_consistency mode, uint64_t iterations, uint64_t default_seed, bool observer = false) {
  TempDir dir;
  const std::string path = dir.File("crash.dat");
  const uint64_t seed = upfs_test::TestSeed(default_seed);
  std::printf("crash test (%s): %" PRIu64 " kills, seed %" PRIu64 "\n", mode == UPFS_STRICT ? "strict" : "sync",
              iterations, seed);
  ASSERT_NO_FATAL_FAILURE(CreateFile(path, mode, 0));
  int live = -1;
  if (observer) {
    live = upfs_open(path.c_str(), O_RDONLY);
    ASSERT_GE(live, 0) << upfs_last_error();
  }
  std::mt19937_64 rng(seed);
  Bytes model;
  const Region region{0, kSlots * kBlock, true};
  uint64_t total_acked = 0, inflight_present = 0, inflight_absent = 0, partial = 0;
  for (uint64_t it = 0; it < iterations; ++it) {
    std::vector<CrashOp> ops =
        GenerateOps(seed * 1000003 + it, 1, static_cast<uint32_t>(it * 8192), model.size(), region, 4096);
    KillPlan plan = PlanKill(rng);
    ChildRun c = Spawn(path, ops);
    ASSERT_GT(c.pid, 0) << "fork failed";
    bool hung = !RunPlan(&c, plan);
    KillAndCollect(&c);
    std::string ctx = Context(seed, static_cast<int>(it), c, ops);
    ASSERT_FALSE(hung) << "child made no progress for 300 s (" << ctx << ")";
    ASSERT_EQ(c.error, "") << "the child's operation failed (" << ctx << ")";
    ASSERT_TRUE(c.end == "signal 9 (Killed)" || c.end == "exit 0") << ctx;
    total_acked += c.acked;

    Bytes expect = model;
    for (size_t i = 0; i < c.acked; ++i) Apply(&expect, ops[i]);
    Bytes with = expect;
    bool has_inflight = c.acked < ops.size();
    if (has_inflight) Apply(&with, ops[c.acked]);

    Bytes got;
    std::string err;
    ASSERT_TRUE(ReadUpfsFile(path, &got, &err)) << err << " (" << ctx << ")";
    if (observer) {
      Bytes seen;
      ASSERT_TRUE(upfs_test::UpfsReadAll(live, &seen)) << upfs_last_error() << " (" << ctx << ")";
      ASSERT_TRUE(seen == got) << "the long-lived descriptor and a fresh open disagree (" << ctx << ")\n  "
                               << Diff(seen, got, "long-lived vs fresh");
    }
    if (mode == UPFS_STRICT) {
      if (got == expect) {
        ++inflight_absent;
      } else if (has_inflight && got == with) {
        ++inflight_present;
      } else {
        FAIL() << "after the crash the file is neither the acknowledged state nor that plus the in-flight "
                  "operation ("
               << ctx << ")\n  " << Diff(got, expect, "without in-flight op") << "\n  "
               << (has_inflight ? Diff(got, with, "with in-flight op") : std::string());
      }
    } else {
      // Sync: acknowledged data present; each byte of the in-flight range
      // old or new; the size one of the two.
      bool size_ok = got.size() == expect.size() || (has_inflight && got.size() == with.size());
      size_t bad = got.size();
      for (size_t i = 0; i < got.size() && size_ok; ++i) {
        unsigned char o = i < expect.size() ? expect[i] : 0, w = i < with.size() ? with[i] : 0;
        if (got[i] != o && got[i] != w) {
          bad = i;
          break;
        }
      }
      ASSERT_TRUE(size_ok && bad == got.size())
          << "acknowledged data lost or foreign data after the crash (" << ctx << ")\n  "
          << Diff(got, expect, "without in-flight op") << "\n  "
          << (has_inflight ? Diff(got, with, "with in-flight op") : std::string());
      if (got == expect) ++inflight_absent;
      else if (got == with) ++inflight_present;
      else ++partial;
    }
    std::string problems = InspectProblems(path);
    ASSERT_EQ(problems, "") << "InspectFile after the crash (" << ctx << ")";
    model.swap(got);
  }
  if (live >= 0) {
    EXPECT_EQ(upfs_close(live), 0);
  }
  std::printf("acknowledged ops: %" PRIu64 "; in-flight op present %" PRIu64 ", absent %" PRIu64
              ", partial %" PRIu64 "; final size %zu\n",
              total_acked, inflight_present, inflight_absent, partial, model.size());
}

TEST(Crash, StrictSingleWriter) { RunSingleChild(UPFS_STRICT, upfs_test::Scaled(500), 1001); }

TEST(Crash, SyncSingleWriter) { RunSingleChild(UPFS_SYNC, upfs_test::Scaled(200), 1002); }

TEST(Crash, StrictSingleWriterWithLiveObserver) {
  RunSingleChild(UPFS_STRICT, upfs_test::Scaled(200), 1004, /*observer=*/true);
}

// Two children write disjoint halves of one file (the boundary is not block
// aligned, so they share a block) and are both killed.
TEST(Crash, StrictTwoWriters) {
  TempDir dir;
  const std::string path = dir.File("crash2.dat");
  const uint64_t seed = upfs_test::TestSeed(1003);
  const uint64_t iterations = upfs_test::Scaled(150);
  const uint64_t split = 150 * kBlock + 1234, end = 300 * kBlock;
  const Region ra{0, split, false}, rb{split, end, false};
  std::printf("crash test (2 writers): %" PRIu64 " iterations, seed %" PRIu64 "\n", iterations, seed);
  ASSERT_NO_FATAL_FAILURE(CreateFile(path, UPFS_STRICT, end));
  Bytes model(end, 0);
  std::mt19937_64 rng(seed);
  uint64_t total_acked = 0;
  for (uint64_t it = 0; it < iterations; ++it) {
    std::vector<CrashOp> opa = GenerateOps(seed * 1000003 + 2 * it, 1, static_cast<uint32_t>(it * 8192), end, ra, 4096);
    std::vector<CrashOp> opb = GenerateOps(seed * 1000003 + 2 * it + 1, 2, static_cast<uint32_t>(it * 8192), end, rb, 4096);
    KillPlan plan = PlanKill(rng);
    ChildRun a = Spawn(path, opa);
    ChildRun b = Spawn(path, opb);
    ASSERT_GT(a.pid, 0);
    ASSERT_GT(b.pid, 0);
    bool hung = !RunPlan(plan.mode == 2 && rng() % 2 ? &b : &a, plan);
    if (rng() % 3 == 0) {
      KillAndCollect(&a);
      SleepMicros(rng() % 500);
      KillAndCollect(&b);
    } else {
      KillAndCollect(&b);
      KillAndCollect(&a);
    }
    std::string ctx = "A: " + Context(seed, static_cast<int>(it), a, opa) + "; B: " + Context(seed, static_cast<int>(it), b, opb);
    ASSERT_FALSE(hung) << "no progress for 300 s (" << ctx << ")";
    ASSERT_EQ(a.error, "") << ctx;
    ASSERT_EQ(b.error, "") << ctx;
    total_acked += a.acked + b.acked;

    Bytes expect = model;
    for (size_t i = 0; i < a.acked; ++i) Apply(&expect, opa[i]);
    for (size_t i = 0; i < b.acked; ++i) Apply(&expect, opb[i]);
    Bytes with = expect;
    if (a.acked < opa.size()) Apply(&with, opa[a.acked]);
    if (b.acked < opb.size()) Apply(&with, opb[b.acked]);

    Bytes got;
    std::string err;
    ASSERT_TRUE(ReadUpfsFile(path, &got, &err)) << err << " (" << ctx << ")";
    ASSERT_EQ(got.size(), end) << ctx;
    for (const auto& [lo, hi, name] : {std::tuple<uint64_t, uint64_t, const char*>{0, split, "A"},
                                       std::tuple<uint64_t, uint64_t, const char*>{split, end, "B"}}) {
      bool absent = std::equal(got.begin() + lo, got.begin() + hi, expect.begin() + lo);
      bool present = std::equal(got.begin() + lo, got.begin() + hi, with.begin() + lo);
      if (!absent && !present) {
        Bytes g(got.begin() + lo, got.begin() + hi), e(expect.begin() + lo, expect.begin() + hi),
            w(with.begin() + lo, with.begin() + hi);
        FAIL() << "region " << name << " [" << lo << ", " << hi
               << ") is neither the acknowledged state nor that plus its in-flight op (" << ctx << ")\n  "
               << Diff(g, e, "without in-flight op (offsets relative to the region)") << "\n  "
               << Diff(g, w, "with in-flight op");
      }
    }
    std::string problems = InspectProblems(path);
    ASSERT_EQ(problems, "") << "InspectFile after the crash (" << ctx << ")";
    model.swap(got);
  }
  std::printf("acknowledged ops: %" PRIu64 "\n", total_acked);
}

}  // namespace
