// What the engine tests over real per-file files share (engine_test.cc,
// gc_test.cc; fold_test.cc and give_back_test.cc the allocation check): an engine File opened on a host file, and the checks that a
// file's allocation state and its closed form are exact.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "container/perfile/inspect.h"
#include "container/perfile/perfile.h"
#include "engine/file.h"
#include "format/format.h"

namespace upfs {

struct OpenedFile {
  int host = -1;
  std::unique_ptr<upfs::File> file;
  ~OpenedFile() {
    file.reset();
    if (host >= 0) close(host);
  }
};

inline void OpenEngine(const std::string& path, OpenedFile* of,
                       format::Consistency c = format::Consistency::kStrict) {
  of->host = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(of->host, 0);
  Status st = OpenPerFile(of->host, path, true, c, nullptr, &of->file);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// The allocation state of an open, idle file matches its log exactly.
inline void ExpectAllocationExact(File* f) {
  uint64_t leaked = 0, unmarked = 0;
  Status st = f->AuditAllocation(&leaked, &unmarked);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(leaked, 0u) << "blocks taken that nothing references or holds";
  EXPECT_EQ(unmarked, 0u) << "referenced blocks marked free";
}

// A closed file checks clean, and its last user removed its shared state.
inline void ReportIsClean(const std::string& path) {
  FileReport r;
  Status st = InspectFile(path, true, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  EXPECT_FALSE(r.shared_state_present) << "the last user removes the shared state";
}

}  // namespace upfs
