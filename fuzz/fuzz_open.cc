// fuzz_open: arbitrary bytes as a upfs file, through the C API.
//
// Each run writes the input to a host file (fuzz_common.h), then
//   upfs_open(O_RDWR)            header checks, log replay, shared-state rebuild
//   upfs_fstat, upfs_pread       the whole virtual size (bounded), upfs_read,
//   upfs_lseek                   SEEK_DATA / SEEK_HOLE / SEEK_END
//   upfs_pwrite, upfs_ftruncate, upfs_fallocate (punch and allocate),
//   upfs_fsync, upfs_close
//   upfs_open again              replays what the engine itself appended
// and removes the file with upfs_unlink.
//
// Contract (a violation traps, and libFuzzer saves the input):
//  - no crash, hang, leak, ASan or UBSan report;
//  - every call that fails returns -1 with errno EUCLEAN, EMEDIUMTYPE, EINVAL,
//    EFBIG or ENOSPC and a non-empty upfs_last_error();
//  - a file upfs_open refuses as damaged (EUCLEAN) is also reported damaged
//    by InspectFile (fsck checks at least what open checks);
//  - on a file that opened, every successful call does what it says: reads
//    inside the size return every byte asked for, a write reads back, a
//    truncate sets the size, a punched range reads as zero;
//  - after close, the file opens again with the same size and contents.
#include <linux/falloc.h>

#include <algorithm>
#include <vector>

#include "container/perfile/inspect.h"
#include "fuzz_common.h"

using namespace upfs_fuzz;

namespace {

constexpr uint64_t kMaxRead = 64ull << 20;  // a hole-filled huge file is legal
constexpr size_t kChunk = 256 << 10;

void CheckFail(const char* what, int e) {
  const char* msg = upfs_last_error();
  if (!AllowedErrno(e)) Violation("%s failed with %s (%s)", what, ErrnoName(e), msg);
  if (msg == nullptr || *msg == '\0')
    Violation("%s failed with %s and an empty upfs_last_error()", what, ErrnoName(e));
}

// True if r >= 0; otherwise checks the failure against the contract.
bool Ok(const char* what, long long r) {
  if (r >= 0) return true;
  if (r != -1) Violation("%s returned %lld", what, r);
  CheckFail(what, errno);
  return false;
}

std::vector<unsigned char> g_buf(kChunk);

// Reads [off, off + n) (n <= kChunk) and checks that every byte came back.
// Returns false if the read failed (cleanly).
bool ReadExact(int fd, uint64_t off, size_t n, unsigned char* out, const char* what) {
  ssize_t r = upfs_pread(fd, out, n, off_t(off));
  if (!Ok(what, r)) return false;
  if (size_t(r) != n)
    Violation("%s: pread(%zu bytes at %llu) inside the size returned %zd", what, n,
              (unsigned long long)off, r);
  return true;
}

// Reads the file's contents (everything if the size is at most kMaxRead,
// else the first, a middle and the last chunk). Appends them to *out if
// given. Returns the size, or -1 if fstat or a read failed cleanly.
int64_t ReadAll(int fd, const char* what, std::vector<unsigned char>* out) {
  struct stat st;
  if (!Ok("upfs_fstat", upfs_fstat(fd, &st))) return -1;
  if (st.st_size < 0) Violation("%s: negative size %lld", what, (long long)st.st_size);
  const uint64_t size = uint64_t(st.st_size);
  if (size > upfs::format::kMaxFileSize)
    Violation("%s: size %llu beyond kMaxFileSize", what, (unsigned long long)size);
  std::vector<uint64_t> offs;
  if (size <= kMaxRead) {
    for (uint64_t o = 0; o < size; o += kChunk) offs.push_back(o);
  } else {
    offs = {0, size / 2 / kB * kB, size - kChunk};
  }
  for (uint64_t o : offs) {
    size_t n = size_t(std::min<uint64_t>(kChunk, size - o));
    if (!ReadExact(fd, o, n, g_buf.data(), what)) return -1;
    if (out) out->insert(out->end(), g_buf.begin(), g_buf.begin() + n);
  }
  // At and past the end: nothing.
  for (uint64_t o : {size, size + 1, size + kB + 7}) {
    ssize_t r = upfs_pread(fd, g_buf.data(), 16, off_t(o));
    if (!Ok("upfs_pread past the end", r)) return -1;
    if (r != 0) Violation("%s: pread at %llu (size %llu) returned %zd", what,
                          (unsigned long long)o, (unsigned long long)size, r);
  }
  return int64_t(size);
}

void CheckSize(int fd, uint64_t want, const char* after) {
  struct stat st;
  if (!Ok("upfs_fstat", upfs_fstat(fd, &st))) return;
  if (uint64_t(st.st_size) != want)
    Violation("size %lld after %s, expected %llu", (long long)st.st_size, after,
              (unsigned long long)want);
}

void WriteAndCheck(int fd, const unsigned char* src, size_t n, uint64_t off, const char* what) {
  ssize_t w = upfs_pwrite(fd, src, n, off_t(off));
  if (!Ok(what, w)) return;
  if (size_t(w) != n) Violation("%s wrote %zd of %zu bytes", what, w, n);
  std::vector<unsigned char> back(n);
  if (!ReadExact(fd, off, n, back.data(), what)) return;
  if (memcmp(back.data(), src, n) != 0) Violation("%s does not read back", what);
}

void ExpectZero(int fd, uint64_t off, size_t n, const char* what) {
  std::vector<unsigned char> back(n);
  if (!ReadExact(fd, off, n, back.data(), what)) return;
  for (size_t i = 0; i < n; ++i)
    if (back[i] != 0)
      Violation("%s: byte %llu is %#x, expected zero", what, (unsigned long long)(off + i),
                back[i]);
}

void CheckSeek(int fd, int64_t size) {
  for (int whence : {SEEK_DATA, SEEK_HOLE}) {
    const char* name = whence == SEEK_DATA ? "upfs_lseek(SEEK_DATA)" : "upfs_lseek(SEEK_HOLE)";
    off_t r = upfs_lseek(fd, 0, whence);
    if (r == -1 && errno == ENXIO) {
      // Legal: no data at or after 0 (SEEK_DATA), or 0 is at the end.
      if (whence == SEEK_HOLE && size > 0) Violation("%s: ENXIO inside the file", name);
      continue;
    }
    if (!Ok(name, r)) continue;
    if (r > size || (whence == SEEK_DATA && r == size))
      Violation("%s returned %lld for size %lld", name, (long long)r, (long long)size);
  }
  off_t e = upfs_lseek(fd, 0, SEEK_END);
  if (Ok("upfs_lseek(SEEK_END)", e) && e != size)
    Violation("SEEK_END gave %lld, size %lld", (long long)e, (long long)size);
  if (Ok("upfs_lseek(SEEK_SET)", upfs_lseek(fd, 0, SEEK_SET))) {
    char c;
    ssize_t r = upfs_read(fd, &c, 1);
    if (Ok("upfs_read", r) && r != (size > 0 ? 1 : 0))
      Violation("upfs_read of 1 byte at 0 returned %zd for size %lld", r, (long long)size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Scratch& s = Scratch::Get();
  s.Write(data, size);
  const char* path = s.path().c_str();

  int fd = upfs_open(path, O_RDWR);
  if (fd < 0) {
    int e = errno;
    CheckFail("upfs_open", e);
    if (e == EUCLEAN) {
      std::string why = upfs_last_error();
      upfs::FileReport r;
      upfs::Status st = upfs::InspectFile(path, true, &r);
      if (st.ok() && r.problems.empty())
        Violation("upfs_open refused a file as damaged (%s) that InspectFile calls clean",
                  why.c_str());
    }
    s.Remove();
    return 0;
  }

  // The harness's check that no shared state is left behind (Remove) needs
  // the right name: the file's state must exist under it while it is open.
  if (s.shm_name().empty() || ::access(s.shm_name().c_str(), F_OK) != 0)
    Violation("harness: the shared state of the open file is not at \"%s\"", s.shm_name().c_str());

  int64_t vsize = ReadAll(fd, "reading the file as opened", nullptr);
  if (vsize >= 0) CheckSeek(fd, vsize);

  // A pattern that differs from run to run, so a write that lands in the
  // wrong place does not read back by luck.
  unsigned char pat[6000];
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < std::min<size_t>(size, 64); ++i) h = (h ^ data[i]) * 16777619u;
  for (size_t i = 0; i < sizeof(pat); ++i) {
    h = h * 1103515245u + 12345u;
    pat[i] = uint8_t(h >> 16) | 1;  // never zero
  }

  WriteAndCheck(fd, pat, 100, 0, "upfs_pwrite(100 bytes at 0)");
  WriteAndCheck(fd, pat + 100, 5000, 12345, "upfs_pwrite(5000 bytes at 12345)");
  if (Ok("upfs_ftruncate(20000)", upfs_ftruncate(fd, 20000))) CheckSize(fd, 20000, "ftruncate(20000)");
  if (Ok("upfs_fallocate(PUNCH_HOLE, 4096, 8192)",
         upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192)))
    ExpectZero(fd, 4096, 8192, "punched range [4096, 12288)");
  if (Ok("upfs_fallocate(0, 30000, 10000)", upfs_fallocate(fd, 0, 30000, 10000)))
    CheckSize(fd, 40000, "ftruncate(20000) and fallocate(30000, 10000)");
  WriteAndCheck(fd, pat + 200, 3000, 4000, "upfs_pwrite(3000 bytes at 4000)");
  if (Ok("upfs_ftruncate(5000)", upfs_ftruncate(fd, 5000))) CheckSize(fd, 5000, "ftruncate(5000)");
  Ok("upfs_fsync", upfs_fsync(fd));

  std::vector<unsigned char> before, after;
  int64_t size_before = ReadAll(fd, "reading the file before close", &before);
  if (!Ok("upfs_close", upfs_close(fd))) Violation("upfs_close of an open descriptor failed");

  // Reopen: the log now also holds what the engine appended above.
  fd = upfs_open(path, O_RDWR);
  if (fd < 0)
    Violation("a file that opened, was changed through upfs and closed does not open again: "
              "%s (%s)", ErrnoName(errno), upfs_last_error());
  int64_t size_after = ReadAll(fd, "reading the file after reopening", &after);
  if (size_before >= 0 && size_after >= 0) {
    if (size_before != size_after)
      Violation("size %lld before close, %lld after reopening", (long long)size_before,
                (long long)size_after);
    if (before != after) Violation("contents differ after reopening");
  }
  if (!Ok("upfs_close", upfs_close(fd))) Violation("upfs_close of an open descriptor failed");
  s.Remove();
  return 0;
}
