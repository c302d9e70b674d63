// A checkpoint finds room in a pool whose free space is in small pieces.
//
// A directory that grows to 150,000 new files on small pages (this test
// runs with UPFS_HUGEPAGES=0, set by tests/CMakeLists.txt: the switch is
// read once per process) can leave the pool's free space in pieces too
// small for a checkpoint image (more runs than its header holds). The image
// of the next checkpoint then needed more runs than its header holds, the
// checkpoint failed with ENOSPC, every later commit built a whole image to
// fail again (2,200 creates/s instead of 400,000), and the log grew
// without bound. Now the image goes to fresh space at the pool's end.
// The first test makes that fragmentation on purpose, the second as a
// program does. The third: creates and unlinks without end in one
// directory leave the pool as small as its live metadata needs (they grew
// it to 244 MiB: each single block the pool took for itself started a
// chunk, and each image that found no run nearby grew the pool by an
// eighth).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "container/pool/checkpoint.h"
#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "engine/alloc_bitmap.h"
#include "engine/block_source.h"
#include "posix/pool_mounts.h"
#include "upfs/upfs.h"

namespace {

// Makes empty files `prefix`N for N in [from, to) in mounted directory
// `in`, through the C API.
void CreateFiles(const std::string& in, const char* prefix, int from, int to) {
  for (int i = from; i < to; ++i) {
    const int fd = upfs_open((in + "/" + prefix + std::to_string(i)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << i << " " << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
  }
}

// Makes pool `pool` with `files` empty files in its directory `dir` ("" =
// the root), through the C API, and unmounts it.
void MakePoolWithFiles(const std::string& pool, const std::string& dir, int files) {
  const std::string mnt = "/upfs-ckroom-" + std::to_string(getpid());
  unlink(pool.c_str());
  ASSERT_EQ(upfs_mkfs(pool.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  const std::string in = dir.empty() ? mnt : mnt + "/" + dir;
  if (!dir.empty()) {
    ASSERT_EQ(upfs_mkdir(in.c_str(), 0755), 0);
  }
  CreateFiles(in, "f", 0, files);
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
}

TEST(PoolCheckpointRoom, AnImageFindsRoomWhenFreeSpaceIsInSingleBlocks) {
  const std::string pool = "/dev/shm/upfs-ckroom1-" + std::to_string(getpid()) + ".pool";
  // 20,000 names: an image of over 512 blocks (slots at most half full).
  constexpr int kFiles = 20000;
  MakePoolWithFiles(pool, "", kFiles);
  if (HasFatalFailure()) return;
  {
    std::unique_ptr<upfs::Pool> p;
    ASSERT_TRUE(upfs::Pool::Attach(pool, &p).ok());
    // Every free block of the pool taken, then every other one given back:
    // free space in single blocks only (the medium settled first, so that
    // no growth begun by the creates adds whole free space afterwards).
    p->medium()->Settle();
    upfs::AllocationBitmap* bm = p->source()->bitmap();
    const uint64_t cap = bm->capacity();
    std::vector<uint32_t> taken, kept;
    for (uint64_t w = 0; w < cap / 64; ++w) {
      uint64_t was = 0;
      while (!bm->ClaimBits(w, was, ~uint64_t{0})) {
      }
      for (uint64_t b = 0; b < 64; ++b)
        if (!(was >> b & 1)) taken.push_back(uint32_t(w * 64 + b));
    }
    for (size_t i = 0; i < taken.size(); ++i) {
      if (i % 2) p->FreeBlock(taken[i]);
      else kept.push_back(taken[i]);
    }
    ASSERT_GT(taken.size() / 2, 600u) << "too few free blocks to fragment";
    upfs::Status st = p->Checkpoint();
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (uint32_t l : kept) p->FreeBlock(l);
  }
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.files, uint64_t(kFiles));
  unlink(pool.c_str());
}

TEST(PoolCheckpointRoom, AGrowingDirectoryKeepsTheLogBounded) {
  const char* huge = std::getenv("UPFS_HUGEPAGES");
  ASSERT_TRUE(huge && huge[0] == '0') << "run with UPFS_HUGEPAGES=0 (tests/CMakeLists.txt)";
  const std::string pool = "/dev/shm/upfs-ckroom-" + std::to_string(getpid()) + ".pool";
  constexpr int kFiles = 150000;
  MakePoolWithFiles(pool, "d", kFiles);
  if (HasFatalFailure()) return;
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.files, uint64_t(kFiles));
  // As CheckpointsKeepEverythingAndBoundTheLog: at most two checkpoint
  // intervals of log (the one being written and the one after it).
  EXPECT_LE(r.log_blocks, 2 * r.checkpoint_interval_blocks + 2);
  unlink(pool.c_str());
}

TEST(PoolCheckpointRoom, CreateAndUnlinkChurnKeepsThePoolSmall) {
  const std::string pool = "/dev/shm/upfs-ckroom3-" + std::to_string(getpid()) + ".pool";
  const std::string mnt = "/upfs-ckroom3-" + std::to_string(getpid());
  unlink(pool.c_str());
  ASSERT_EQ(upfs_mkfs(pool.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mkdir((mnt + "/d").c_str(), 0755), 0);
  // 25 batches of 4,096 (over a dozen checkpoints, each of an image of up
  // to 4,096 names): the pool file reached 116 MiB so.
  constexpr int kBatches = 25, kBatch = 4096;
  for (int b = 0; b < kBatches; ++b) {
    for (int i = 0; i < kBatch; ++i) {
      const int fd = upfs_open((mnt + "/d/f" + std::to_string(i)).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      ASSERT_GE(fd, 0) << b << " " << i << " " << upfs_last_error();
      ASSERT_EQ(upfs_close(fd), 0);
    }
    for (int i = 0; i < kBatch; ++i) ASSERT_EQ(upfs_unlink((mnt + "/d/f" + std::to_string(i)).c_str()), 0);
  }
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
  struct stat st;
  ASSERT_EQ(stat(pool.c_str(), &st), 0);
  // 34 MiB of fixed header, a few MiB of log, inodes and images, and the
  // growth steps: 54 MiB measured.
  EXPECT_LE(st.st_size, 64 << 20) << "the pool grew to " << (st.st_size >> 20) << " MiB";
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.files, 0u);
  EXPECT_EQ(r.leaked_blocks, 0);
  unlink(pool.c_str());
}

// Creates and unlinks beside a big directory: a checkpoint rewrites the
// whole image, so with one every 256 log blocks each record paid a share
// of the whole namespace (a create + unlink beside 300,000 files cost 4.5
// us against 1.7 beside none). Checkpoints come every image's quarter in
// log blocks instead: as many records pay for each block of image
// whatever the namespace's size, and the log stays bounded.
TEST(PoolCheckpointRoom, ChurnBesideABigDirectoryCheckpointsInProportionToTheImage) {
  const std::string pool = "/dev/shm/upfs-ckroom4-" + std::to_string(getpid()) + ".pool";
  const std::string mnt = "/upfs-ckroom4-" + std::to_string(getpid());
  // An image of about 2,600 blocks (262,144 slots): 650 log blocks between checkpoints.
  MakePoolWithFiles(pool, "big", 120000);
  if (HasFatalFailure()) return;
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mkdir((mnt + "/churn").c_str(), 0755), 0);
  upfs::PoolPath pp;
  ASSERT_TRUE(upfs::InPool(AT_FDCWD, mnt.c_str(), &pp));
  upfs::Pool* p = pp.mount->pool.get();
  auto checkpoint = [&](uint64_t* image_words) {
    const upfs::format::pool::CheckpointHeader* h = nullptr;
    const uint64_t at = p->super()->checkpoint.load();
    EXPECT_TRUE(upfs::ReadCheckpointHeader(p->access(), at, p->super()->version, &h).ok());
    if (!h) return uint64_t{0};
    if (image_words) *image_words = h->image_words;
    return h->number;
  };
  uint64_t image_words = 0;
  const uint64_t first = checkpoint(&image_words);
  const uint64_t interval = upfs::CheckpointIntervalBlocks(image_words);
  ASSERT_GE(interval, 2 * upfs::kCheckpointEveryBlocks) << "the image is too small to tell";
  const uint64_t start = p->log()->PosHint().seq;
  constexpr uint64_t kIntervals = 4;
  uint64_t pairs = 0;
  while (p->log()->PosHint().seq < start + kIntervals * interval) {
    const std::string f = mnt + "/churn/g" + std::to_string(pairs++ % 64);
    const int fd = upfs_open(f.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << pairs << " " << upfs_last_error();
    ASSERT_EQ(upfs_close(fd), 0);
    ASSERT_EQ(upfs_unlink(f.c_str()), 0);
  }
  const uint64_t written = checkpoint(nullptr) - first;
  const uint64_t log_blocks = p->log()->PosHint().seq - start;
  pp.guard.reset();
  std::printf("%" PRIu64 " create + unlink pairs, %" PRIu64 " log blocks: %" PRIu64
              " checkpoints of %" PRIu64 " image blocks (interval %" PRIu64 ")\n",
              pairs, log_blocks, written, upfs::format::CeilBlocks(image_words * 8), interval);
  // One per interval (every 256 log blocks: 10 or more here), and at
  // least one less than that: the log is still checkpointed.
  EXPECT_LE(written, log_blocks / interval + 1);
  EXPECT_GE(written, log_blocks / interval - 1);
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.files, 120000u);
  EXPECT_EQ(r.checkpoint_interval_blocks, interval);
  EXPECT_LE(r.log_blocks, 2 * interval + 2);
  unlink(pool.c_str());
}

// A detaching process leaves a checkpoint only for a delta of a 64th of
// the image's entries or more (and at least 1,024 records): a checkpoint
// rewrites the whole image, and with 1,024 records whatever the image a
// process that made 1,100 files beside 300,000 spent 32-36 ms detaching.
TEST(PoolCheckpointRoom, ADetachCheckpointsOnlyADeltaWorthTheImage) {
  const std::string pool = "/dev/shm/upfs-ckroom5-" + std::to_string(getpid()) + ".pool";
  const std::string mnt = "/upfs-ckroom5-" + std::to_string(getpid());
  constexpr int kFiles = 100000;  // 100,001 entries: a detach checkpoints from 1,562 records on
  MakePoolWithFiles(pool, "big", kFiles);
  if (HasFatalFailure()) return;
  {
    std::unique_ptr<upfs::Pool> p;
    ASSERT_TRUE(upfs::Pool::Attach(pool, &p).ok());
    ASSERT_TRUE(p->Checkpoint().ok());  // an empty delta to start from
  }
  auto checkpoint_number = [&] {
    upfs::PoolReport r;
    EXPECT_TRUE(upfs::CheckPool(pool, &r).ok());
    EXPECT_TRUE(r.problems.empty());
    return r.checkpoint_number;
  };
  const uint64_t first = checkpoint_number();
  auto create = [&](int from, int to) {
    ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
    CreateFiles(mnt + "/big", "g", from, to);
    ASSERT_EQ(upfs_umount(mnt.c_str()), 0);
  };
  create(0, 1200);  // 1,200 records: replayed by the next attach instead
  if (HasFatalFailure()) return;
  EXPECT_EQ(checkpoint_number(), first) << "a delta of 1,200 records beside 100,001 entries was checkpointed";
  create(1200, 1700);  // 1,700: a 64th of the image or more
  if (HasFatalFailure()) return;
  EXPECT_EQ(checkpoint_number(), first + 1);
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_EQ(r.files, uint64_t(kFiles) + 1700);
  unlink(pool.c_str());
}

// With no block to take, a checkpoint fails with ENOSPC, gives back what
// it took, and leaves the index whole: the frozen layer it was writing
// from is reloaded from the last checkpoint and the log, every name is
// still found, and the next checkpoint, once blocks are free, is written.
TEST(PoolCheckpointRoom, ACheckpointWithNoRoomLeavesTheIndexWhole) {
  const std::string pool = "/dev/shm/upfs-ckroom3-" + std::to_string(getpid()) + ".pool";
  constexpr int kFiles = 300;
  MakePoolWithFiles(pool, "", kFiles);
  if (HasFatalFailure()) return;
  {
    std::unique_ptr<upfs::Pool> p;
    ASSERT_TRUE(upfs::Pool::Attach(pool, &p).ok());
    upfs::Credentials who = upfs::Credentials::Current(false);
    upfs::PoolNamespace ns(p.get(), &who);
    const auto all_found = [&] {
      for (int i = 0; i < kFiles; ++i) {
        upfs::Resolved r;
        const upfs::Status st = ns.Resolve("/f" + std::to_string(i), false, &r);
        if (!st.ok() || r.ino == 0) return false;
      }
      return true;
    };
    const uint64_t before = p->super()->checkpoint.load();
    p->RefuseBlocksForTest();
    upfs::Status st = p->Checkpoint();
    EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
    EXPECT_EQ(p->super()->checkpoint.load(), before) << "a checkpoint published without its image";
    EXPECT_TRUE(all_found()) << "names lost with the failed checkpoint";
    p->RefuseBlocksForTest(false);
    st = p->Checkpoint();
    ASSERT_TRUE(st.ok()) << "the index left frozen by the failed one: " << st.ToString();
    EXPECT_NE(p->super()->checkpoint.load(), before);
    EXPECT_TRUE(all_found());
  }
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  for (const std::string& problem : r.problems) ADD_FAILURE() << problem;
  EXPECT_EQ(r.files, uint64_t(kFiles));
  EXPECT_EQ(r.leaked_blocks, 0);
  unlink(pool.c_str());
}

// While checkpoints fail (no room for an image), a commit does not try
// one again until the log has grown by kCheckpointRetryBlocks: before that
// rule every later commit built a whole image only to fail again (2,200
// creates a second instead of 400,000, the header above). Once room is
// back, the next try succeeds and the log is bounded again.
TEST(PoolCheckpointRoom, FailedCheckpointsAreRetriedOnlyAsTheLogGrows) {
  const std::string pool = "/dev/shm/upfs-ckroom4-" + std::to_string(getpid()) + ".pool";
  unlink(pool.c_str());
  ASSERT_TRUE(upfs::Pool::Create(pool, 0).ok());
  {
    std::unique_ptr<upfs::Pool> p;
    ASSERT_TRUE(upfs::Pool::Attach(pool, &p).ok());
    upfs::Credentials who = upfs::Credentials::Current(false);
    upfs::PoolNamespace ns(p.get(), &who);
    const auto create = [&](int i) {
      upfs::Resolved r;
      uint64_t ino;
      bool created;
      upfs::Status st = ns.Resolve("/f" + std::to_string(i), false, &r);
      if (st.ok()) st = ns.Create(r, 0644, upfs::format::Consistency::kStrict, &ino, &created);
      return st;
    };
    p->RefuseCheckpointImagesForTest();
    // Past the first interval, then four retry distances more.
    int i = 0;
    const auto blocks = [&] { return p->log()->pos().seq; };  // the log's block sequence
    const uint64_t target = upfs::kCheckpointEveryBlocks + 4 * upfs::kCheckpointRetryBlocks + 2;
    while (blocks() < target) ASSERT_TRUE(create(i++).ok()) << i;
    const uint64_t tried = p->CheckpointsBegunForTest();
    EXPECT_GE(tried, 4u) << "no retries as the log grew";
    EXPECT_LE(tried, 6u) << "a checkpoint tried by every commit (" << i << " creates)";
    EXPECT_EQ(p->super()->checkpoint.load(), 0u);
    p->RefuseCheckpointImagesForTest(false);
    const uint64_t until = blocks() + upfs::kCheckpointRetryBlocks + 1;
    while (blocks() < until) ASSERT_TRUE(create(i++).ok()) << i;
    EXPECT_NE(p->super()->checkpoint.load(), 0u) << "no checkpoint once there was room";
  }
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  for (const std::string& problem : r.problems) ADD_FAILURE() << problem;
  EXPECT_LE(r.log_blocks, 2 * r.checkpoint_interval_blocks + 2);
  EXPECT_EQ(r.leaked_blocks, 0);
  unlink(pool.c_str());
}

// A process whose log position stayed behind while others checkpointed
// may find that position's block freed and made something else: Reserve
// refuses it (the caller catches up and reserves again) instead of
// writing a reservation into someone else's block.
TEST(PoolLogPosition, AReservationAtAPositionLeftBehindIsRefused) {
  const std::string pool = "/dev/shm/upfs-ckroom2-" + std::to_string(getpid()) + ".pool";
  MakePoolWithFiles(pool, "", 10);
  if (HasFatalFailure()) return;
  {
    std::unique_ptr<upfs::Pool> p;
    ASSERT_TRUE(upfs::Pool::Attach(pool, &p).ok());
    std::optional<upfs::EpochPin> pin;
    ASSERT_TRUE(p->Pin(&pin).ok());
    const upfs::NsPos at = p->log()->PosHint();
    upfs::NsRecord rec{upfs::format::pool::RecordType::kCreate, upfs::format::pool::FileType::kRegular,
                       0, p->root_ino(), 0, 0, "x", {}, {}};
    rec.creation = upfs::NsCreation{true, upfs::format::pool::FileType::kRegular, 1, 0644, 1, 0, 1};  // a regular file's create carries it
    upfs::NsLog::Reservation r;
    // The same block with another sequence number: made anew since.
    upfs::Status st = p->log()->Reserve(rec, upfs::NsPos{at.lblock, at.slot, at.seq + 1}, &r);
    EXPECT_EQ(st.err(), ESTALE) << st.ToString();
    // A block that is not a namespace log block at all (an inode block).
    st = p->log()->Reserve(rec, upfs::NsPos{upfs::format::pool::InodeBlockOf(p->root_ino()), 0, at.seq}, &r);
    EXPECT_EQ(st.err(), ESTALE) << st.ToString();
    // Where the log is: a reservation (never applied, so it means nothing).
    st = p->log()->Reserve(rec, at, &r);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.files, 10u);
  unlink(pool.c_str());
}

}  // namespace
