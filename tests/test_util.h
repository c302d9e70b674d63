// Shared helpers for the upfs test suite: temporary directories, scale and
// seed knobs, self-describing write records and small I/O utilities.
//
// Environment:
//   UPFS_TEST_SCALE  multiplies iteration counts (default 1.0; e.g. 0.2 under
//                    sanitizers). Counts never drop below 1.
//   UPFS_TEST_SEED   overrides the default seed of seeded tests (decimal or
//                    0x hex). Every seeded test prints the seed it used.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace upfs_test {

// ---------------------------------------------------------------------------
// Knobs.

inline double Scale() {
  static const double scale = [] {
    const char* e = std::getenv("UPFS_TEST_SCALE");
    if (e == nullptr || *e == '\0') return 1.0;
    double v = std::strtod(e, nullptr);
    return v > 0 ? v : 1.0;
  }();
  return scale;
}

// n scaled by UPFS_TEST_SCALE, at least `floor_value`.
inline uint64_t Scaled(uint64_t n, uint64_t floor_value = 1) {
  long long v = std::llround(static_cast<double>(n) * Scale());
  return std::max<uint64_t>(floor_value, static_cast<uint64_t>(v < 0 ? 0 : v));
}

// The seed from UPFS_TEST_SEED, or `def`.
inline uint64_t TestSeed(uint64_t def) {
  const char* e = std::getenv("UPFS_TEST_SEED");
  if (e == nullptr || *e == '\0') return def;
  return std::strtoull(e, nullptr, 0);
}

// ---------------------------------------------------------------------------
// Temporary directory under /dev/shm, removed with its contents at the end.

inline int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  // upfs_unlink also removes the shared allocation state of a upfs file (a
  // plain unlink for anything else).
  if (type == FTW_F && upfs_unlink(path) == 0) return 0;
  ::remove(path);
  return 0;
}

inline void RemoveTree(const std::string& path) {
  ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

class TempDir {
 public:
  TempDir() {
    RemoveStale();
    owner_ = ::getpid();
    std::string tmpl = "/dev/shm/upfs-test-" + std::to_string(owner_) + "-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = p;
  }

  // Directories of test processes that died before their TempDir was
  // destroyed (an abort, a timeout's kill) are removed by the next test
  // that makes one, so that a failed run does not leave them for good.
  // Only a directory whose owner no longer exists and that nothing has
  // changed for an hour (longer than any test runs): a process of another
  // pid namespace sharing /dev/shm would look dead from here.
  static void RemoveStale() {
    DIR* d = ::opendir("/dev/shm");
    if (d == nullptr) return;
    std::vector<std::string> stale;
    const time_t now = ::time(nullptr);
    while (const struct dirent* e = ::readdir(d)) {
      long pid = 0;
      int used = 0;
      if (std::sscanf(e->d_name, "upfs-test-%ld-%n", &pid, &used) != 1 || used == 0 || pid <= 0) continue;
      if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
      const std::string path = std::string("/dev/shm/") + e->d_name;
      struct stat st;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && now - st.st_mtime > 3600) stale.push_back(path);
    }
    ::closedir(d);
    for (const std::string& path : stale) RemoveTree(path);
  }
  ~TempDir() {
    // A forked child that leaves through exit() must not remove the parent's
    // directory.
    if (::getpid() == owner_) RemoveTree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  pid_t owner_;
};

// ---------------------------------------------------------------------------
// Plain-file helpers (host files, not upfs).

inline bool WriteHostFile(const std::string& path, const void* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) {
      ::close(fd);
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
  return true;
}

inline bool ReadHostFile(const std::string& path, std::vector<unsigned char>* out) {
  out->clear();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  unsigned char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      ::close(fd);
      return false;
    }
    if (r == 0) break;
    out->insert(out->end(), buf, buf + r);
  }
  ::close(fd);
  return true;
}

// Full pread on a upfs descriptor; returns bytes read or -1.
inline ssize_t UpfsPreadFull(int fd, void* buf, size_t n, off_t off) {
  size_t done = 0;
  char* p = static_cast<char*>(buf);
  while (done < n) {
    ssize_t r = upfs_pread(fd, p + done, n - done, off + static_cast<off_t>(done));
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

// Full pwrite on a upfs descriptor; true when all bytes were written.
inline bool UpfsPwriteFull(int fd, const void* buf, size_t n, off_t off) {
  size_t done = 0;
  const char* p = static_cast<const char*>(buf);
  while (done < n) {
    ssize_t w = upfs_pwrite(fd, p + done, n - done, off + static_cast<off_t>(done));
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// The whole content of an open upfs file (size from fstat). False on error.
inline bool UpfsReadAll(int fd, std::vector<unsigned char>* out) {
  struct stat st;
  if (upfs_fstat(fd, &st) != 0) return false;
  out->assign(static_cast<size_t>(st.st_size), 0);
  ssize_t r = UpfsPreadFull(fd, out->data(), out->size(), 0);
  if (r < 0 || static_cast<size_t>(r) != out->size()) return false;
  return true;
}

inline off_t UpfsSize(int fd) {
  struct stat st;
  if (upfs_fstat(fd, &st) != 0) return -1;
  return st.st_size;
}

// n bytes of a fixed-seed sequence, none of them zero.
inline std::vector<unsigned char> Pattern(size_t n, uint32_t seed) {
  std::vector<unsigned char> b(n);
  std::mt19937 rng(seed);
  for (auto& c : b) c = static_cast<unsigned char>(rng() % 255 + 1);
  return b;
}

// Creates (or opens) the upfs file `path`, writes `data` at 0 and closes it:
// 0, or -1 with errno.
inline int WriteAndClose(const std::string& path, const std::vector<unsigned char>& data) {
  int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd < 0) return -1;
  if (upfs_pwrite(fd, data.data(), data.size(), 0) != ssize_t(data.size())) return -1;
  return upfs_close(fd);
}

inline bool AllZero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

inline std::string ErrnoText(int e) {
  return std::string(strerrorname_np(e) ? strerrorname_np(e) : "?") + " (" + std::strerror(e) + ")";
}

// ---------------------------------------------------------------------------
// Self-describing write records.
//
// A write W = (writer, seq, off, len) fills [off, off+len) with 32-byte
// records aligned to absolute file positions: the record at q (q % 32 == 0)
// names W and q and carries a CRC over itself; a write that starts or ends
// inside a record holds the matching slice of that record. The content of a
// write is therefore a pure function of W and the position, and any 64-byte
// window of it identifies W.
//
// Append records (FillAppend) are for O_APPEND writes, whose offset the
// writer does not know: records are aligned to the start of the write and
// `len` is a multiple of 32.

inline constexpr uint32_t kRecSize = 32;
inline constexpr uint32_t kRecMagic = 0x31434552;  // "REC1"
inline constexpr uint32_t kAppMagic = 0x31505041;  // "APP1"

struct WriteId {
  uint16_t writer = 0;
  uint32_t seq = 0;
  uint64_t off = 0;
  uint32_t len = 0;
  bool operator==(const WriteId& o) const {
    return writer == o.writer && seq == o.seq && off == o.off && len == o.len;
  }
  bool operator!=(const WriteId& o) const { return !(*this == o); }
  std::string ToString() const {
    char b[128];
    std::snprintf(b, sizeof b, "{writer=%u seq=%u off=%llu len=%u}", writer, seq,
                  static_cast<unsigned long long>(off), len);
    return b;
  }
};

struct RecordImage {
  uint32_t magic;
  uint16_t writer;
  uint16_t tag;  // zero
  uint32_t seq;
  uint32_t len;
  uint64_t off;  // write offset; ~0 for append records
  uint32_t pos;  // q / 32 (positional) or record index (append)
  uint32_t crc;  // CRC-32C of the 28 bytes before it
};
static_assert(sizeof(RecordImage) == kRecSize);

inline RecordImage MakeRecord(uint32_t magic, const WriteId& w, uint32_t pos) {
  RecordImage r{};
  r.magic = magic;
  r.writer = w.writer;
  r.tag = 0;
  r.seq = w.seq;
  r.len = w.len;
  r.off = w.off;
  r.pos = pos;
  r.crc = upfs::Crc32c(&r, offsetof(RecordImage, crc));
  return r;
}

inline bool RecordValid(const RecordImage& r) {
  return r.crc == upfs::Crc32c(&r, offsetof(RecordImage, crc)) && r.tag == 0;
}

// Writes the bytes of write `w` that fall in [start, start+n) into `dst`.
// Requires [start, start+n) within [w.off, w.off + w.len).
inline void FillPositionalRange(const WriteId& w, uint64_t start, uint64_t n, unsigned char* dst) {
  uint64_t end = start + n;
  uint64_t q = start & ~uint64_t{kRecSize - 1};
  for (; q < end; q += kRecSize) {
    RecordImage r = MakeRecord(kRecMagic, w, static_cast<uint32_t>(q / kRecSize));
    const unsigned char* rb = reinterpret_cast<const unsigned char*>(&r);
    uint64_t a = std::max(q, start), b = std::min(q + kRecSize, end);
    std::memcpy(dst + (a - start), rb + (a - q), b - a);
  }
}

// The whole buffer of write `w`.
inline void FillPositional(const WriteId& w, unsigned char* dst) {
  FillPositionalRange(w, w.off, w.len, dst);
}

inline std::vector<unsigned char> MakePositional(const WriteId& w) {
  std::vector<unsigned char> v(w.len);
  FillPositional(w, v.data());
  return v;
}

// Append record buffer: `w.off` is ignored (stored as ~0), w.len % 32 == 0.
inline void FillAppend(const WriteId& w, unsigned char* dst) {
  WriteId a = w;
  a.off = ~uint64_t{0};
  for (uint32_t i = 0; i < w.len / kRecSize; ++i) {
    RecordImage r = MakeRecord(kAppMagic, a, i);
    std::memcpy(dst + uint64_t{i} * kRecSize, &r, kRecSize);
  }
}

// Result of classifying a region of file content.
struct RegionClass {
  enum Kind { kZero, kWhole, kBad } kind = kBad;
  WriteId w;          // for kWhole
  std::string error;  // for kBad
};

// Decodes the positional record whose 32-byte image starts at `q` (absolute)
// inside data (covering [start, start+n)); false if it is not a whole valid
// positional record.
inline bool DecodeAt(const unsigned char* data, uint64_t start, uint64_t n, uint64_t q, WriteId* w) {
  if (q < start || q + kRecSize > start + n) return false;
  RecordImage r;
  std::memcpy(&r, data + (q - start), kRecSize);
  if (r.magic != kRecMagic || !RecordValid(r)) return false;
  if (r.pos != static_cast<uint32_t>(q / kRecSize)) return false;
  w->writer = r.writer;
  w->seq = r.seq;
  w->off = r.off;
  w->len = r.len;
  return true;
}

// Describes the bytes at absolute position p for diagnostics.
inline std::string DescribeAt(const unsigned char* data, uint64_t start, uint64_t n, uint64_t p) {
  uint64_t q = p & ~uint64_t{kRecSize - 1};
  WriteId w;
  char b[256];
  if (DecodeAt(data, start, n, q, &w)) {
    std::snprintf(b, sizeof b, "record of %s", w.ToString().c_str());
  } else if (p >= start && p < start + n) {
    std::snprintf(b, sizeof b, "byte 0x%02x (no whole record at %llu)", data[p - start],
                  static_cast<unsigned long long>(q));
  } else {
    std::snprintf(b, sizeof b, "outside");
  }
  return b;
}

// Classifies [start, start+n) (absolute positions; data holds those bytes):
// all zero, or entirely the content of a single write W (which must cover
// the whole region), or bad (torn, mixed, foreign).
inline RegionClass ClassifyRegion(const unsigned char* data, uint64_t start, uint64_t n) {
  RegionClass c;
  if (n == 0 || AllZero(data, n)) {
    c.kind = RegionClass::kZero;
    return c;
  }
  uint64_t q = (start + kRecSize - 1) & ~uint64_t{kRecSize - 1};
  WriteId w;
  bool found = false;
  for (; q + kRecSize <= start + n; q += kRecSize) {
    if (DecodeAt(data, start, n, q, &w)) {
      found = true;
      break;
    }
  }
  char b[512];
  if (!found) {
    std::snprintf(b, sizeof b, "no valid record in region [%llu, %llu)",
                  static_cast<unsigned long long>(start), static_cast<unsigned long long>(start + n));
    c.error = b;
    return c;
  }
  if (w.off > start || w.off + w.len < start + n) {
    std::snprintf(b, sizeof b, "region [%llu, %llu) holds a record of %s that does not cover it",
                  static_cast<unsigned long long>(start), static_cast<unsigned long long>(start + n),
                  w.ToString().c_str());
    c.error = b;
    return c;
  }
  std::vector<unsigned char> expect(n);
  FillPositionalRange(w, start, n, expect.data());
  if (std::memcmp(expect.data(), data, n) != 0) {
    uint64_t i = 0;
    while (expect[i] == data[i]) ++i;
    uint64_t j = n;
    while (expect[j - 1] == data[j - 1]) --j;
    std::snprintf(b, sizeof b,
                  "torn region [%llu, %llu): identified as %s but bytes [%llu, %llu) differ; "
                  "at %llu: %s; at %llu: %s",
                  static_cast<unsigned long long>(start), static_cast<unsigned long long>(start + n),
                  w.ToString().c_str(), static_cast<unsigned long long>(start + i),
                  static_cast<unsigned long long>(start + j), static_cast<unsigned long long>(start + i),
                  DescribeAt(data, start, n, start + i).c_str(),
                  static_cast<unsigned long long>(start + j - 1),
                  DescribeAt(data, start, n, start + j - 1).c_str());
    c.error = b;
    return c;
  }
  c.kind = RegionClass::kWhole;
  c.w = w;
  return c;
}

// Parses append records in data[0, n). Calls on_record(WriteId) for each
// whole append (off = position in data). Returns "" or an error.
template <typename F>
std::string ParseAppends(const unsigned char* data, uint64_t n, F on_record) {
  uint64_t p = 0;
  char b[256];
  while (p < n) {
    if (p + kRecSize > n) {
      std::snprintf(b, sizeof b, "partial record at %llu (size %llu)", static_cast<unsigned long long>(p),
                    static_cast<unsigned long long>(n));
      return b;
    }
    RecordImage r;
    std::memcpy(&r, data + p, kRecSize);
    if (r.magic != kAppMagic || !RecordValid(r) || r.pos != 0 || r.len == 0 || r.len % kRecSize != 0) {
      std::snprintf(b, sizeof b, "no valid append record start at %llu", static_cast<unsigned long long>(p));
      return b;
    }
    WriteId w{r.writer, r.seq, 0, r.len};
    if (p + r.len > n) {
      std::snprintf(b, sizeof b, "append %s at %llu runs past the end %llu", w.ToString().c_str(),
                    static_cast<unsigned long long>(p), static_cast<unsigned long long>(n));
      return b;
    }
    std::vector<unsigned char> expect(r.len);
    FillAppend(w, expect.data());
    if (std::memcmp(expect.data(), data + p, r.len) != 0) {
      std::snprintf(b, sizeof b, "torn append %s at %llu", w.ToString().c_str(),
                    static_cast<unsigned long long>(p));
      return b;
    }
    w.off = p;
    on_record(w);
    p += r.len;
  }
  return "";
}

// ---------------------------------------------------------------------------
// Child processes.

// Waits for `pid`; returns a description of how it ended ("exit 0",
// "signal 9", ...) and sets *status.
inline std::string WaitChild(pid_t pid, int* status_out = nullptr) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return std::string("waitpid: ") + std::strerror(errno);
  }
  if (status_out) *status_out = status;
  char b[64];
  if (WIFEXITED(status)) {
    std::snprintf(b, sizeof b, "exit %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    std::snprintf(b, sizeof b, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  } else {
    std::snprintf(b, sizeof b, "status 0x%x", status);
  }
  return b;
}

// Reads everything from fd until EOF (or until timeout_ms passes without the
// writer closing; then *timed_out is set). Blocking reads with poll.
inline std::string DrainFd(int fd, int timeout_ms, bool* timed_out) {
  std::string out;
  *timed_out = false;
  char buf[4096];
  for (;;) {
    struct pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (r == 0) {
      *timed_out = true;
      break;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// write(2) all of a buffer to a pipe (child side; ignores errors).
inline void PipeWriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

inline void PipeWriteString(int fd, const std::string& s) { PipeWriteAll(fd, s.data(), s.size()); }

// A child process that reports to its parent on a pipe.
struct ReportingChild {
  pid_t pid = -1;
  int out = -1;  // the parent's read end
  std::string what;
};

// Forks; the child closes the descriptors in `close_in_child` (the parent's
// ends of other pipes), runs body(write end) and must end the process
// itself. pid is -1 if the pipe or the fork failed.
template <typename Body>
ReportingChild ForkReporting(const std::string& what, std::initializer_list<int> close_in_child,
                             Body body) {
  ReportingChild c;
  c.what = what;
  int p[2];
  if (::pipe(p) != 0) return c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::close(p[0]);
    for (int fd : close_in_child) ::close(fd);
    body(p[1]);
    ::_exit(0);
  }
  ::close(p[1]);
  if (c.pid < 0) {
    ::close(p[0]);
    return c;
  }
  c.out = p[0];
  return c;
}

// What the child wrote until it ended (killed after timeout_ms without
// closing its end: *hung), and how it ended (WaitChild).
inline std::string CollectReport(ReportingChild& c, int timeout_ms, std::string* how, bool* hung) {
  *hung = false;
  std::string text = DrainFd(c.out, timeout_ms, hung);
  ::close(c.out);
  c.out = -1;
  if (*hung) ::kill(c.pid, SIGKILL);
  *how = WaitChild(c.pid);
  return text;
}

}  // namespace upfs_test
