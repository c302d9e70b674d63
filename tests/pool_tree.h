// The namespace tree of a pool in one canonical text form, twice: as a
// reference model computes it (TreeModel: what the operations should have
// done) and as a pool shows it (DumpPool: a walk over a live or recovered
// pool). Crash tests compare the two as strings.
//
// One line per name, sorted by path:
//   <path> <type d|f|l> <mode octal> n=<links> <what>
// where <what> is, for a regular file, its size and the CRC-32C of its
// bytes, then "=<first path>" naming the lexically first name of the same
// inode (so hard links are compared without inode numbers, which recovery
// may legitimately assign differently across images); for a symbolic
// link its target; for a directory nothing. The root is the line "/".
// Times are left out: they are not part of what a crash must preserve.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "container/pool/namespace.h"
#include "container/pool/pool.h"
#include "util/crc32c.h"
#include "util/time_ns.h"

namespace upfs::crashtest {

using format::pool::FileType;

inline std::string CanonicalLine(const std::string& path, FileType t, uint64_t mode, uint64_t nlink,
                                 const std::string& what) {
  char b[96];
  const char type = t == FileType::kDirectory ? 'd' : t == FileType::kSymlink ? 'l' : 'f';
  std::snprintf(b, sizeof(b), " %c %04llo n=%llu ", type, (unsigned long long)(mode & 07777),
                (unsigned long long)nlink);
  return path + b + what;
}

inline std::string FileWhat(const std::string& data, const std::string& first) {
  char b[64];
  std::snprintf(b, sizeof(b), "%zu:%08x", data.size(), Crc32c(data.data(), data.size()));
  return std::string(b) + " =" + first;
}

// Deterministic file content for a write of `n` bytes with `seed`.
inline std::string FillBytes(uint64_t n, uint32_t seed) {
  std::string out(n, '\0');
  std::mt19937 r(seed);
  for (uint64_t i = 0; i < n; ++i) out[i] = char('A' + r() % 26);
  return out;
}

// ---------------------------------------------------------------------------
// The reference model: paths to inode ids, inodes with type, mode and bytes.
class TreeModel {
 public:
  TreeModel() { inodes_[0] = Node{FileType::kDirectory, 0755, ""}; }

  // Each returns 0 or the errno the operation must fail with.
  int Create(const std::string& p, mode_t mode) { return Add(p, Node{FileType::kRegular, mode & 07777, ""}); }
  int Mkdir(const std::string& p, mode_t mode) { return Add(p, Node{FileType::kDirectory, mode & 07777, ""}); }
  int Symlink(const std::string& p, const std::string& target) {
    return Add(p, Node{FileType::kSymlink, 0777, target});
  }
  int Link(const std::string& from, const std::string& to) {
    int id = Find(from);
    if (id < 0) return ENOENT;
    if (inodes_[id].type == FileType::kDirectory) return EPERM;
    if (!ParentIsDir(to)) return ENOENT;
    if (names_.count(to)) return EEXIST;
    names_[to] = id;
    return 0;
  }
  int Unlink(const std::string& p) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    if (inodes_[id].type == FileType::kDirectory) return EISDIR;
    Drop(p);
    return 0;
  }
  int Rmdir(const std::string& p) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    if (inodes_[id].type != FileType::kDirectory) return ENOTDIR;
    if (!Children(p).empty()) return ENOTEMPTY;
    Drop(p);
    return 0;
  }
  int Rename(const std::string& from, const std::string& to) {
    int a = Find(from);
    if (a < 0 || !ParentIsDir(to)) return ENOENT;
    if (from == to || (to.size() > from.size() && to.compare(0, from.size() + 1, from + "/") == 0))
      return from == to ? 0 : EINVAL;
    int b = Find(to);
    if (b == a) return 0;  // two names of one file
    if (b >= 0) {
      const bool da = inodes_[a].type == FileType::kDirectory, db = inodes_[b].type == FileType::kDirectory;
      if (da && !db) return ENOTDIR;
      if (!da && db) return EISDIR;
      if (db && !Children(to).empty()) return ENOTEMPTY;
      Drop(to);
    }
    Move(from, to);
    return 0;
  }
  int Exchange(const std::string& x, const std::string& y) {
    int a = Find(x), b = Find(y);
    if (a < 0 || b < 0) return ENOENT;
    const std::string tmp = "\x01tmp";
    Move(x, tmp);
    Move(y, x);
    Move(tmp, y);
    return 0;
  }
  // A change of times alone (utimensat): the tree does not change.
  int Touch(const std::string& p) const { return Find(p) < 0 ? ENOENT : 0; }
  int Chmod(const std::string& p, mode_t mode) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    inodes_[id].mode = mode & 07777;
    return 0;
  }
  int Write(const std::string& p, uint64_t off, const std::string& bytes) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    std::string& d = inodes_[id].data;
    if (d.size() < off + bytes.size()) d.resize(off + bytes.size(), '\0');
    d.replace(off, bytes.size(), bytes);
    return 0;
  }
  int Append(const std::string& p, const std::string& bytes) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    inodes_[id].data += bytes;
    return 0;
  }
  int Truncate(const std::string& p, uint64_t len) {
    int id = Find(p);
    if (id < 0) return ENOENT;
    inodes_[id].data.resize(len, '\0');
    return 0;
  }
  bool Exists(const std::string& p) const { return names_.count(p) != 0; }
  // Every name (not the root) with its type, sorted by path.
  std::vector<std::pair<std::string, FileType>> List() const {
    std::vector<std::pair<std::string, FileType>> v;
    for (const auto& [p, id] : names_) v.emplace_back(p, inodes_.at(id).type);
    return v;
  }
  // A regular file's size (0 for anything else or nothing).
  uint64_t Size(const std::string& p) const {
    const int id = Find(p);
    return id < 0 ? 0 : inodes_.at(id).data.size();
  }
  bool IsEmptyDir(const std::string& p) const { return Children(p).empty(); }

  std::string Dump() const {
    std::map<int, std::string> first;
    std::map<int, uint64_t> links;
    for (const auto& [p, id] : names_) {
      if (!first.count(id)) first[id] = p;  // names_ is sorted: the first is the least
      ++links[id];
    }
    std::vector<std::string> lines;
    lines.push_back(CanonicalLine("/", FileType::kDirectory, inodes_.at(0).mode,
                                  2 + Subdirs(""), ""));
    for (const auto& [p, id] : names_) {
      const Node& n = inodes_.at(id);
      switch (n.type) {
        case FileType::kDirectory:
          lines.push_back(CanonicalLine(p, n.type, n.mode, 2 + Subdirs(p), ""));
          break;
        case FileType::kSymlink:
          lines.push_back(CanonicalLine(p, n.type, n.mode, links[id], n.data));
          break;
        default:
          lines.push_back(CanonicalLine(p, n.type, n.mode, links[id], FileWhat(n.data, first[id])));
      }
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }

 private:
  struct Node {
    FileType type;
    uint64_t mode;
    std::string data;  // file bytes, or a symbolic link's target
  };
  static std::string Parent(const std::string& p) {
    size_t s = p.rfind('/');
    return s == 0 || s == std::string::npos ? "" : p.substr(0, s);
  }
  int Find(const std::string& p) const {
    if (p == "/") return 0;
    auto it = names_.find(p);
    return it == names_.end() ? -1 : it->second;
  }
  bool ParentIsDir(const std::string& p) const {
    const std::string d = Parent(p);
    if (d.empty()) return true;
    int id = Find(d);
    return id >= 0 && inodes_.at(id).type == FileType::kDirectory;
  }
  int Add(const std::string& p, Node n) {
    if (!ParentIsDir(p)) return ENOENT;
    if (names_.count(p)) return EEXIST;
    inodes_[next_] = std::move(n);
    names_[p] = next_++;
    return 0;
  }
  std::vector<std::string> Children(const std::string& dir) const {
    std::vector<std::string> v;
    for (const auto& [p, id] : names_)
      if (Parent(p) == dir) v.push_back(p);
    return v;
  }
  uint64_t Subdirs(const std::string& dir) const {
    uint64_t n = 0;
    for (const std::string& c : Children(dir))
      if (inodes_.at(names_.at(c)).type == FileType::kDirectory) ++n;
    return n;
  }
  void Drop(const std::string& p) {
    int id = names_.at(p);
    names_.erase(p);
    for (const auto& [q, i] : names_)
      if (i == id) return;
    inodes_.erase(id);  // its last name
  }
  // Moves a name, and everything below it for a directory.
  void Move(const std::string& from, const std::string& to) {
    std::vector<std::pair<std::string, int>> moved;
    for (auto it = names_.begin(); it != names_.end();) {
      if (it->first == from || it->first.compare(0, from.size() + 1, from + "/") == 0) {
        moved.emplace_back(to + it->first.substr(from.size()), it->second);
        it = names_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [p, id] : moved) names_[p] = id;
  }

  std::map<int, Node> inodes_;
  std::map<std::string, int> names_;  // "/a/b" -> inode id (the root, id 0, has none)
  int next_ = 1;
};

// ---------------------------------------------------------------------------
// The tree a pool shows, walked through its namespace (as root, so that no
// permission bit hides anything). Returns the canonical dump, or an error
// describing what could not be read. With `times`, also the times a
// namespace operation makes durable before it returns, by inode number.
// Times are not part of the dump (an interrupted operation may have moved
// them or not), so a crash test checks them apart.
struct DurableTimes {
  // A directory: its mtime and ctime. Any other inode: its inode's own
  // ctime only (names and attributes changed); the times its data writes
  // set are durable only at an fsync, and stat reports the later of the
  // two ctimes.
  bool dir = false;
  int64_t mtime_ns = 0;  // directories only
  int64_t ctime_ns = 0;
  // A regular file that has a log: the times its data writes set (the
  // engine's mtime and data ctime), durable at an fsync.
  bool data = false;
  int64_t data_mtime_ns = 0;
  int64_t data_ctime_ns = 0;
};
using InodeTimes = std::map<uint64_t, DurableTimes>;
inline int64_t StatNs(const struct timespec& t) { return int64_t(upfs::TimespecNs(t)); }
inline Status DumpPool(Pool* pool, std::string* out, InodeTimes* times = nullptr) {
  Credentials who;
  who.uid = 0;
  who.gid = 0;
  who.umask = 0;
  PoolNamespace ns(pool, &who);
  struct Seen {
    std::string path;
    uint64_t ino;
    FileType type;
  };
  std::vector<Seen> seen;
  std::vector<std::pair<uint64_t, std::string>> todo{{pool->root_ino(), ""}};
  while (!todo.empty()) {
    auto [dir, prefix] = todo.back();
    todo.pop_back();
    Listing list;
    UPFS_RETURN_IF_ERROR(ns.List(dir, &list));
    for (const auto& e : list) {
      if (e.name == "." || e.name == "..") continue;
      const std::string p = prefix + "/" + std::string(e.name);
      seen.push_back(Seen{p, e.ino, e.type});
      if (e.type == FileType::kDirectory) todo.emplace_back(e.ino, p);
      if (seen.size() > 100000) return Status::Error(ELOOP, "the tree does not end");
    }
  }
  std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.path < b.path; });
  std::map<uint64_t, std::string> first;
  for (const Seen& s : seen)
    if (!first.count(s.ino)) first[s.ino] = s.path;
  std::vector<std::string> lines;
  struct stat st;
  UPFS_RETURN_IF_ERROR(ns.Stat(pool->root_ino(), &st));
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "the root is not a directory");
  if (times) {
    times->clear();
    (*times)[pool->root_ino()] = {true, StatNs(st.st_mtim), StatNs(st.st_ctim)};
  }
  lines.push_back(CanonicalLine("/", FileType::kDirectory, st.st_mode, st.st_nlink, ""));
  for (const Seen& s : seen) {
    UPFS_RETURN_IF_ERROR(ns.Stat(s.ino, &st));
    const FileType stat_type = S_ISDIR(st.st_mode) ? FileType::kDirectory
                               : S_ISLNK(st.st_mode) ? FileType::kSymlink
                                                     : FileType::kRegular;
    if (stat_type != s.type)
      return Status::Error(EUCLEAN, s.path + ": the directory entry's type is not the inode's");
    if (times && s.type == FileType::kDirectory) (*times)[s.ino] = {true, StatNs(st.st_mtim), StatNs(st.st_ctim)};
    if (times && s.type != FileType::kDirectory) {
      format::pool::Inode* in;
      UPFS_RETURN_IF_ERROR(pool->InodeAt(s.ino, &in));
      (*times)[s.ino] = {false, 0, int64_t(in->ctime_ns.load())};
    }
    std::string what;
    if (s.type == FileType::kSymlink) {
      UPFS_RETURN_IF_ERROR(ns.Readlink(s.ino, &what));
    } else if (s.type == FileType::kRegular) {
      std::string data;
      format::pool::Inode* in;
      UPFS_RETURN_IF_ERROR(pool->InodeAt(s.ino, &in));
      if (in->log_head.load() != 0) {
        std::shared_ptr<File> f;
        UPFS_RETURN_IF_ERROR(pool->FileOf(s.ino, &f));
        uint64_t size = 0;
        UPFS_RETURN_IF_ERROR(f->Size(&size));
        if (times) {
          FileStat fs;
          UPFS_RETURN_IF_ERROR(f->Stat(&fs));
          DurableTimes& t = (*times)[s.ino];
          t.data = true;
          t.data_mtime_ns = fs.mtime_ns;
          t.data_ctime_ns = fs.data_ctime_ns;
        }
        data.resize(size);
        size_t done = 0;
        if (size) UPFS_RETURN_IF_ERROR(f->Read(data.data(), size, 0, &done));
        if (done != size) return Status::Error(EIO, s.path + ": short read");
      }
      what = FileWhat(data, first[s.ino]);
    }
    lines.push_back(CanonicalLine(s.path, s.type, st.st_mode, st.st_nlink, what));
  }
  std::sort(lines.begin(), lines.end());
  out->clear();
  for (const std::string& l : lines) *out += l + "\n";
  return Status::OK();
}

// The first line where two dumps differ, for messages.
inline std::string DumpDiff(const std::string& got, const std::string& want) {
  size_t i = 0, line = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) {
    if (got[i] == '\n') line = i + 1;
    ++i;
  }
  auto take = [&](const std::string& s) {
    if (line >= s.size()) return std::string("(end)");
    size_t e = s.find('\n', line);
    return s.substr(line, e == std::string::npos ? std::string::npos : e - line);
  };
  return "got \"" + take(got) + "\", expected \"" + take(want) + "\"";
}

}  // namespace upfs::crashtest
