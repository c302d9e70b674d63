#include "cli/pool_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>

namespace upfs::cli {

namespace {
constexpr size_t kChunk = 1u << 20;
}

TreeCopy::TreeCopy(const Fs& dst, bool recursive, Progress* progress)
    : dst_(dst), recursive_(recursive), progress_(progress), root_(geteuid() == 0),
      buf_(kChunk) {}

bool TreeCopy::Failed(const Fs& fs, const std::string& path) {
  std::fprintf(stderr, "upfs cp: %s\n", fs.Error(path).c_str());
  return false;
}

uint64_t TreeCopy::BytesBelow(const Fs& fs, const std::string& path) {
  uint64_t total = 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> todo = {path}, names;
  while (!todo.empty()) {
    std::string p = std::move(todo.back());
    todo.pop_back();
    struct stat st;
    if (fs.Lstat(p, &st) != 0) continue;  // the copy itself reports it
    if (S_ISREG(st.st_mode) && seen.insert({st.st_dev, st.st_ino}).second) total += st.st_size;
    if (!S_ISDIR(st.st_mode) || fs.List(p, &names) != 0) continue;
    for (const std::string& n : names) todo.push_back(JoinPath(p, n));
  }
  return total;
}

bool TreeCopy::CopyFrom(const Fs& from, const std::string& src, const struct stat& st,
                        const std::string& dst) {
  src_ = &from;
  return Copy(src, st, dst);
}

bool TreeCopy::Copy(const std::string& src, const struct stat& st, const std::string& dst) {
  if (S_ISDIR(st.st_mode)) {
    if (recursive_) return CopyDir(src, st, dst);
    std::fprintf(stderr, "upfs cp: %s: is a directory (copy trees with -r)\n", src_->Display(src).c_str());
    return false;
  }
  if (S_ISLNK(st.st_mode)) return CopySymlink(src, st, dst);
  if (S_ISREG(st.st_mode)) return CopyFile(src, st, dst);
  // A pool holds directories, files and symbolic links only.
  std::fprintf(stderr, "upfs cp: %s: not copied: not a regular file, directory or symbolic link\n",
               src_->Display(src).c_str());
  return false;
}

bool TreeCopy::CopyDir(const std::string& src, const struct stat& st, const std::string& dst) {
  // Made owner-writable first so that its entries can be made whatever its
  // mode; the mode comes last, with the times, which each entry made
  // inside would otherwise change.
  if (dst_.Mkdir(dst, 0700) != 0) {
    struct stat dst_st;
    if (errno != EEXIST || dst_.Stat(dst, &dst_st) != 0 || !S_ISDIR(dst_st.st_mode)) {
      return Failed(dst_, dst);
    }
  }
  std::vector<std::string> names;
  if (src_->List(src, &names) != 0) return Failed(*src_, src);
  bool ok = true;
  for (const std::string& name : names) {
    const std::string from = JoinPath(src, name);
    struct stat child;
    if (src_->Lstat(from, &child) != 0) {
      ok = Failed(*src_, from);
      continue;
    }
    ok = Copy(from, child, JoinPath(dst, name)) && ok;
  }
  return SetPathAttributes(st, dst) && ok;
}

void TreeCopy::RemoveNonDirectory(const std::string& dst) {
  struct stat st;
  if (dst_.Lstat(dst, &st) == 0 && !S_ISDIR(st.st_mode)) dst_.Unlink(dst);
}

bool TreeCopy::CopySymlink(const std::string& src, const struct stat& st, const std::string& dst) {
  std::string target;
  if (src_->Readlink(src, &target) != 0) return Failed(*src_, src);
  if (dst_.Symlink(target, dst) != 0) {
    if (errno != EEXIST) return Failed(dst_, dst);
    RemoveNonDirectory(dst);
    if (dst_.Symlink(target, dst) != 0) return Failed(dst_, dst);
  }
  return SetPathAttributes(st, dst);
}

bool TreeCopy::LinkToFirstCopy(const std::string& first, const std::string& dst) {
  if (dst_.Link(first, dst) == 0) return true;
  if (errno != EEXIST) return Failed(dst_, dst);
  RemoveNonDirectory(dst);
  return dst_.Link(first, dst) == 0 || Failed(dst_, dst);
}

bool TreeCopy::CopyFile(const std::string& src, const struct stat& st, const std::string& dst) {
  const std::tuple<const Fs*, dev_t, ino_t> id{src_, st.st_dev, st.st_ino};
  if (st.st_nlink > 1) {
    auto it = first_copy_.find(id);
    if (it != first_copy_.end()) return LinkToFirstCopy(it->second, dst);
  }
  const int sfd = src_->Open(src, O_RDONLY);
  if (sfd < 0) return Failed(*src_, src);
  struct stat sst;
  if (src_->Fstat(sfd, &sst) != 0) {
    Failed(*src_, src);
    src_->Close(sfd);
    return false;
  }
  // A symbolic link in the way would be followed by O_CREAT: replace it,
  // as a regular file is (its contents replaced, its other links kept).
  struct stat dst_st;
  if (dst_.Lstat(dst, &dst_st) == 0 && S_ISLNK(dst_st.st_mode)) dst_.Unlink(dst);
  const int dfd = dst_.Open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (dfd < 0) {
    Failed(dst_, dst);
    src_->Close(sfd);
    return false;
  }
  bool ok = CopyData(sfd, dfd, uint64_t(sst.st_size), src, dst) && SetFileAttributes(dfd, sst, dst);
  src_->Close(sfd);
  if (dst_.Close(dfd) != 0) ok = Failed(dst_, dst);
  if (ok && st.st_nlink > 1) first_copy_[id] = dst;
  return ok;
}

// Copies what the source holds, extent by extent: its holes stay holes
// (never written, so never allocated), and the size comes last.
bool TreeCopy::CopyData(int sfd, int dfd, uint64_t size, const std::string& src,
                        const std::string& dst) {
  const uint64_t base = done_;
  uint64_t off = 0;
  while (off < size) {
    off_t data = src_->Lseek(sfd, off_t(off), SEEK_DATA);
    uint64_t end = size;
    if (data < 0) {
      if (errno == ENXIO) break;  // nothing but a hole up to the end
      if (errno != EINVAL && errno != EOPNOTSUPP) return Failed(*src_, src);
      data = off_t(off);  // no hole reporting here: all of it is data
    } else {
      off_t hole = src_->Lseek(sfd, data, SEEK_HOLE);
      if (hole < 0) return Failed(*src_, src);
      end = std::min<uint64_t>(size, uint64_t(hole));
    }
    if (!CopyRange(sfd, dfd, uint64_t(data), end, src, dst)) return false;
    off = end;
  }
  if (dst_.Ftruncate(dfd, off_t(size)) != 0) return Failed(dst_, dst);
  done_ = base + size;
  if (progress_) progress_->Update(done_);
  return true;
}

bool TreeCopy::CopyRange(int sfd, int dfd, uint64_t from, uint64_t to, const std::string& src,
                         const std::string& dst) {
  const uint64_t base = done_;
  for (uint64_t off = from; off < to;) {
    const size_t want = size_t(std::min<uint64_t>(buf_.size(), to - off));
    const ssize_t got = src_->Pread(sfd, buf_.data(), want, off_t(off));
    if (got < 0) return Failed(*src_, src);
    if (got == 0) return true;  // the source shrank meanwhile: copy what there is
    for (ssize_t put = 0; put < got;) {
      ssize_t n = dst_.Pwrite(dfd, buf_.data() + put, size_t(got - put), off_t(off) + put);
      if (n < 0) return Failed(dst_, dst);
      put += n;
    }
    off += uint64_t(got);
    if (progress_) progress_->Update(base + off);
  }
  return true;
}

// Owner first: chown clears the set-id bits that chmod then sets; times
// last, since both change the ctime only but writes changed the mtime.
bool TreeCopy::SetFileAttributes(int dfd, const struct stat& st, const std::string& dst) {
  if (root_ && dst_.Fchown(dfd, st.st_uid, st.st_gid) != 0) return Failed(dst_, dst);
  if (dst_.Fchmod(dfd, st.st_mode & 07777) != 0) return Failed(dst_, dst);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (dst_.Futimens(dfd, times) != 0) return Failed(dst_, dst);
  return true;
}

bool TreeCopy::SetPathAttributes(const struct stat& st, const std::string& dst) {
  if (root_ && dst_.Lchown(dst, st.st_uid, st.st_gid) != 0) return Failed(dst_, dst);
  // A symbolic link's own mode means nothing (and Linux cannot change it).
  if (!S_ISLNK(st.st_mode) && dst_.Chmod(dst, st.st_mode & 07777) != 0) return Failed(dst_, dst);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (dst_.Lutimens(dst, times) != 0) return Failed(dst_, dst);
  return true;
}

}  // namespace upfs::cli
