// AttachedPoolTest: a fresh pool attached directly (no mount), for tests
// that drive the namespace and the engine step by step in one thread.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"

namespace pool_test {

class AttachedPoolTest : public ::testing::Test {
 protected:
  // `tag` names the pool file, so that concurrent test programs differ.
  explicit AttachedPoolTest(const char* tag) : tag_(tag) {}
  void SetUp() override {
    path_ = "/dev/shm/upfs-" + std::string(tag_) + "-" + std::to_string(getpid()) + ".pool";
    unlink(path_.c_str());
    upfs::Status st = upfs::Pool::Create(path_, 0);
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = upfs::Pool::Attach(path_, &pool_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    who_ = upfs::Credentials::Current(false);
  }
  void TearDown() override {
    pool_.reset();
    unlink(path_.c_str());
  }
  upfs::PoolNamespace Ns() { return upfs::PoolNamespace(pool_.get(), &who_); }
  // `path` resolved (following a last symbolic link), checked to succeed.
  upfs::Resolved At(const std::string& path) { return ResolvedIn(Ns(), path); }
  static upfs::Resolved ResolvedIn(upfs::PoolNamespace ns, const std::string& path) {
    upfs::Resolved r;
    upfs::Status st = ns.Resolve(path, true, &r);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return r;
  }
  const char* tag_;
  std::string path_;
  std::unique_ptr<upfs::Pool> pool_;
  upfs::Credentials who_;
};

}  // namespace pool_test
