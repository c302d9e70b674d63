// fuzz_pool's seeds: patch lists to its seed pools (fuzz/fuzz_pool.cc has
// the encoding: a flags byte, then target, offset (2 bytes), length, bytes):
// a clean and a crashed pool of each version, and damage to each structure
// (superblock, checkpoint header and image, log, inode and volatile-area
// blocks, the bitmap), several patches in one input, truncated pools.
#include "pool_seeds.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cstdint>

#include "corpus_files.h"

namespace corpus {

namespace {

struct PoolSeed {
  Bytes b;
  explicit PoolSeed(uint8_t flags) : b{flags} {}
  PoolSeed& Patch(uint8_t target, uint16_t off, const Bytes& bytes) {
    b.push_back(target);
    b.push_back(uint8_t(off));
    b.push_back(uint8_t(off >> 8));
    b.push_back(uint8_t(bytes.size() == 8 ? 0 : bytes.size()));
    b.insert(b.end(), bytes.begin(), bytes.end());
    return *this;
  }
  PoolSeed& Word(uint8_t target, uint16_t off, uint64_t v) {
    Bytes w(8);
    memcpy(w.data(), &v, 8);
    return Patch(target, off, w);
  }
};

}  // namespace

int PoolSeeds(const std::string& dir) {
  mkdir(dir.c_str(), 0755);
  int n = 0, failed = 0;
  auto emit = [&](const std::string& name, const PoolSeed& s) {
    if (WriteFile(dir + "/" + name, s.b)) ++n;
    else ++failed;
  };
  emit("pool-clean", PoolSeed(0));
  emit("pool-crashed", PoolSeed(1));
  emit("pool-sb-checksum", PoolSeed(2).Patch(0, 20, {0x7f}));
  emit("pool-sb-root", PoolSeed(0).Word(0, 48, 1));
  emit("pool-sb-no-checkpoint", PoolSeed(0).Word(0, 80, 0));
  emit("pool-sb-log-head", PoolSeed(1).Word(0, 64, 12345));
  emit("pool-ck-nruns", PoolSeed(0).Patch(1, 44, {0, 1, 0, 0}));
  emit("pool-ck-multi", PoolSeed(0).Word(1, 80, uint64_t{1} << 63));
  emit("pool-ck-image", PoolSeed(0).Word(2, 0, 0));
  emit("pool-ck-image-raw", PoolSeed(2).Word(2, 40, 0x1234));
  // The version 2 seed (untagged checkpoint image).
  emit("pool-v2-clean", PoolSeed(8));
  emit("pool-v2-ck-image", PoolSeed(8).Word(2, 0, 0));
  emit("pool-v2-ck-row", PoolSeed(8).Word(2, 96, 0x3fff));
  for (uint8_t t = 3; t < 9; ++t) {
    emit("pool-block" + std::to_string(t) + "-next", PoolSeed(0).Word(t, 0, 0x47534e5500000000ull | 9000));
    emit("pool-block" + std::to_string(t) + "-slot", PoolSeed(t & 1).Word(t, 16 + 8 * t, 0x5));
    emit("pool-block" + std::to_string(t) + "-inode", PoolSeed(0).Word(t, 256 + 64, ~uint64_t{0}));
  }
  emit("pool-inode-kind", PoolSeed(1).Word(255, 256, 9));
  emit("pool-volatile-magic", PoolSeed(0).Word(254, 0, 0));
  emit("pool-bitmap", PoolSeed(0).Word(253, 0, 0));
  // Several patches in one input: libFuzzer's length limit starts from the
  // longest seed, so these let inputs with many patches in from the start.
  for (uint8_t flags : {0, 1, 2, 3}) {
    PoolSeed multi(flags);
    for (uint8_t t = 0; t < 12; ++t) multi.Word(uint8_t(t * 7 + flags), uint16_t(16 + 8 * t * (flags + 1)), t);
    emit("pool-multi-" + std::to_string(flags), multi);
  }
  PoolSeed trunc(4), trunc_odd(5);  // the size word follows the flags
  trunc.b.insert(trunc.b.end(), {6, 0});
  trunc_odd.b.insert(trunc_odd.b.end(), {7, 0});
  emit("pool-truncated", trunc);
  emit("pool-truncated-odd", trunc_odd);
  printf("make_corpus: %d pool seeds in %s, %d failures\n", n, dir.c_str(), failed);
  return failed ? 1 : 0;
}

}  // namespace corpus
