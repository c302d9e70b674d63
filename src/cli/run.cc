// upfs run --dir DIR [--mode strict|sync] -- PROGRAM ARGS...
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"

#ifndef UPFS_LIBDIR_FROM_BINDIR
#define UPFS_LIBDIR_FROM_BINDIR "../lib"
#endif

namespace upfs::cli {

const char kRunHelp[] =
    "usage: upfs run --dir DIR [--mode strict|sync] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with the upfs LD_PRELOAD library (libupfs-preload.so, found\n"
    "in ../lib next to this binary). Regular files that the program creates\n"
    "under DIR are upfs files; files it creates elsewhere, and plain files\n"
    "already under DIR, stay plain. An existing upfs file is recognised\n"
    "wherever the program opens it. DIR is created if missing.\n"
    "\n"
    "options:\n"
    "  --dir DIR     the directory whose new files are upfs files (required)\n"
    "  --mode MODE   consistency mode of new files: strict (default) or sync\n"
    "\n"
    "The exit status is the program's (127 if it cannot be run, 2 bad usage).\n"
    "Statically linked and setuid programs, io_uring, libaio and POSIX AIO\n"
    "bypass the library; see README.md, \"Running programs on upfs\".\n"
    "\n"
    "example:\n"
    "  upfs run --dir /dev/shm/db -- sqlite3 /dev/shm/db/test.db 'select 1'\n";

namespace {

std::string PreloadLibrary() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = 0;
  std::string dir(exe);
  dir.erase(dir.rfind('/'));
  // UPFS_LIBDIR_FROM_BINDIR: where `cmake --install` puts the library,
  // relative to this binary (cmake/install.cmake); ../lib is the build tree.
  for (const char* rel : {"/" UPFS_LIBDIR_FROM_BINDIR "/libupfs-preload.so",
                          "/../lib/libupfs-preload.so", "/libupfs-preload.so"}) {
    std::string p = dir + rel;
    char canon[PATH_MAX];
    if (realpath(p.c_str(), canon)) return canon;
  }
  return "";
}

void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
        throw std::runtime_error("cannot create " + part + ": " + std::strerror(errno));
    }
  }
}

}  // namespace

int RunRun(const std::vector<std::string>& args) {
  std::string dir, mode = "strict";
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    auto value = [&](const char* name) {
      std::string flag = std::string("--") + name;
      if (a == flag) {
        if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
        return args[++i];
      }
      return a.substr(flag.size() + 1);  // --name=value
    };
    if (a == "--dir" || a.rfind("--dir=", 0) == 0) {
      dir = value("dir");
    } else if (a == "--mode" || a.rfind("--mode=", 0) == 0) {
      mode = value("mode");
    } else if (a.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + a + "'");
    } else {
      break;  // PROGRAM without "--"
    }
  }
  if (dir.empty()) throw UsageError("--dir is required");
  if (mode != "strict" && mode != "sync") throw UsageError("--mode must be strict or sync");
  if (i >= args.size()) throw UsageError("expected PROGRAM");

  MakeDirs(dir);
  char canon[PATH_MAX];
  if (!realpath(dir.c_str(), canon))
    throw std::runtime_error(dir + ": " + std::strerror(errno));
  struct stat st;
  if (stat(canon, &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(dir + ": not a directory");
  std::string lib = PreloadLibrary();
  if (lib.empty()) throw std::runtime_error("cannot find libupfs-preload.so next to upfs");

  const char* old = getenv("LD_PRELOAD");
  std::string preload = lib;
  if (old && *old) preload += std::string(":") + old;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("UPFS_DIR", canon, 1);
  setenv("UPFS_MODE", mode.c_str(), 1);

  std::vector<char*> argv;
  for (size_t j = i; j < args.size(); ++j) argv.push_back(const_cast<char*>(args[j].c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "upfs run: %s: %s\n", argv[0], std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

}  // namespace upfs::cli
