// ShardedCounter: a count that many threads change often and few read (a
// pool's open descriptors: every open adds one, every close takes one
// back, an unmount reads it). One word per shard, each on a cache line of
// its own, so that threads counting in different shards never write the
// same line (one shared word was written by every open and every close).
#pragma once

#include <atomic>
#include <cstdint>

namespace upfs {

template <uint32_t kShards>
class ShardedCounter {
 public:
  // `shard`: any number; the caller's thread index spreads the threads.
  void Add(uint32_t shard, int64_t delta) {
    words_[shard % kShards].v.fetch_add(delta, std::memory_order_acq_rel);
  }
  // The sum of the shards. Not a snapshot while others count: exact when
  // no Add runs at once (a shard may go below zero, where one thread takes
  // back what another added; the sum never does).
  int64_t Read() const {
    int64_t sum = 0;
    for (const Word& w : words_) sum += w.v.load(std::memory_order_acquire);
    return sum;
  }

 private:
  struct alignas(64) Word {
    std::atomic<int64_t> v{0};
  };
  Word words_[kShards];
};

}  // namespace upfs
