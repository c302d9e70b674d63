// A version 9 pool's one wait a create (docs/design.md, "One wait a
// create"): the record of a new file or directory carries its creation
// values, recovery
// writes an image a crash lost again from them, fsck judges such an image
// by its record, and damaged creation words are refused, never repaired.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <upfs/upfs.h>

#include <cstring>
#include <string>

#include "container/pool/fresh_inode.h"
#include "container/pool/ns_record.h"
#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"

namespace {

using upfs::NsCreation;
using upfs::NsRecord;
using namespace upfs::format::pool;

NsRecord CreateRecord(const NsCreation& c) {
  NsRecord r;
  r.type = RecordType::kCreate;
  r.ftype = FileType::kRegular;
  r.ino = InodeNumber(kDataStart + 1, 3);
  r.dir1 = InodeNumber(kDataStart, 1);
  r.name1 = "a-file";
  r.creation = c;
  return r;
}

constexpr NsCreation kValues{true, FileType::kRegular, 7, 04751, 1, (uint64_t{1234} << 32) | 4321,
                             1'700'000'000'123'456'789ull};

TEST(NsRecordCreation, RoundTripsEveryValue) {
  uint64_t w[kMaxRecordWords];
  const uint32_t n = upfs::EncodeRecord(CreateRecord(kValues), w, true, true);
  ASSERT_EQ(n, kRecordHeaderWords + 1 + kCreationWords);
  for (uint32_t i = 0; i < n; ++i) EXPECT_NE(w[i], 0u) << "word " << i << " of a tagged record is zero";
  NsRecord back;
  ASSERT_TRUE(upfs::DecodeRecord(w, n, &back, true, true).ok());
  EXPECT_TRUE(back.creation.present);
  EXPECT_EQ(back.creation.gen, kValues.gen);
  EXPECT_EQ(back.creation.mode, kValues.mode);
  EXPECT_EQ(back.creation.consistency, kValues.consistency);
  EXPECT_EQ(back.creation.owner, kValues.owner);
  EXPECT_EQ(back.creation.created_ns, kValues.created_ns);
  // Root's owner (all zero) still makes nonzero words.
  NsCreation root = kValues;
  root.owner = 0;
  const uint32_t m = upfs::EncodeRecord(CreateRecord(root), w, true, true);
  for (uint32_t i = 0; i < m; ++i) EXPECT_NE(w[i], 0u) << "word " << i;
}

TEST(NsRecordCreation, OnlyAVersion9CreateOrMkdirCarriesThem) {
  uint64_t w[kMaxRecordWords];
  NsCreation dir_values = kValues;
  dir_values.consistency = 0;
  NsRecord dir = CreateRecord(dir_values);
  dir.type = RecordType::kMkdir;
  dir.ftype = FileType::kDirectory;
  const uint32_t d = upfs::EncodeRecord(dir, w, true, true);
  EXPECT_EQ(d, kRecordHeaderWords + 1 + kCreationWords);
  NsRecord back;
  ASSERT_TRUE(upfs::DecodeRecord(w, d, &back, true, true).ok());
  EXPECT_EQ(back.creation.kind, FileType::kDirectory);
  EXPECT_EQ(back.creation.mode, kValues.mode);
  NsRecord link = CreateRecord({});
  link.ftype = FileType::kSymlink;
  EXPECT_EQ(upfs::EncodeRecord(link, w, true, true), kRecordHeaderWords + 1);
  // A version 8 pool's create: no creation words, and a version 9 reader
  // of such a record (too short) refuses it.
  const uint32_t n = upfs::EncodeRecord(CreateRecord({}), w, true, false);
  EXPECT_EQ(n, kRecordHeaderWords + 1);
  EXPECT_TRUE(upfs::DecodeRecord(w, n, &back, true, false).ok());
  EXPECT_FALSE(back.creation.present);
  EXPECT_EQ(upfs::DecodeRecord(w, n, &back, true, true).err(), EUCLEAN);
}

TEST(NsRecordCreation, DamagedCreationWordsAreRefused) {
  uint64_t w[kMaxRecordWords];
  const uint32_t n = upfs::EncodeRecord(CreateRecord(kValues), w, true, true);
  const uint32_t c = kRecordHeaderWords + 1;
  struct Damage {
    uint32_t word;
    uint64_t bits;  // XORed in
    const char* says;
  } damages[] = {
      {c + 0, kRecordWordTag, "tag"},          {c + 1, kRecordWordTag, "tag"},
      {c + 2, kRecordWordTag, "tag"},          {c + 3, kRecordWordTag, "tag"},
      {c + 0, uint64_t{1} << 50, "must be zero"},  // past consistency
      {c + 1, uint64_t{1} << 32, "must be zero"},  // past the uid
      {c + 1, uint64_t{1} << 61, "must be zero"},
      {c + 2, uint64_t{1} << 40, "must be zero"},  // past the gid
  };
  for (const Damage& d : damages) {
    uint64_t x[kMaxRecordWords];
    std::memcpy(x, w, sizeof(x));
    x[d.word] ^= d.bits;
    NsRecord back;
    upfs::Status st = upfs::DecodeRecord(x, n, &back, true, true);
    EXPECT_EQ(st.err(), EUCLEAN) << "word " << d.word;
    EXPECT_NE(st.message().find(d.says), std::string::npos) << st.ToString();
  }
}

TEST(NsRecordCreation, AnImageMadeFromItsRecordIsTheCreatorsImage) {
  upfs::InodeImage made;
  upfs::ImageFromCreation(kValues, made.get());
  const Inode& in = *made.get();
  const uint64_t id = in.ident.load();
  EXPECT_EQ(IdentKind(id), FileType::kRegular);
  EXPECT_EQ(IdentGen(id), kValues.gen);
  EXPECT_TRUE(id & kIdentFresh) << "made again, it is fresh until recovery's fence";
  EXPECT_EQ(in.mode.load(), kValues.mode);
  EXPECT_EQ(in.owner.load(), kValues.owner);
  EXPECT_EQ(in.consistency, kValues.consistency);
  EXPECT_EQ(in.log_head.load(), 0u) << "made again, a new file has no log";
  EXPECT_EQ(in.ctime_ns.load(), kValues.created_ns);
  EXPECT_EQ(in.atime_ns.load(), kValues.created_ns);
  EXPECT_EQ(in.created_ns, kValues.created_ns);
  EXPECT_EQ(in.times.mtime_ns.load(), kValues.created_ns);
  EXPECT_EQ(in.times.data_ctime_ns.load(), kValues.created_ns);
  // Fresh, or another life: not sealed for these values.
  EXPECT_FALSE(upfs::ImageSealedFor(in, kValues));
  upfs::InodeImage sealed;
  upfs::ImageFromCreation(kValues, sealed.get());
  sealed.get()->ident.store(id & ~kIdentFresh);
  EXPECT_TRUE(upfs::ImageSealedFor(*sealed.get(), kValues));
  NsCreation other = kValues;
  other.gen = kValues.gen + 1;
  EXPECT_FALSE(upfs::ImageSealedFor(*sealed.get(), other));
}

// A pool a process died in right after creating `name` (mode 0600), its
// image's lines then lost as a power failure before the creator's fence
// would lose them: the record durable, the inode as its free life left it.
class PoolFreshImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    pool_ = "/dev/shm/upfs-fresh-" + tag + ".pool";
    mnt_ = "/upfs-fresh-" + tag;
    unlink(pool_.c_str());
    ASSERT_EQ(upfs_mkfs(pool_.c_str(), 0), 0) << upfs_last_error();
  }
  void TearDown() override {
    upfs_umount(mnt_.c_str());
    unlink(pool_.c_str());
  }
  // Creates `name` (a directory if `dir`) in a child that is then killed;
  // returns its inode.
  uint64_t CreateAndDie(const std::string& name, bool dir = false) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      if (upfs_mount(pool_.c_str(), mnt_.c_str()) != 0) _exit(2);
      const std::string path = mnt_ + "/" + name;
      struct stat st;
      if (dir ? upfs_mkdir(path.c_str(), 0700) != 0 || upfs_stat(path.c_str(), &st) != 0
              : upfs_open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600) < 0 || upfs_stat(path.c_str(), &st) != 0)
        _exit(3);
      const uint64_t ino = st.st_ino;
      if (write(fds[1], &ino, 8) != 8) _exit(4);
      kill(getpid(), SIGKILL);
      _exit(5);
    }
    close(fds[1]);
    uint64_t ino = 0;
    EXPECT_EQ(read(fds[0], &ino, 8), 8);
    close(fds[0]);
    int status;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status));
    return ino;
  }
  // The image's two durable lines as a crash before their write-back leaves
  // them (a new inode block is zero: a free inode of generation 0).
  void LoseImage(uint64_t ino) {
    const int fd = open(pool_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char zero[2 * 64] = {};
    ASSERT_EQ(pwrite(fd, zero, sizeof(zero), off_t(InodeOffset(ino))), ssize_t(sizeof(zero)));
    close(fd);
  }
  // CheckPool on the pool as it is: no problem, `files` regular files, and
  // `from_records` images judged by their create records (0 once a
  // recovery wrote them).
  void ExpectChecked(uint64_t from_records, uint64_t files) {
    upfs::PoolReport r;
    ASSERT_TRUE(upfs::CheckPool(pool_, &r).ok());
    EXPECT_TRUE(r.problems.empty()) << r.problems[0];
    EXPECT_EQ(r.images_from_records, from_records);
    EXPECT_EQ(r.files, files);
    EXPECT_EQ(r.orphans, 0u);
  }
  std::string pool_, mnt_;
};

TEST_F(PoolFreshImageTest, ALostImageIsMadeAgainFromItsRecord) {
  const uint64_t ino = CreateAndDie("new");
  ASSERT_NE(ino, 0u);
  LoseImage(ino);
  ExpectChecked(1, 1);  // fsck judges the lost image by its record

  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  struct stat st;
  ASSERT_EQ(upfs_stat((mnt_ + "/new").c_str(), &st), 0) << upfs_last_error();
  EXPECT_EQ(st.st_ino, ino);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_nlink, 1u);
  // Usable: written, read back, and sealed by its first File.
  const int fd = upfs_open((mnt_ + "/new").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_write(fd, "data", 4), 4);
  char b[4];
  ASSERT_EQ(upfs_pread(fd, b, 4, 0), 4);
  EXPECT_EQ(std::string(b, 4), "data");
  ASSERT_EQ(upfs_close(fd), 0);
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  ExpectChecked(0, 1);  // recovery wrote the image
}

TEST_F(PoolFreshImageTest, ALostDirectoryImageIsMadeAgainFromItsRecord) {
  const uint64_t ino = CreateAndDie("dir", /*dir=*/true);
  ASSERT_NE(ino, 0u);
  LoseImage(ino);
  ExpectChecked(1, 0);
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  struct stat st;
  ASSERT_EQ(upfs_stat((mnt_ + "/dir").c_str(), &st), 0) << upfs_last_error();
  EXPECT_EQ(st.st_ino, ino);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_nlink, 2u);
  const int fd = upfs_open((mnt_ + "/dir/inside").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_close(fd), 0);
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  ExpectChecked(0, 1);
}

TEST_F(PoolFreshImageTest, AnImageOfAnotherLifeIsMadeAgainToo) {
  // A half-written image: its ident line lost, its second line (log head,
  // times) kept from the free life before (the free stack's link).
  const uint64_t ino = CreateAndDie("new");
  ASSERT_NE(ino, 0u);
  const int fd = open(pool_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t free_ident = EncodeIdent(FileType::kFree, 0);
  ASSERT_EQ(pwrite(fd, &free_ident, 8, off_t(InodeOffset(ino))), 8);
  const uint64_t stale_link = ino + 1;  // a free inode's log_head holds the next free inode
  ASSERT_EQ(pwrite(fd, &stale_link, 8, off_t(InodeOffset(ino) + offsetof(Inode, log_head))), 8);
  close(fd);
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  struct stat st;
  ASSERT_EQ(upfs_stat((mnt_ + "/new").c_str(), &st), 0) << upfs_last_error();
  EXPECT_EQ(st.st_size, 0) << "the stale link was taken for a log";
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  ExpectChecked(0, 1);
}

TEST_F(PoolFreshImageTest, AFreshBitOnASymbolicLinkIsDamage) {
  ASSERT_EQ(upfs_mount(pool_.c_str(), mnt_.c_str()), 0) << upfs_last_error();
  ASSERT_EQ(upfs_symlink("target", (mnt_ + "/l").c_str()), 0);
  struct stat st;
  ASSERT_EQ(upfs_lstat((mnt_ + "/l").c_str(), &st), 0);
  ASSERT_EQ(upfs_umount(mnt_.c_str()), 0);
  const int fd = open(pool_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint64_t id;
  ASSERT_EQ(pread(fd, &id, 8, off_t(InodeOffset(st.st_ino))), 8);
  id |= kIdentFresh;
  ASSERT_EQ(pwrite(fd, &id, 8, off_t(InodeOffset(st.st_ino))), 8);
  close(fd);
  upfs::PoolReport r;
  ASSERT_TRUE(upfs::CheckPool(pool_, &r).ok());
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems[0].find("unknown kind"), std::string::npos) << r.problems[0];
}

}  // namespace
