#include "cli/pool_operand.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/cli.h"
#include "upfs/upfs.h"

namespace upfs::cli {

Operand ParseOperand(const std::string& arg, bool bare_pool) {
  Operand op;
  op.text = arg;
  op.path = arg;
  const size_t colon = arg.find(':');
  if (colon != std::string::npos && colon > 0 && IsPoolFile(arg.substr(0, colon))) {
    op.in_pool = true;
    op.pool = arg.substr(0, colon);
    op.path = arg.substr(colon + 1);
  } else if (bare_pool && IsPoolFile(arg)) {
    op.in_pool = true;
    op.pool = arg;
    op.path = "/";
  }
  if (op.in_pool && (op.path.empty() || op.path[0] != '/')) op.path = "/" + op.path;
  return op;
}

PoolMounts::~PoolMounts() {
  for (const auto& [pool, dir] : dirs_) {
    // Only a descriptor left open could refuse; the verbs close theirs.
    if (upfs_umount(dir.c_str()) != 0) {
      std::fprintf(stderr, "upfs: unmount %s: %s\n", pool.c_str(), ApiError("umount").c_str());
    }
  }
}

Status PoolMounts::Mount(const std::string& pool, std::string* dir) {
  std::error_code ec;
  std::string key = std::filesystem::canonical(pool, ec).string();
  if (ec) return Status::Error(ec.value(), pool + ": " + ec.message());
  if (auto it = dirs_.find(key); it != dirs_.end()) {
    *dir = it->second;
    return Status::OK();
  }
  std::string d = "/.upfs-cli-" + std::to_string(getpid()) + "-" + std::to_string(dirs_.size());
  if (upfs_mount(pool.c_str(), d.c_str()) != 0) {
    int err = errno;
    return Status::Error(err, pool + ": " + ApiError("mount"));
  }
  dirs_[key] = d;
  *dir = d;
  return Status::OK();
}

}  // namespace upfs::cli
