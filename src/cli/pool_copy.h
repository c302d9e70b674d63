// upfs cp's copier: one tree from one side (a pool or the host) to the
// other, as `cp -a` copies: contents with their holes, modes, owners (when
// root), access and modification times, symbolic links as links, and hard
// links as links (an inode met twice in the source is linked to its first
// copy). It goes on past a failed entry, as cp does, and reports each.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "cli/pool_fs.h"

namespace upfs::cli {

class TreeCopy {
 public:
  // Copies to `dst`; progress may be null.
  TreeCopy(const Fs& dst, bool recursive, Progress* progress);

  // Copies `src` of `from` (whose lstat is `st`) to `dst`. False if
  // anything failed (each failure printed on stderr). Hard links are found
  // across the calls of one TreeCopy, as cp finds them across its SOURCEs.
  bool CopyFrom(const Fs& from, const std::string& src, const struct stat& st,
                const std::string& dst);

  // The bytes of the regular files at or below `path` (each inode once):
  // the total of a progress bar.
  static uint64_t BytesBelow(const Fs& fs, const std::string& path);

 private:
  bool Copy(const std::string& src, const struct stat& st, const std::string& dst);
  bool CopyDir(const std::string& src, const struct stat& st, const std::string& dst);
  bool CopyFile(const std::string& src, const struct stat& st, const std::string& dst);
  bool CopySymlink(const std::string& src, const struct stat& st, const std::string& dst);
  bool LinkToFirstCopy(const std::string& first, const std::string& dst);
  bool CopyData(int sfd, int dfd, uint64_t size, const std::string& src, const std::string& dst);
  bool CopyRange(int sfd, int dfd, uint64_t from, uint64_t to, const std::string& src,
                 const std::string& dst);
  bool SetFileAttributes(int dfd, const struct stat& st, const std::string& dst);
  bool SetPathAttributes(const struct stat& st, const std::string& dst);
  // Makes room for a new `dst` that is not a directory (cp overwrites).
  void RemoveNonDirectory(const std::string& dst);
  bool Failed(const Fs& fs, const std::string& path);

  const Fs* src_ = nullptr;  // the current CopyFrom's
  const Fs& dst_;
  bool recursive_;
  Progress* progress_;
  uint64_t done_ = 0;  // bytes of finished files, for the progress bar
  bool root_;          // only root may give files to others
  // The first copy of each source inode with more than one link, by its
  // side (two sides may number inodes alike), device and inode.
  std::map<std::tuple<const Fs*, dev_t, ino_t>, std::string> first_copy_;
  std::vector<char> buf_;
};

}  // namespace upfs::cli
