// A full file system under upfs: every call that wants space it cannot get
// fails with ENOSPC, nothing written before is lost, and no store ever
// faults (a store into a page tmpfs cannot back is a SIGBUS, which kills
// the program). Each case runs in a child process with a mount namespace
// of its own, where a small tmpfs is mounted over /dev/shm (so the
// per-file shared state is short of space too); the child's exit status
// says what happened. Without the privilege to do that (not root, no user
// namespaces) the cases are skipped.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <string>
#include <vector>

#include "container/pool/pool_check.h"
#include "pair_idle_age.h"
#include "upfs/upfs.h"

namespace {

constexpr int kSkip = 77;
constexpr size_t kChunk = 64 * 1024;

// Runs body in a process whose /dev/shm is a fresh tmpfs of `size` (mount
// option syntax, e.g. "20m"). body returns "" when all was as it should
// be, else what went wrong. The process that mounted the tmpfs waits for
// body's and then looks for shared-state objects left behind (upfs keeps
// closed files parked while their process lives: litter shows only after).
void InSmallShm(const char* size, const std::function<std::string()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0) _exit(kSkip);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(kSkip);
    const std::string opts = std::string("size=") + size;
    if (mount("tmpfs", "/dev/shm", "tmpfs", 0, opts.c_str()) != 0) _exit(kSkip);
    const pid_t worker = fork();
    if (worker < 0) _exit(1);
    if (worker == 0) {
      const std::string why = body();
      if (!why.empty()) std::fprintf(stderr, "[tmpfs of %s] %s\n", size, why.c_str());
      std::exit(why.empty() ? 0 : 1);  // exit, not _exit: parked files are closed at exit
    }
    int ws = 0;
    if (waitpid(worker, &ws, 0) != worker) _exit(1);
    if (WIFSIGNALED(ws)) {
      std::fprintf(stderr, "[tmpfs of %s] killed by signal %d (%s)\n", size, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
      _exit(1);
    }
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) _exit(1);
    if (DIR* d = opendir("/dev/shm")) {
      std::string left;
      while (struct dirent* e = readdir(d))
        if (std::strncmp(e->d_name, "upfs-", 5) == 0) left += std::string(" ") + e->d_name;
      closedir(d);
      if (!left.empty()) {
        std::fprintf(stderr, "[tmpfs of %s] shared state left behind:%s\n", size, left.c_str());
        _exit(1);
      }
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSkip) GTEST_SKIP() << "cannot mount a tmpfs here";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "tmpfs of " << size << ": see stderr";
}

unsigned char Pattern(int file, size_t at) { return static_cast<unsigned char>(file * 31 + at / kChunk); }

// What a writer managed to write before the space ran out.
struct Written {
  std::string path;
  size_t bytes = 0;
};

// Creates files under `dir` and writes 64 KiB chunks until a call fails;
// then keeps trying (the space a failed growth left must not be used).
// Fails on any error but ENOSPC.
std::string Fill(const std::string& dir, std::vector<Written>* out) {
  std::vector<unsigned char> buf(kChunk);
  bool full = false;
  for (int k = 0; k < 400; ++k) {
    Written w{dir + "/f" + std::to_string(k), 0};
    const int fd = upfs_open(w.path.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) {
      if (errno != ENOSPC) return "create " + w.path + ": " + std::strerror(errno);
      full = true;
      continue;
    }
    for (int i = 0; i < 64; ++i) {
      for (size_t j = 0; j < kChunk; ++j) buf[j] = Pattern(k, w.bytes);
      if (upfs_write(fd, buf.data(), kChunk) != ssize_t(kChunk)) {
        if (errno != ENOSPC) return "write " + w.path + ": " + std::strerror(errno);
        full = true;
        break;
      }
      w.bytes += kChunk;
    }
    if (upfs_close(fd) != 0) return "close " + w.path + ": " + std::strerror(errno);
    out->push_back(w);
    if (full && k > 40) break;  // well past the first ENOSPC
  }
  return full ? "" : "the file system never filled up";
}

// Every byte Fill said it wrote reads back.
std::string Verify(const std::vector<Written>& files) {
  std::vector<unsigned char> buf(kChunk);
  for (size_t k = 0; k < files.size(); ++k) {
    const Written& w = files[k];
    const int file = std::stoi(w.path.substr(w.path.rfind("/f") + 2));
    const int fd = upfs_open(w.path.c_str(), O_RDONLY);
    if (fd < 0) return "reopen " + w.path + ": " + std::strerror(errno);
    struct stat st;
    if (upfs_fstat(fd, &st) != 0 || size_t(st.st_size) < w.bytes) {
      upfs_close(fd);
      return w.path + ": shorter than written";
    }
    for (size_t at = 0; at < w.bytes; at += kChunk) {
      if (upfs_pread(fd, buf.data(), kChunk, off_t(at)) != ssize_t(kChunk) || buf[kChunk - 1] != Pattern(file, at)) {
        upfs_close(fd);
        return w.path + ": lost data at " + std::to_string(at);
      }
    }
    upfs_close(fd);
  }
  return "";
}

TEST(FullMedium, APoolThatRunsOutOfSpaceSaysEnospcAndKeepsWhatItHas) {
  // Sizes that run out in different places: the first data region, a
  // growth step, a later one.
  for (const char* size : {"44m", "60m", "100m"}) {
    InSmallShm(size, [] {
      const std::string pool = "/dev/shm/pool", mnt = "/full-medium-pool";
      if (upfs_mkfs(pool.c_str(), 0) != 0) return std::string("mkfs: ") + std::strerror(errno);
      if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("mount: ") + std::strerror(errno);
      std::vector<Written> files;
      std::string why = Fill(mnt, &files);
      if (why.empty()) why = Verify(files);
      if (upfs_umount(mnt.c_str()) != 0) return std::string("umount: ") + std::strerror(errno);
      if (!why.empty()) return why;
      // Attached again, the pool is recovered (its allocator rebuilt over
      // whatever a failed growth left) and is still full, not broken.
      if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("remount: ") + std::strerror(errno);
      why = Verify(files);
      std::vector<Written> more;
      if (why.empty()) why = Fill(mnt + "", &more);
      if (why == "the file system never filled up") why = "";  // some space may have come back
      upfs_umount(mnt.c_str());
      return why;
    });
  }
}

TEST(FullMedium, AFullPoolCanAlwaysBeEmptied) {
  // With the data region full, removals that free no block (empty files)
  // still commit: 200 of them in a row cross at least one log block, whose
  // successor comes from the log's reserve (docs/design.md, "The
  // namespace log": 258 such removals of short names are guaranteed).
  // mkdir+rmdir pairs still succeed (an inode goes and comes back) until
  // the log can grow no more. Removals must still commit then, and what
  // they free lets everything else go on.
  InSmallShm("60m", [] {
    const std::string pool = "/dev/shm/pool", mnt = "/full-medium-pool";
    if (upfs_mkfs(pool.c_str(), 0) != 0) return std::string("mkfs: ") + std::strerror(errno);
    if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("mount: ") + std::strerror(errno);
    // Inodes to come back free once the data region is full.
    constexpr int kEmpty = 200;
    for (int i = 0; i < kEmpty; ++i) {
      const int fd = upfs_open((mnt + "/e" + std::to_string(i)).c_str(), O_CREAT | O_RDWR, 0644);
      if (fd < 0 || upfs_close(fd) != 0) return std::string("create: ") + std::strerror(errno);
    }
    std::vector<Written> files;
    std::string why = Fill(mnt, &files);
    for (int i = 0; why.empty() && i < kEmpty; ++i)
      if (upfs_unlink((mnt + "/e" + std::to_string(i)).c_str()) != 0)
        why = "unlink of empty file " + std::to_string(i) + " in a full pool: " + upfs_last_error();
    bool log_full = false;
    for (int i = 0; why.empty() && i < 20000 && !log_full; ++i) {
      const std::string d = mnt + "/d" + std::to_string(i);
      if (upfs_mkdir(d.c_str(), 0755) != 0) {
        if (errno != ENOSPC) why = "mkdir: " + std::string(std::strerror(errno));
        log_full = true;
      } else if (upfs_rmdir(d.c_str()) != 0) {
        why = "rmdir of " + d + " in a full pool: " + std::strerror(errno) + ": " + upfs_last_error();
      }
    }
    if (why.empty() && !log_full) why = "the namespace log never ran out of room";
    for (const Written& w : files)
      if (why.empty() && upfs_unlink(w.path.c_str()) != 0)
        why = "unlink of " + w.path + " in a full pool: " + std::strerror(errno) + ": " + upfs_last_error();
    if (why.empty() && upfs_mkdir((mnt + "/after").c_str(), 0755) != 0)
      why = std::string("mkdir after emptying: ") + std::strerror(errno);
    std::vector<Written> again;
    if (why.empty()) why = Fill(mnt + "/after", &again);
    if (why.empty()) why = Verify(again);
    upfs_umount(mnt.c_str());
    return why;
  });
}

// Truncating full files to nothing must work with no space left (it may
// need a log entry of its own), and give the space back.
std::string TruncateAllAndRefill(const std::string& dir, const std::vector<Written>& files) {
  for (const Written& w : files) {
    const int fd = upfs_open(w.path.c_str(), O_RDWR);
    if (fd < 0) return "reopen " + w.path + ": " + std::strerror(errno);
    const int r = upfs_ftruncate(fd, 0);
    const int e = errno;
    upfs_close(fd);
    if (r != 0) return "truncate of " + w.path + " with no space left: " + std::strerror(e);
  }
  std::vector<Written> again;
  std::string why = Fill(dir, &again);
  return why.empty() ? Verify(again) : why;
}

TEST(FullMedium, TruncatingFullFilesGivesTheSpaceBack) {
  InSmallShm("20m", [] {
    if (mkdir("/dev/shm/again", 0755) != 0) return std::string("mkdir: ") + std::strerror(errno);
    std::vector<Written> files;
    std::string why = Fill("/dev/shm", &files);
    return why.empty() ? TruncateAllAndRefill("/dev/shm/again", files) : why;
  });
  InSmallShm("60m", [] {
    const std::string pool = "/dev/shm/pool", mnt = "/full-medium-pool";
    if (upfs_mkfs(pool.c_str(), 0) != 0) return std::string("mkfs: ") + std::strerror(errno);
    if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("mount: ") + std::strerror(errno);
    if (upfs_mkdir((mnt + "/again").c_str(), 0755) != 0) return std::string("mkdir: ") + std::strerror(errno);
    std::vector<Written> files;
    std::string why = Fill(mnt, &files);
    if (why.empty()) why = TruncateAllAndRefill(mnt + "/again", files);
    upfs_umount(mnt.c_str());
    return why;
  });
}

TEST(FullMedium, MkfsWithoutRoomForThePoolFailsAndLeavesNothing) {
  for (const char* size : {"1m", "8m"}) {
    InSmallShm(size, [] {
      const std::string pool = "/dev/shm/pool";
      if (upfs_mkfs(pool.c_str(), 0) == 0) return std::string("mkfs succeeded without room");
      if (errno != ENOSPC) return std::string("mkfs: ") + std::strerror(errno);
      struct stat st;
      if (stat(pool.c_str(), &st) == 0) return std::string("mkfs left the pool file behind");
      return std::string();
    });
  }
}

TEST(FullMedium, PerFileFilesThatRunOutOfSpaceSayEnospcAndLeaveNoSharedState) {
  for (const char* size : {"3m", "8m", "20m"}) {
    InSmallShm(size, [] {
      std::vector<Written> files;
      std::string why = Fill("/dev/shm", &files);
      if (why.empty()) why = Verify(files);
      return why;
    });
  }
}

// A per-file file that gave free extents back to the host while quiet,
// on a file system that is then filled by someone else: writes that need
// the extents again get ENOSPC (taking them back provides them first,
// never a SIGBUS in a store), nothing written before is lost, and once
// there is room again they succeed.
TEST(FullMedium, AFileThatGaveSpaceBackSaysEnospcWhenItCannotTakeItBack) {
  InSmallShm("40m", [] {
    upfs_test::PairIdleAge idle(100);
    const std::string path = "/dev/shm/f", filler = "/dev/shm/filler";
    const int fd = upfs_open(path.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) return std::string("create: ") + std::strerror(errno);
    constexpr size_t kData = 8 << 20;
    std::vector<unsigned char> model(kData);
    for (size_t i = 0; i < kData; ++i) model[i] = static_cast<unsigned char>(i * 7 + i / 4096);
    if (upfs_pwrite(fd, model.data(), kData, 0) != ssize_t(kData)) return std::string("write: ") + std::strerror(errno);
    // A small write into each block pairs it: a shadow each, freed by the
    // quiet fold and then given back with the rest of the free space.
    for (size_t at = 100; at < kData; at += 4096) {
      model[at] ^= 0xff;
      if (upfs_pwrite(fd, &model[at], 1, off_t(at)) != 1) return std::string("small write: ") + std::strerror(errno);
    }
    struct stat st;
    const auto held = [&] { return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0; };
    const uint64_t paired = held();
    for (int i = 0; i < 1000 && held() + (4 << 20) > paired; ++i) usleep(20000);
    if (held() + (4 << 20) > paired)
      return "nothing given back: " + std::to_string(held()) + " bytes held, " + std::to_string(paired) + " paired";
    // Someone else takes every page the file system has left.
    const int f = open(filler.c_str(), O_CREAT | O_WRONLY, 0644);
    std::vector<unsigned char> junk(kChunk, 0x5a);
    while (write(f, junk.data(), junk.size()) > 0) {
    }
    close(f);
    std::vector<unsigned char> more(kChunk, 0xc3);
    size_t appended = 0;
    int err = 0;
    for (int i = 0; i < 512 && !err; ++i) {
      if (upfs_pwrite(fd, more.data(), kChunk, off_t(kData + appended)) == ssize_t(kChunk))
        appended += kChunk;
      else
        err = errno;
    }
    if (err != ENOSPC) return std::string("appends on a full file system: ") + (err ? std::strerror(err) : "no error");
    std::vector<unsigned char> got(kData);
    if (upfs_pread(fd, got.data(), kData, 0) != ssize_t(kData) || got != model) return std::string("data lost");
    unlink(filler.c_str());
    if (upfs_pwrite(fd, more.data(), kChunk, off_t(kData + appended)) != ssize_t(kChunk))
      return std::string("append with room again: ") + std::strerror(errno);
    upfs_close(fd);
    return std::string();
  });
}

// A pool's detach gives back what removals freed beyond what it keeps
// (pool_give_back.cc); when the file system has no page left for it, the
// writer that needs it gets ENOSPC, not a SIGBUS, and keeps what it has.
TEST(FullMedium, APoolThatGaveSpaceBackSaysEnospcWhenItCannotTakeItBack) {
  InSmallShm("220m", [] {
    const std::string pool = "/dev/shm/pool", mnt = "/full-medium-giveback", filler = "/dev/shm/filler";
    if (upfs_mkfs(pool.c_str(), 0) != 0) return std::string("mkfs: ") + std::strerror(errno);
    if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("mount: ") + std::strerror(errno);
    constexpr size_t kFile = 4 << 20;
    constexpr int kFiles = 30;
    std::vector<unsigned char> data(kFile, 0x3c);
    const auto name = [&](int i) { return mnt + "/f" + std::to_string(i); };
    for (int i = 0; i < kFiles; ++i) {
      const int fd = upfs_open(name(i).c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0 || upfs_write(fd, data.data(), kFile) != ssize_t(kFile)) return std::string("fill: ") + std::strerror(errno);
      upfs_close(fd);
    }
    for (int i = 0; i < kFiles; ++i) upfs_unlink(name(i).c_str());
    if (upfs_umount(mnt.c_str()) != 0) return std::string("umount: ") + std::strerror(errno);
    upfs::PoolReport r;
    if (!upfs::CheckPool(pool, &r).ok() || r.given_back_blocks <= 0) return std::string("nothing given back");
    // Someone else takes every page the file system has left, but 1 MiB:
    // a taken-back extent's first pages fit, its huge page does not.
    const int f = open(filler.c_str(), O_CREAT | O_WRONLY, 0644);
    std::vector<unsigned char> junk(kChunk, 0x5a);
    while (write(f, junk.data(), junk.size()) > 0) {
    }
    const off_t filled = lseek(f, 0, SEEK_END);
    if (filled < (1 << 20) || ftruncate(f, filled - (1 << 20)) != 0) return std::string("filler: ") + std::strerror(errno);
    close(f);
    if (upfs_mount(pool.c_str(), mnt.c_str()) != 0) return std::string("remount: ") + std::strerror(errno);
    int made = 0, err = 0;
    for (; made < kFiles && !err; ++made) {
      const int fd = upfs_open(name(made).c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd < 0) {
        err = errno;
        break;
      }
      if (upfs_write(fd, data.data(), kFile) != ssize_t(kFile)) err = errno;
      upfs_close(fd);
    }
    if (err != ENOSPC) return std::string("writes on a full file system: ") + (err ? std::strerror(err) : "no error");
    std::vector<unsigned char> got(kFile);
    for (int i = 0; i + 1 < made; ++i) {
      const int fd = upfs_open(name(i).c_str(), O_RDONLY);
      const bool same = fd >= 0 && upfs_read(fd, got.data(), kFile) == ssize_t(kFile) && got == data;
      upfs_close(fd);
      if (!same) return "file " + std::to_string(i) + " lost";
    }
    unlink(filler.c_str());
    const int fd = upfs_open(name(kFiles).c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || upfs_write(fd, data.data(), kFile) != ssize_t(kFile))
      return std::string("write with room again: ") + std::strerror(errno);
    upfs_close(fd);
    if (upfs_umount(mnt.c_str()) != 0) return std::string("last umount: ") + std::strerror(errno);
    if (!upfs::CheckPool(pool, &r).ok() || !r.problems.empty() || r.leaked_blocks != 0)
      return std::string("fsck after: ") + (r.problems.empty() ? "leaked blocks" : r.problems[0]);
    unlink(pool.c_str());
    return std::string();
  });
}

}  // namespace
