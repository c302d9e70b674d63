// Differential test: a seeded random sequence of file operations is applied
// to a upfs file and to a plain kernel file side by side; after every step
// the sizes, descriptor offsets and whole contents must be identical.
//
// Reproduce a failure with UPFS_TEST_SEED=<seed printed> (and the same
// UPFS_TEST_SCALE, which sets the number of steps).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using upfs_test::TempDir;

uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void FillRandom(std::vector<unsigned char>* buf, size_t n, uint64_t seed) {
  buf->resize(n);
  uint64_t s = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = SplitMix(&s);
    std::memcpy(buf->data() + i, &v, 8);
  }
  uint64_t v = SplitMix(&s);
  for (; i < n; ++i, v >>= 8) (*buf)[i] = static_cast<unsigned char>(v);
}

struct Params {
  upfs_consistency mode;
  uint64_t steps;
  uint64_t soft_max;     // sizes are pushed back below this
  uint64_t reopen_every;  // mean steps between close + reopen
};

class Differential {
 public:
  Differential(const TempDir& dir, const Params& p, uint64_t seed)
      : p_(p), seed_(seed), rng_(seed), upath_(dir.File("upfs.dat")), kpath_(dir.File("kernel.dat")) {}

  ~Differential() { Close(); }

  // Runs the sequence; returns "" or a failure report.
  std::string Run() {
    std::string err = Open(true);
    if (!err.empty()) return Report(0, err);
    for (step_ = 1; step_ <= p_.steps; ++step_) {
      err = Step();
      if (err.empty()) err = Compare();
      if (!err.empty()) return Report(step_, err);
    }
    return "";
  }

 private:
  std::string Open(bool create) {
    int cflags = create ? O_CREAT : 0;
    ufd_ = upfs_open_mode(upath_.c_str(), O_RDWR | cflags, 0644, p_.mode);
    if (ufd_ < 0) return std::string("upfs_open: ") + upfs_last_error() + " " + upfs_test::ErrnoText(errno);
    uafd_ = upfs_open(upath_.c_str(), O_WRONLY | O_APPEND);
    if (uafd_ < 0) return std::string("upfs_open O_APPEND: ") + upfs_last_error();
    kfd_ = ::open(kpath_.c_str(), O_RDWR | cflags, 0644);
    kafd_ = ::open(kpath_.c_str(), O_WRONLY | O_APPEND);
    if (kfd_ < 0 || kafd_ < 0) return "kernel open failed";
    return "";
  }

  std::string Close() {
    std::string err;
    if (ufd_ >= 0 && upfs_close(ufd_) != 0) err = std::string("upfs_close: ") + upfs_last_error();
    if (uafd_ >= 0 && upfs_close(uafd_) != 0) err = std::string("upfs_close: ") + upfs_last_error();
    if (kfd_ >= 0) ::close(kfd_);
    if (kafd_ >= 0) ::close(kafd_);
    ufd_ = uafd_ = kfd_ = kafd_ = -1;
    return err;
  }

  uint64_t KSize() {
    struct stat st;
    ::fstat(kfd_, &st);
    return static_cast<uint64_t>(st.st_size);
  }

  uint64_t Rand(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Chance(unsigned pct) { return Rand(100) < pct; }

  // A length biased towards small and block-aligned sizes (1 B .. 64 KiB).
  uint64_t PickLen(bool* aligned) {
    *aligned = false;
    unsigned r = static_cast<unsigned>(Rand(100));
    if (r < 35) return 1 + Rand(64);
    if (r < 55) return 1 + Rand(4096);
    if (r < 80) {
      *aligned = true;
      return 4096 * (1 + Rand(16));
    }
    return 1 + Rand(65536);
  }

  // An offset near or inside the current size.
  uint64_t PickOff(uint64_t size, bool aligned) {
    uint64_t limit = std::min<uint64_t>(size + 8192, p_.soft_max + p_.soft_max / 2);
    uint64_t off = Rand(limit + 1);
    if (aligned && Chance(75)) off &= ~uint64_t{4095};
    return off;
  }

  // Compares two call results, including errno for failures.
  static std::string CheckResult(const char* what, long long u, int uerr, long long k, int kerr) {
    if (u == k && (u >= 0 || uerr == kerr)) return "";
    char b[256];
    std::snprintf(b, sizeof b, "%s: upfs returned %lld (%s), kernel %lld (%s)", what, u,
                  u < 0 ? upfs_test::ErrnoText(uerr).c_str() : "-", k,
                  k < 0 ? upfs_test::ErrnoText(kerr).c_str() : "-");
    std::string s = b;
    if (u < 0) s += std::string("; upfs_last_error: ") + upfs_last_error();
    return s;
  }

  void Log(const std::string& s) {
    history_.push_back("step " + std::to_string(step_) + ": " + s);
    if (history_.size() > 25) history_.pop_front();
  }

  std::string Step() {
    uint64_t size = KSize();
    bool shrink_pressure = size > p_.soft_max;
    unsigned r = static_cast<unsigned>(Rand(1000));
    char d[256];
    if (shrink_pressure && r < 300) {
      uint64_t len = Rand(p_.soft_max / 2 + 1);
      std::snprintf(d, sizeof d, "ftruncate(%" PRIu64 ") [shrink]", len);
      Log(d);
      return DoTruncate(len);
    }
    if (r < 200 && size > 0) {  // a sub-block pwrite below the size: a patch in strict mode
      // Every length up to past the largest patch, at any offset in the
      // block, sometimes across its end (copied on write).
      uint64_t len = 1 + Rand(Chance(70) ? 128 : 640);
      uint64_t off = (Rand(size) & ~uint64_t{4095}) + Rand(4096);
      if (off + len > size) off = size > len ? size - len : 0;
      std::snprintf(d, sizeof d, "pwrite(off=%" PRIu64 ", len=%" PRIu64 ") [sub-block]", off, len);
      Log(d);
      return DoPwrite(off, len);
    }
    if (r < 330) {  // pwrite
      bool aligned;
      uint64_t len = PickLen(&aligned), off = PickOff(size, aligned);
      std::snprintf(d, sizeof d, "pwrite(off=%" PRIu64 ", len=%" PRIu64 ")", off, len);
      Log(d);
      return DoPwrite(off, len);
    }
    if (r < 380) {  // pwrite leaving a hole past EOF
      uint64_t len = 1 + Rand(Chance(50) ? 100 : 8192);
      uint64_t off = size + 1 + Rand(Chance(50) ? 4096 : 200 * 1024);
      if (Chance(30)) off = (off + 4095) & ~uint64_t{4095};
      off = std::min<uint64_t>(off, p_.soft_max + p_.soft_max / 2);
      std::snprintf(d, sizeof d, "pwrite(off=%" PRIu64 ", len=%" PRIu64 ") [hole]", off, len);
      Log(d);
      return DoPwrite(off, len);
    }
    if (r < 480) {  // append through the O_APPEND descriptors
      bool aligned;
      uint64_t len = PickLen(&aligned);
      if (Chance(30)) {
        // lseek on the append descriptor first: must not matter.
        uint64_t to = Rand(size + 1);
        off_t u = upfs_lseek(uafd_, static_cast<off_t>(to), SEEK_SET);
        off_t k = ::lseek(kafd_, static_cast<off_t>(to), SEEK_SET);
        std::string e = CheckResult("lseek(append fd)", u, errno, k, errno);
        if (!e.empty()) return e;
      }
      std::snprintf(d, sizeof d, "append write(len=%" PRIu64 ")", len);
      Log(d);
      return DoAppend(len);
    }
    if (r < 560) {  // lseek + write() at the descriptor offset
      bool aligned;
      uint64_t len = PickLen(&aligned);
      std::string e;
      if (Chance(70)) {
        int whence = static_cast<int>(Rand(3));
        long long off;
        if (whence == SEEK_SET) off = static_cast<long long>(PickOff(size, aligned));
        else if (whence == SEEK_CUR) off = static_cast<long long>(Rand(20000)) - 10000;
        else off = static_cast<long long>(Rand(16384)) - 12000;
        e = DoLseek(off, whence);
        if (!e.empty()) return e;
      }
      std::snprintf(d, sizeof d, "write(len=%" PRIu64 ")", len);
      Log(d);
      return DoWrite(len);
    }
    if (r < 620) {  // lseek + read()
      uint64_t len = 1 + Rand(Chance(50) ? 4096 : 70000);
      if (Chance(70)) {
        int whence = static_cast<int>(Rand(3));
        long long off = whence == SEEK_SET ? static_cast<long long>(Rand(size + 5000))
                                           : static_cast<long long>(Rand(20000)) - 10000;
        std::string e = DoLseek(off, whence);
        if (!e.empty()) return e;
      }
      std::snprintf(d, sizeof d, "read(len=%" PRIu64 ")", len);
      Log(d);
      return DoRead(len);
    }
    if (r < 700) {  // pread
      uint64_t off = Rand(size + 10000), len = 1 + Rand(Chance(50) ? 5000 : 100000);
      std::snprintf(d, sizeof d, "pread(off=%" PRIu64 ", len=%" PRIu64 ")", off, len);
      Log(d);
      return DoPread(off, len);
    }
    if (r < 720) {  // lseek alone, including invalid results
      int whence = static_cast<int>(Rand(3));
      long long off = static_cast<long long>(Rand(3 * size + 10)) - static_cast<long long>(size) - 5;
      return DoLseek(off, whence);
    }
    if (r < 800) {  // ftruncate up or down
      uint64_t len;
      unsigned k = static_cast<unsigned>(Rand(4));
      if (k == 0) len = Rand(size + 1);
      else if (k == 1) len = size + 1 + Rand(100000);
      else if (k == 2) len = Rand(size + 1) & ~uint64_t{4095};
      else len = size > 0 ? size - 1 - Rand(std::min<uint64_t>(size, 100)) : 0;
      len = std::min<uint64_t>(len, p_.soft_max + p_.soft_max / 2);
      std::snprintf(d, sizeof d, "ftruncate(%" PRIu64 ")", len);
      Log(d);
      return DoTruncate(len);
    }
    if (r < 900) {  // fallocate
      static const int modes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE};
      int mode = modes[Rand(4)];
      bool aligned;
      uint64_t len = PickLen(&aligned);
      uint64_t off = mode == 0 || mode == FALLOC_FL_KEEP_SIZE ? PickOff(size, aligned) : Rand(size + 4096);
      if (aligned && Chance(50)) off &= ~uint64_t{4095};
      if (off + len > p_.soft_max + p_.soft_max / 2) off = Rand(size + 1);
      std::snprintf(d, sizeof d, "fallocate(mode=%s, off=%" PRIu64 ", len=%" PRIu64 ")",
                    mode == 0 ? "0" : mode == FALLOC_FL_KEEP_SIZE ? "KEEP_SIZE" : "PUNCH_HOLE|KEEP_SIZE",
                    off, len);
      Log(d);
      return DoFallocate(mode, off, len);
    }
    if (r < 920) {  // zero-length operations
      uint64_t off = Rand(size + 100000);
      std::snprintf(d, sizeof d, "pwrite(off=%" PRIu64 ", len=0) + read(len=0)", off);
      Log(d);
      unsigned char c = 0;
      ssize_t u = upfs_pwrite(ufd_, &c, 0, static_cast<off_t>(off));
      int ue = errno;
      ssize_t k = ::pwrite(kfd_, &c, 0, static_cast<off_t>(off));
      std::string e = CheckResult("pwrite len 0", u, ue, k, errno);
      if (!e.empty()) return e;
      u = upfs_read(ufd_, &c, 0);
      ue = errno;
      k = ::read(kfd_, &c, 0);
      return CheckResult("read len 0", u, ue, k, errno);
    }
    if (r < 935) {
      Log("fsync + fdatasync");
      if (upfs_fsync(ufd_) != 0) return std::string("upfs_fsync: ") + upfs_last_error();
      if (upfs_fdatasync(uafd_) != 0) return std::string("upfs_fdatasync: ") + upfs_last_error();
      return "";
    }
    if (Rand(p_.reopen_every * 65 / 1000 + 1) == 0) {
      Log("close + reopen");
      std::string e = Close();
      if (!e.empty()) return e;
      return Open(false);
    }
    // Several small writes in a row into one block neighbourhood.
    uint64_t base = PickOff(size, true);
    Log("burst of 8 small pwrites near " + std::to_string(base));
    for (int i = 0; i < 8; ++i) {
      uint64_t off = base + Rand(8192), len = 1 + Rand(300);
      std::snprintf(d, sizeof d, "  pwrite(off=%" PRIu64 ", len=%" PRIu64 ") [burst]", off, len);
      Log(d);
      std::string e = DoPwrite(off, len);
      if (!e.empty()) return e;
    }
    return "";
  }

  std::string DoPwrite(uint64_t off, uint64_t len) {
    FillRandom(&buf_, len, rng_());
    ssize_t u = upfs_pwrite(ufd_, buf_.data(), len, static_cast<off_t>(off));
    int ue = errno;
    ssize_t k = ::pwrite(kfd_, buf_.data(), len, static_cast<off_t>(off));
    return CheckResult("pwrite", u, ue, k, errno);
  }

  std::string DoAppend(uint64_t len) {
    FillRandom(&buf_, len, rng_());
    ssize_t u = upfs_write(uafd_, buf_.data(), len);
    int ue = errno;
    ssize_t k = ::write(kafd_, buf_.data(), len);
    std::string e = CheckResult("append write", u, ue, k, errno);
    if (!e.empty()) return e;
    off_t uo = upfs_lseek(uafd_, 0, SEEK_CUR);
    ue = errno;
    off_t ko = ::lseek(kafd_, 0, SEEK_CUR);
    return CheckResult("offset of the append fd after the append", uo, ue, ko, errno);
  }

  std::string DoWrite(uint64_t len) {
    FillRandom(&buf_, len, rng_());
    ssize_t u = upfs_write(ufd_, buf_.data(), len);
    int ue = errno;
    ssize_t k = ::write(kfd_, buf_.data(), len);
    return CheckResult("write", u, ue, k, errno);
  }

  std::string DoRead(uint64_t len) {
    std::vector<unsigned char> a(len), b(len);
    ssize_t u = upfs_read(ufd_, a.data(), len);
    int ue = errno;
    ssize_t k = ::read(kfd_, b.data(), len);
    std::string e = CheckResult("read", u, ue, k, errno);
    if (!e.empty()) return e;
    if (k > 0 && std::memcmp(a.data(), b.data(), static_cast<size_t>(k)) != 0) return "read returned different data";
    return "";
  }

  std::string DoPread(uint64_t off, uint64_t len) {
    std::vector<unsigned char> a(len), b(len);
    ssize_t u = upfs_pread(ufd_, a.data(), len, static_cast<off_t>(off));
    int ue = errno;
    ssize_t k = ::pread(kfd_, b.data(), len, static_cast<off_t>(off));
    std::string e = CheckResult("pread", u, ue, k, errno);
    if (!e.empty()) return e;
    if (k > 0 && std::memcmp(a.data(), b.data(), static_cast<size_t>(k)) != 0) {
      size_t i = 0;
      while (a[i] == b[i]) ++i;
      return "pread returned different data at file offset " + std::to_string(off + i);
    }
    return "";
  }

  std::string DoLseek(long long off, int whence) {
    char d[128];
    std::snprintf(d, sizeof d, "lseek(%lld, %s)", off,
                  whence == SEEK_SET ? "SEEK_SET" : whence == SEEK_CUR ? "SEEK_CUR" : "SEEK_END");
    Log(d);
    off_t u = upfs_lseek(ufd_, static_cast<off_t>(off), whence);
    int ue = errno;
    off_t k = ::lseek(kfd_, static_cast<off_t>(off), whence);
    return CheckResult("lseek", u, ue, k, errno);
  }

  std::string DoTruncate(uint64_t len) {
    int u = upfs_ftruncate(ufd_, static_cast<off_t>(len));
    int ue = errno;
    int k = ::ftruncate(kfd_, static_cast<off_t>(len));
    return CheckResult("ftruncate", u, ue, k, errno);
  }

  std::string DoFallocate(int mode, uint64_t off, uint64_t len) {
    int u = upfs_fallocate(ufd_, mode, static_cast<off_t>(off), static_cast<off_t>(len));
    int ue = errno;
    int k = ::fallocate(kfd_, mode, static_cast<off_t>(off), static_cast<off_t>(len));
    return CheckResult("fallocate", u, ue, k, errno);
  }

  // Sizes, offsets and whole contents must agree.
  std::string Compare() {
    struct stat us, ks;
    if (upfs_fstat(ufd_, &us) != 0) return std::string("upfs_fstat: ") + upfs_last_error();
    ::fstat(kfd_, &ks);
    if (us.st_size != ks.st_size)
      return "size differs: upfs " + std::to_string(us.st_size) + ", kernel " + std::to_string(ks.st_size);
    off_t uo = upfs_lseek(ufd_, 0, SEEK_CUR), ko = ::lseek(kfd_, 0, SEEK_CUR);
    if (uo != ko) return "offset differs: upfs " + std::to_string(uo) + ", kernel " + std::to_string(ko);
    size_t n = static_cast<size_t>(ks.st_size);
    ubuf_.resize(n);
    kbuf_.resize(n);
    ssize_t u = upfs_test::UpfsPreadFull(ufd_, ubuf_.data(), n, 0);
    if (u != static_cast<ssize_t>(n))
      return "upfs read of the whole file returned " + std::to_string(u) + " of " + std::to_string(n) +
             " bytes" + (u < 0 ? std::string(": ") + upfs_last_error() : std::string());
    size_t done = 0;
    while (done < n) {
      ssize_t k = ::pread(kfd_, kbuf_.data() + done, n - done, static_cast<off_t>(done));
      if (k <= 0) return "kernel read failed";
      done += static_cast<size_t>(k);
    }
    if (n > 0 && std::memcmp(ubuf_.data(), kbuf_.data(), n) != 0) {
      size_t i = 0;
      while (ubuf_[i] == kbuf_[i]) ++i;
      size_t j = n;
      while (ubuf_[j - 1] == kbuf_[j - 1]) --j;
      char b[256];
      std::snprintf(b, sizeof b,
                    "content differs in bytes [%zu, %zu) of %zu; first: upfs 0x%02x kernel 0x%02x "
                    "(block %zu, offset %zu in block)",
                    i, j, n, ubuf_[i], kbuf_[i], i / 4096, i % 4096);
      return b;
    }
    return "";
  }

  std::string Report(uint64_t step, const std::string& err) {
    std::string s = "differential mismatch (mode " + std::string(p_.mode == UPFS_STRICT ? "strict" : "sync") +
                    ", seed " + std::to_string(seed_) + ", step " + std::to_string(step) + " of " +
                    std::to_string(p_.steps) + "): " + err + "\nlast operations:\n";
    for (const auto& h : history_) s += "  " + h + "\n";
    s += "reproduce: UPFS_TEST_SEED=" + std::to_string(seed_) + " UPFS_TEST_SCALE=" + std::to_string(upfs_test::Scale());
    return s;
  }

  Params p_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::string upath_, kpath_;
  int ufd_ = -1, uafd_ = -1, kfd_ = -1, kafd_ = -1;
  uint64_t step_ = 0;
  std::deque<std::string> history_;
  std::vector<unsigned char> buf_, ubuf_, kbuf_;
};

void RunDifferential(const Params& p, uint64_t default_seed) {
  uint64_t seed = upfs_test::TestSeed(default_seed);
  std::printf("differential: mode %s, seed %" PRIu64 ", %" PRIu64 " steps\n",
              p.mode == UPFS_STRICT ? "strict" : "sync", seed, p.steps);
  TempDir dir;
  Differential d(dir, p, seed);
  std::string err = d.Run();
  if (!err.empty()) ADD_FAILURE() << err;
}

TEST(Differential, StrictMode) {
  RunDifferential(Params{UPFS_STRICT, upfs_test::Scaled(100000), 1 << 20, 1000}, 20240601);
}

TEST(Differential, SyncMode) {
  RunDifferential(Params{UPFS_SYNC, upfs_test::Scaled(30000), 1 << 20, 1000}, 20240601);
}

// Small files: every operation hits the same few blocks and their edges.
TEST(Differential, StrictModeSmallFile) {
  RunDifferential(Params{UPFS_STRICT, upfs_test::Scaled(30000), 48 << 10, 500}, 777);
}

TEST(Differential, SyncModeSmallFile) {
  RunDifferential(Params{UPFS_SYNC, upfs_test::Scaled(20000), 48 << 10, 500}, 778);
}

// A second seed for the strict mode, with frequent reopens.
TEST(Differential, StrictModeFrequentReopen) {
  RunDifferential(Params{UPFS_STRICT, upfs_test::Scaled(20000), 256 << 10, 100}, 4242);
}

}  // namespace
