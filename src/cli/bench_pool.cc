// upfs bench --pool: the pool, and the rounds of namespace operations. The
// upfs side works in a pool mounted in this process, the kernel side in a
// directory next to the pool file; both by path, so that every operation
// pays for its path's resolution. The file workloads on pool files are the
// ordinary rounds (bench_rounds.cc) on paths inside the mount.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_internal.h"
#include "cli/bench_ns.h"
#include "upfs/upfs.h"

namespace upfs::cli::bench {

namespace {

// Removes directory `dir` of the pool and everything below it.
Status RemovePoolTree(const std::string& dir) {
  UPFS_DIR* d = upfs_opendir(dir.c_str());
  if (!d) return errno == ENOENT ? Status::OK() : SideError(true, "list " + dir, errno);
  std::vector<std::string> names;
  while (struct dirent* e = upfs_readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  upfs_closedir(d);
  for (const std::string& n : names) {
    const std::string p = dir + "/" + n;
    struct stat st;
    if (upfs_lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      UPFS_RETURN_IF_ERROR(RemovePoolTree(p));
    } else if (upfs_unlink(p.c_str()) != 0) {
      return SideError(true, "remove " + p, errno);
    }
  }
  return upfs_rmdir(dir.c_str()) == 0 ? Status::OK() : SideError(true, "remove " + dir, errno);
}

// Makes the pool file `file` and mounts it at `mount` (a made-up
// directory: the C API needs none in the kernel).
Status MakeAndMountPool(const std::string& file, const std::string& mount) {
  if (upfs_mkfs(file.c_str(), 0) != 0) return SideError(true, "make pool " + file, errno);
  if (upfs_mount(file.c_str(), mount.c_str()) != 0) return SideError(true, "mount " + file, errno);
  return Status::OK();
}

// Unmounts `*mount` (pool file `file`) if mounted; a failure is reported,
// not returned (cleanup goes on). The pool file goes with the bench
// directory.
void UnmountPool(std::string* mount, const std::string& file) {
  if (mount->empty()) return;
  if (upfs_umount(mount->c_str()) != 0) {
    std::fprintf(stderr, "upfs bench: %s\n", ApiError("unmount " + file).c_str());
  }
  mount->clear();
}

}  // namespace

Status Bench::SetupPool() {
  pool_file_ = bench_dir_ + "/pool";
  const std::string mount = "/.upfs-bench-" + std::to_string(getpid());
  UPFS_RETURN_IF_ERROR(MakeAndMountPool(pool_file_, mount));
  mount_dir_ = mount;
  pool_settle_fd_ = upfs_open((mount + "/settle").c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (pool_settle_fd_ < 0) return SideError(true, "create " + mount + "/settle", errno);
  SideState& u = sides_[0];
  u.data_path = mount + "/data";
  u.append_path = mount + "/append";
  u.small_path = mount + "/small";
  u.ns_dir = mount + "/ns";
  sides_[1].ns_dir = bench_dir_ + "/ns.kernel";
  return Status::OK();
}

Status Bench::SetupSecondPool() {
  if (!second_mount_dir_.empty()) return Status::OK();
  second_pool_file_ = bench_dir_ + "/pool-2";
  const std::string mount = mount_dir_ + "-2";
  UPFS_RETURN_IF_ERROR(MakeAndMountPool(second_pool_file_, mount));
  second_mount_dir_ = mount;
  if (upfs_mkdir((mount + "/ns").c_str(), 0755) != 0) return SideError(true, "mkdir " + mount + "/ns", errno);
  return Status::OK();
}

void Bench::CleanupPool() {
  UnmountPool(&second_mount_dir_, second_pool_file_);
  if (pool_settle_fd_ >= 0) upfs_close(pool_settle_fd_);
  pool_settle_fd_ = -1;
  UnmountPool(&mount_dir_, pool_file_);
}

// The workload's directory, with its `w.io` files ("aN" for rename, "fN"
// else; 4 KiB each for open-close, as in open-close, else empty).
Status Bench::PrepareNamespace(const Workload& w, SideState* s) {
  const Ns ns{s->upfs};
  if (ns.Mkdir(s->ns_dir.c_str()) != 0) return SideError(s->upfs, "mkdir " + s->ns_dir, errno);
  s->renamed = 0;
  Names names(s->ns_dir, w.kind == Kind::kNsRename ? "a" : "f");
  const size_t bytes = w.kind == Kind::kNsOpenClose || w.kind == Kind::kNsStatData ? 4096 : 0;
  if (w.io) status_.Show("making " + WithCommas(w.io) + " files (" + (s->upfs ? "upfs" : "kernel") + ")");
  for (uint64_t i = 0; i < w.io; i++) {
    if (g_interrupted) return Interrupted();
    const int fd = ns.Open(names(i), O_WRONLY | O_CREAT | O_EXCL);
    if (fd < 0) return SideError(s->upfs, std::string("create ") + names(i), errno);
    const bool ok = !bytes || ns.Write(fd, wbuf_.get(), bytes);
    const int err = errno;
    ns.Close(fd);
    if (!ok) return SideError(s->upfs, std::string("write ") + names(i), err);
  }
  return Status::OK();
}

Status Bench::FinishNamespace(SideState* s) {
  if (s->upfs) return RemovePoolTree(s->ns_dir);
  std::error_code ec;
  std::filesystem::remove_all(s->ns_dir, ec);
  return ec ? Status::Error(ec.value(), "kernel: remove " + s->ns_dir + ": " + ec.message())
            : Status::OK();
}

}  // namespace upfs::cli::bench
