// Free space given back while others write (docs/design.md, "Giving free
// space back"): a second attachment gives back every wholly free extent
// over and over, while threads of the first write, check and remove files
// of 1-16 MiB, so that extents go free, are punched, and are taken
// back (given memory again) all the time. Every file reads back as
// written, and afterwards fsck finds nothing leaked and no free block
// lacks memory. Also run under ThreadSanitizer (label concurrency).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "container/pool/pool.h"
#include "container/pool/pool_check.h"
#include "pool_api/pool_host_memory.h"
#include "test_util.h"
#include "upfs/upfs.h"

namespace {

constexpr int kWriters = 2;
constexpr int kKeep = 4;  // files each writer keeps before removing its oldest

// A file's bytes: its id in every 8-byte word, with the word's offset
// (n is a multiple of 8).
std::string Pattern(uint64_t id, size_t n) {
  std::string s(n, 0);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = (id << 32) ^ i;
    std::memcpy(&s[i], &w, 8);
  }
  return s;
}

TEST(PoolGiveBackRace, WritersAndGiveBacksOfAnotherAttachment) {
  const std::string pool = "/dev/shm/upfs-givebackrace-" + std::to_string(getpid()) + ".pool";
  const std::string mnt = "/upfs-givebackrace-" + std::to_string(getpid());
  unlink(pool.c_str());
  ASSERT_EQ(upfs_mkfs(pool.c_str(), 0), 0) << upfs_last_error();
  ASSERT_EQ(upfs_mount(pool.c_str(), mnt.c_str()), 0) << upfs_last_error();
  std::unique_ptr<upfs::Pool> other;
  ASSERT_TRUE(upfs::Pool::Attach(pool, &other).ok());

  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(upfs_test::Scaled(3000, 400));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> given_back{0}, rounds{0}, written{0};
  std::vector<std::string> failures(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(uint64_t(w) * 7919 + 1);
      std::deque<std::pair<uint64_t, size_t>> kept;  // id, size
      auto name = [&](uint64_t id) { return mnt + "/w" + std::to_string(w) + "-" + std::to_string(id); };
      auto check = [&](uint64_t id, size_t n) {
        std::string got(n, 0);
        const int fd = upfs_open(name(id).c_str(), O_RDONLY);
        const bool ok = fd >= 0 && upfs_read(fd, got.data(), n) == ssize_t(n) && got == Pattern(id, n);
        if (fd >= 0) upfs_close(fd);
        return ok;
      };
      for (uint64_t id = 0; std::chrono::steady_clock::now() < until && failures[w].empty(); ++id) {
        // 1-16 MiB: whole 2 MiB partitions (pool allocation), freed together.
        const size_t n = size_t(1) << (20 + rng() % 5);
        const std::string data = Pattern(id, n);
        const int fd = upfs_open(name(id).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0 || upfs_write(fd, data.data(), n) != ssize_t(n) || upfs_close(fd) != 0) {
          failures[w] = "write " + name(id) + ": " + upfs_last_error();
          break;
        }
        kept.emplace_back(id, n);
        ++written;
        // All of them at once now and then: whole extents go free together,
        // and the giver has them for a while.
        const size_t keep = kept.size() >= kKeep && rng() % 4 == 0 ? 0 : kKeep;
        while (kept.size() > keep && failures[w].empty()) {
          const auto [old, size] = kept.front();
          kept.pop_front();
          if (!check(old, size)) failures[w] = "file " + name(old) + " does not read back as written";
          else if (upfs_unlink(name(old).c_str()) != 0) failures[w] = "unlink: " + std::string(upfs_last_error());
        }
        if (keep == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      for (const auto& [id, size] : kept)
        if (failures[w].empty() && !check(id, size)) failures[w] = "file " + name(id) + " does not read back";
    });
  }
  std::thread giver([&] {
    while (!stop.load()) {
      given_back += other->GiveBackFreeSpace(0);
      ++rounds;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  for (std::thread& t : threads) t.join();
  stop = true;
  giver.join();
  for (const std::string& f : failures) EXPECT_TRUE(f.empty()) << f;
  EXPECT_GT(given_back.load(), 0u) << "nothing was ever given back (" << rounds.load() << " rounds)";
  // Taken back by the writers (given memory again) while the giver ran.
  const uint64_t taken_back = given_back.load() - other->GivenBackBlocks();
  EXPECT_GT(taken_back, 0u);
  other.reset();
  ASSERT_EQ(upfs_umount(mnt.c_str()), 0) << upfs_last_error();
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool, &r).ok());
  for (const std::string& p : r.problems) ADD_FAILURE() << p;
  EXPECT_EQ(r.leaked_blocks, 0);
  EXPECT_EQ(upfs_test::FreeBlocksWithoutMemory(pool), 0u);
  std::printf("%llu files written; %llu blocks given back in %llu rounds, %llu taken back\n",
              (unsigned long long)written.load(), (unsigned long long)given_back.load(),
              (unsigned long long)rounds.load(), (unsigned long long)taken_back);
  unlink(pool.c_str());
}

}  // namespace
