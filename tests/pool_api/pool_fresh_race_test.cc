// New files and directories changed while their makers may still be
// between their commit and their fence (a version 9 pool's one wait a
// create: container/pool/fresh_inode.h). Threads make files and
// directories; others chmod each one, write into each file (and remove
// some) and make a name in each directory as soon as it appears, so that
// seals and releases race the makers' clears of the fresh bit. Every
// change must hold after a detach and the pool must check clean (also
// under ThreadSanitizer, with the concurrency label).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "pool_concurrency_util.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

using PoolFreshRace = pool_conc::PoolConcurrencyTest;
using upfs_test::Scaled;

constexpr int kMakers = 2;

std::string Name(int maker, uint64_t i) { return "m" + std::to_string(maker) + "-" + std::to_string(i); }

TEST_F(PoolFreshRace, ChangesRacingTheMakersFenceAllHold) {
  const uint64_t per_maker = Scaled(3000, 300);
  // made[m]: how many of maker m's names exist (released after each make).
  std::atomic<uint64_t> made[kMakers] = {};
  std::atomic<bool> done{false};
  pool_conc::Errors errors;
  std::vector<std::thread> threads;
  for (int m = 0; m < kMakers; ++m) {
    threads.emplace_back([&, m] {
      for (uint64_t i = 0; i < per_maker; ++i) {
        const std::string p = P(Name(m, i));
        if (i % 4 == 3) {
          if (upfs_mkdir(p.c_str(), 0755) != 0) errors.Add("mkdir " + p + ": " + upfs_last_error());
        } else {
          const int fd = upfs_open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
          if (fd < 0 || upfs_close(fd) != 0) errors.Add("create " + p + ": " + upfs_last_error());
        }
        made[m].store(i + 1, std::memory_order_release);
      }
    });
  }
  // One changer per maker: the newest name of its maker, each name once.
  for (int m = 0; m < kMakers; ++m) {
    threads.emplace_back([&, m] {
      for (uint64_t next = 0; next < per_maker;) {
        // The name the maker is making right now: it may not exist yet
        // (ENOENT), or exist with its maker before its fence.
        const std::string p = P(Name(m, next));
        const bool dir = next % 4 == 3;
        if (next % 8 == 7) {
          // A directory removed the moment it exists: the release races
          // its maker's clear of the fresh bit.
          const bool was_made = made[m].load(std::memory_order_acquire) > next;
          if (upfs_rmdir(p.c_str()) == 0) {
            ++next;
          } else if (errno != ENOENT || was_made) {
            errors.Add("rmdir " + p + ": " + upfs_last_error());
            ++next;
          }
          continue;
        }
        const bool was_made = made[m].load(std::memory_order_acquire) > next;  // before the chmod
        if (upfs_chmod(p.c_str(), dir ? 0711 : 0600) != 0) {
          if (errno != ENOENT) errors.Add("chmod " + p + ": " + upfs_last_error());
          if (!was_made) continue;  // not made yet: again
          errors.Add("chmod " + p + " after it was made: " + upfs_last_error());
        }
        if (dir) {
          const int fd = upfs_open((p + "/in").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
          if (fd < 0 || upfs_close(fd) != 0) errors.Add("create in " + p + ": " + upfs_last_error());
        } else {
          const int fd = upfs_open(p.c_str(), O_WRONLY);
          if (fd < 0 || upfs_pwrite(fd, "12345678", 8, 0) != 8 || upfs_close(fd) != 0)
            errors.Add("write " + p + ": " + upfs_last_error());
        }
        // Some files go again at once: their release may race the maker's
        // clear of the fresh bit (the releaser's CAS must not give up).
        if (next % 4 == 1 && upfs_unlink(p.c_str()) != 0) errors.Add("unlink " + p + ": " + upfs_last_error());
        ++next;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(errors.Text(), "");
  // Every change is there after a detach and attach (the images the
  // makers left and the seals made them durable with).
  Umount();
  Mount();
  uint64_t files = 0, dirs = 1;
  for (int m = 0; m < kMakers; ++m) {
    for (uint64_t i = 0; i < per_maker; ++i) {
      const std::string p = P(Name(m, i));
      struct stat st;
      if (i % 4 == 1 || i % 8 == 7) {
        EXPECT_NE(upfs_stat(p.c_str(), &st), 0) << p << " was removed";
        continue;
      }
      ASSERT_EQ(upfs_stat(p.c_str(), &st), 0) << p << ": " << upfs_last_error();
      if (i % 4 == 3) {
        ++dirs;
        ++files;  // its "in"
        EXPECT_TRUE(S_ISDIR(st.st_mode)) << p;
        EXPECT_EQ(st.st_mode & 07777, 0711u) << p;
        EXPECT_EQ(st.st_nlink, 2u) << p;
        ASSERT_EQ(upfs_stat((p + "/in").c_str(), &st), 0) << p;
      } else {
        ++files;
        EXPECT_EQ(st.st_mode & 07777, 0600u) << p;
        EXPECT_EQ(st.st_size, 8) << p;
      }
    }
  }
  CheckDetached(files, dirs);
}

}  // namespace
