// upfs fsck FILE
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "container/perfile/inspect.h"

namespace upfs::cli {

const char kFsckHelp[] =
    "usage: upfs fsck FILE\n"
    "\n"
    "Verifies every structure of a upfs file without changing it: the header\n"
    "and its checksum, the log chain, every log entry and extended payload, the\n"
    "overflow blocks and the block map (no block referenced twice, nothing\n"
    "past the end of the host file). Prints each problem found, naming the\n"
    "damaged structure, and the number of leaked blocks (blocks the shared\n"
    "allocation state marks used that nothing references; left by crashed\n"
    "processes, harmless, and reclaimed when the state is next rebuilt).\n"
    "\n"
    "The last line says either 'FILE: clean' or 'FILE: DAMAGED'.\n"
    "\n"
    "Exit status: 0 clean; 1 damaged, not a upfs file, or unreadable;\n"
    "2 bad usage.\n"
    "\n"
    "example:\n"
    "  upfs fsck /dev/shm/data.upfs && echo ok\n";

int RunFsck(const std::vector<std::string>& args) {
  ParsedArgs p = ParseArgs(args, {});
  if (p.positional.size() != 1) throw UsageError("expected exactly one FILE");
  const std::string& path = p.positional[0];
  if (IsPoolFile(path)) return RunPoolFsck(path);

  FileReport r;
  Status st = InspectFile(path, /*full_check=*/true, &r);
  bool damaged = !r.problems.empty() || st.err() == EUCLEAN;
  if (!st.ok() && !damaged) {
    if (st.err() == EMEDIUMTYPE) {
      std::printf("%s: not a upfs file (%s)\n", path.c_str(), st.message().c_str());
    } else {
      std::printf("%s: cannot check: %s\n", path.c_str(), st.ToString().c_str());
    }
    return kExitFailure;
  }
  if (damaged && r.problems.empty()) r.problems.push_back(st.message());

  std::printf("checked %s: format v%u, %s mode, %s, %s log blocks, %s entries\n", path.c_str(),
              r.format_version, r.consistency.empty() ? "?" : r.consistency.c_str(),
              HumanBytes(r.size).c_str(), WithCommas(r.log_blocks).c_str(),
              WithCommas(r.log_entries).c_str());
  for (const std::string& pr : r.problems) std::printf("problem: %s\n", pr.c_str());
  if (r.cut_short_words)
    std::printf("%s: a commit a crash interrupted at the end of the log (%u words; cleared by the next open)\n",
                path.c_str(), r.cut_short_words);
  PrintSharedState(r);
  if (damaged) {
    std::printf("%s: DAMAGED: %zu problem%s found\n", path.c_str(), r.problems.size(),
                r.problems.size() == 1 ? "" : "s");
    return kExitFailure;
  }
  std::printf("%s: clean\n", path.c_str());
  return kExitOk;
}

}  // namespace upfs::cli
