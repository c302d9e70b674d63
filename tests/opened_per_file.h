// A per-file upfs file opened straight through the engine, for tests that
// write, append and read it without the C API, and its format version set
// as an older build would have made it (tests/patch_test.cc,
// tests/append_test.cc).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "container/perfile/inspect.h"
#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "format/format.h"
#include "label_version.h"
#include "patch_test_util.h"
#include "util/crc32c.h"

namespace upfs_test {

struct Opened {
  int host = -1;
  std::unique_ptr<upfs::File> file;
  explicit Opened(const std::string& path, upfs::format::Consistency c = upfs::format::Consistency::kStrict) {
    host = open(path.c_str(), O_RDWR | O_CREAT, 0644);
    EXPECT_GE(host, 0);
    upfs::Status st = upfs::OpenPerFile(host, path, true, c, nullptr, &file);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ~Opened() {
    file.reset();
    if (host >= 0) close(host);
  }
  void Write(const std::string& b, uint64_t off, bool append = false) {
    uint64_t at;
    upfs::Status st = file->Write(b.data(), b.size(), off, append, &at);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void Append(const std::string& b) { Write(b, 0, true); }
  std::string ReadAll() {
    uint64_t size = 0;
    EXPECT_TRUE(file->Size(&size).ok());
    std::string out(size, '\0');
    size_t done = 0;
    EXPECT_TRUE(file->Read(out.data(), size, 0, &done).ok());
    EXPECT_EQ(done, size);
    return out;
  }
};

// Labels the per-file file at `path` with format `version` (as an older
// build would have made it), keeping its header checksum right.
inline void LabelVersion(const std::string& path, uint32_t version) {
  ASSERT_TRUE(RelabelVersion(path, version)) << path;
}

// `threads` threads writing small overlapping ranges of the file's first
// `blocks` blocks (zeroed first) `writes` times each while a thread reads
// (PatchOrderCheck's rule); then a GC changes nothing a reader sees.
inline void RaceSmallWriters(Opened* f, int threads, int writes, uint64_t blocks) {
  using upfs::format::kBlockSize;
  f->Write(std::string(blocks * kBlockSize, '\0'), 0);
  const int errors = RacePatchWriters(
      threads, writes, blocks, kBlockSize / 8,
      [&](const void* b, size_t n, uint64_t off) {
        uint64_t at;
        return f->file->Write(b, n, off, false, &at).ok();
      },
      [&](void* b, size_t n) {
        size_t done;
        return f->file->Read(b, n, 0, &done).ok() && done == n;
      });
  EXPECT_EQ(errors, 0);
  const std::string now = f->ReadAll();
  ASSERT_TRUE(f->file->CollectGarbage(true).ok());
  EXPECT_EQ(f->ReadAll(), now);
}

// The file at `path` holds a last commit made to look cut short by a
// crash (a word of it zeroed): that is damage while the file is not
// marked in use, and a commit the crash cut short (one word, which the
// next open discards) once it is; this marks it in use.
inline void ExpectCutShortOnlyAfterACrash(const std::string& path) {
  upfs::FileReport r;
  EXPECT_EQ(upfs::InspectFile(path, true, &r).err(), EUCLEAN) << "in_use 0: damage";
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t one = 1;
  ASSERT_EQ(pwrite(fd, &one, 8, off_t(offsetof(upfs::format::FileHeader, in_use))), 8);
  close(fd);
  upfs::Status st = upfs::InspectFile(path, true, &r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.cut_short_words, 1u);
}

}  // namespace upfs_test
