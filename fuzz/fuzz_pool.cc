// fuzz_pool: damaged pool images through upfs_mount, a walk of the whole
// tree, CheckPool (`upfs fsck`) and upfs_umount.
//
// Why patches and not whole images: the smallest pool is the data start
// plus three blocks, 34 MiB (docs/format.md, "Pools, format version 1"),
// and a pool with a checkpoint and a log after it is a few hundred KiB of
// used blocks in that; libFuzzer's inputs are at most 64 KiB (fuzz.sh) and
// a mutation of a whole image would mostly hit holes. So the input is a
// list of patches applied to one of two fixed, valid seed pools that the
// target builds once per process through the C API:
//   seed 0 "clean": directories, files with data, short and long symbolic
//     links, hard links, renames, a checkpoint (1,000+ records at detach)
//     and a log delta after it; cleanly detached (mount trusts the
//     volatile area and replays from the checkpoint);
//   seed 1 "crashed": the same, then a process killed while attached with
//     an unlinked file open (mount runs recovery);
//   seed 2 "version 2": seed 0 made as a pool of version 2, whose
//     checkpoint image is untagged (docs/format.md, "Checkpoints").
//
// Input: byte 0 = flags:
//   bit 0   seed 1 instead of seed 0
//   bit 3   seed 2 (bit 0 ignored)
//   bit 1   leave checksums alone (else the superblock's, the checkpoint's
//           header and image checksums, and every namespace log record's
//           kApply checksum are recomputed after patching, so that
//           mutations reach the checks behind the checksums)
//   bit 2   resize the file: the next 2 bytes (LE) v give the new size,
//           (kDataStart + v / 2) blocks, one byte short of that when v is odd
// then patches, each: target (1 byte: index into the seed's metadata
// blocks, modulo their count: superblock, checkpoint header and image,
// namespace log blocks, inode blocks, file log blocks, symlink target,
// volatile words, the bitmap's first block), offset in the block (2 bytes
// LE, modulo 4096), length (1 byte, modulo 16, 0 = 8), then that many bytes
// written there. Input bytes left over that do not make a whole patch are
// ignored.
//
// Contract (a violation traps, and libFuzzer saves the input):
//  - no crash, hang, leak, ASan or UBSan report;
//  - a refused mount fails with EUCLEAN, EMEDIUMTYPE or EPROTONOSUPPORT (or
//    ENOSPC, EAGAIN, EFBIG, ENOMEM: resources a damaged volatile area can
//    claim are gone) with a message naming a structure ("what: detail"),
//    and leaves the durable bytes (everything but the volatile area and
//    the superblock's clean word) as they were: no silent repair, also
//    not half a recovery on the crashed seed;
//  - a mounted pool can be walked (errors allowed) and unmounted;
//  - CheckPool returns OK (with or without problems) or EUCLEAN /
//    EMEDIUMTYPE / EPROTONOSUPPORT with a message.
//
// UPFS_FUZZ_SAVE=PATH copies the pool file of the last input there (look at
// it with `upfs fsck PATH`).
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <set>

#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"
#include "fuzz_common.h"
#include "pool_durable_hash.h"

using namespace upfs_fuzz;
namespace fmt = upfs::format;
namespace fp = upfs::format::pool;

namespace {

using Block = std::vector<uint8_t>;

// A pool image in memory: its non-zero blocks and its size.
struct Image {
  std::map<uint32_t, Block> blocks;
  uint64_t size = 0;

  uint8_t* At(uint64_t l) {  // the block, made (zeros) when absent
    auto it = blocks.find(uint32_t(l));
    if (it == blocks.end()) it = blocks.emplace(uint32_t(l), Block(kB, 0)).first;
    return it->second.data();
  }
  bool Has(uint64_t l) const { return l < size / kB && l < (uint64_t{1} << 32); }
  uint64_t Get(uint64_t off) {
    if (off + 8 > size) return 0;
    uint64_t v;
    auto it = blocks.find(uint32_t(off / kB));
    if (it == blocks.end()) return 0;
    memcpy(&v, it->second.data() + off % kB, 8);
    return v;
  }
  void Put(uint64_t off, uint64_t v) {
    if (off + 8 > size) return;
    memcpy(At(off / kB) + off % kB, &v, 8);
  }
};

struct Seed {
  Image img;
  std::vector<uint32_t> targets;  // metadata blocks, in a fixed order
};

class PoolFuzz {
 public:
  static PoolFuzz& Get() {
    static PoolFuzz* p = new PoolFuzz();  // never destroyed: atexit cleans up
    return *p;
  }
  void Run(const uint8_t* data, size_t size);

 private:
  PoolFuzz();
  void Cleanup() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  bool Build(const std::string& path, bool crashed, uint32_t version);
  void Load(const std::string& path, Seed* s);
  void WriteImage(Image& img);
  void Walk(const std::string& dir, int depth, int* budget);

  std::string dir_, path_, mnt_;
  Seed seeds_[3];
};

bool PutFile(const std::string& p, const std::string& data) {
  int fd = upfs_open(p.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  if (fd < 0) return false;
  bool ok = upfs_write(fd, data.data(), data.size()) == ssize_t(data.size());
  return upfs_close(fd) == 0 && ok;
}

// Labels a fresh pool with an older format version, as the build that
// made such pools did.
bool SetPoolVersion(const std::string& path, uint32_t version) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  fp::Superblock sb;
  bool ok = pread(fd, &sb, sizeof(sb), 0) == ssize_t(sizeof(sb));
  sb.version = version;
  sb.sb_crc = fp::SuperblockCrc(sb);
  ok = ok && pwrite(fd, &sb, sizeof(sb), 0) == ssize_t(sizeof(sb));
  return ::close(fd) == 0 && ok;
}

bool PoolFuzz::Build(const std::string& path, bool crashed, uint32_t version) {
  auto M = [&](const std::string& rel) { return mnt_ + "/" + rel; };
  if (upfs_mkfs(path.c_str(), 0) != 0) return false;
  if (version != fp::kPoolVersion && !SetPoolVersion(path, version)) return false;
  if (upfs_mount(path.c_str(), mnt_.c_str()) != 0) return false;
  bool ok = upfs_mkdir(M("d1").c_str(), 0755) == 0 && upfs_mkdir(M("d1/d2").c_str(), 0750) == 0 &&
            upfs_mkdir(M("c").c_str(), 0755) == 0 && PutFile(M("d1/small"), "hello, pool") &&
            PutFile(M("d1/d2/big"), std::string(5 * kB + 123, 'b')) && PutFile(M("top"), "top") &&
            upfs_symlink("d1/small", M("short").c_str()) == 0 &&
            upfs_symlink(std::string(200, 'L').c_str(), M("d1/long").c_str()) == 0 &&
            upfs_link(M("d1/d2/big").c_str(), M("hard").c_str()) == 0 &&
            PutFile(M("d1/a-name-longer-than-a-slot-holds"), "long");
  // Enough records for a checkpoint at detach (1,024), few names left (a
  // run walks and checks them all).
  for (int i = 0; ok && i < 600; ++i) {
    const std::string n = M("c/" + std::to_string(i));
    ok = PutFile(n, i % 100 == 0 ? std::string(50, 'x') : "");
    if (ok && i % 50 != 0) ok = upfs_unlink(n.c_str()) == 0;
  }
  ok = upfs_umount(mnt_.c_str()) == 0 && ok;
  // The delta after the checkpoint.
  ok = ok && upfs_mount(path.c_str(), mnt_.c_str()) == 0;
  ok = ok && upfs_mkdir(M("d4").c_str(), 0755) == 0 && PutFile(M("d4/f"), std::string(2 * kB, 'd')) &&
       upfs_symlink("../top", M("d4/s").c_str()) == 0 && upfs_link(M("d1/small").c_str(), M("d4/h").c_str()) == 0 &&
       upfs_rename(M("top").c_str(), M("d4/top").c_str()) == 0 && upfs_unlink(M("c/50").c_str()) == 0;
  ok = upfs_umount(mnt_.c_str()) == 0 && ok;
  if (!ok || !crashed) return ok;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (upfs_mount(path.c_str(), mnt_.c_str()) != 0) _exit(2);
    int fd = upfs_open(M("d1/orphan").c_str(), O_CREAT | O_RDWR, 0644);
    upfs_write(fd, std::string(2 * kB, 'o').data(), 2 * kB);
    upfs_unlink(M("d1/orphan").c_str());
    PutFile(M("kept"), "kept");
    kill(getpid(), SIGKILL);
    _exit(3);
  }
  int status;
  return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status);
}

void PoolFuzz::Load(const std::string& path, Seed* s) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Violation("harness: open seed %s: %s", path.c_str(), strerror(errno));
  struct stat st;
  fstat(fd, &st);
  s->img.size = uint64_t(st.st_size);
  Block b(kB);
  for (off_t at = 0; at < st.st_size;) {
    off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) break;
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) hole = st.st_size;
    for (off_t o = data / off_t(kB) * off_t(kB); o < hole; o += off_t(kB)) {
      if (pread(fd, b.data(), kB, o) != ssize_t(kB)) break;
      if (std::any_of(b.begin(), b.end(), [](uint8_t c) { return c != 0; })) s->img.blocks[uint32_t(o / off_t(kB))] = b;
    }
    at = hole;
  }
  ::close(fd);
  // The metadata blocks, found the way fsck finds them.
  Image& im = s->img;
  std::vector<uint32_t>& t = s->targets;
  t.push_back(0);
  const uint64_t ck = im.Get(offsetof(fp::Superblock, checkpoint));
  if (ck) {
    t.push_back(uint32_t(ck));
    fp::CheckpointHeader h;
    memcpy(&h, im.At(ck), sizeof(h));
    for (uint32_t r = 0; r < h.nruns; ++r)
      for (uint32_t i = 0; i < h.runs[r].count; ++i) t.push_back(h.runs[r].lblock + i);
  }
  for (uint64_t l = im.Get(offsetof(fp::Superblock, nslog_head)); l != 0 && t.size() < 200;
       l = fmt::NextBlock(im.Get(l * kB)))
    t.push_back(uint32_t(l));
  std::vector<uint32_t> inode_blocks;
  for (uint64_t l = im.Get(offsetof(fp::Superblock, inode_chain)); l != 0 && inode_blocks.size() < 50;
       l = im.Get(l * kB + 8))
    inode_blocks.push_back(uint32_t(l));
  t.insert(t.end(), inode_blocks.begin(), inode_blocks.end());
  for (uint32_t b : inode_blocks)
    for (uint32_t sl = 1; sl < fp::kInodesPerBlock; ++sl) {
      const uint64_t ino = fp::InodeNumber(b, sl);
      const uint64_t id = im.Get(ino * fp::kInodeSize);
      if (fp::IdentKind(id) == fp::FileType::kRegular) {
        if (uint64_t h = im.Get(ino * fp::kInodeSize + offsetof(fp::Inode, log_head)); h) t.push_back(uint32_t(h));
      } else if (fp::IdentKind(id) == fp::FileType::kSymlink) {
        if (uint64_t tb = im.Get(ino * fp::kInodeSize + offsetof(fp::Inode, target_block)); tb)
          t.push_back(uint32_t(tb));
      }
    }
  t.push_back(fp::kWordsBlock);
  t.push_back(fp::kBitmapBlock + fp::kDataStart / 8 / uint32_t(kB));
  if (t.size() > 256) t.resize(256);
}

PoolFuzz::PoolFuzz() {
  char tmpl[] = "/dev/shm/fuzz-upfs.XXXXXX";
  if (!::mkdtemp(tmpl)) Violation("harness: mkdtemp under /dev/shm: %s", strerror(errno));
  dir_ = tmpl;
  path_ = dir_ + "/input.pool";
  mnt_ = "/fuzz-pool-" + std::to_string(getpid());
  atexit([] { Get().Cleanup(); });
  for (int k = 0; k < 3; ++k) {
    const std::string seed = dir_ + "/seed" + std::to_string(k) + ".pool";
    ::unlink(seed.c_str());
    if (!Build(seed, k == 1, k == 2 ? 2 : fp::kPoolVersion)) Violation("harness: building seed pool %d failed: %s", k, upfs_last_error());
    upfs::PoolReport r;
    upfs::Status st = upfs::CheckPool(seed, &r);
    if (!st.ok() || !r.problems.empty() || r.checkpoint_number == 0)
      Violation("harness: seed pool %d is not clean or has no checkpoint", k);
    Load(seed, &seeds_[k]);
    ::unlink(seed.c_str());
    Image& im = seeds_[k].img;
    uint64_t magic;
    memcpy(&magic, im.At(im.Get(offsetof(fp::Superblock, checkpoint))), sizeof(magic));
    if (magic != fp::CheckpointMagicFor(k == 2 ? 2 : fp::kPoolVersion))
      Violation("harness: seed pool %d's checkpoint is not of its version's format", k);
  }
}

// Checksums as a writer computes them (see the flags above).
void FixChecksums(Image& im) {
  if (im.size < kB) return;
  auto* sb = reinterpret_cast<fp::Superblock*>(im.At(0));
  sb->sb_crc = fp::SuperblockCrc(*sb);
  const uint64_t blocks = im.size / kB;
  if (const uint64_t ck = sb->checkpoint.load(); ck >= fp::kDataStart && ck < blocks) {
    auto* h = reinterpret_cast<fp::CheckpointHeader*>(im.At(ck));
    if (h->magic == fp::kCheckpointMagic || h->magic == fp::kCheckpointMagicV2) {
      const uint32_t nruns = std::min(h->nruns, fp::kMaxCheckpointRuns);
      uint32_t crc = 0;
      uint64_t left = h->image_words;
      for (uint32_t r = 0; r < nruns && left > 0; ++r)
        for (uint64_t i = 0; i < h->runs[r].count && left > 0; ++i) {
          const uint64_t l = uint64_t(h->runs[r].lblock) + i;
          if (l >= blocks || l < fp::kDataStart) {
            left = 0;
            break;
          }
          const uint64_t n = std::min<uint64_t>(left, kB / 8);
          crc = upfs::Crc32c(im.At(l), n * 8, crc);
          left -= n;
        }
      h->image_crc = crc;
      uint32_t c = upfs::Crc32c(h, offsetof(fp::CheckpointHeader, header_crc));
      c = upfs::Crc32c(&h->multi, 16, c);
      h->header_crc = upfs::Crc32c(h->runs, nruns * sizeof(fmt::Run), c);
    }
  }
  // Every kApply of the namespace log chain.
  std::set<uint64_t> seen;
  for (uint64_t l = sb->nslog_head.load(); l >= fp::kDataStart && l < blocks && seen.insert(l).second;) {
    auto* b = reinterpret_cast<fmt::LogBlock*>(im.At(l));
    if (!fp::NsNextWordValid(b->next.load())) break;
    for (uint32_t s = 0; s < fmt::kSlotsPerLogBlock;) {
      const uint64_t e = b->slots[s].load();
      if (e == 0) break;
      if (fmt::KindOf(e) == fmt::EntryKind::kReserve && fmt::ReserveWellFormed(e)) {
        s += 1 + fmt::ReserveCount(e);
        continue;
      }
      if (fmt::KindOf(e) == fmt::EntryKind::kApply) {
        const uint32_t rs = fmt::ApplySlot(e);
        const uint64_t r = rs < s ? b->slots[rs].load() : 0;
        const uint32_t n = fmt::ReserveCount(r);
        if (fmt::KindOf(r) == fmt::EntryKind::kReserve && fmt::ReserveWellFormed(r) && rs + 1 + n <= s) {
          const uint32_t c = upfs::Crc32c(&b->slots[rs + 1], uint64_t(n) * 8);
          b->slots[s].store((e & 0xffffffffull) | (uint64_t(c) << 32));
        }
      }
      ++s;
    }
    l = fmt::NextBlock(b->next.load());
  }
}

void PoolFuzz::WriteImage(Image& img) {
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Violation("harness: cannot create %s: %s", path_.c_str(), strerror(errno));
  if (ftruncate(fd, off_t(img.size)) != 0) Violation("harness: ftruncate: %s", strerror(errno));
  for (const auto& [l, b] : img.blocks) {
    const uint64_t off = uint64_t(l) * kB;
    if (off >= img.size) break;
    const size_t n = size_t(std::min<uint64_t>(kB, img.size - off));
    if (pwrite(fd, b.data(), n, off_t(off)) != ssize_t(n)) Violation("harness: pwrite: %s", strerror(errno));
  }
  ::close(fd);
  if (const char* save = getenv("UPFS_FUZZ_SAVE")) {
    ::unlink(save);
    std::string cmd = std::string("cp --sparse=always '") + path_ + "' '" + save + "'";
    if (system(cmd.c_str()) != 0) Violation("harness: cannot save the pool to %s", save);
  }
}


// Lists, lstats, reads links and files; bounded.
void PoolFuzz::Walk(const std::string& dir, int depth, int* budget) {
  if (depth > 16 || *budget <= 0) return;
  UPFS_DIR* d = upfs_opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (struct dirent* e = upfs_readdir(d)) {
    if (--*budget <= 0) break;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  if (upfs_closedir(d) != 0) Violation("upfs_closedir failed: %s", upfs_last_error());
  for (const std::string& n : names) {
    const std::string p = dir + "/" + n;
    struct stat st;
    if (upfs_lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      Walk(p, depth + 1, budget);
    } else if (S_ISLNK(st.st_mode)) {
      char buf[4200];
      const ssize_t r = upfs_readlink(p.c_str(), buf, sizeof(buf));
      if (r > ssize_t(sizeof(buf))) Violation("upfs_readlink returned %zd for a %zu-byte buffer", r, sizeof(buf));
    } else if (S_ISREG(st.st_mode)) {
      int fd = upfs_open(p.c_str(), O_RDONLY);
      if (fd < 0) continue;
      char buf[16384];
      uint64_t total = 0;
      for (ssize_t r; (r = upfs_read(fd, buf, sizeof(buf))) > 0 && total < (1u << 20);) total += uint64_t(r);
      struct stat fst;
      (void)upfs_fstat(fd, &fst);
      if (upfs_close(fd) != 0) Violation("upfs_close failed: %s", upfs_last_error());
    }
  }
}

bool MountErrnoAllowed(int e) {
  return e == EUCLEAN || e == EMEDIUMTYPE || e == EPROTONOSUPPORT || e == ENOSPC || e == EAGAIN ||
         e == EFBIG || e == ENOMEM;
}

void PoolFuzz::Run(const uint8_t* data, size_t size) {
  const uint8_t flags = size ? data[0] : 0;
  size_t at = size ? 1 : 0;
  const int which = (flags & 8) ? 2 : (flags & 1);
  Image img = seeds_[which].img;
  const std::vector<uint32_t>& targets = seeds_[which].targets;
  if ((flags & 4) && at + 2 <= size) {
    const uint16_t v = uint16_t(data[at] | (data[at + 1] << 8));
    at += 2;
    img.size = (uint64_t(fp::kDataStart) + v / 2) * kB - (v & 1);
  }
  while (at + 4 <= size) {
    const uint32_t block = targets[data[at] % targets.size()];
    const uint32_t off = uint32_t(data[at + 1] | (data[at + 2] << 8)) % uint32_t(kB);
    uint32_t len = data[at + 3] % 16;
    if (len == 0) len = 8;
    at += 4;
    if (at + len > size) break;
    for (uint32_t i = 0; i < len; ++i) {
      const uint64_t byte = uint64_t(block) * kB + off + i;
      if (byte >= img.size) break;
      img.At(byte / kB)[byte % kB] = data[at + i];
    }
    at += len;
  }
  if (!(flags & 2)) FixChecksums(img);
  WriteImage(img);

  const uint64_t before = upfs_test::PoolDurableHash(path_);
  if (upfs_mount(path_.c_str(), mnt_.c_str()) == 0) {
    int budget = 5000;
    Walk(mnt_, 0, &budget);
    if (upfs_umount(mnt_.c_str()) != 0)
      Violation("upfs_umount of a walked pool failed: %s (%s)", ErrnoName(errno), upfs_last_error());
  } else {
    const int e = errno;
    const std::string msg = upfs_last_error();
    if (!MountErrnoAllowed(e)) Violation("upfs_mount failed with %s (%s)", ErrnoName(e), msg.c_str());
    if (msg.find(": ") == std::string::npos) Violation("upfs_mount failed with %s and no structure named: '%s'", ErrnoName(e), msg.c_str());
    if (e != ENOSPC && e != EAGAIN && upfs_test::PoolDurableHash(path_) != before)
      Violation("a refused mount (%s: %s) changed the pool's durable bytes", ErrnoName(e), msg.c_str());
  }
  upfs::PoolReport r;
  upfs::Status st = upfs::CheckPool(path_, &r);
  if (!st.ok()) {
    const int e = st.err();
    if (e != EUCLEAN && e != EMEDIUMTYPE && e != EPROTONOSUPPORT)
      Violation("CheckPool failed with %s (%s)", ErrnoName(e), st.message().c_str());
    if (st.message().empty()) Violation("CheckPool failed with %s and no message", ErrnoName(e));
  }
  if (::unlink(path_.c_str()) != 0) Violation("harness: unlink %s: %s", path_.c_str(), strerror(errno));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  PoolFuzz::Get().Run(data, size);
  return 0;
}
