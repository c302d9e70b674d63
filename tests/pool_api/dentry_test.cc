// Dentries of the next namespace (container/pool/dentry.h): every field and
// name length written and read back, and what a reader makes of a word a
// crash lost (torn, never damage) and of a flipped bit (damage, never a
// dentry).
#include "container/pool/dentry.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "pool_api/dentry_sample.h"

namespace upfs {
namespace {

using namespace format::pool;

std::vector<uint64_t> Lines(uint32_t n) { return std::vector<uint64_t>(size_t(n) * 8, 0); }

Dentry Fresh(std::string_view name) {
  Dentry d = SampleDentry(name);
  d.flags = kDentryFresh;
  d.mode = 0644;
  d.consistency = 1;
  d.uid = 0;  // root's owner word is all ones, not zero
  d.gid = 0;
  d.ctime_ns = 1733500000123456789ull;
  return d;
}

std::string NameOf(size_t len, unsigned seed) {
  std::string s;
  for (size_t i = 0; i < len; ++i) {
    unsigned char c = static_cast<unsigned char>(1 + (i * 37 + seed) % 255);
    if (c == '/') c = 'x';
    s.push_back(static_cast<char>(c));
  }
  return s;
}

TEST(Dentry, EveryNameLengthAndKindReadsBackAsWritten) {
  for (size_t len = 1; len <= kDentryMaxName; ++len) {
    const std::string name = NameOf(len, unsigned(len));
    for (uint32_t flags : {uint32_t(kDentryFresh), 0u, uint32_t(kDentryRename), uint32_t(kDentryRename | kDentryExchange)}) {
      Dentry d = Fresh(name);
      d.flags = flags;
      d.kind = 1 + uint32_t(len % 3);
      d.owner = uint32_t(len * 17 % 4096);
      if (flags & kDentryRename) {
        d.source = DentryRef(8704 * 64 + 5, 3);
        d.replaced = (flags & kDentryExchange) ? kDentryNone : DentryRef(9000 * 64 + 1, 1);
        d.partner = (flags & kDentryExchange) ? DentryRef(9001 * 64 + 2, 9) : kDentryNone;
      }
      const uint32_t n = DentryLines(len);
      ASSERT_GE(n, 1u);
      ASSERT_LE(n, kDentryMaxLines);
      std::vector<uint64_t> w = Lines(n);
      EncodeDentry(d, w.data());
      Dentry r;
      uint32_t lines;
      std::string why;
      ASSERT_EQ(ReadDentry(w.data(), n, &r, &lines, &why), DentryRead::kValid) << len << " " << why;
      EXPECT_EQ(lines, n);
      EXPECT_EQ(r.name, name);
      EXPECT_EQ(r.state, d.state);
      EXPECT_EQ(r.kind, d.kind);
      EXPECT_EQ(r.flags, flags);
      EXPECT_EQ(r.gen, d.gen);
      EXPECT_EQ(r.owner, d.owner);
      EXPECT_EQ(DentryOwner(w[0]), d.owner);
      std::string peeked;
      EXPECT_EQ(PeekDentryName(w.data(), n, &peeked), name);
      EXPECT_TRUE(DentryNameIs(w.data(), n, name));
      std::string other = name;
      other.back() = other.back() == 'q' ? 'r' : 'q';
      EXPECT_FALSE(DentryNameIs(w.data(), n, other)) << len;
      EXPECT_FALSE(DentryNameIs(w.data(), n, name.substr(0, len - 1))) << len;
      EXPECT_EQ(r.parent, d.parent);
      EXPECT_EQ(r.ino, d.ino);
      EXPECT_EQ(r.ino_gen, d.ino_gen);
      if (flags & kDentryFresh) {
        EXPECT_EQ(r.mode, d.mode);
        EXPECT_EQ(r.consistency, d.consistency);
        EXPECT_EQ(r.uid, d.uid);
        EXPECT_EQ(r.gid, d.gid);
        EXPECT_EQ(r.ctime_ns, d.ctime_ns);
      } else {
        EXPECT_EQ(r.source, d.source);
        EXPECT_EQ(r.replaced, d.replaced);
        EXPECT_EQ(r.partner, d.partner);
      }
    }
  }
  EXPECT_EQ(DentryLines(8), 1u);
  EXPECT_EQ(DentryLines(9), 2u);
  EXPECT_EQ(DentryLines(255), 6u);
}

TEST(Dentry, AStateChangeIsOneWordAndKeepsTheChecksum) {
  const std::string name = NameOf(100, 1);
  std::vector<uint64_t> w = Lines(DentryLines(100));
  Dentry d = Fresh(name);
  d.state = kDentryStatePending;
  EncodeDentry(d, w.data());
  for (uint64_t s : {kDentryStateLive, kDentryStateDead, kDentryStatePending}) {
    w[0] = WithDentryState(w[0], s);
    Dentry r;
    uint32_t lines;
    std::string why;
    ASSERT_EQ(ReadDentry(w.data(), 64, &r, &lines, &why), DentryRead::kValid) << why;
    EXPECT_EQ(r.state, s);
  }
}

// A crash may lose any word of a dentry being written: it reads as zero
// (lines are zero before a dentry goes into them), and the dentry as torn.
TEST(Dentry, AnyWordLostReadsAsTornNeverAsDamage) {
  for (size_t len : {5, 40, 255}) {
    const std::string name = NameOf(len, 3);
    const uint32_t n = DentryLines(len);
    std::vector<uint64_t> w = Lines(n);
    EncodeDentry(Fresh(name), w.data());
    for (size_t i = 0; i < w.size(); ++i) {
      std::vector<uint64_t> t = w;
      t[i] = 0;
      Dentry r;
      uint32_t lines;
      std::string why;
      const DentryRead got = ReadDentry(t.data(), n, &r, &lines, &why);
      if (i == 0)
        EXPECT_EQ(got, DentryRead::kEmpty) << "the head word lost: its lines read one by one";
      else
        EXPECT_EQ(got, DentryRead::kTorn) << "word " << i << " of " << len << "-byte name: " << why;
    }
  }
}

// A dentry written over freed lines, each keeping the generation of the
// dentry that covered it: a word lost reads as the free line held it, and
// the dentry as torn.
TEST(Dentry, AWordLostOverFreedLinesReadsAsTorn) {
  const std::string name = NameOf(150, 5);
  const uint32_t n = DentryLines(150);
  std::vector<uint64_t> freed = Lines(n);
  for (uint32_t l = 0; l < n; ++l) freed[l * 8] = FreedDentryLine(6);
  Dentry r;
  uint32_t lines;
  std::string why;
  ASSERT_EQ(ReadDentry(freed.data(), n, &r, &lines, &why), DentryRead::kEmpty);
  EXPECT_EQ(DentryLineGen(freed[0]), 6u);
  Dentry d = Fresh(name);
  d.gen = DentryLineGen(freed[0]) + 1;
  std::vector<uint64_t> w = freed;
  EncodeDentry(d, w.data());
  EXPECT_EQ(DentryLineGen(w[0]), 7u);
  for (size_t i = 1; i < w.size(); ++i) {
    std::vector<uint64_t> t = w;
    t[i] = freed[i];
    ASSERT_EQ(ReadDentry(t.data(), n, &r, &lines, &why), DentryRead::kTorn) << "word " << i << ": " << why;
  }
}

// Damage to a written dentry (a flipped bit, no word lost) is reported,
// never read as a dentry, including a flipped state bit.
TEST(Dentry, AnyFlippedBitIsDamage) {
  const std::string name = NameOf(70, 9);
  const uint32_t n = DentryLines(70);
  std::vector<uint64_t> w = Lines(n);
  EncodeDentry(Fresh(name), w.data());
  int damaged = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    for (int bit = 0; bit < 64; ++bit) {
      std::vector<uint64_t> t = w;
      t[i] ^= uint64_t{1} << bit;
      if (t[i] == 0) continue;  // a lost word, above
      Dentry r;
      uint32_t lines;
      std::string why;
      const DentryRead got = ReadDentry(t.data(), n, &r, &lines, &why);
      if (i == 0 && (got == DentryRead::kContinuation || got == DentryRead::kEmpty)) continue;
      ASSERT_EQ(got, DentryRead::kDamaged) << "word " << i << " bit " << bit;
      EXPECT_FALSE(why.empty());
      ++damaged;
    }
  }
  EXPECT_GT(damaged, 1000);
}

// Bytes past the name are padding as the writer writes it: other bytes
// there, even under a right checksum, are damage (the reader accepts only
// what the writer writes; fuzz_dentry finds a reader without this check).
TEST(Dentry, PaddingOtherThanTheWritersIsDamage) {
  const std::string name = NameOf(20, 2);
  const uint32_t n = DentryLines(20);
  std::vector<uint64_t> w = Lines(n);
  EncodeDentry(Fresh(name), w.data());
  reinterpret_cast<unsigned char*>(w.data())[64 + 8 + (20 - 8)] = 'p';  // the first byte past the name
  w[3] = (w[3] & 0xffffffff) | uint64_t(DentryChecksum(w.data(), n)) << 32;
  Dentry r;
  uint32_t lines;
  std::string why;
  EXPECT_EQ(ReadDentry(w.data(), n, &r, &lines, &why), DentryRead::kDamaged);
  EXPECT_EQ(why, "name padding");
}

TEST(Dentry, ContinuationsAndRunsPastTheBlockAreToldApart) {
  const std::string name = NameOf(200, 4);
  const uint32_t n = DentryLines(200);
  std::vector<uint64_t> w = Lines(n);
  EncodeDentry(Fresh(name), w.data());
  Dentry r;
  uint32_t lines;
  std::string why;
  EXPECT_EQ(ReadDentry(w.data() + 8, n - 1, &r, &lines, &why), DentryRead::kContinuation);
  EXPECT_EQ(lines, 1u);
  EXPECT_EQ(ReadDentry(w.data(), n - 1, &r, &lines, &why), DentryRead::kDamaged);
  EXPECT_NE(why.find("block"), std::string::npos) << why;
  std::vector<uint64_t> empty = Lines(1);
  EXPECT_EQ(ReadDentry(empty.data(), 1, &r, &lines, &why), DentryRead::kEmpty);
}

// Whatever a line holds, reading it answers and stays inside the lines it
// was given (ASan checks the second part).
TEST(Dentry, RandomLinesAreReadWithoutHarm) {
  std::mt19937_64 rng(12345);
  int valid = 0;
  for (int round = 0; round < 200000; ++round) {
    const uint32_t left = 1 + uint32_t(rng() % kDentryMaxLines);
    std::vector<uint64_t> t(size_t(left) * 8);
    for (auto& x : t) x = rng();
    if (round % 2) {  // a plausible head: small lines and name length
      const uint64_t len = 1 + rng() % 255;
      t[0] = (t[0] & ~uint64_t{0x3fffff}) | (rng() % 3 + 1) | uint64_t(DentryLines(len)) << 2 | len << 10;
    }
    Dentry r;
    uint32_t lines;
    std::string why;
    valid += ReadDentry(t.data(), left, &r, &lines, &why) == DentryRead::kValid;
    ASSERT_LE(lines, left);
  }
  EXPECT_EQ(valid, 0);
}

}  // namespace
}  // namespace upfs
