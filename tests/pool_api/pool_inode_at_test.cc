// Where a pool's inodes are (InodeAllocator::At: inline for a number below
// the attachment's mapping, AtSlow otherwise) and what releasing a file's
// inode gives back (Pool::ReleaseInode).
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "pool_api/pool_attached_fixture.h"
#include "pool_api/pool_test_fixture.h"

namespace {

using upfs::Pool;
using upfs::Status;
using upfs::format::pool::Inode;
using upfs::format::pool::InodeNumber;
using upfs::format::pool::kDataStart;
using upfs::format::pool::kMaxPoolBlocks;

class PoolInodeAt : public pool_test::AttachedPoolTest {
 protected:
  PoolInodeAt() : AttachedPoolTest("inode-at") {}
};

TEST_F(PoolInodeAt, NumbersNoInodeBlockCanHoldAreRefused) {
  Pool* p = pool_.get();
  for (uint64_t ino : {uint64_t{0}, InodeNumber(kDataStart, 0), InodeNumber(kDataStart - 1, 3),
                       InodeNumber(uint32_t(kMaxPoolBlocks - 1), 0) + 16 + 1}) {
    Inode* in = nullptr;
    Status st = p->InodeAt(ino, &in);
    EXPECT_EQ(st.err(), EUCLEAN) << ino;
    EXPECT_NE(st.message().find("number " + std::to_string(ino) + " names no inode"), std::string::npos)
        << st.message();
    EXPECT_EQ(in, nullptr) << ino;
  }
}

// Another attachment grew the pool: an inode in the new space lies past
// this attachment's mapping, which the lookup extends (the slow path), and
// both attachments see the same bytes there.
TEST_F(PoolInodeAt, AnInodePastThisAttachmentsMappingIsMappedFirst) {
  Pool* grower = pool_.get();
  std::unique_ptr<Pool> other;
  ASSERT_TRUE(Pool::Attach(path_, &other).ok());
  const uint64_t mapped = other->medium()->mapped_bytes();
  const uint64_t block = mapped / upfs::format::kBlockSize + 100;
  ASSERT_TRUE(grower->medium()->Grow((block + 1) * upfs::format::kBlockSize).ok());
  ASSERT_EQ(other->medium()->mapped_bytes(), mapped) << "the other attachment saw the growth already";
  const uint64_t ino = InodeNumber(uint32_t(block), 5);

  Inode* mine = nullptr;
  Inode* theirs = nullptr;
  ASSERT_TRUE(grower->InodeAt(ino, &mine).ok());
  Status st = other->InodeAt(ino, &theirs);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(other->medium()->mapped_bytes(), (block + 1) * upfs::format::kBlockSize);
  EXPECT_EQ(reinterpret_cast<char*>(theirs) - other->medium()->base(),
            reinterpret_cast<char*>(mine) - grower->medium()->base());
  mine->created_ns = 0x1234567890abcdefull;
  EXPECT_EQ(theirs->created_ns, 0x1234567890abcdefull);

  // Past the whole pool: refused, not mapped.
  const uint64_t beyond = grower->medium()->capacity() / upfs::format::kBlockSize + 10;
  st = other->InodeAt(InodeNumber(uint32_t(beyond), 1), &theirs);
  EXPECT_EQ(st.err(), EUCLEAN) << st.ToString();
}

class PoolRelease : public pool_test::PoolTest {};

// Each kind of file gives back exactly the blocks it held when its last
// name goes: none for a file never written, its target's block for a long
// symbolic link, its log and data for a written file. After detaching, the
// check finds no block the bitmap holds that nothing references.
TEST_F(PoolRelease, ReleasingAFileGivesBackWhatItHeldAndNothingMore) {
  ASSERT_EQ(Create("unused"), 0);
  ASSERT_EQ(Create("written", std::string(3 * 4096 + 100, 'w')), 0);
  const std::string long_target(300, 't');  // past the inode's inline room
  ASSERT_EQ(upfs_symlink(long_target.c_str(), P("long-link").c_str()), 0) << strerror(errno);
  for (const char* name : {"unused", "written", "long-link"})
    ASSERT_EQ(upfs_unlink(P(name).c_str()), 0) << name << ": " << strerror(errno);
  ASSERT_EQ(Create("after"), 0);  // a create after the releases: the freed inodes serve again
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);

  upfs::PoolReport r;
  Status st = upfs::CheckPool(pool_, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_EQ(r.files, 1u);
  EXPECT_EQ(r.symlinks, 0u);
  EXPECT_EQ(r.data_blocks, 0u);
}

}  // namespace
