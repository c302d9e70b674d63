// AttachedPoolTest: a fresh pool attached directly (no mount), for tests
// that drive the namespace and the engine step by step in one thread.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "container/pool/pool_check.h"

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
  // Creates `path` as an open would (born held), then lets go as a close;
  // its inode.
  uint64_t CreateAndClose(const std::string& path) { return CreatedAndClosedIn(Ns(), At(path)); }
  static uint64_t CreatedAndClosedIn(upfs::PoolNamespace ns, const upfs::Resolved& at) {
    uint64_t ino = 0;
    bool created = false;
    uint32_t gen = 0;
    upfs::Status st = ns.Create(at, 0644, upfs::format::Consistency::kStrict, &ino, &created, &gen);
    EXPECT_TRUE(st.ok() && created) << st.ToString();
    ns.DropHold(ino, gen);
    return ino;
  }
  upfs::format::pool::Inode* InodeOf(uint64_t ino) {
    upfs::format::pool::Inode* in = nullptr;
    upfs::Status st = pool_->InodeAt(ino, &in);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return in;
  }
  upfs::format::pool::FileType Kind(uint64_t ino) { return upfs::format::pool::IdentKind(InodeOf(ino)->ident.load()); }
  // Detaches every attachment and checks the pool as fsck does (its files'
  // logs replayed whole): no problem, nothing leaked.
  void DetachAndCheck() {
    Detach();
    upfs::PoolReport r;
    upfs::Status st = upfs::CheckPool(path_, &r);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (const std::string& p : r.problems) ADD_FAILURE() << p;
    EXPECT_EQ(r.leaked_blocks, 0);
  }
  virtual void Detach() { pool_.reset(); }
  const char* tag_;
  std::string path_;
  std::unique_ptr<upfs::Pool> pool_;
  upfs::Credentials who_;
};

// The same pool attached twice: other_ is a second attachment (another
// process, as far as the namespace knows), whose changes the first sees
// only at its next catch-up.
class TwoAttachmentsTest : public AttachedPoolTest {
 protected:
  explicit TwoAttachmentsTest(const char* tag) : AttachedPoolTest(tag) {}
  void SetUp() override {
    AttachedPoolTest::SetUp();
    upfs::Status st = upfs::Pool::Attach(path_, &other_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    other_.reset();
    AttachedPoolTest::TearDown();
  }
  upfs::PoolNamespace Other() { return upfs::PoolNamespace(other_.get(), &who_); }
  upfs::Resolved OtherAt(const std::string& path) { return ResolvedIn(Other(), path); }
  void Detach() override {
    other_.reset();
    AttachedPoolTest::Detach();
  }

  std::unique_ptr<upfs::Pool> other_;
};

}  // namespace pool_test
