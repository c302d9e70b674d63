// upfs ls [-l] [-R] POOL[:PATH]: a listing of a pool's namespace, in the
// form of `ls -1A`, `ls -lA --time-style=long-iso` and `ls -R`.
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/pool_fs.h"
#include "cli/pool_operand.h"

namespace upfs::cli {

const char kLsHelp[] =
    "usage: upfs ls [-l] [-R] [--numeric] POOL[:PATH]\n"
    "\n"
    "Lists directory PATH of pool POOL (default: its root), one name a line,\n"
    "names starting with a dot included, in byte order; a PATH that is not a\n"
    "directory is listed alone.\n"
    "\n"
    "options:\n"
    "  -l, --long        mode, links, owner, group, size, modification time\n"
    "                    (local, YYYY-MM-DD HH:MM) and name; '-> TARGET' for\n"
    "                    a symbolic link\n"
    "  -R, --recursive   list every directory below PATH too, each under a\n"
    "                    'PATH:' line\n"
    "  -n, --numeric     owners and groups as numbers (with -l)\n"
    "\n"
    "Exit status: 0 success, 1 failure (no such pool or path, ...), 2 bad usage.\n"
    "\n"
    "examples:\n"
    "  upfs ls /dev/shm/tree.pool\n"
    "  upfs ls -lR /dev/shm/tree.pool:/etc\n";

namespace {

struct LsOptions {
  bool long_form = false;
  bool recursive = false;
  bool numeric = false;
};

std::string ModeString(mode_t m) {
  std::string s = S_ISDIR(m) ? "d" : S_ISLNK(m) ? "l" : S_ISREG(m) ? "-" : "?";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) s += (m & (0400 >> i)) ? rwx[i] : '-';
  // Set-id and sticky bits show in the execute slots, as ls shows them.
  auto mark = [&](size_t pos, mode_t bit, char with_x, char without_x) {
    if (m & bit) s[pos] = s[pos] == 'x' ? with_x : without_x;
  };
  mark(3, S_ISUID, 's', 'S');
  mark(6, S_ISGID, 's', 'S');
  mark(9, S_ISVTX, 't', 'T');
  return s;
}

std::string UserName(uid_t uid, bool numeric) {
  struct passwd pw, *res = nullptr;
  char buf[1024];
  if (!numeric && getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return pw.pw_name;
  return std::to_string(uid);
}

std::string GroupName(gid_t gid, bool numeric) {
  struct group gr, *res = nullptr;
  char buf[1024];
  if (!numeric && getgrgid_r(gid, &gr, buf, sizeof buf, &res) == 0 && res) return gr.gr_name;
  return std::to_string(gid);
}

std::string TimeString(const struct timespec& ts) {
  struct tm tm;
  time_t t = ts.tv_sec;
  char buf[32];
  if (!localtime_r(&t, &tm) || !std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm)) {
    return std::to_string(t);
  }
  return buf;
}

struct Row {
  std::string cols[5];  // mode, links, owner, group, size
  std::string rest;     // time, name, link target
};

// The long form of a set of entries, with ls's column alignment: counts
// and sizes to the right, names of owners and groups to the left.
void PrintLong(const std::vector<Row>& rows) {
  size_t w[5] = {};
  for (const Row& r : rows) {
    for (int i = 0; i < 5; i++) w[i] = std::max(w[i], r.cols[i].size());
  }
  for (const Row& r : rows) {
    std::printf("%-*s %*s %-*s %-*s %*s %s\n", int(w[0]), r.cols[0].c_str(), int(w[1]),
                r.cols[1].c_str(), int(w[2]), r.cols[2].c_str(), int(w[3]), r.cols[3].c_str(),
                int(w[4]), r.cols[4].c_str(), r.rest.c_str());
  }
}

Row LongRow(const Fs& fs, const std::string& path, const std::string& name,
            const struct stat& st, const LsOptions& o) {
  Row r;
  r.cols[0] = ModeString(st.st_mode);
  r.cols[1] = std::to_string(st.st_nlink);
  r.cols[2] = UserName(st.st_uid, o.numeric);
  r.cols[3] = GroupName(st.st_gid, o.numeric);
  r.cols[4] = std::to_string(st.st_size);
  r.rest = TimeString(st.st_mtim) + " " + name;
  std::string target;
  if (S_ISLNK(st.st_mode) && fs.Readlink(path, &target) == 0) r.rest += " -> " + target;
  return r;
}

// Lists directory `dir`; returns false if anything could not be listed.
bool ListDir(const Fs& fs, const std::string& dir, const LsOptions& o, bool header) {
  bool ok = true;
  std::vector<std::string> names;
  if (header) std::printf("%s:\n", dir.c_str());
  if (fs.List(dir, &names) != 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "upfs ls: %s\n", fs.Error(dir).c_str());
    return false;
  }
  std::vector<Row> rows;
  std::vector<std::string> subdirs;
  uint64_t blocks = 0;
  for (const std::string& name : names) {
    const std::string path = JoinPath(dir, name);
    struct stat st;
    if (fs.Lstat(path, &st) != 0) {  // gone since the listing: skip it, as ls does
      if (errno != ENOENT) {
        std::fprintf(stderr, "upfs ls: %s\n", fs.Error(path).c_str());
        ok = false;
      }
      continue;
    }
    if (S_ISDIR(st.st_mode)) subdirs.push_back(path);
    blocks += uint64_t(st.st_blocks);
    if (o.long_form) {
      rows.push_back(LongRow(fs, path, name, st, o));
    } else {
      std::printf("%s\n", name.c_str());
    }
  }
  if (o.long_form) {
    std::printf("total %llu\n", static_cast<unsigned long long>(blocks / 2));  // KiB, as ls
    PrintLong(rows);
  }
  if (!o.recursive) return ok;
  for (const std::string& sub : subdirs) {
    std::printf("\n");
    ok = ListDir(fs, sub, o, true) && ok;
  }
  return ok;
}

}  // namespace

int RunLs(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(ExpandShortFlags(args, {{'l', "long"}, {'R', "recursive"}, {'n', "numeric"}}),
                           {{"long"}, {"recursive"}, {"numeric"}});
  if (p.positional.size() != 1) throw UsageError("expected exactly one POOL[:PATH]");
  LsOptions o;
  o.long_form = p.Has("long");
  o.recursive = p.Has("recursive");
  o.numeric = p.Has("numeric");
  Operand op = ParseOperand(p.positional[0], /*bare_pool=*/true);
  if (!op.in_pool) return Fail("ls", op.text + ": not a pool (make one with 'upfs mkfs')");
  PoolMounts mounts;
  std::string dir;
  if (Status st = mounts.Mount(op.pool, &dir); !st.ok()) return Fail("ls", st.message());
  Fs fs(op.pool, dir);
  struct stat st;
  if (fs.Lstat(op.path, &st) != 0) return Fail("ls", fs.Error(op.path));
  if (S_ISDIR(st.st_mode)) return ListDir(fs, op.path, o, o.recursive) ? kExitOk : kExitFailure;
  if (o.long_form) {
    PrintLong({LongRow(fs, op.path, op.path, st, o)});
  } else {
    std::printf("%s\n", op.path.c_str());
  }
  return kExitOk;
}

}  // namespace upfs::cli
