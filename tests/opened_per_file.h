// A per-file upfs file opened straight through the engine, for tests that
// write, append and read it without the C API (tests/patch_test.cc,
// tests/append_test.cc).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "container/perfile/perfile.h"
#include "engine/file.h"

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

}  // namespace upfs_test
