// Shared parts of the libFuzzer targets: turning an input into a host file,
// removing it (and its shared state) after each run, and reporting a broken
// contract so that libFuzzer records the input.
//
// The input becomes the host file like this:
//  - an odd-length input is written as it is (so sizes that are not whole
//    blocks, and files shorter than a header, are exercised);
//  - an even-length input is padded with zeros to a whole number of 4 KiB
//    blocks, so that most mutations (which change the length freely) still
//    give a file that passes the size checks and reach the log;
//  - checksums are fixed up (FixChecksums): the header CRC, and along the
//    log chain the CRC of every kApply's payload and of overflow runs, are
//    recomputed the way a writer would, so that mutations of checksummed
//    structures reach the code behind the checksum test. Setting bit 0 of
//    the header's reserved0 word (byte 44, which upfs neither checks nor
//    checksums) turns this off for an input, so that checksum mismatches
//    are fuzzed too.
// The file lives in a private directory under /dev/shm (tmpfs, the medium
// the tests use), one path reused by every run of the process.
//
// To look at what a saved input became (e.g. with `upfs fsck`), run the
// target on it with UPFS_FUZZ_SAVE=PATH: the host file is copied there.
#pragma once

#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "format/format.h"
#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace upfs_fuzz {

constexpr uint64_t kB = upfs::format::kBlockSize;

// A broken contract: print what and trap, which libFuzzer reports as a
// crash (with the input saved as crash-<sha1>).
[[noreturn]] inline void Violation(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void Violation(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\n==== upfs fuzz: CONTRACT VIOLATION: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  __builtin_trap();
}

inline const char* ErrnoName(int e) {
  switch (e) {
    case EUCLEAN: return "EUCLEAN";
    case EMEDIUMTYPE: return "EMEDIUMTYPE";
    case EINVAL: return "EINVAL";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EBADF: return "EBADF";
    default: return strerrorname_np(e) ? strerrorname_np(e) : "?";
  }
}

// Recomputes the checksums of a file image in place (see above). Follows
// the same rules as the log decoder (src/engine/log.cc) but never fails:
// whatever it cannot make sense of it leaves alone.
inline void FixChecksums(std::vector<uint8_t>& b) {
  namespace fmt = upfs::format;
  const uint64_t n = b.size();
  if (n < 48 || memcmp(b.data(), fmt::kMagic, sizeof(fmt::kMagic)) != 0) return;
  if (b[44] & 1) return;  // reserved0 bit 0: leave the checksums alone
  auto get = [&](uint64_t off) {
    uint64_t v = 0;
    if (off + 8 <= n) memcpy(&v, b.data() + off, 8);
    return v;
  };
  auto put = [&](uint64_t off, uint64_t v) {
    if (off + 8 <= n) memcpy(b.data() + off, &v, 8);
  };
  uint32_t hcrc = upfs::Crc32c(b.data(), 40);
  memcpy(b.data() + 40, &hcrc, 4);

  const uint64_t blocks = n / kB;
  uint64_t l = get(64);
  std::vector<bool> seen(blocks, false);
  while (l != 0 && l < blocks && !seen[l] && fmt::NextWordValid(get(l * kB))) {
    seen[l] = true;
    auto slot = [&](uint32_t s) { return l * kB + 16 + 8 * uint64_t(s); };
    uint32_t s = 0;
    while (s < fmt::kSlotsPerLogBlock) {
      uint64_t e = get(slot(s));
      if (e == 0) break;
      if (fmt::KindOf(e) == fmt::EntryKind::kReserve && fmt::ReserveWellFormed(e)) {
        s += 1 + fmt::ReserveCount(e);
        continue;
      }
      if (fmt::KindOf(e) == fmt::EntryKind::kApply) {
        uint32_t rs = fmt::ApplySlot(e);
        uint64_t r = rs < s ? get(slot(rs)) : 0;
        uint32_t cnt = fmt::ReserveCount(r);
        if (fmt::KindOf(r) == fmt::EntryKind::kReserve && fmt::ReserveWellFormed(r) &&
            rs + 1 + cnt <= s) {
          uint64_t w1 = cnt >= 2 ? get(slot(rs + 2)) : 0;
          if (cnt == 4 && ((w1 >> 48) & fmt::kPayloadOverflow)) {
            // Overflow runs: their CRC goes into the low half of word 3.
            fmt::Run ov = fmt::DecodeRun(get(slot(rs + 3)));
            uint64_t nruns = (w1 >> 32) & 0xffff;
            if (ov.lblock != 0 && uint64_t(ov.lblock) * kB + nruns * 8 <= n) {
              uint32_t c = upfs::Crc32c(b.data() + uint64_t(ov.lblock) * kB, nruns * 8);
              uint64_t w3 = get(slot(rs + 4));
              put(slot(rs + 4), (w3 & ~uint64_t{0xffffffff}) | c);
            }
          }
          uint32_t c = upfs::Crc32c(b.data() + slot(rs + 1), uint64_t(cnt) * 8);
          put(slot(s), (e & 0xffffffffull) | (uint64_t(c) << 32));
        }
      }
      ++s;
    }
    l = fmt::NextBlock(get(l * kB));
  }
}

class Scratch {
 public:
  static Scratch& Get() {
    static Scratch* s = new Scratch();  // never destroyed: atexit cleans up
    return *s;
  }
  const std::string& path() const { return path_; }
  // /dev/shm/upfs-<dev>-<ino> for an input with the magic, else "".
  const std::string& shm_name() const { return shm_name_; }

  // Writes the host file for one input (see above).
  void Write(const uint8_t* data, size_t size) {
    buf_.assign(data, data + size);
    if (size % 2 == 0 && size % kB != 0) buf_.resize((size + kB - 1) / kB * kB, 0);
    FixChecksums(buf_);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) Violation("harness: cannot create %s: %s", path_.c_str(), strerror(errno));
    size_t done = 0;
    while (done < buf_.size()) {
      ssize_t w = ::write(fd, buf_.data() + done, buf_.size() - done);
      if (w <= 0) Violation("harness: cannot write %s: %s", path_.c_str(), strerror(errno));
      done += size_t(w);
    }
    if (const char* save = getenv("UPFS_FUZZ_SAVE")) {
      FILE* f = fopen(save, "wb");
      if (!f || fwrite(buf_.data(), 1, buf_.size(), f) != buf_.size() || fclose(f) != 0)
        Violation("harness: cannot save the host file to %s", save);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) Violation("harness: fstat: %s", strerror(errno));
    ::close(fd);
    // The name the shared state of this file would get (docs/format.md,
    // "The shared-memory state"): only files with the magic get one.
    shm_name_.clear();
    if (size >= 32 && memcmp(data, upfs::format::kMagic, sizeof(upfs::format::kMagic)) == 0) {
      char buf[128];
      snprintf(buf, sizeof(buf), "/dev/shm/upfs-%" PRIx64 "-%" PRIx64, uint64_t(st.st_dev),
               uint64_t(st.st_ino));
      shm_name_ = buf;
    }
  }

  // Removes the host file with upfs_unlink, which must also remove its
  // shared state: nothing may pile up in /dev/shm over a run.
  void Remove() {
    if (upfs_unlink(path_.c_str()) != 0)
      Violation("upfs_unlink(%s) failed: %s (%s)", path_.c_str(), ErrnoName(errno),
                upfs_last_error());
    if (!shm_name_.empty() && ::access(shm_name_.c_str(), F_OK) == 0)
      Violation("upfs_unlink left the shared state %s behind", shm_name_.c_str());
  }

 private:
  Scratch() {
    char tmpl[] = "/dev/shm/fuzz-upfs.XXXXXX";
    if (!::mkdtemp(tmpl)) Violation("harness: mkdtemp under /dev/shm: %s", strerror(errno));
    dir_ = tmpl;
    path_ = dir_ + "/input.upfs";
    atexit([] { Get().Cleanup(); });
  }
  void Cleanup() {
    // A crash leaves the directory behind (scripts/fuzz.sh removes it);
    // a normal exit removes it here.
    if (::access(path_.c_str(), F_OK) == 0) upfs_unlink(path_.c_str());
    if (::rmdir(dir_.c_str()) != 0)
      fprintf(stderr, "upfs fuzz: could not remove %s: %s\n", dir_.c_str(), strerror(errno));
  }

  std::string dir_;
  std::string path_;
  std::string shm_name_;
  std::vector<uint8_t> buf_;
};

// Error numbers a call on a (possibly damaged) file may fail with.
inline bool AllowedErrno(int e) {
  return e == EUCLEAN || e == EMEDIUMTYPE || e == EINVAL || e == EFBIG || e == ENOSPC;
}

}  // namespace upfs_fuzz
