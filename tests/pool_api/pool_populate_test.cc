// A pool file opened for use has the pages of its data mapped in the
// background, as a per-file upfs file has: Pool::FileOf with for_use asks
// the pool's medium for the file's runs of blocks (Medium::
// PopulateRangeAhead, whose effect, no fault per page afterwards, is
// tests/medium_populate_test.cc's ARangeIsMappedAndNothingElse). Here:
// that the pool asks for exactly its data, only for use, and only for a
// file large enough.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "container/pool/pool.h"
#include "engine/file.h"
#include "medium/medium.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace upfs {
namespace {

class PoolPopulate : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    path_ = "/dev/shm/upfs-populate-" + tag + ".pool";
    const std::string mnt = "/upfs-populate-" + tag;
    unlink(path_.c_str());
    ASSERT_EQ(upfs_mkfs(path_.c_str(), 0), 0) << upfs_last_error();
    ASSERT_EQ(upfs_mount(path_.c_str(), mnt.c_str()), 0) << upfs_last_error();
    ASSERT_NO_FATAL_FAILURE(Write(mnt + "/big", 8u << 20));  // above kPopulateAtOpenBytes
    ASSERT_NO_FATAL_FAILURE(Write(mnt + "/small", kPopulateAtOpenBytes - kBlockBytes));
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
    ASSERT_TRUE(Pool::Attach(path_, &pool_).ok());
  }
  void TearDown() override {
    pool_.reset();
    unlink(path_.c_str());
  }
  static constexpr uint64_t kBlockBytes = format::kBlockSize;
  static void Write(const std::string& path, uint64_t bytes) {
    const int fd = upfs_open(path.c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << upfs_last_error();
    const std::vector<unsigned char> chunk(kBlockBytes, 7);
    for (uint64_t off = 0; off < bytes; off += chunk.size())
      ASSERT_TRUE(upfs_test::UpfsPwriteFull(fd, chunk.data(), chunk.size(), off_t(off))) << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
  // Opens name's engine File; returns the bytes this asked the medium to
  // populate.
  uint64_t QueuedByOpening(const char* name, bool for_use, std::shared_ptr<File>* f) {
    NsEntry e;
    EXPECT_TRUE(pool_->index()->Find(pool_->root_ino(), name, &e)) << name;
    const uint64_t before = pool_->medium()->populate_queued_bytes();
    const Status st = pool_->FileOf(e.ino, f, for_use);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return pool_->medium()->populate_queued_bytes() - before;
  }

  std::string path_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(PoolPopulate, AFileOpenedForUseHasItsDataQueued) {
  std::shared_ptr<File> f;
  // A stat's File asks for nothing.
  EXPECT_EQ(QueuedByOpening("big", /*for_use=*/false, &f), 0u);
  f.reset();  // closed: the next FileOf opens it again
  EXPECT_EQ(QueuedByOpening("big", /*for_use=*/true, &f), 8u << 20);
  // Every queued byte is the file's: its runs, as the engine reports them.
  uint64_t data = 0;
  ASSERT_TRUE(f->ForEachDataRun([&](uint32_t, uint32_t n) { data += uint64_t(n) * kBlockBytes; }).ok());
  EXPECT_EQ(data, 8u << 20);
  // Open already (another descriptor's File): nothing asked again.
  std::shared_ptr<File> g;
  EXPECT_EQ(QueuedByOpening("big", /*for_use=*/true, &g), 0u);
  EXPECT_EQ(f, g);
}

TEST_F(PoolPopulate, ASmallFileIsLeftToItsReader) {
  std::shared_ptr<File> f;
  EXPECT_EQ(QueuedByOpening("small", /*for_use=*/true, &f), 0u);
}

}  // namespace
}  // namespace upfs
