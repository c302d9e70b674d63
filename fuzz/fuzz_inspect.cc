// fuzz_inspect: arbitrary bytes as a upfs file, through InspectFile with a
// full check (what `upfs fsck` and `upfs info` run). Read-only.
//
// Contract (a violation traps, and libFuzzer saves the input):
//  - no crash, hang, leak, ASan or UBSan report;
//  - an error status is EUCLEAN, EMEDIUMTYPE or EINVAL, with a message;
//    EUCLEAN comes with the problem in the report's problem list;
//  - an OK status comes with an empty problem list;
//  - a file fsck calls clean opens with upfs_open (read-only), with the
//    size, and the number of mapped blocks, the report gives.
#include "container/perfile/inspect.h"
#include "fuzz_common.h"

using namespace upfs_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Scratch& s = Scratch::Get();
  s.Write(data, size);
  const char* path = s.path().c_str();

  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(path, /*full_check=*/true, &r);
  if (!st.ok()) {
    int e = st.err();
    if (e != EUCLEAN && e != EMEDIUMTYPE && e != EINVAL)
      Violation("InspectFile failed with %s (%s)", ErrnoName(e), st.message().c_str());
    if (st.message().empty()) Violation("InspectFile failed with %s and no message", ErrnoName(e));
    if (e == EUCLEAN && r.problems.empty())
      Violation("InspectFile: EUCLEAN (%s) with an empty problem list", st.message().c_str());
  } else {
    if (!r.problems.empty())
      Violation("InspectFile: OK status but %zu problems, the first: %s", r.problems.size(),
                r.problems.front().c_str());
    if (r.format_version < upfs::format::kOldestFormatVersion ||
        r.format_version > upfs::format::kFormatVersion)
      Violation("InspectFile: clean file with format version %u", r.format_version);
    // Clean per fsck: the engine must accept it and agree on what is in it.
    int fd = upfs_open(path, O_RDONLY);
    if (fd < 0)
      Violation("InspectFile calls the file clean, upfs_open fails with %s (%s)",
                ErrnoName(errno), upfs_last_error());
    struct stat sb;
    if (upfs_fstat(fd, &sb) != 0)
      Violation("upfs_fstat of a clean file fails with %s (%s)", ErrnoName(errno),
                upfs_last_error());
    if (uint64_t(sb.st_size) != r.size)
      Violation("InspectFile says size %llu, upfs_fstat %lld", (unsigned long long)r.size,
                (long long)sb.st_size);
    // A paired block holds two (granule flips): st_blocks counts both.
    if (uint64_t(sb.st_blocks) != (r.data_blocks + r.paired_blocks) * (kB / 512))
      Violation("InspectFile says %llu data blocks and %llu shadows, upfs_fstat %lld 512-byte blocks",
                (unsigned long long)r.data_blocks, (unsigned long long)r.paired_blocks,
                (long long)sb.st_blocks);
    if (upfs_close(fd) != 0) Violation("upfs_close failed");
  }
  s.Remove();
  return 0;
}
