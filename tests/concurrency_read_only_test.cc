// Read-only opens under concurrent compaction (ctest label concurrency).
//
// A read-only open pins nothing: the shared state, where epochs are pinned,
// is for the users who may write the file. So a GC in a writing process may
// reuse the log blocks a reader is reading; the reader must notice (the log
// head moved, File::HeadMoved) and never apply or return what it read from
// them. Readers that fall behind the writer across compactions, while its
// overwrites reuse the retired blocks as data, are the case that finds it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "container/perfile/inspect.h"
#include "test_util.h"
#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace {

using Bytes = std::vector<unsigned char>;
using upfs_test::TempDir;

constexpr uint32_t kRoBlocks = 16;
constexpr uint32_t kRoBlock = 4096;

void FillBlock(unsigned char* b, uint32_t index, uint64_t seq) {
  std::memcpy(b, &index, 4);
  std::memcpy(b + 4, &seq, 8);
  for (uint32_t i = 12; i < kRoBlock - 4; ++i) b[i] = static_cast<unsigned char>(index * 31 + seq + i);
  uint32_t crc = upfs::Crc32c(b, kRoBlock - 4);
  std::memcpy(b + kRoBlock - 4, &crc, 4);
}

// "" if block `index` holds a whole write of itself.
std::string CheckBlock(const unsigned char* b, uint32_t index) {
  uint32_t got_index, crc;
  std::memcpy(&got_index, b, 4);
  std::memcpy(&crc, b + kRoBlock - 4, 4);
  if (crc != upfs::Crc32c(b, kRoBlock - 4)) return "block " + std::to_string(index) + ": torn or foreign";
  if (got_index != index) return "block " + std::to_string(index) + " holds block " + std::to_string(got_index);
  return "";
}

[[noreturn]] void LaggingReaderChild(const std::string& path, uint64_t seed, int stop_fd, int out) {
  int fd = upfs_open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    upfs_test::PipeWriteString(out, std::string("E open failed: ") + upfs_last_error() + "\n");
    _exit(1);
  }
  std::mt19937_64 rng(seed);
  Bytes buf(kRoBlocks * kRoBlock);
  std::string errs;
  uint64_t reads = 0;
  for (;;) {
    struct pollfd p{stop_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 || errs.size() > 2000) break;
    // Fall behind the writer by a few thousand entries.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ssize_t n = upfs_pread(fd, buf.data(), buf.size(), 0);
    ++reads;
    if (n != static_cast<ssize_t>(buf.size())) {
      errs += "E read returned " + std::to_string(n) + ": " + upfs_last_error() + "\n";
      continue;
    }
    for (uint32_t i = 0; i < kRoBlocks; ++i) {
      std::string e = CheckBlock(buf.data() + uint64_t(i) * kRoBlock, i);
      if (!e.empty()) errs += "E read " + std::to_string(reads) + ": " + e + "\n";
    }
  }
  upfs_close(fd);
  upfs_test::PipeWriteString(out, "R " + std::to_string(reads) + "\n" + errs);
  _exit(errs.empty() ? 0 : 1);
}

TEST(ConcurrencyReadOnly, ReadersFallingBehindAcrossCompactions) {
  TempDir dir;
  const std::string path = dir.File("ro");
  Bytes block(kRoBlock);
  int wfd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(wfd, 0) << upfs_last_error();
  for (uint32_t i = 0; i < kRoBlocks; ++i) {
    FillBlock(block.data(), i, 0);
    ASSERT_EQ(upfs_pwrite(wfd, block.data(), block.size(), off_t(i) * kRoBlock),
              static_cast<ssize_t>(block.size()));
  }
  // Closed before the fork: a child would otherwise re-open the inherited
  // descriptor for writing, and its reads would use that File, pinned.
  ASSERT_EQ(upfs_close(wfd), 0);
  upfs_drop_closed_files();
  int stop[2];
  ASSERT_EQ(::pipe(stop), 0);
  const int nreaders = 2;
  std::vector<upfs_test::ReportingChild> readers;
  for (int r = 0; r < nreaders; ++r) {
    readers.push_back(upfs_test::ForkReporting("lagging reader " + std::to_string(r), {stop[1]}, [&](int out) {
      LaggingReaderChild(path, upfs_test::TestSeed(5) + r, stop[0], out);
    }));
    ASSERT_GE(readers.back().pid, 0);
  }
  ::close(stop[0]);
  wfd = upfs_open(path.c_str(), O_RDWR);
  ASSERT_GE(wfd, 0) << upfs_last_error();
  // Whole-block overwrites: every one displaces a block that is soon
  // reused, and every ~16,000 entries compact the log.
  const uint64_t writes = upfs_test::Scaled(1000000);
  for (uint64_t k = 1; k <= writes; ++k) {
    uint32_t i = static_cast<uint32_t>(k % kRoBlocks);
    FillBlock(block.data(), i, k);
    ASSERT_EQ(upfs_pwrite(wfd, block.data(), block.size(), off_t(i) * kRoBlock),
              static_cast<ssize_t>(block.size()))
        << upfs_last_error();
  }
  ::close(stop[1]);
  for (upfs_test::ReportingChild& r : readers) {
    bool hung;
    std::string how;
    std::istringstream in(upfs_test::CollectReport(r, 120 * 1000, &how, &hung));
    EXPECT_FALSE(hung) << r.what;
    std::string line;
    int shown = 0;
    while (std::getline(in, line)) {
      if (line.rfind("R ", 0) == 0) std::printf("%s: %s reads\n", r.what.c_str(), line.c_str() + 2);
      if (line.rfind("E ", 0) == 0 && shown++ < 10) ADD_FAILURE() << r.what << ": " << line.substr(2);
    }
    EXPECT_EQ(how, "exit 0") << r.what;
  }
  ASSERT_EQ(upfs_close(wfd), 0);
  upfs::FileReport report;
  upfs::Status st = upfs::InspectFile(path, true, &report);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

}  // namespace
