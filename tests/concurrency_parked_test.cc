// Threads opening and closing files race with parking and dropping of
// closed files.
#include "concurrency_util.h"

namespace {

using namespace upfs_concurrency;

// Threads open, write, stat and close a few files over and over while
// another drops the parked ones: the last close of one thread races with
// another thread's open of the same file, which must get the File back (or
// a fresh one) and never lose a write.
TEST(ConcurrencyParked, OpenCloseRacesWithParkingAndDropping) {
  TempDir d;
  constexpr int kFiles = 3, kThreads = 4;
  const int rounds = upfs_test::Scaled(1500);
  std::vector<std::string> paths;
  for (int f = 0; f < kFiles; ++f) paths.push_back(d.File("p" + std::to_string(f)));
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::string> first_error(kThreads + 1);
  // Thread t owns bytes [8t, 8t + 8) of every file and writes its round there.
  auto worker = [&](int t) {
    std::mt19937 rng(t);
    for (int r = 1; r <= rounds; ++r) {
      const std::string& path = paths[rng() % kFiles];
      int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
      if (fd < 0) {
        if (errors++ == 0) first_error[t] = std::string("open: ") + upfs_last_error();
        continue;
      }
      uint64_t v = uint64_t(r);
      uint64_t back = 0;
      if (upfs_pwrite(fd, &v, 8, off_t(8 * t)) != 8 || upfs_pread(fd, &back, 8, off_t(8 * t)) != 8 ||
          back != v) {
        if (errors++ == 0) first_error[t] = "write/read back failed: " + std::string(upfs_last_error());
      }
      upfs_close(fd);
      if (r % 7 == 0) {
        struct stat host, st;
        if (::stat(path.c_str(), &host) == 0) upfs_stat_if_open(&host, &st);
      }
    }
  };
  std::thread dropper([&] {
    while (!stop.load()) {
      upfs_drop_closed_files();
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(worker, t);
  for (auto& t : ts) t.join();
  stop = true;
  dropper.join();
  EXPECT_EQ(errors.load(), 0) << first_error[0] << first_error[1] << first_error[2] << first_error[3];
  upfs_drop_closed_files();
  for (const std::string& path : paths) ExpectInspectClean(path);
}

}  // namespace
