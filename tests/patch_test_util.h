// What the sub-block write tests share (tests/patch_test.cc over per-file
// files, tests/pool_api/pool_patch_test.cc over pool files): bytes to
// write, and the check of what a reader sees while threads patch
// overlapping ranges of the same blocks (PatchOrderCheck).
//
// Write s of writer w fills its range with the word (w << 32 | s) and
// announces the range before it starts. Any read that finds (w, s) in a
// word must find, everywhere in that write's range, either (w, s), a later
// write of w, or another writer's word: never zero and never an earlier
// write of w (that would be a torn write, or one undone or reordered).
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace upfs_test {

// n bytes of every value, the same for the same seed.
inline std::string PatchBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 r(seed);
  for (auto& c : s) c = char(r());
  return s;
}

class PatchOrderCheck {
 public:
  PatchOrderCheck(int writers, uint64_t writes, uint64_t words_per_block)
      : writers_(writers), writes_(writes), words_per_block_(words_per_block), ranges_(writers + 1) {
    for (auto& r : ranges_) r = std::vector<std::atomic<uint64_t>>(writes + 1);
  }
  // Before write `seq` of writer `w` (both from 1): its range.
  void Announce(int w, uint64_t seq, uint64_t block, uint64_t first_word, uint64_t words) {
    ranges_[w][seq].store(block | (first_word << 16) | (words << 32), std::memory_order_release);
  }
  // The word write `seq` of writer `w` fills its range with.
  static uint64_t Word(int w, uint64_t seq) { return (uint64_t(w) << 32) | seq; }
  // How many words of `img` (the blocks from block 0, as read) break the rule.
  int Errors(const std::vector<uint64_t>& img) const {
    int errors = 0;
    for (uint64_t x : img) {
      if (x == 0) continue;
      const uint64_t w = x >> 32, s = x & 0xffffffff;
      if (w < 1 || w > uint64_t(writers_) || s < 1 || s > writes_) {
        errors++;
        continue;
      }
      const uint64_t rg = ranges_[w][s].load(std::memory_order_acquire);
      const uint64_t blk = rg & 0xffff, first = (rg >> 16) & 0xffff, words = rg >> 32;
      for (uint64_t i = first; i < first + words; ++i) {
        const uint64_t y = img[blk * words_per_block_ + i];
        if (y == 0 || ((y >> 32) == w && (y & 0xffffffff) < s)) {
          errors++;
          break;
        }
      }
    }
    return errors;
  }

 private:
  int writers_;
  uint64_t writes_, words_per_block_;
  std::vector<std::vector<std::atomic<uint64_t>>> ranges_;
};

// Runs `writers` threads of `writes` patches each (1-64 words inside one of
// `blocks` blocks of `words_per_block` words) through write(buf, bytes,
// offset), while one thread reads all blocks through read(buf, bytes) and
// checks each image; returns the failed calls plus the broken words.
template <typename Write, typename Read>
int RacePatchWriters(int writers, uint64_t writes, uint64_t blocks, uint64_t words_per_block,
                     Write write, Read read) {
  PatchOrderCheck check(writers, writes, words_per_block);
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  auto writer = [&](int w) {
    std::mt19937 r(w);
    for (uint64_t seq = 1; seq <= writes; ++seq) {
      const uint64_t words = 1 + r() % 64, blk = r() % blocks, first = r() % (words_per_block - words + 1);
      check.Announce(w, seq, blk, first, words);
      std::vector<uint64_t> b(words, PatchOrderCheck::Word(w, seq));
      if (!write(b.data(), words * 8, (blk * words_per_block + first) * 8)) errors++;
    }
  };
  auto reader = [&] {
    std::vector<uint64_t> img(blocks * words_per_block);
    while (!stop.load()) {
      if (!read(img.data(), img.size() * 8)) errors++;
      errors += check.Errors(img);
    }
  };
  std::vector<std::thread> ts;
  for (int w = 1; w <= writers; ++w) ts.emplace_back(writer, w);
  std::thread rd(reader);
  for (auto& t : ts) t.join();
  stop = true;
  rd.join();
  return errors.load();
}

}  // namespace upfs_test
