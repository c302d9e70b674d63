// A upfs file is never written as plain bytes: callers that may not read it
// are refused, and raw system calls on a upfs descriptor fail.
#include "container/perfile/inspect.h"
#include "semantics_util.h"

namespace upfs_semantics {
namespace {

// ---------------------------------------------------------------------------
// Never written as plain bytes.

TEST_F(Semantics, AWriteOnlyCallerIsRefusedAndTheFileStaysIntact) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "wo", 0277);  // the case
  EXPECT_EQ(As(&kOwner, [&] {
              int fd = upfs_open(p.upfs.c_str(), O_WRONLY);
              std::string out = Errno(fd) + " " + std::to_string(upfs_is_upfs_file(p.upfs.c_str())) + " " +
                                std::to_string(upfs_is_upfs_file(p.plain.c_str()));
              if (fd >= 0) upfs_close(fd);
              return out;
            }),
            std::string(std::strerror(EACCES)) + " 1 0");
  EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
  EXPECT_EQ(upfs_is_upfs_file(p.upfs.c_str()), 1);
}

TEST_F(Semantics, CallersWithoutReadPermissionRecogniseAndCannotDamageAUpfsFile) {
  NEED_ROOT();
  for (const CallerClass& c : kCallerClasses) {
    for (unsigned bits : {0u, 2u, 3u}) {  // ---, -w-, -wx
      const std::string scenario = Scenario(c, bits);
      Pair p = MakePair(dir_, "nr" + std::to_string(c.shift) + std::to_string(bits), ModeFor(c, bits));
      const std::string got = As(c.user, [&] {
        std::string out = std::to_string(upfs_is_upfs_file(p.upfs.c_str())) + " " +
                          std::to_string(upfs_is_upfs_file(p.plain.c_str()));
        for (int flags : {O_WRONLY, O_WRONLY | O_APPEND, O_WRONLY | O_TRUNC}) {
          const int fd = upfs_open(p.upfs.c_str(), flags);
          out += " " + Err(fd);
          if (fd >= 0) {
            upfs_pwrite(fd, "XYZS", 4, 0);
            upfs_close(fd);
          }
        }
        return out;
      });
      EXPECT_EQ(got, "1 0 EACCES EACCES EACCES") << scenario << " (is_upfs upfs/plain, opens O_WRONLY, |O_APPEND, |O_TRUNC)";
      EXPECT_EQ(UpfsHolds(p.upfs, Content()), "") << scenario;
    }
  }
}

// ---------------------------------------------------------------------------
// Raw system calls on a upfs descriptor fail and damage nothing.

// Every raw call that would write the host file through the upfs descriptor
// fd: "" if each failed (EBADF or EINVAL; EACCES for a shared writable map),
// else what got through. src: a readable kernel descriptor.
std::string RawWritesRefused(int fd, int src) {
  const int h = upfs_host_fd(fd);
  if (h < 0) return "upfs_host_fd failed; ";
  std::string out;
  auto refused = [&out](const char* what, long r, std::initializer_list<int> ok_errnos) {
    const int e = errno;
    if (r != -1) {
      out += std::string(what) + " succeeded (" + std::to_string(r) + "); ";
      return;
    }
    for (int x : ok_errnos)
      if (x == e) return;
    out += std::string(what) + " failed with " + upfs_test::ErrnoText(e) + "; ";
  };
  refused("pwrite64", syscall(SYS_pwrite64, h, "XYZS", 4, 0), {EBADF, EINVAL});
  refused("write", syscall(SYS_write, h, "XYZS", 4), {EBADF, EINVAL});
  struct iovec iov{const_cast<char*>("XYZS"), 4};
  refused("pwritev", syscall(SYS_pwritev, h, &iov, 1, 0, 0), {EBADF, EINVAL});
  refused("ftruncate", syscall(SYS_ftruncate, h, 0), {EBADF, EINVAL});
  refused("fallocate", syscall(SYS_fallocate, h, 0, 0, 1 << 20), {EBADF, EINVAL});
  loff_t off = 0;
  refused("copy_file_range", syscall(SYS_copy_file_range, src, nullptr, h, &off, 4, 0), {EBADF, EINVAL});
  void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, h, 0);
  refused("mmap(PROT_WRITE, MAP_SHARED)", m == MAP_FAILED ? -1 : 0, {EACCES});
  if (m != MAP_FAILED) ::munmap(m, 4096);
  return out;
}

// Opens the upfs file with flags, tries the raw calls, and reads it back
// through the same descriptor. "" if nothing got through.
std::string RawCallsCannotDamage(const Pair& p, int flags) {
  const int u = upfs_open(p.upfs.c_str(), flags);
  if (u < 0) return "open failed: " + std::string(upfs_last_error());
  const int src = ::open(p.plain.c_str(), O_RDONLY);
  std::string out = RawWritesRefused(u, src);
  if (src >= 0) ::close(src);
  Bytes got;
  if (Readable(flags) && (!upfs_test::UpfsReadAll(u, &got) || got != Content()))
    out += "the descriptor reads changed bytes; ";
  upfs_close(u);
  return out;
}

// Each flag, from a fresh open and from the reopen of a just-closed (parked)
// file. "" if nothing got through.
std::string RawCallsReport(const Pair& p) {
  std::string out;
  for (const Flag& f : {Flag{"O_RDWR", O_RDWR}, Flag{"O_WRONLY", O_WRONLY}, Flag{"O_RDWR|O_APPEND", O_RDWR | O_APPEND}}) {
    for (bool parked : {false, true}) {
      upfs_drop_closed_files();
      if (parked) {
        const int first = upfs_open(p.upfs.c_str(), O_RDWR);
        if (first >= 0) upfs_close(first);
      }
      const std::string r = RawCallsCannotDamage(p, f.flags);
      if (!r.empty()) out += std::string(f.name) + (parked ? " (reopened while parked): " : ": ") + r;
    }
  }
  return out;
}

TEST_F(Semantics, RawSystemCallsOnAUpfsDescriptorFailAndDamageNothing) {
  {
    Pair p = MakePair(dir_, "raw", 0600, ::geteuid(), ::getegid());
    EXPECT_EQ(RawCallsReport(p), "") << "as uid " << ::geteuid();
    EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
    EXPECT_EQ(upfs_is_upfs_file(p.upfs.c_str()), 1);
  }
  if (::geteuid() != 0) return;
  Pair p = MakePair(dir_, "raw-owner", 0600);
  EXPECT_EQ(As(&kOwner, [&] { return RawCallsReport(p); }), "") << "as the owner";
  EXPECT_EQ(UpfsHolds(p.upfs, Content()), "");
}

// A program that bypasses upfs and writes over a upfs file's header leaves
// a file that still carries the marker: open, stat and fsck report damage
// (EUCLEAN, naming the header), not "not a upfs file".
TEST(Damage, HeaderOverwrittenBehindUpfsIsReportedAsDamage) {
  upfs_test::TempDir d;
  const std::string path = d.File("h");
  ASSERT_EQ(upfs_test::WriteAndClose(path, upfs_test::Pattern(9000, 7)), 0) << upfs_last_error();
  ASSERT_EQ(upfs_drop_closed_files(), 0);
  int h = open(path.c_str(), O_WRONLY);
  ASSERT_GE(h, 0);
  ASSERT_EQ(pwrite(h, "XYZS", 4, 0), 4);  // the write-only program
  close(h);
  EXPECT_EQ(upfs_is_upfs_file(path.c_str()), 1) << "the marker still says upfs";
  EXPECT_EQ(upfs_open(path.c_str(), O_RDWR), -1);
  EXPECT_EQ(errno, EUCLEAN) << upfs_last_error();
  EXPECT_NE(std::string(upfs_last_error()).find("marked as a upfs file"), std::string::npos)
      << upfs_last_error();
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(path, true, &r);
  EXPECT_EQ(st.err(), EUCLEAN) << st.ToString();
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems.front().find("file header"), std::string::npos) << r.problems.front();
}

}  // namespace
}  // namespace upfs_semantics
