// Who may open, create and truncate a upfs file: the kernel decides, as for a
// plain file (the one designed difference: write without read permission).
#include "semantics_util.h"

namespace upfs_semantics {
namespace {

// ---------------------------------------------------------------------------
// Opening: owner, group member, other x rwx bits x flags.

// O_CREAT of an existing file only opens it. O_TRUNC asks for write
// permission whatever the access mode, and Linux truncates a file opened
// O_RDONLY | O_TRUNC (the test compares the sizes after).
const Flag kFlags[] = {{"O_RDONLY", O_RDONLY},
                       {"O_WRONLY", O_WRONLY},
                       {"O_RDWR", O_RDWR},
                       {"O_WRONLY|O_APPEND", O_WRONLY | O_APPEND},
                       {"O_RDONLY|O_CREAT", O_RDONLY | O_CREAT},
                       {"O_RDONLY|O_TRUNC", O_RDONLY | O_TRUNC},  // these two last: they empty the files
                       {"O_RDWR|O_TRUNC", O_RDWR | O_TRUNC}};

// What each open did, as "FLAG: kernel-result / upfs-result;".
std::string OpenResults(const Pair& p) {
  std::string out;
  for (const Flag& f : kFlags) {
    int kfd = ::open(p.plain.c_str(), f.flags, 0644);
    std::string k = Errno(kfd);
    if (kfd >= 0) ::close(kfd);
    int ufd = upfs_open(p.upfs.c_str(), f.flags, 0644);
    std::string u = Errno(ufd);
    if (ufd >= 0 && (f.flags & O_ACCMODE) != O_WRONLY && !(f.flags & O_TRUNC)) {
      Bytes got;
      if (!upfs_test::UpfsReadAll(ufd, &got) || got != Content()) u += " but read wrong bytes";
    }
    if (ufd >= 0) upfs_close(ufd);
    out += std::string(f.name) + ": " + k + " / " + u + "; ";
  }
  return out;
}

// The results the test expects: the kernel's, except EACCES where the
// class may write but not read (upfs reads its metadata to write).
std::string ExpectedResults(const Pair& p, unsigned bits) {
  std::string out;
  const bool r = bits & 4, w = bits & 2;
  for (const Flag& f : kFlags) {
    const int acc = f.flags & O_ACCMODE;
    const bool writes = acc != O_RDONLY || (f.flags & O_TRUNC);
    const bool kernel_ok = (acc == O_WRONLY || r) && (!writes || w);
    const std::string k = kernel_ok ? "ok" : std::strerror(EACCES);
    const bool upfs_ok = kernel_ok && (!writes || r);
    const std::string u = upfs_ok ? "ok" : std::strerror(EACCES);
    out += std::string(f.name) + ": " + k + " / " + u + "; ";
  }
  (void)p;
  return out;
}

TEST_F(Semantics, OpenAsOwnerGroupMemberAndOtherForEveryModeAndFlag) {
  NEED_ROOT();
  struct Class {
    const User* user;
    int shift;
  };
  for (const Class& c : {Class{&kOwner, 6}, Class{&kMember, 3}, Class{&kOther, 0}}) {
    for (unsigned bits = 0; bits < 8; ++bits) {
      // The other classes get the complement, so only this class's bits
      // can make the results match.
      mode_t mode = 0;
      for (int s : {6, 3, 0}) mode |= (s == c.shift ? bits : 7 - bits) << s;
      const std::string name = std::string(c.user->name).substr(0, 5) + std::to_string(bits);
      Pair p = MakePair(dir_, name, mode);
      std::string got = As(c.user, [&] { return OpenResults(p); });
      EXPECT_EQ(got, ExpectedResults(p, bits)) << c.user->name << ", mode " << std::oct << mode;
      // Read as root (upfs cannot read the size of a file its caller may
      // not read): emptied by the O_TRUNC opens that read and write.
      struct stat sp, su;
      ASSERT_EQ(::stat(p.plain.c_str(), &sp), 0);
      ASSERT_EQ(upfs_stat(p.upfs.c_str(), &su), 0) << upfs_last_error();
      const off_t left = (bits & 6) == 6 ? 0 : off_t(Content().size());
      EXPECT_EQ(sp.st_size, left) << c.user->name << ", mode " << std::oct << mode;
      EXPECT_EQ(su.st_size, left) << c.user->name << ", mode " << std::oct << mode;
      if (!(bits & 4) && (bits & 2)) {
        EXPECT_EQ(UpfsHolds(p.upfs, Content()), "") << "refused write-only open damaged the file";
      }
    }
  }
}

TEST_F(Semantics, RootOpensEverythingAsTheKernelDoes) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "root", 0);
  EXPECT_EQ(As(nullptr, [&] { return OpenResults(p); }), ExpectedResults(p, 7));
}

// truncate, chmod and chown by path, as each user, against the kernel.
TEST_F(Semantics, TruncateChmodChownDecidedAsTheKernelDecides) {
  NEED_ROOT();
  for (const User* u : {&kOwner, &kMember, &kOther}) {
    Pair p = MakePair(dir_, std::string("t") + std::to_string(u->uid), 0664);
    std::string got = As(u, [&] {
      std::string out;
      auto both = [&](const char* what, int k, int up) {
        const std::string ks = Errno(k), us = Errno(up);
        if (ks != us) out += std::string(what) + ": kernel " + ks + ", upfs " + us + "; ";
      };
      both("truncate", ::truncate(p.plain.c_str(), 100), upfs_truncate(p.upfs.c_str(), 100));
      both("chmod", ::chmod(p.plain.c_str(), 0660), upfs_chmod(p.upfs.c_str(), 0660));
      both("chgrp", ::chown(p.plain.c_str(), -1, 61001), upfs_chown(p.upfs.c_str(), -1, 61001));
      both("chown", ::chown(p.plain.c_str(), 61003, -1), upfs_chown(p.upfs.c_str(), 61003, -1));
      return out;
    });
    EXPECT_EQ(got, "") << u->name;
    struct stat sp, su;
    ASSERT_EQ(::stat(p.plain.c_str(), &sp), 0);
    ASSERT_EQ(upfs_stat(p.upfs.c_str(), &su), 0);
    EXPECT_EQ(sp.st_size, su.st_size) << u->name;
    EXPECT_EQ(sp.st_mode, su.st_mode) << u->name;
    EXPECT_EQ(sp.st_uid, su.st_uid) << u->name;
    EXPECT_EQ(sp.st_gid, su.st_gid) << u->name;
  }
}

// A process that already writes a file holds an engine File it could
// write with, so its kernel open of the file (always read-only) is not
// what decides a later open for writing: after the owner takes its own
// write permission away, every open that writes is refused as the
// kernel's are, the descriptor opened before keeps writing, and nothing
// is truncated.
TEST_F(Semantics, AnOpenForWritingIsDecidedByTheKernelWhileTheProcessWritesTheFile) {
  NEED_ROOT();
  Pair p = MakePair(dir_, "again", 0644);
  const std::string got = As(&kOwner, [&] {
    std::string out;
    const int k = ::open(p.plain.c_str(), O_RDWR), u = upfs_open(p.upfs.c_str(), O_RDWR);
    out += "first " + Errno(k) + "/" + Errno(u) + "; ";
    out += "chmod " + Errno(::chmod(p.plain.c_str(), 0444)) + "/" + Errno(upfs_chmod(p.upfs.c_str(), 0444)) + "; ";
    for (const Flag& f : kFlags) {
      const int k2 = ::open(p.plain.c_str(), f.flags, 0644), u2 = upfs_open(p.upfs.c_str(), f.flags, 0644);
      out += std::string(f.name) + " " + Errno(k2) + "/" + Errno(u2) + "; ";
      if (k2 >= 0) ::close(k2);
      if (u2 >= 0) upfs_close(u2);
    }
    out += "write " + Errno(int(::pwrite(k, "x", 1, 0))) + "/" + Errno(int(upfs_pwrite(u, "x", 1, 0))) + "; ";
    if (k >= 0) ::close(k);
    if (u >= 0) upfs_close(u);
    return out;
  });
  const std::string no = std::strerror(EACCES);
  std::string want = "first ok/ok; chmod ok/ok; ";
  for (const Flag& f : kFlags) {
    const bool writes = (f.flags & O_ACCMODE) != O_RDONLY || (f.flags & O_TRUNC);
    want += std::string(f.name) + " " + (writes ? no + "/" + no : "ok/ok") + "; ";
  }
  EXPECT_EQ(got, want + "write ok/ok; ");
  Bytes after = Content();
  after[0] = 'x';
  EXPECT_EQ(UpfsHolds(p.upfs, after), "");
}

// ---------------------------------------------------------------------------
// Creation with a mode that denies the creator.

TEST_F(Semantics, CreateWithModeZeroGivesAWritableDescriptor) {
  NEED_ROOT();
  for (mode_t umask_value : {mode_t(022), mode_t(077)}) {
    for (mode_t mode : {mode_t(0), mode_t(0200), mode_t(0444), mode_t(0666)}) {
      const std::string tag = std::to_string(umask_value) + "-" + std::to_string(mode);
      std::string got = As(&kOther, [&] {
        ::umask(umask_value);
        std::string k = dir_.File("k" + tag), u = dir_.File("u" + tag);
        int kfd = ::open(k.c_str(), O_CREAT | O_RDWR | O_EXCL, mode);
        int ufd = upfs_open(u.c_str(), O_CREAT | O_RDWR | O_EXCL, mode);
        std::string out = Errno(kfd) + "/" + Errno(ufd);
        out += " w" + (kfd >= 0 ? Errno(int(::write(kfd, "abc", 3))) : "-");
        out += "/" + (ufd >= 0 ? Errno(int(upfs_write(ufd, "abc", 3))) : "-");
        if (kfd >= 0) ::close(kfd);
        if (ufd >= 0) upfs_close(ufd);
        struct stat sk, su;
        if (::stat(k.c_str(), &sk) == 0 && upfs_stat(u.c_str(), &su) == 0) {
          char b[64];
          std::snprintf(b, sizeof b, " mode %o/%o size %lld/%lld", unsigned(sk.st_mode & 07777),
                        unsigned(su.st_mode & 07777), (long long)sk.st_size, (long long)su.st_size);
          out += b;
        }
        return out;
      });
      // "ok/ok wok/ok mode M/M size 3/3"
      EXPECT_NE(got.find("ok/ok wok/ok"), std::string::npos) << tag << ": " << got;
      size_t m = got.find("mode ");
      ASSERT_NE(m, std::string::npos) << got;
      std::string modes = got.substr(m + 5, got.find(' ', m + 5) - m - 5);
      EXPECT_EQ(modes.substr(0, modes.find('/')), modes.substr(modes.find('/') + 1)) << tag << ": " << got;
    }
  }
}

// ---------------------------------------------------------------------------
// Writes through every open the kernel allows reach the file.

// O_TRUNC first, so that the writes of the later opens stay for root to see.
const Flag kWritingFlags[] = {{"O_RDWR|O_TRUNC", O_RDWR | O_TRUNC},
                              {"O_RDWR", O_RDWR},
                              {"O_WRONLY", O_WRONLY},
                              {"O_WRONLY|O_APPEND", O_WRONLY | O_APPEND},
                              {"O_RDONLY", O_RDONLY}};

// Writes `tag` through a kernel or upfs descriptor: appended under
// O_APPEND, else at `at`. "ok" or the errno's name.
std::string WriteTag(int fd, bool upfs, int flags, const std::string& tag, off_t at) {
  ssize_t r;
  if (flags & O_APPEND)
    r = upfs ? upfs_write(fd, tag.data(), tag.size()) : ::write(fd, tag.data(), tag.size());
  else
    r = upfs ? upfs_pwrite(fd, tag.data(), tag.size(), at) : ::pwrite(fd, tag.data(), tag.size(), at);
  if (r >= 0 && size_t(r) != tag.size()) return "short write";
  return Err(r);
}

bool KernelReadAll(int fd, Bytes* out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  out->assign(size_t(st.st_size), 0);
  size_t done = 0;
  while (done < out->size()) {
    ssize_t r = ::pread(fd, out->data() + done, out->size() - done, off_t(done));
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

// As the caller: opens both files with each of kWritingFlags, writes a tag
// through each writable pair of descriptors and compares what each readable
// pair reads. Returns every difference from the kernel ("" if none).
std::string WriteThroughEveryOpen(const Pair& p, unsigned bits) {
  std::string out;
  off_t at = 0;
  for (const Flag& f : kWritingFlags) {
    const int k = ::open(p.plain.c_str(), f.flags);
    const std::string ko = Err(k);
    const int u = upfs_open(p.upfs.c_str(), f.flags);
    const std::string uo = Err(u);
    const std::string want = (ko == "ok" && Writable(f.flags) && WriteWithoutRead(bits)) ? "EACCES" : ko;
    if (uo != want)
      out += std::string(f.name) + ": open expected " + want + " (kernel " + ko + "), upfs got " + uo + "; ";
    if (k >= 0 && u >= 0 && Writable(f.flags)) {
      const std::string tag = std::string("<") + f.name + ">";
      const std::string kw = WriteTag(k, false, f.flags, tag, at), uw = WriteTag(u, true, f.flags, tag, at);
      if (kw != "ok" || uw != "ok") out += std::string(f.name) + ": write kernel " + kw + ", upfs " + uw + "; ";
      at += 32;
    }
    if (k >= 0 && u >= 0 && Readable(f.flags)) {
      Bytes kb, ub;
      const bool kr = KernelReadAll(k, &kb), ur = upfs_test::UpfsReadAll(u, &ub);
      if (!kr || !ur || kb != ub)
        out += std::string(f.name) + ": upfs read " + (ur ? std::to_string(ub.size()) + " bytes" : "failed") +
               " unlike the kernel's " + std::to_string(kb.size()) + "; ";
    }
    if (k >= 0) ::close(k);
    if (u >= 0) upfs_close(u);
  }
  return out;
}

// Root afterwards: the upfs file holds what the plain file holds, or, where
// upfs refused the writes (write without read), what it held before.
void ExpectRootSeesTheWrites(const Pair& p, bool refused, const std::string& scenario) {
  Bytes plain;
  ASSERT_TRUE(upfs_test::ReadHostFile(p.plain, &plain));
  EXPECT_EQ(UpfsHolds(p.upfs, refused ? Content() : plain), "")
      << scenario << (refused ? ": a refused write changed the upfs file" : ": upfs content differs from the plain file's");
}

TEST_F(Semantics, WritesThroughEveryOpenTheKernelAllowsReachTheFile) {
  NEED_ROOT();
  for (const CallerClass& c : kCallerClasses) {
    for (unsigned bits = 0; bits < 8; ++bits) {
      const std::string scenario = Scenario(c, bits);
      Pair p = MakePair(dir_, "w" + std::to_string(c.shift) + std::to_string(bits), ModeFor(c, bits));
      EXPECT_EQ(As(c.user, [&] { return WriteThroughEveryOpen(p, bits); }), "") << scenario;
      ExpectRootSeesTheWrites(p, WriteWithoutRead(bits), scenario);
    }
  }
  // Root (CAP_DAC_OVERRIDE) opens a mode 0 file every way, as the kernel.
  Pair p = MakePair(dir_, "w-root", 0);
  EXPECT_EQ(As(nullptr, [&] { return WriteThroughEveryOpen(p, 7); }), "") << "root, mode 0000";
  ExpectRootSeesTheWrites(p, false, "root, mode 0000");
}

// ---------------------------------------------------------------------------
// truncate(2) by path for every class and mode: the kernel's result,
// except for a caller who may write but not read the file and is not its
// owner (the owner may give itself read permission; nobody else can, and
// upfs must read its metadata to truncate): EACCES, the file intact.

bool TruncateRefusedByDesign(const CallerClass& c, unsigned bits) {
  return WriteWithoutRead(bits) && c.user != &kOwner;
}

TEST_F(Semantics, TruncateByPathAsEveryClassAndMode) {
  NEED_ROOT();
  for (const CallerClass& c : kCallerClasses) {
    for (unsigned bits = 0; bits < 8; ++bits) {
      const std::string scenario = Scenario(c, bits);
      Pair p = MakePair(dir_, "tr" + std::to_string(c.shift) + std::to_string(bits), ModeFor(c, bits));
      const std::string got = As(c.user, [&] {
        const int k = ::truncate(p.plain.c_str(), 100);
        const std::string ks = Err(k);
        const int u = upfs_truncate(p.upfs.c_str(), 100);
        return ks + "/" + Err(u);
      });
      const std::string k = (bits & 2) ? "ok" : "EACCES";
      const std::string u = TruncateRefusedByDesign(c, bits) ? "EACCES" : k;
      EXPECT_EQ(got, k + "/" + u) << scenario << " (kernel/upfs)";
      const Bytes want(Content().begin(), Content().begin() + (u == "ok" ? 100 : Content().size()));
      EXPECT_EQ(UpfsHolds(p.upfs, want), "") << scenario;
    }
  }
}

// ---------------------------------------------------------------------------
// O_CREAT with a mode that denies the creator: the descriptor writes and
// reads back, and the mode is the one asked for, less the umask.

TEST_F(Semantics, ACreatorWithModeZeroWritesAndReadsBackThroughItsDescriptor) {
  NEED_ROOT();
  for (mode_t um : {mode_t(0), mode_t(027)}) {
    for (mode_t mode : {mode_t(0), mode_t(0640), mode_t(0777)}) {
      const std::string tag = Oct(um) + "-" + Oct(mode);
      const std::string got = As(&kOther, [&] {
        ::umask(um);
        std::string out;
        for (bool upfs : {false, true}) {
          const std::string path = dir_.File((upfs ? "cu" : "ck") + tag);
          const int fd = upfs ? upfs_open(path.c_str(), O_CREAT | O_RDWR | O_EXCL, mode)
                              : ::open(path.c_str(), O_CREAT | O_RDWR | O_EXCL, mode);
          out += (upfs ? " | upfs " : "kernel ") + Err(fd);
          if (fd < 0) continue;
          char buf[6] = {};
          const ssize_t w = upfs ? upfs_pwrite(fd, "hello", 5, 0) : ::pwrite(fd, "hello", 5, 0);
          const ssize_t r = upfs ? upfs_pread(fd, buf, 5, 0) : ::pread(fd, buf, 5, 0);
          out += std::string(" write ") + (w == 5 ? "ok" : "failed") + " read '" + (r == 5 ? buf : "") + "'";
          upfs ? upfs_close(fd) : ::close(fd);
          struct stat st;
          const int s = upfs ? upfs_stat(path.c_str(), &st) : ::stat(path.c_str(), &st);
          if (s == 0) out += " mode " + Oct(st.st_mode & 07777) + " size " + std::to_string(st.st_size);
        }
        return out;
      });
      const std::string one = " write ok read 'hello' mode " + Oct(mode & ~um) + " size 5";
      EXPECT_EQ(got, "kernel ok" + one + " | upfs ok" + one) << "umask " << Oct(um) << ", mode " << Oct(mode);
    }
  }
}

}  // namespace
}  // namespace upfs_semantics
