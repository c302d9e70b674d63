// upfs info POOL and upfs fsck POOL: the pool forms of info and fsck,
// chosen when the file carries the pool magic.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cli/cli.h"
#include "container/pool/pool_check.h"
#include "container/pool/pool_format.h"

namespace upfs::cli {

bool IsPoolFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char magic[sizeof(format::pool::kPoolMagic)];
  const bool pool = pread(fd, magic, sizeof(magic), 0) == ssize_t(sizeof(magic)) &&
                    std::memcmp(magic, format::pool::kPoolMagic, sizeof(magic)) == 0;
  close(fd);
  return pool;
}

namespace {

std::string Plural(uint64_t n, const char* one, const char* many) {
  return WithCommas(n) + " " + (n == 1 ? one : many);
}

}  // namespace

int RunPoolInfo(const std::string& path) {
  PoolReport r;
  Status st = CheckPool(path, &r);
  if (!st.ok()) {
    if (st.err() == EUCLEAN)
      return Fail("info", path + ": damaged: " + st.message() + " (run 'upfs fsck " + path +
                              "' for every problem)");
    return Fail("info", path + ": " + st.ToString());
  }
  Row("pool:", path);
  // What the version means for the builds that may share the pool
  // (docs/format.md, "Pools, format version 10").
  Row("format:", "version " + std::to_string(r.version) +
                     (r.version >= format::pool::kFirstGiveBackPoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips with anywhere "
                            "shadows in files' logs, a namespace log reserve, one-wait namespace commits "
                            "and creates, free space given back)"
                      : r.version >= format::pool::kFirstFreshCreatePoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips with anywhere "
                            "shadows in files' logs, a namespace log reserve, one-wait namespace commits "
                            "and creates)"
                      : r.version >= format::pool::kFirstOneWaitPoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips with anywhere "
                            "shadows in files' logs, a namespace log reserve, one-wait namespace commits)"
                      : r.version >= format::pool::kFirstLogReservePoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips with anywhere "
                            "shadows in files' logs, a namespace log reserve)"
                      : r.version >= format::pool::kFirstAnywhereShadowPoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips with anywhere "
                            "shadows in files' logs)"
                      : r.version >= format::pool::kFirstGranulePoolVersion
                          ? " (tagged checkpoint images, checked appends and granule flips in files' logs)"
                      : r.version >= format::pool::kFirstCheckedAppendPoolVersion
                          ? " (tagged checkpoint images, checked appends in files' logs)"
                      : r.version >= format::pool::kFirstTaggedPoolVersion ? " (tagged checkpoint images)"
                      : r.version >= format::pool::kFirstPatchPoolVersion
                          ? " (untagged checkpoint images, patches in files' logs)"
                          : " (untagged checkpoint images, no patches)"));
  Row("namespace:", Plural(r.directories, "directory", "directories") + ", " +
                        Plural(r.files, "file", "files") + ", " +
                        Plural(r.symlinks, "symbolic link", "symbolic links") + ", " +
                        Plural(r.extra_links, "extra hard link", "extra hard links"));
  Row("inodes:", WithCommas(r.inodes_in_use) + " in use in " + Plural(r.inode_blocks, "block", "blocks") +
                     (r.orphans ? ", " + WithCommas(r.orphans) + " orphaned (freed at the next recovery)" : ""));
  Row("namespace log:", Plural(r.log_blocks, "block", "blocks") + ", " +
                            Plural(r.log_records, "record", "records") + "; " +
                            (r.checkpoint_number ? "checkpoint " + std::to_string(r.checkpoint_number) +
                                                       " (" + Plural(r.checkpoint_entries, "entry", "entries") +
                                                       " in " + Plural(r.checkpoint_image_blocks, "block", "blocks") +
                                                       ")"
                                                 : std::string("no checkpoint yet")) +
                            ", the next after " + Plural(r.checkpoint_interval_blocks, "block", "blocks") +
                            (r.version >= format::pool::kFirstLogReservePoolVersion
                                 ? "; " + Plural(r.log_reserve_blocks, "block", "blocks") + " in reserve"
                                 : std::string()));
  Row("space:", WithCommas(r.capacity_blocks) + " blocks of 4 KiB (pool file " + HumanBytes(r.pool_bytes) + ")");
  // The fixed header (superblock and volatile area: format.md, "Pools")
  // apart, so that an empty pool does not read as 34 MiB of someone's data.
  const uint64_t header = std::min<uint64_t>(format::pool::kDataStart, r.referenced_blocks);
  const uint64_t names = r.referenced_blocks - header - std::min(r.file_blocks, r.referenced_blocks - header);
  Row("  used:", Blocks(r.referenced_blocks) + ": pool header " + Blocks(header) + ", namespace " +
                     Blocks(names) + ", files " + Blocks(r.file_blocks));
  Row("  free:", Blocks(r.capacity_blocks - std::min(r.capacity_blocks, r.referenced_blocks)));
  if (r.data_runs)
    Row("  file data:", Plural(r.data_blocks, "block", "blocks") + " in " + Plural(r.data_runs, "run", "runs") +
                            " (" + HumanBytes(r.data_blocks * 4096 / r.data_runs) + " per run)");
  Row("medium:", r.medium + ": " + r.durability);
  Row("processes:", r.attached_processes ? "attached" : "none attached");
  Row("volatile area:", r.clean ? "clean" : "to be rebuilt by the next attach");
  if (!r.torn_commit.empty())
    Row("cut short:", "a commit a crash interrupted, at " + r.torn_commit + " (discarded by the next attach)");
  if (r.images_from_records)
    Row("new files:", Plural(r.images_from_records, "inode", "inodes") +
                          " to be written from their create records by the next attach");
  if (r.leaked_blocks >= 0) Row("leaked blocks:", WithCommas(uint64_t(r.leaked_blocks)));
  if (r.given_back_blocks > 0)
    Row("given back:", HumanBytes(uint64_t(r.given_back_blocks) * 4096) +
                           " of free space, holes in the pool file (taken back as the pool fills)");
  for (const std::string& p : r.problems) std::printf("problem: %s\n", p.c_str());
  return r.problems.empty() ? 0 : 1;
}

int RunPoolFsck(const std::string& path) {
  PoolReport r;
  Status st = CheckPool(path, &r);
  if (!st.ok() && st.err() != EUCLEAN) {
    std::printf("%s: %s\n", path.c_str(), st.message().c_str());
    return 1;
  }
  if (!st.ok()) r.problems.push_back(st.message());
  for (const std::string& p : r.problems) std::printf("problem: %s\n", p.c_str());
  std::printf("%s: %s directories, %s files, %s symbolic links, %s orphaned inodes, %s log records\n",
              path.c_str(), WithCommas(r.directories).c_str(), WithCommas(r.files).c_str(),
              WithCommas(r.symlinks).c_str(), WithCommas(r.orphans).c_str(),
              WithCommas(r.log_records).c_str());
  if (!r.torn_commit.empty())
    std::printf("%s: a commit a crash interrupted, at %s (discarded by the next recovery)\n", path.c_str(),
                r.torn_commit.c_str());
  if (r.images_from_records)
    std::printf("%s: %s new inodes to be written from their create records by the next recovery\n",
                path.c_str(), WithCommas(r.images_from_records).c_str());
  if (r.leaked_blocks > 0)
    std::printf("%s: %s leaked blocks (reclaimed at the next recovery)\n", path.c_str(),
                WithCommas(uint64_t(r.leaked_blocks)).c_str());
  std::printf("%s: %s\n", path.c_str(), r.problems.empty() ? "clean" : "DAMAGED");
  return r.problems.empty() ? 0 : 1;
}

}  // namespace upfs::cli
