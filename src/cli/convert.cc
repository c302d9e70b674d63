// upfs convert --to-upfs PLAIN OUT | --to-plain UPFS OUT
//
// Copies through the C API in large chunks. Holes survive: on the plain side
// SEEK_DATA/SEEK_HOLE finds them where the file system supports it, and
// all-zero chunks are never written in either direction (the destination is
// new, so an unwritten range reads as zeros; the final ftruncate sets the
// size past a trailing hole).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

const char kConvertHelp[] =
    "usage: upfs convert (--to-upfs PLAIN OUT [--mode strict|sync] | --to-plain UPFS OUT)\n"
    "                    [--force] [--progress] [--verify]\n"
    "\n"
    "--to-upfs PLAIN OUT   copies the ordinary file PLAIN into a new upfs file OUT\n"
    "                      (put OUT on /dev/shm or a DAX file system)\n"
    "--to-plain UPFS OUT   copies the upfs file UPFS into a new ordinary file OUT\n"
    "\n"
    "options:\n"
    "  --mode strict|sync  consistency mode of the new upfs file (default strict):\n"
    "                      strict: every write atomic and durable when it returns;\n"
    "                      sync: overwrites in place, durable on return, not atomic\n"
    "  --force             replace OUT if it exists (never when OUT is the input)\n"
    "  --progress          show a progress bar on stderr even when stderr is not a\n"
    "                      terminal (on a terminal it is shown for files >= 64 MiB)\n"
    "  --verify            read both files back afterwards and compare every byte\n"
    "\n"
    "Data is copied in 8 MiB chunks. Holes in the input and all-zero 4 KiB\n"
    "blocks are not written, so sparse files stay sparse. OUT is fsynced and\n"
    "its size is checked against the input's. On any error OUT is removed.\n"
    "\n"
    "Exit status: 0 success, 1 failure (OUT removed), 2 bad usage.\n"
    "\n"
    "examples:\n"
    "  upfs convert --to-upfs data.bin /dev/shm/data.upfs\n"
    "  upfs convert --to-upfs data.bin /dev/shm/data.upfs --mode sync --force\n"
    "  upfs convert --to-plain /dev/shm/data.upfs restored.bin\n";

namespace {

constexpr size_t kChunk = 8u << 20;
constexpr uint64_t kProgressThreshold = 64u << 20;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer AllocBuffer() {
  void* p = std::aligned_alloc(4096, kChunk);
  if (!p) throw std::bad_alloc();
  return Buffer(static_cast<char*>(p));
}

bool AllZero(const char* p, size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

// One side of a copy: either a kernel descriptor or a upfs descriptor.
struct Side {
  int fd = -1;
  bool upfs = false;
  std::string path;

  std::string Err(const std::string& what) const {
    if (upfs) return ApiError(what + " " + path);
    return what + " " + path + ": " + std::strerror(errno);
  }

  // Reads exactly n bytes at off (fewer only at end of file).
  Status ReadFull(char* buf, size_t n, uint64_t off, size_t* got) const {
    size_t done = 0;
    while (done < n) {
      ssize_t r = upfs ? upfs_pread(fd, buf + done, n - done, off_t(off + done))
                       : pread(fd, buf + done, n - done, off_t(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Status::Error(errno, Err("read"));
      }
      if (r == 0) break;
      done += size_t(r);
    }
    *got = done;
    return Status::OK();
  }

  Status WriteFull(const char* buf, size_t n, uint64_t off) const {
    size_t done = 0;
    while (done < n) {
      ssize_t r = upfs ? upfs_pwrite(fd, buf + done, n - done, off_t(off + done))
                       : pwrite(fd, buf + done, n - done, off_t(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Status::Error(errno, Err("write"));
      }
      if (r == 0) return Status::Error(EIO, "write " + path + ": wrote nothing");
      done += size_t(r);
    }
    return Status::OK();
  }

  // Next data offset at or after off, with the end of that data run.
  // Returns false when only a hole remains. Without SEEK_DATA support the
  // whole rest counts as data.
  bool NextData(uint64_t off, uint64_t size, uint64_t* data, uint64_t* hole) const {
    off_t d = upfs ? upfs_lseek(fd, off_t(off), SEEK_DATA) : lseek(fd, off_t(off), SEEK_DATA);
    if (d < 0) {
      if (errno == ENXIO) return false;
      *data = off;
      *hole = size;
      return true;
    }
    off_t h = upfs ? upfs_lseek(fd, d, SEEK_HOLE) : lseek(fd, d, SEEK_HOLE);
    *data = uint64_t(d);
    *hole = h < 0 ? size : std::min<uint64_t>(uint64_t(h), size);
    if (*data >= size) return false;
    return true;
  }

  int Close() {
    int rc = 0;
    if (fd >= 0) rc = upfs ? upfs_close(fd) : close(fd);
    fd = -1;
    return rc;
  }
};

// Removes OUT unless Commit() was called.
class OutputGuard {
 public:
  explicit OutputGuard(Side* out) : out_(out) {}
  ~OutputGuard() {
    if (committed_) return;
    out_->Close();
    if (!created_) return;
    if (out_->upfs) {
      upfs_unlink(out_->path.c_str());  // with its shared state
    } else {
      unlink(out_->path.c_str());
    }
  }
  void Created() { created_ = true; }
  void Commit() { committed_ = true; }

 private:
  Side* out_;
  bool created_ = false;
  bool committed_ = false;
};

// Refuses to overwrite OUT without --force, and ever when it is the input.
Status PrepareOutput(const std::string& in_path, const std::string& out_path, bool force) {
  struct stat out_st;
  if (lstat(out_path.c_str(), &out_st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno("stat " + out_path);
  }
  struct stat in_st;
  if (stat(in_path.c_str(), &in_st) == 0 && stat(out_path.c_str(), &out_st) == 0 &&
      in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino) {
    return Status::Error(EINVAL, out_path + " is the input file itself");
  }
  if (!force) return Status::Error(EEXIST, out_path + " exists (use --force to replace it)");
  if (S_ISDIR(out_st.st_mode)) return Status::Error(EISDIR, out_path + " is a directory");
  // upfs_unlink removes any file, and a upfs file's shared state with it.
  if (upfs_unlink(out_path.c_str()) != 0) return Status::FromErrno("remove " + out_path);
  return Status::OK();
}

// Writes the 4 KiB blocks of buf that are not all zero, coalescing
// neighbours into one write.
Status WriteNonZero(const Side& out, const char* buf, size_t n, uint64_t pos) {
  constexpr size_t kBlk = 4096;
  if (AllZero(buf, n)) return Status::OK();
  size_t run_start = 0;
  bool in_run = false;
  for (size_t b = 0; b < n; b += kBlk) {
    size_t len = std::min(kBlk, n - b);
    bool zero = AllZero(buf + b, len);
    if (!zero && !in_run) {
      run_start = b;
      in_run = true;
    } else if (zero && in_run) {
      UPFS_RETURN_IF_ERROR(out.WriteFull(buf + run_start, b - run_start, pos + run_start));
      in_run = false;
    }
  }
  if (in_run) UPFS_RETURN_IF_ERROR(out.WriteFull(buf + run_start, n - run_start, pos + run_start));
  return Status::OK();
}

Status CopyData(const Side& in, const Side& out, uint64_t size, Progress* progress) {
  Buffer buf = AllocBuffer();
  uint64_t off = 0;
  while (off < size) {
    uint64_t data, hole;
    if (!in.NextData(off, size, &data, &hole)) break;
    for (uint64_t pos = data; pos < hole;) {
      size_t n = size_t(std::min<uint64_t>(kChunk, hole - pos));
      size_t got = 0;
      UPFS_RETURN_IF_ERROR(in.ReadFull(buf.get(), n, pos, &got));
      if (got != n) {
        return Status::Error(EIO, in.path + " shrank while it was copied (end at " +
                                      std::to_string(pos + got) + ", expected " +
                                      std::to_string(size) + " bytes)");
      }
      UPFS_RETURN_IF_ERROR(WriteNonZero(out, buf.get(), n, pos));
      pos += n;
      progress->Update(pos);
    }
    off = hole;
    progress->Update(off);
  }
  return Status::OK();
}

Status VerifyData(const Side& a, const Side& b, uint64_t size) {
  Buffer ba = AllocBuffer();
  Buffer bb = AllocBuffer();
  for (uint64_t pos = 0; pos < size;) {
    size_t n = size_t(std::min<uint64_t>(kChunk, size - pos));
    size_t ga = 0, gb = 0;
    UPFS_RETURN_IF_ERROR(a.ReadFull(ba.get(), n, pos, &ga));
    UPFS_RETURN_IF_ERROR(b.ReadFull(bb.get(), n, pos, &gb));
    if (ga != n || gb != n) {
      return Status::Error(EIO, "verify: short read at offset " + std::to_string(pos));
    }
    if (std::memcmp(ba.get(), bb.get(), n) != 0) {
      size_t i = 0;
      while (ba.get()[i] == bb.get()[i]) i++;
      return Status::Error(EIO, "verify: contents differ at offset " + std::to_string(pos + i));
    }
    pos += n;
  }
  return Status::OK();
}

struct Options {
  bool to_upfs = false;
  std::string in_path, out_path;
  upfs_consistency mode = UPFS_STRICT;
  bool force = false;
  bool progress = false;
  bool verify = false;
};

Status Convert(const Options& o, uint64_t* copied_size) {
  UPFS_RETURN_IF_ERROR(PrepareOutput(o.in_path, o.out_path, o.force));

  Side in{-1, !o.to_upfs, o.in_path};
  Side out{-1, o.to_upfs, o.out_path};
  struct stat st;
  if (o.to_upfs) {
    in.fd = open(o.in_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in.fd < 0) return Status::FromErrno("open " + o.in_path);
    if (fstat(in.fd, &st) != 0) {
      Status s = Status::FromErrno("stat " + o.in_path);
      in.Close();
      return s;
    }
  } else {
    in.fd = upfs_open(o.in_path.c_str(), O_RDONLY);
    if (in.fd < 0) {
      int err = errno;
      if (err == EMEDIUMTYPE) return Status::Error(err, o.in_path + " is not a upfs file");
      return Status::Error(err, ApiError("open " + o.in_path));
    }
    if (upfs_fstat(in.fd, &st) != 0) {
      Status s = Status::Error(errno, ApiError("stat " + o.in_path));
      in.Close();
      return s;
    }
  }
  struct InCloser {
    Side* s;
    ~InCloser() { s->Close(); }
  } in_closer{&in};
  if (!S_ISREG(st.st_mode)) return Status::Error(EINVAL, o.in_path + " is not a regular file");
  uint64_t size = uint64_t(st.st_size);
  *copied_size = size;
  mode_t perm = st.st_mode & 07777;

  OutputGuard guard(&out);
  if (o.to_upfs) {
    out.fd = upfs_open_mode(o.out_path.c_str(), O_RDWR | O_CREAT | O_EXCL, perm, o.mode);
    if (out.fd < 0) return Status::Error(errno, ApiError("create " + o.out_path));
  } else {
    out.fd = open(o.out_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, perm);
    if (out.fd < 0) return Status::FromErrno("create " + o.out_path);
  }
  guard.Created();

  bool show = o.progress || (isatty(STDERR_FILENO) && size >= kProgressThreshold);
  Progress progress(o.to_upfs ? "to upfs " : "to plain", size, show);
  UPFS_RETURN_IF_ERROR(CopyData(in, out, size, &progress));

  // The size, including a trailing hole; then durability.
  int rc = out.upfs ? upfs_ftruncate(out.fd, off_t(size)) : ftruncate(out.fd, off_t(size));
  if (rc != 0) return Status::Error(errno, out.Err("set size of"));
  rc = out.upfs ? upfs_fsync(out.fd) : fsync(out.fd);
  if (rc != 0) return Status::Error(errno, out.Err("fsync"));
  progress.Finish();

  struct stat ost;
  rc = out.upfs ? upfs_fstat(out.fd, &ost) : fstat(out.fd, &ost);
  if (rc != 0) return Status::Error(errno, out.Err("stat"));
  if (uint64_t(ost.st_size) != size) {
    return Status::Error(EIO, "size check failed: " + o.out_path + " has " +
                                  std::to_string(ost.st_size) + " bytes, the input " +
                                  std::to_string(size));
  }
  if (o.verify) UPFS_RETURN_IF_ERROR(VerifyData(in, out, size));
  if (out.Close() != 0) return Status::Error(errno, out.Err("close"));
  guard.Commit();
  return Status::OK();
}

}  // namespace

int RunConvert(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {{"to-upfs"}, {"to-plain"}, {"mode", true}, {"force"},
                                  {"progress"}, {"verify"}});
  Options o;
  bool to_upfs = p.Has("to-upfs"), to_plain = p.Has("to-plain");
  if (to_upfs == to_plain) throw UsageError("give exactly one of --to-upfs and --to-plain");
  if (p.positional.size() != 2) throw UsageError("expected an input file and an output file");
  o.to_upfs = to_upfs;
  o.in_path = p.positional[0];
  o.out_path = p.positional[1];
  if (auto m = p.Value("mode")) {
    if (!to_upfs) throw UsageError("--mode applies only to --to-upfs");
    if (*m == "strict") {
      o.mode = UPFS_STRICT;
    } else if (*m == "sync") {
      o.mode = UPFS_SYNC;
    } else {
      throw UsageError("--mode must be strict or sync, not '" + *m + "'");
    }
  }
  o.force = p.Has("force");
  o.progress = p.Has("progress");
  o.verify = p.Has("verify");

  double t0 = NowSeconds();
  uint64_t size = 0;
  Status st = Convert(o, &size);
  if (!st.ok()) {
    std::string msg = st.message();
    if (msg.find(std::strerror(st.err())) == std::string::npos) msg = st.ToString();
    return Fail("convert", msg);
  }
  std::printf("%s -> %s: %s copied to a new %s in %.2f s\n", o.in_path.c_str(),
              o.out_path.c_str(), HumanBytes(size).c_str(),
              o.to_upfs ? "upfs file" : "plain file", NowSeconds() - t0);
  return kExitOk;
}

}  // namespace upfs::cli
