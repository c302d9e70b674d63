// The next namespace's tables over its dentries (container/pool/
// dentry_tables.h): recovery's live dentries rebuilt into each
// directory's SharedDirTable, found by name and listed, and nothing else.
#include "container/pool/dentry_tables.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <deque>
#include <map>
#include <set>
#include <string>

#include "pool_api/dentry_memory_store.h"
#include "pool_api/dentry_sample.h"

namespace upfs {
namespace {

using namespace format::pool;

// Table memory in one mapping, never reused (the tests end before it fills).
class HeapTables final : public TableMemory {
 public:
  HeapTables() {
    base_ = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  ~HeapTables() { munmap(base_, kBytes); }
  Status Allocate(uint64_t bytes, uint64_t* handle) override {
    *handle = next_;
    next_ += (bytes + 63) / 64 * 64;
    return next_ <= kBytes ? Status::OK() : Status::Error(ENOMEM, "test tables full");
  }
  char* At(uint64_t handle) const override { return base_ + handle; }
  void Retire(uint64_t) override {}
  uint32_t Self() const override { return 0; }
  bool Alive(uint32_t) override { return true; }

 private:
  static constexpr uint64_t kBytes = uint64_t{64} << 20;
  char* base_;
  uint64_t next_ = 64;
};

constexpr uint64_t kDir = 139265, kOther = 139266;

class DentryTablesTest : public ::testing::Test {
 protected:
  MemoryStore store{256};
  DentryArena arena{&store};
  HeapTables tables;
  DentryNames names{&store, 0x5eed5eed12345678ull};
  std::map<uint64_t, std::atomic<uint64_t>> anchors;  // directory -> its table's anchor
  SampleWriter writer{&arena, &store};
  uint64_t Write(const std::string& name, uint64_t parent, uint64_t ino,
                 uint64_t state = kDentryStateLive, uint32_t flags = 0, uint64_t source = kDentryNone) {
    return writer.Write(name, parent, ino, state, flags, source).line;
  }
  void Rebuild() {
    RecoveredDentries r;
    ASSERT_TRUE(RecoverDentries(&store, &r).ok());
    ASSERT_TRUE(RebuildTables(&tables, &names, r, [&](uint64_t dir) { return &anchors[dir]; }).ok());
  }
  uint64_t Find(uint64_t dir, const std::string& name) {
    SharedDirTable t(&tables, &names, &anchors[dir]);
    return t.Find(names.Hash(name), [&](uint64_t ref) { return names.Names(ref, dir, name); });
  }
  std::set<uint64_t> List(uint64_t dir) {
    SharedDirTable t(&tables, &names, &anchors[dir]);
    std::set<uint64_t> out;
    t.Scan(0, true, [&](uint64_t, const uint64_t* refs, size_t n) {
      out.insert(refs, refs + n);
      return true;
    });
    return out;
  }
};

TEST_F(DentryTablesTest, LiveNamesAreRebuiltIntoTheirDirectoriesTables) {
  std::set<uint64_t> in_dir, in_other;
  for (int i = 0; i < 500; ++i) in_dir.insert(Write("f" + std::to_string(i), kDir, 139300 + uint64_t(i)));
  const uint64_t a = Write("a", kOther, 140000);
  const uint64_t renamed = Write("moved-here", kDir, 140000, kDentryStateLive, kDentryRename,
                                 DentryRef(a, DentryLineGen(store.Line(a)[0])));
  in_dir.insert(renamed);
  Write("dead", kDir, 140001, kDentryStateDead);
  Write("pending", kOther, 140002, kDentryStatePending);
  in_other.insert(Write("same-name-elsewhere", kOther, 140003));
  Write("same-name-elsewhere", kDir, 140004, kDentryStateDead);
  Rebuild();
  for (int i = 0; i < 500; ++i) ASSERT_NE(Find(kDir, "f" + std::to_string(i)), 0u) << i;
  EXPECT_EQ(Find(kDir, "moved-here"), renamed);
  EXPECT_EQ(Find(kOther, "a"), 0u) << "superseded by the rename";
  EXPECT_EQ(Find(kDir, "dead"), 0u);
  EXPECT_EQ(Find(kOther, "pending"), 0u);
  EXPECT_EQ(Find(kDir, "same-name-elsewhere"), 0u) << "a name is looked up in its own directory";
  EXPECT_NE(Find(kOther, "same-name-elsewhere"), 0u);
  EXPECT_EQ(List(kDir), in_dir);
  EXPECT_EQ(List(kOther), in_other);
  EXPECT_EQ(SharedDirTable(&tables, &names, &anchors[kDir]).Entries(), 501);
}

TEST_F(DentryTablesTest, ANamesHashIsKeyedPerPool) {
  DentryNames other(&store, 1);
  EXPECT_NE(names.Hash("same"), other.Hash("same"));
  const uint64_t line = Write("same", kDir, 139300);
  EXPECT_EQ(names.HashOf(line), names.Hash("same"));
  EXPECT_EQ(names.OwnerOf(line), 0u);
}

}  // namespace
}  // namespace upfs
