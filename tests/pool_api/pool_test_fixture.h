// PoolTest: a fresh pool in /dev/shm mounted for each test, removed at the
// end, and the small file helpers the pool API tests share.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "container/pool/pool_check.h"
#include "upfs/upfs.h"

namespace pool_test {

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = "/dev/shm/upfs-pooltest-" + std::to_string(getpid()) + ".pool";
    mnt_ = "/upfs-pooltest-" + std::to_string(getpid());
    unlink(pool_.c_str());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
  }
  std::string P(const std::string& rel) const { return mnt_ + "/" + rel; }
  int Create(const std::string& rel, const std::string& data = "") {
    int fd = upfs_open(P(rel).c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) return -1;
    if (!data.empty() && upfs_write(fd, data.data(), data.size()) != ssize_t(data.size())) return -1;
    return upfs_close(fd);
  }
  std::string Read(const std::string& rel) {
    int fd = upfs_open(P(rel).c_str(), O_RDONLY);
    if (fd < 0) return "<" + std::string(strerror(errno)) + ">";
    char buf[4096];
    ssize_t n = upfs_read(fd, buf, sizeof(buf));
    upfs_close(fd);
    return n < 0 ? "<read error>" : std::string(buf, size_t(n));
  }
  std::vector<std::string> List(const std::string& rel) {
    std::vector<std::string> out;
    UPFS_DIR* d = upfs_opendir(P(rel).c_str());
    if (!d) return {"<" + std::string(strerror(errno)) + ">"};
    while (struct dirent* e = upfs_readdir(d)) out.push_back(e->d_name);
    upfs_closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }
  void ExpectClean() {
    upfs::PoolReport r;
    ASSERT_TRUE(upfs::CheckPool(pool_, &r).ok());
    EXPECT_TRUE(r.problems.empty()) << r.problems[0];
  }
  std::string pool_, mnt_;
};

}  // namespace pool_test
