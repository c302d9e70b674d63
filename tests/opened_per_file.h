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

#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "format/format.h"
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
  using upfs::format::FileHeader;
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  FileHeader h;
  ASSERT_EQ(pread(fd, &h, sizeof(h), 0), ssize_t(sizeof(h)));
  h.format_version = version;
  h.header_crc = upfs::Crc32c(&h, offsetof(FileHeader, header_crc));
  ASSERT_EQ(pwrite(fd, &h, sizeof(h), 0), ssize_t(sizeof(h)));
  close(fd);
}

}  // namespace upfs_test
