// NeedsSplit (posix/path_shape.h) against the rule it keeps, byte by byte:
// "//" anywhere, or a component "." or ".." (between slashes, or last).
// The vector scan looks at 16 bytes at a time and at candidates only, so
// every length around its block edges and every place of a candidate
// inside a block is tried.
#include "posix/path_shape.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace upfs {
namespace {

bool Rule(const std::string& p) {
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    if (p[i] != '/') continue;
    if (p[i + 1] == '/') return true;
    if (p[i + 1] != '.') continue;
    size_t after = i + 2;
    if (after < p.size() && p[after] == '.') ++after;
    if (after == p.size() || p[after] == '/') return true;
  }
  return false;
}

TEST(PathShape, NamedCases) {
  for (const char* p : {"/a", "/a/b", "/.git/x", "/a/...", "/a/.b", "/.upfs-bench-1/d/f", "/a/", "/", "",
                        "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r"})
    EXPECT_FALSE(NeedsSplit(p)) << p;
  for (const char* p : {"//", "/a//b", "/.", "/..", "/a/.", "/a/..", "/a/./b", "/a/../b", "/a/b/c/d/e/f/g/h/i/j/k/l//"})
    EXPECT_TRUE(NeedsSplit(p)) << p;
}

TEST(PathShape, EveryCandidateAtEveryPlaceOfEveryLength) {
  // One piece ("//", "/.", "/..", "/./", "/../", "/.x", "/...") at every
  // offset of an otherwise plain path, for lengths across three blocks.
  for (const std::string piece : {"//", "/.", "/..", "/./", "/../", "/.x", "/...", "/..x"}) {
    for (size_t len = piece.size(); len <= 52; ++len) {
      for (size_t at = 0; at + piece.size() <= len; ++at) {
        std::string p(len, 'a');
        for (size_t i = 0; i < len; i += 5) p[i] = '/';
        p.replace(at, piece.size(), piece);
        ASSERT_EQ(NeedsSplit(p), Rule(p)) << '"' << p << '"';
      }
    }
  }
}

TEST(PathShape, RandomPathsOfSlashesDotsAndLetters) {
  std::mt19937_64 rng(7);
  const char alphabet[] = {'/', '/', '.', 'a', 'b'};
  for (int n = 0; n < 200000; ++n) {
    std::string p(rng() % 90, 'a');
    for (char& c : p) c = alphabet[rng() % sizeof(alphabet)];
    ASSERT_EQ(NeedsSplit(p), Rule(p)) << '"' << p << '"';
  }
}

// A view that ends before the string's end: nothing past the view is read
// as part of the path. The strings put a slash last in a block of 16 and
// "./" after it, so that a scan reading one byte too many would see "/./".
TEST(PathShape, LooksOnlyInsideTheView) {
  for (size_t blocks = 1; blocks <= 3; ++blocks) {
    const std::string s = "/" + std::string(16 * blocks - 2, 'a') + "/./b";
    for (size_t len = 1; len <= s.size(); ++len) {
      const std::string_view v(s.data(), len);
      EXPECT_EQ(NeedsSplit(v), Rule(std::string(v))) << len;
    }
  }
}

}  // namespace
}  // namespace upfs

namespace upfs {
namespace {

// WithoutNoOpComponents: "//" and "." go, but a last "." and a trailing
// slash stay (they change what rmdir and a lookup accept), and ".." stays.
TEST(PathShape, NoOpComponentsDropped) {
  const std::pair<const char*, const char*> cases[] = {
      {"/", "/"},           {"//", "/"},            {"/a", "/a"},         {"/a//b", "/a/b"},
      {"/./a/./b", "/a/b"}, {"/a/.", "/a/."},       {"/a/./", "/a/./"},   {"/a/", "/a/"},
      {"/a//", "/a/"},      {"/a/../b", "/a/../b"}, {"//.//a", "/a"},     {"/.a/..b/.", "/.a/..b/."},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(WithoutNoOpComponents(in), want) << in;
}

}  // namespace
}  // namespace upfs
