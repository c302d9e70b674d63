// NsIndex against a plain model of the namespace, through its three
// shapes: a delta over nothing, a delta over a frozen layer (while this
// process writes a checkpoint), and a delta over the image written from
// that frozen layer (after Publish). Random valid records (create, link,
// unlink, mkdir, rmdir, rename of files and directories across
// directories, exchange; a create may reuse a freed file's number) are
// applied; after each, every answer the index gives (Dir, Find, List,
// Nlink, ForEachDir) must be the model's.
#include "container/pool/ns_index.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/engine/memory_storage.h"

namespace upfs {
namespace {

using format::pool::FileType;
using format::pool::RecordType;

struct Model {
  struct Dir {
    uint64_t parent;
    std::map<std::string, NsEntry> names;
  };
  std::map<uint64_t, Dir> dirs;
  std::map<uint64_t, uint32_t> links;  // non-directories
  uint64_t next_ino = 2;
  // Files whose last name went: a create may take one's number again, as
  // the pool's inode allocator does (the index may still hold a count of
  // it, in any layer).
  std::vector<uint64_t> freed;
};

// Names of every kind of length a tagged slot tells apart: up to 16 bytes
// (held in the slot), 16 and 17 exactly, and longer.
std::string NameOf(uint64_t k) {
  std::string n = "n" + std::to_string(k);
  if (k % 4 == 1) n.resize(16, 'x');
  else if (k % 4 == 2) n.resize(17, 'y');
  else if (k % 4 == 3) n += "-a-name-well-past-sixteen-bytes";
  return n;
}

NsRecord RecordOf(RecordType t, FileType f, uint64_t ino, uint64_t dir, std::string_view name) {
  NsRecord r;
  r.type = t;
  r.ftype = f;
  r.ino = ino;
  r.dir1 = dir;
  r.name1 = name;
  return r;
}

class Driver {
 public:
  explicit Driver(uint64_t seed) : rng_(seed) { m_.dirs[1] = {1, {}}; }

  // A random record that fits the model (applied to the model too).
  NsRecord Next() {
    for (;;) {
      const uint64_t d1 = PickDir(), d2 = PickDir();
      auto& n1 = m_.dirs[d1].names;
      name1_ = NameOf(rng_() % 40);
      name2_ = NameOf(rng_() % 40);
      const bool has1 = n1.count(name1_) != 0;
      switch (rng_() % 7) {
        case 0:
        case 1:
          if (has1) break;
          return Create(d1);
        case 2: {
          if (has1 || m_.dirs.size() > 30) break;
          const uint64_t ino = m_.next_ino++;
          n1[name1_] = {ino, FileType::kDirectory};
          m_.dirs[ino] = {d1, {}};
          return Rec(RecordType::kMkdir, FileType::kDirectory, ino, d1, 0, 0);
        }
        case 3: {  // unlink or rmdir
          if (!has1) break;
          const NsEntry e = n1[name1_];
          if (e.type == FileType::kDirectory) {
            if (!m_.dirs[e.ino].names.empty()) break;
            m_.dirs.erase(e.ino);
          } else {
            Unref(e.ino);
          }
          n1.erase(name1_);
          return Rec(RecordType::kUnlink, e.type, e.ino, d1, 0, 0);
        }
        case 4: {  // link
          auto& n2 = m_.dirs[d2].names;
          if (!has1 || n1[name1_].type == FileType::kDirectory || n2.count(name2_)) break;
          const NsEntry e = n1[name1_];
          n2[name2_] = e;
          ++m_.links[e.ino];
          NsRecord r = Rec(RecordType::kLink, e.type, e.ino, d2, 0, 0);
          r.name1 = name2_;
          return r;
        }
        case 5: {  // rename, over a file if there is one
          auto& n2 = m_.dirs[d2].names;
          if (!has1 || (d1 == d2 && name1_ == name2_)) break;
          const NsEntry e = n1[name1_];
          if (e.type == FileType::kDirectory && IsAncestorOrSelf(e.ino, d2)) break;
          uint64_t victim = 0;
          if (n2.count(name2_)) {
            const NsEntry v = n2[name2_];
            if (v.type != e.type || v.type == FileType::kDirectory) break;
            victim = v.ino;
            Unref(v.ino);
          }
          n1.erase(name1_);
          n2[name2_] = e;
          if (e.type == FileType::kDirectory) m_.dirs[e.ino].parent = d2;
          return Rec(RecordType::kRename, e.type, e.ino, d1, d2, victim);
        }
        case 6: {  // exchange
          auto& n2 = m_.dirs[d2].names;
          if (!has1 || !n2.count(name2_) || (d1 == d2 && name1_ == name2_)) break;
          const NsEntry a = n1[name1_], b = n2[name2_];
          if (a.type == FileType::kDirectory || b.type == FileType::kDirectory) break;
          n1[name1_] = b;
          n2[name2_] = a;
          return Rec(RecordType::kExchange, a.type, a.ino, d1, d2, b.ino);
        }
      }
    }
  }

  void ExpectSame(const NsIndex& idx, const std::string& when) {
    std::set<uint64_t> seen;
    idx.ForEachDir([&](uint64_t ino, const NsDirInfo& i) {
      ASSERT_TRUE(m_.dirs.count(ino)) << when << ": directory " << ino << " listed";
      ASSERT_TRUE(seen.insert(ino).second) << when << ": directory " << ino << " listed twice";
      EXPECT_EQ(i.parent, m_.dirs[ino].parent) << when;
    });
    EXPECT_EQ(seen.size(), m_.dirs.size()) << when;
    for (auto& [ino, d] : m_.dirs) {
      NsDirInfo i;
      ASSERT_TRUE(idx.Dir(ino, &i)) << when << ": directory " << ino;
      EXPECT_EQ(i.entries, d.names.size()) << when;
      uint64_t subdirs = 0;
      for (auto& [n, e] : d.names) subdirs += e.type == FileType::kDirectory;
      EXPECT_EQ(i.subdirs, subdirs) << when;
      std::map<std::string, uint64_t> listed;
      idx.List(ino, [&](std::string_view n, const NsEntry& e) {
        EXPECT_TRUE(listed.emplace(std::string(n), e.ino).second) << when << ": " << n << " twice";
      });
      EXPECT_EQ(listed.size(), d.names.size()) << when << ": directory " << ino;
      for (int k = 0; k < 40; ++k) {
        const std::string n = "n" + std::to_string(k);
        NsEntry e;
        const bool found = idx.Find(ino, n, &e);
        auto it = d.names.find(n);
        ASSERT_EQ(found, it != d.names.end()) << when << ": " << ino << "/" << n;
        if (found) {
          EXPECT_EQ(e.ino, it->second.ino) << when;
          EXPECT_EQ(listed[n], e.ino) << when;
          const uint32_t want =
              e.type == FileType::kDirectory ? uint32_t(2 + SubdirsOf(e.ino)) : m_.links[e.ino];
          EXPECT_EQ(idx.Nlink(e.ino, e.type), want) << when << ": links of " << e.ino;
        }
      }
    }
  }

 private:
  // A new file, numbered anew or (every other time there is one) with a
  // freed file's number.
  NsRecord Create(uint64_t dir) {
    uint64_t ino = m_.next_ino;
    if (!m_.freed.empty() && rng_() % 2) {
      ino = m_.freed.back();
      m_.freed.pop_back();
    } else {
      ++m_.next_ino;
    }
    m_.dirs[dir].names[name1_] = {ino, FileType::kRegular};
    m_.links[ino] = 1;
    return Rec(RecordType::kCreate, FileType::kRegular, ino, dir, 0, 0);
  }
  void Unref(uint64_t ino) {
    if (--m_.links[ino] != 0) return;
    m_.links.erase(ino);
    m_.freed.push_back(ino);
  }
  NsRecord Rec(RecordType t, FileType f, uint64_t ino, uint64_t d1, uint64_t d2, uint64_t victim) {
    NsRecord r = RecordOf(t, f, ino, d1, name1_);
    r.dir2 = d2;
    r.victim = victim;
    r.name2 = name2_;
    return r;
  }
  uint64_t PickDir() {
    auto it = m_.dirs.begin();
    std::advance(it, long(rng_() % m_.dirs.size()));
    return it->first;
  }
  bool IsAncestorOrSelf(uint64_t a, uint64_t d) {
    for (uint64_t x = d;; x = m_.dirs[x].parent) {
      if (x == a) return true;
      if (m_.dirs[x].parent == x) return false;
    }
  }
  uint64_t SubdirsOf(uint64_t ino) {
    uint64_t n = 0;
    for (auto& [k, e] : m_.dirs[ino].names) n += e.type == FileType::kDirectory;
    return n;
  }

  std::mt19937_64 rng_;
  Model m_;
  std::string name1_, name2_;
};

// `image` (built with header *h) placed in fresh memory blocks at the
// space's end (a previous image stays intact: the frozen layer may read
// it) and opened; `verify` false skips the checksum pass, as for an image
// a test damaged on purpose. `scattered`: each block a run of its own, a
// block apart, as a pool's image placed where no run was long enough (read
// block by block, not through the flat view).
std::unique_ptr<BaseImage> PlaceImage(const std::vector<uint64_t>& image, upfs_engine_test::MemorySpace* space,
                                      format::pool::CheckpointHeader* h, bool verify, bool scattered = false) {
  const uint64_t blocks = (image.size() * 8 + format::kBlockSize - 1) / format::kBlockSize;
  const uint64_t at = space->capacity() / format::kBlockSize, stride = scattered ? 2 : 1;
  EXPECT_TRUE(space->Grow((at + blocks * stride) * format::kBlockSize).ok());
  const auto* bytes = reinterpret_cast<const char*>(image.data());
  for (uint64_t i = 0; i < blocks; ++i)
    std::memcpy(space->base() + (at + i * stride) * format::kBlockSize, bytes + i * format::kBlockSize,
                std::min<uint64_t>(format::kBlockSize, image.size() * 8 - i * format::kBlockSize));
  h->nruns = scattered ? uint32_t(blocks) : 1;
  for (uint64_t i = 0; i < (scattered ? blocks : 1); ++i)
    h->runs[i] = format::Run{uint32_t(at + i * stride), uint32_t(scattered ? 1 : blocks)};
  auto base = std::make_unique<BaseImage>();
  Status st = base->Open(BlockAccess(space), *h, 0, verify);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(base->flat(), !scattered || blocks == 1);
  return base;
}

// The image of `idx`, placed and opened (PlaceImage).
// `copied`: if given, the directories whose tables were copied as they were.
std::unique_ptr<BaseImage> WriteImage(const NsIndex& idx, upfs_engine_test::MemorySpace* space,
                                      format::pool::CheckpointHeader* h, bool tagged, bool scattered = false,
                                      uint64_t* copied = nullptr) {
  std::vector<uint64_t> image;
  std::memset(h, 0, sizeof(*h));
  idx.BuildImage(&image, h, tagged, copied);
  std::unique_ptr<BaseImage> base = PlaceImage(image, space, h, /*verify=*/true, scattered);
  EXPECT_EQ(base->tagged(), tagged);
  // Every table passes fsck's check.
  base->ForEachDir([&](const BaseDir& d) {
    std::string why;
    EXPECT_TRUE(base->CheckTable(d, &why)) << "directory " << d.ino << ": " << why;
  });
  return base;
}

// Both image formats: tagged (pools of version 3) and untagged (1 and 2).
class NsIndexLayers : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Formats, NsIndexLayers, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Tagged" : "Untagged"; });

TEST_P(NsIndexLayers, FrozenLayerAndItsImageAnswerAsTheWholeView) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Driver drv(seed);
    NsIndex idx;
    idx.Rebase(1, nullptr);
    upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{64} << 20);
    // One header per image: a BaseImage reads its header where it lies.
    std::vector<std::unique_ptr<format::pool::CheckpointHeader>> headers;
    for (int round = 0; round < 4; ++round) {
      const std::string r = "seed " + std::to_string(seed) + " round " + std::to_string(round);
      for (int i = 0; i < 150; ++i) {
        NsRecord rec = drv.Next();
        // Every other one as its committer applies it (checked against
        // this very state: the index does not look again).
        Status st = idx.Apply(rec, /*validated=*/i % 2 == 0);
        ASSERT_TRUE(st.ok()) << r << " step " << i << " record type " << int(rec.type) << " ino " << rec.ino
                             << ": " << st.message();
      }
      drv.ExpectSame(idx, r + ", one delta");
      std::shared_ptr<const NsIndex> frozen = idx.Freeze();
      ASSERT_EQ(idx.frozen(), frozen.get());
      drv.ExpectSame(idx, r + ", just frozen");
      for (int i = 0; i < 150; ++i) {
        NsRecord rec = drv.Next();
        ASSERT_TRUE(idx.Apply(rec).ok()) << r;
        if (i % 25 == 0) drv.ExpectSame(idx, r + ", over the frozen layer, step " + std::to_string(i));
      }
      drv.ExpectSame(idx, r + ", over the frozen layer");
      headers.push_back(std::make_unique<format::pool::CheckpointHeader>());
      // Every other image in runs of a block, the others in one run.
      idx.Publish(WriteImage(*frozen, &space, headers.back().get(), GetParam(), round % 2 == 1));
      EXPECT_EQ(idx.frozen(), nullptr);
      frozen.reset();
      drv.ExpectSame(idx, r + ", over the image");
    }
  }
}

// A directory no record touched since the image below keeps its table,
// copied word for word from a flat tagged image (ImageWriter::CopyDir),
// and its names too long for a slot are placed again in the new image:
// every name answers as before, in a directory of 3,000 and in one of 3,
// and fsck's check passes (WriteImage). From an image in runs, or of the
// untagged format, the table is built name by name.
TEST_P(NsIndexLayers, TablesOfUntouchedDirectoriesAreCopied) {
  upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{64} << 20);
  NsIndex idx;
  idx.Rebase(1, nullptr);
  auto apply = [&](RecordType t, FileType f, uint64_t ino, uint64_t dir, const std::string& name) {
    Status st = idx.Apply(RecordOf(t, f, ino, dir, name));
    ASSERT_TRUE(st.ok()) << name << ": " << st.message();
  };
  constexpr uint64_t kBig = 2, kSmall = 3, kBusy = 4;
  apply(RecordType::kMkdir, FileType::kDirectory, kBig, 1, "big");
  apply(RecordType::kMkdir, FileType::kDirectory, kSmall, 1, "small");
  apply(RecordType::kMkdir, FileType::kDirectory, kBusy, 1, "busy");
  uint64_t ino = 10;
  for (uint64_t k = 0; k < 3000; ++k) apply(RecordType::kCreate, FileType::kRegular, ino++, kBig, NameOf(k));
  for (uint64_t k = 0; k < 3; ++k) apply(RecordType::kCreate, FileType::kRegular, ino++, kSmall, NameOf(k + 2));
  std::vector<std::unique_ptr<format::pool::CheckpointHeader>> headers;
  uint64_t copied_from_flat = 0;
  for (int round = 0; round < 4; ++round) {
    for (uint64_t k = 0; k < 50; ++k, ++ino) apply(RecordType::kCreate, FileType::kRegular, ino, kBusy, NameOf(ino));
    std::shared_ptr<const NsIndex> frozen = idx.Freeze();
    headers.push_back(std::make_unique<format::pool::CheckpointHeader>());
    // Images of rounds 1 and 3 in runs of a block: copied from in rounds 2
    // and 4 (none), those of 0 and 2 in one run (copied from in 1 and 3).
    const bool below_flat = round % 2 == 1;
    uint64_t copied = 0;
    idx.Publish(WriteImage(*frozen, &space, headers.back().get(), GetParam(), round % 2 == 1, &copied));
    frozen.reset();
    // After round 0 only busy's table changes: the root's, big's and
    // small's are copied when the image below is flat and tagged.
    if (!GetParam() || !below_flat) {
      EXPECT_EQ(copied, 0u) << "round " << round;
    } else {
      copied_from_flat += copied;
    }
    uint64_t k_ino = 10;
    for (uint64_t k = 0; k < 3000; ++k, ++k_ino) {
      NsEntry e;
      ASSERT_TRUE(idx.Find(kBig, NameOf(k), &e)) << "round " << round << ": " << NameOf(k);
      ASSERT_EQ(e.ino, k_ino) << NameOf(k);
    }
    for (uint64_t k = 0; k < 3; ++k, ++k_ino) {
      NsEntry e;
      ASSERT_TRUE(idx.Find(kSmall, NameOf(k + 2), &e)) << "round " << round << ": " << NameOf(k + 2);
      ASSERT_EQ(e.ino, k_ino);
    }
    NsEntry e;
    EXPECT_FALSE(idx.Find(kBig, NameOf(3000), &e));
    uint64_t listed = 0;
    idx.List(kBig, [&](std::string_view, const NsEntry&) { ++listed; });
    EXPECT_EQ(listed, 3000u);
  }
  // Rounds 1 and 3 copied the root's, big's and small's tables.
  EXPECT_EQ(copied_from_flat, GetParam() ? 6u : 0u);
}

// A damaged slot of an untagged image (tagged ones hold 32-bit numbers)
// whose inode number is near 2^64: a lookup's prefetch of that inode
// wrapped its offset to a pointer before the mapping (UBSan's pointer
// overflow, found by fuzz_pool). Any number a slot holds is looked up
// without leaving the mapping, and the other names still answer.
// Records that do not fit the index (damage, or a bug) are refused as
// damage, whether the names they touch are the delta's or the image's,
// and leave those names as they were.
TEST_P(NsIndexLayers, RecordsThatDoNotFitAreRefused) {
  upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{16} << 20);
  format::pool::CheckpointHeader h;
  NsIndex idx;
  idx.Rebase(1, nullptr);
  auto rec = [](RecordType t, uint64_t ino, std::string_view n1, std::string_view n2 = {}, uint64_t victim = 0) {
    NsRecord r;
    r.type = t;
    r.ftype = FileType::kRegular;
    r.ino = ino;
    r.dir1 = 1;
    r.dir2 = 1;
    r.victim = victim;
    r.name1 = n1;
    r.name2 = n2;
    return r;
  };
  ASSERT_TRUE(idx.Apply(rec(RecordType::kCreate, 10, "old")).ok());
  std::shared_ptr<const NsIndex> frozen = idx.Freeze();
  idx.Publish(WriteImage(*frozen, &space, &h, GetParam()));
  frozen.reset();
  ASSERT_TRUE(idx.Apply(rec(RecordType::kCreate, 11, "new")).ok());
  ASSERT_TRUE(idx.Apply(rec(RecordType::kCreate, 12, "gone")).ok());
  ASSERT_TRUE(idx.Apply(rec(RecordType::kUnlink, 12, "gone")).ok());
  const NsRecord misfits[] = {
      rec(RecordType::kUnlink, 13, "none"),         // a name nobody made
      rec(RecordType::kUnlink, 12, "gone"),         // a name removed (a tombstone)
      rec(RecordType::kUnlink, 99, "old"),          // the image's name, another inode
      rec(RecordType::kUnlink, 99, "new"),          // the delta's name, another inode
      rec(RecordType::kRename, 13, "none", "x"),    // no such name
      rec(RecordType::kRename, 99, "old", "x"),     // another inode
      rec(RecordType::kRename, 12, "gone", "x"),    // removed
      rec(RecordType::kRename, 11, "new", "old"),   // onto a name, no victim
      rec(RecordType::kRename, 11, "new", "old", 99),  // onto a name, another victim
      rec(RecordType::kCreate, 14, "old"),          // a name that exists
      rec(RecordType::kCreate, 14, "new"),
  };
  for (const NsRecord& r : misfits) {
    EXPECT_EQ(idx.Apply(r).err(), EUCLEAN) << int(r.type) << " " << r.name1 << " " << r.ino;
    NsEntry e;
    EXPECT_TRUE(idx.Find(1, "old", &e) && e.ino == 10) << int(r.type) << " " << r.name1;
    EXPECT_TRUE(idx.Find(1, "new", &e) && e.ino == 11) << int(r.type) << " " << r.name1;
    EXPECT_FALSE(idx.Find(1, "gone", &e));
    EXPECT_FALSE(idx.Find(1, "x", &e));
  }
}

TEST(BaseImageDamage, SlotInodeNumbersNearTwoToThe64AreLookedUpSafely) {
  for (const uint64_t bad : {~uint64_t{0}, ~uint64_t{0} - 15, uint64_t{1} << 56, uint64_t{1} << 63}) {
    SCOPED_TRACE("inode number " + std::to_string(bad));
    NsIndex idx;
    idx.Rebase(1, nullptr);
    std::vector<std::string> names;
    for (uint64_t k = 0; k < 8; ++k) {
      names.push_back(NameOf(k));
      NsRecord r;
      r.type = RecordType::kCreate;
      r.ftype = FileType::kRegular;
      r.ino = 100 + k;
      r.dir1 = 1;
      r.name1 = names.back();
      ASSERT_TRUE(idx.Apply(r).ok());
    }
    std::vector<uint64_t> image;
    format::pool::CheckpointHeader h{};
    idx.BuildImage(&image, &h, /*tagged=*/false);
    // The first name's slot: its inode number, then its name's hash.
    size_t slot = 0;
    for (size_t w = 0; w + 1 < image.size() && slot == 0; ++w)
      if (image[w] == 100 && uint32_t(image[w + 1]) == NameHash(names[0])) slot = w;
    ASSERT_NE(slot, 0u);
    image[slot] = bad;
    upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{64} << 20);
    // Unverified: the image's checksum no longer holds, and the damage is
    // what a lookup meets (verify only adds the checksum pass).
    std::unique_ptr<BaseImage> base = PlaceImage(image, &space, &h, /*verify=*/false);
    BaseDir d;
    ASSERT_TRUE(base->FindDir(1, &d));
    for (uint64_t k = 0; k < names.size(); ++k) {
      NsEntry e;
      const bool found = base->FindName(d, names[k], NameHash(names[k]), &e);
      if (k == 0) {
        EXPECT_TRUE(!found || e.ino == bad);
      } else {
        ASSERT_TRUE(found) << names[k];
        EXPECT_EQ(e.ino, 100 + k);
      }
    }
  }
}

// Applies the record of a mkdir of directory `ino`, named "d<ino>", in `dir`.
Status ApplyMkdir(NsIndex* idx, uint64_t ino, uint64_t dir) {
  NsRecord r;
  r.type = RecordType::kMkdir;
  r.ftype = FileType::kDirectory;
  r.ino = ino;
  r.dir1 = dir;
  const std::string name = "d" + std::to_string(ino);
  r.name1 = name;
  return idx->Apply(r);
}

// The image's table of directories: every directory is found with its
// row, every other number is not, however the directories' inode numbers
// are spread (evenly, with gaps, in clusters, growing fast, with one far
// away: FindDir's thread cache is direct-mapped by a hash of the number,
// so the spreads also collide in it differently), in both formats.
TEST_P(NsIndexLayers, ImageFindsEveryDirectoryHoweverItsNumbersSpread) {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> layouts;
  auto add = [&](std::string name, auto fn, uint64_t n) {
    std::vector<uint64_t> inos;
    for (uint64_t k = 0; k < n; ++k) inos.push_back(fn(k));
    layouts.emplace_back(std::move(name), std::move(inos));
  };
  add("dense", [](uint64_t k) { return 2 + k; }, 1000);
  add("every seventh", [](uint64_t k) { return 2 + 7 * k; }, 1000);
  add("quadratic", [](uint64_t k) { return 2 + k * k; }, 1000);
  add("cubic", [](uint64_t k) { return 2 + k * k * k; }, 600);
  add("two clusters", [](uint64_t k) { return k < 300 ? 2 + k : (uint64_t{1} << 31) + k; }, 600);
  add("one far away", [](uint64_t k) { return k < 500 ? 2 + k : uint64_t{4000000000}; }, 501);
  add("one", [](uint64_t) { return uint64_t{2}; }, 1);
  for (const auto& [layout, inos] : layouts) {
    SCOPED_TRACE(layout);
    NsIndex idx;
    idx.Rebase(1, nullptr);
    for (uint64_t ino : inos) ASSERT_TRUE(ApplyMkdir(&idx, ino, 1).ok()) << ino;
    upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{64} << 20);
    format::pool::CheckpointHeader h{};
    std::unique_ptr<BaseImage> base = WriteImage(idx, &space, &h, GetParam());
    std::set<uint64_t> present(inos.begin(), inos.end());
    present.insert(1);
    for (uint64_t ino : present) {
      BaseDir d;
      ASSERT_TRUE(base->FindDir(ino, &d)) << ino;
      EXPECT_EQ(d.ino, ino);
      EXPECT_EQ(d.parent, 1u);
      EXPECT_EQ(d.subdirs, ino == 1 ? inos.size() : 0u);
    }
    std::set<uint64_t> absent = {0, *present.rbegin() + 1, UINT32_MAX, ~uint64_t{0}};
    for (uint64_t ino : present)
      for (uint64_t near : {ino - 1, ino + 1})
        if (!present.count(near)) absent.insert(near);
    for (uint64_t ino : absent) {
      BaseDir d;
      EXPECT_FALSE(base->FindDir(ino, &d)) << ino;
    }
  }
}

// A thread keeps the rows it found (FindDir's cache): an image opened after
// another, with the same directory numbers in other rows (other parents,
// other counts), answers with its own rows, on the same thread, whichever
// was looked up last; and an image opened again in the same object too.
TEST_P(NsIndexLayers, ImageRowsCachedByAThreadAnswerOnlyForTheirImage) {
  upfs_engine_test::MemorySpace space(format::kBlockSize, uint64_t{64} << 20);
  auto build = [&](uint64_t parent_of_ten, format::pool::CheckpointHeader* h) {
    NsIndex idx;
    idx.Rebase(1, nullptr);
    auto mkdir = [&](uint64_t ino, uint64_t dir) { ASSERT_TRUE(ApplyMkdir(&idx, ino, dir).ok()) << ino; };
    mkdir(2, 1);
    mkdir(3, 1);
    for (uint64_t ino = 10; ino < 200; ++ino) mkdir(ino, ino == 10 ? parent_of_ten : 1);
    return WriteImage(idx, &space, h, GetParam());
  };
  format::pool::CheckpointHeader ha{}, hb{};
  std::unique_ptr<BaseImage> a = build(2, &ha), b = build(3, &hb);
  for (int round = 0; round < 3; ++round) {
    BaseDir d;
    ASSERT_TRUE(a->FindDir(10, &d));
    EXPECT_EQ(d.parent, 2u);
    ASSERT_TRUE(b->FindDir(10, &d));
    EXPECT_EQ(d.parent, 3u);
    ASSERT_TRUE(a->FindDir(2, &d));
    EXPECT_EQ(d.subdirs, 1u);
    ASSERT_TRUE(b->FindDir(2, &d));
    EXPECT_EQ(d.subdirs, 0u);
  }
  // The object a viewed, opened again on b's header: b's rows.
  ASSERT_TRUE(a->Open(BlockAccess(&space), hb, 0, true).ok());
  BaseDir d;
  ASSERT_TRUE(a->FindDir(10, &d));
  EXPECT_EQ(d.parent, 3u);
}

}  // namespace
}  // namespace upfs
