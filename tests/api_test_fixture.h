// The fixture of the C API's unit tests (api_test.cc, api_size_test.cc):
// a temporary directory and a upfs file in the consistency mode under
// test (strict and sync have the same single-thread semantics).
#pragma once

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs_api_test {

using Bytes = std::vector<unsigned char>;

inline const char* ModeName(upfs_consistency c) { return c == UPFS_STRICT ? "strict" : "sync"; }

class ApiTest : public ::testing::TestWithParam<upfs_consistency> {
 protected:
  std::string Path(const std::string& name = "f") { return dir_.File(name); }

  // Creates (or opens) a upfs file in the mode under test.
  int Create(const std::string& name = "f", int extra_flags = 0) {
    return upfs_open_mode(Path(name).c_str(), O_CREAT | O_RDWR | extra_flags, 0644, GetParam());
  }

  Bytes ReadAll(int fd) {
    Bytes b;
    EXPECT_TRUE(upfs_test::UpfsReadAll(fd, &b)) << upfs_last_error();
    return b;
  }

  off_t Size(int fd) { return upfs_test::UpfsSize(fd); }

  void ExpectContent(int fd, const Bytes& expect, const char* what = "") {
    Bytes got = ReadAll(fd);
    ASSERT_EQ(got.size(), expect.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], expect[i]) << what << ": first difference at byte " << i;
  }

  upfs_test::TempDir dir_;
};

}  // namespace upfs_api_test

// Runs a file's ApiTest cases in both modes.
#define UPFS_API_TEST_IN_BOTH_MODES()                                                          \
  INSTANTIATE_TEST_SUITE_P(Modes, ApiTest, ::testing::Values(UPFS_STRICT, UPFS_SYNC),          \
                           [](const ::testing::TestParamInfo<upfs_consistency>& i) {           \
                             return std::string(upfs_api_test::ModeName(i.param));             \
                           })
