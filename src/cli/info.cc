// upfs info FILE
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "container/perfile/inspect.h"

namespace upfs::cli {

const char kInfoHelp[] =
    "usage: upfs info FILE\n"
    "\n"
    "Shows what a upfs file holds, without changing it:\n"
    "  header        format version, file id, creation time, consistency mode\n"
    "  size          the virtual file size (what fstat reports)\n"
    "  log           length of the metadata log chain, in blocks and entries\n"
    "  blocks        how the host file's 4 KiB blocks are used: header, data,\n"
    "                log, overflow, free\n"
    "  medium        dax, tmpfs or page-cache, and what survives which crash\n"
    "  shared state  the allocation state in /dev/shm: whether it exists, how\n"
    "                many processes have the file open, leaked blocks if known\n"
    "\n"
    "FILE may be a pool (see 'upfs mkfs'); then it shows the pool's format\n"
    "version, its files, directories, symbolic links and extra hard links,\n"
    "inodes (and orphans), the namespace log's length and last checkpoint,\n"
    "space used and free, the medium, the processes attached and the state\n"
    "of the volatile area.\n"
    "\n"
    "For a full check of every structure use 'upfs fsck FILE'.\n"
    "\n"
    "Exit status: 0 success; 1 if FILE cannot be read, is not a upfs file, or\n"
    "is damaged (the message names the damaged structure); 2 bad usage.\n"
    "\n"
    "example:\n"
    "  upfs info /dev/shm/data.upfs\n";

namespace {

// What the mode promises on this medium: on a page-cache file system a write
// is durable against power loss only after fsync (see "durability").
std::string ConsistencyLine(const std::string& c, const std::string& medium) {
  bool at_fsync = medium == "page-cache";
  if (c == "strict")
    return at_fsync ? "strict (every write atomic; durable at fsync on this medium)"
                    : "strict (every write atomic and durable when it returns)";
  if (c == "sync")
    return at_fsync ? "sync (overwrites in place, not atomic; durable at fsync on this medium)"
                    : "sync (overwrites in place: durable on return, not atomic)";
  return c;
}

}  // namespace

std::string Blocks(uint64_t n) { return WithCommas(n) + " (" + HumanBytes(n * 4096) + ")"; }

void Row(const char* key, const std::string& value) {
  std::printf("%-16s %s\n", key, value.c_str());
}

void PrintSharedState(const FileReport& r) {
  std::string s;
  if (!r.shared_state_present) {
    s = "absent (no process has the file open; rebuilt from the log at the next open)";
  } else {
    s = "present, " + std::to_string(r.live_processes) + " live process" +
        (r.live_processes == 1 ? "" : "es");
  }
  Row("shared state:", s);
  if (r.leaked_blocks >= 0) {
    Row("leaked blocks:", WithCommas(uint64_t(r.leaked_blocks)) +
                              (r.leaked_blocks > 0 ? " (reclaimed at the next rebuild)" : ""));
  } else {
    Row("leaked blocks:", r.shared_state_present ? "unknown (the shared state is in use)"
                                                 : "unknown (no shared state)");
  }
}

int RunInfo(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {});
  if (p.positional.size() != 1) throw UsageError("expected exactly one FILE");
  const std::string& path = p.positional[0];
  if (IsPoolFile(path)) return RunPoolInfo(path);

  FileReport r;
  Status st = InspectFile(path, /*full_check=*/false, &r);
  if (!st.ok()) {
    if (st.err() == EMEDIUMTYPE) return Fail("info", path + ": not a upfs file (" + st.message() + ")");
    if (st.err() == EUCLEAN) {
      return Fail("info", path + ": damaged: " + st.message() + " (run 'upfs fsck " + path +
                              "' for every problem)");
    }
    return Fail("info", path + ": " + st.ToString());
  }

  uint64_t used = r.data_blocks + r.paired_blocks + r.log_blocks + r.overflow_blocks;
  Row("file:", path);
  Row("format version:", std::to_string(r.format_version));
  char id[32];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(r.file_id));
  Row("file id:", id);
  Row("created:", FormatTimeNs(r.created_ns));
  Row("consistency:", ConsistencyLine(r.consistency, r.medium));
  Row("size:", WithCommas(r.size) + " bytes (" + HumanBytes(r.size) + ")");
  Row("log:", WithCommas(r.log_blocks) + " block" + (r.log_blocks == 1 ? "" : "s") + ", " +
                  WithCommas(r.log_entries) + " entr" + (r.log_entries == 1 ? "y" : "ies"));
  if (r.patch_count)
    Row("patches:", WithCommas(r.patch_count) + " live (" + WithCommas(r.patch_bytes) + " bytes in the log) on " +
                        WithCommas(r.patched_blocks) + " block" + (r.patched_blocks == 1 ? "" : "s"));
  Row("blocks:", WithCommas(r.capacity_blocks) + " of 4 KiB (host file " +
                     HumanBytes(r.capacity_blocks * 4096) + ")");
  Row("  data:", Blocks(r.data_blocks));
  if (r.paired_blocks)
    Row("  shadows:", Blocks(r.paired_blocks) + " (granule flips' second homes)");
  Row("  log:", Blocks(r.log_blocks));
  Row("  overflow:", Blocks(r.overflow_blocks));
  if (r.capacity_blocks >= used + r.free_blocks) {
    // Block 0 (the header) and anything the engine does not classify.
    Row("  header/other:", Blocks(r.capacity_blocks - used - r.free_blocks));
  }
  Row("  free:", Blocks(r.free_blocks));
  Row("medium:", r.medium);
  Row("durability:", r.durability);
  PrintSharedState(r);
  if (!r.problems.empty()) {
    for (const std::string& pr : r.problems) std::printf("problem:         %s\n", pr.c_str());
    return Fail("info", path + ": damaged (" + std::to_string(r.problems.size()) + " problem" +
                            (r.problems.size() == 1 ? "" : "s") + ")");
  }
  return kExitOk;
}

}  // namespace upfs::cli
