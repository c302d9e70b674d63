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
  // Sequentially consistent, as Read: a caller may pair them with a flag
  // in a store-then-load handshake (an open's count against an unmount's
  // look; on x86 the instructions are the same as acquire/release's).
  void Add(uint32_t shard, int64_t delta) {
    words_[shard % kShards].v.fetch_add(delta, std::memory_order_seq_cst);
  }
  // The sum of the shards. Not a snapshot while others count: exact when
  // no Add runs at once (a shard may go below zero, where one thread takes
  // back what another added; the sum never does). An Add that this read
  // missed came after it read that shard.
  int64_t Read() const {
    int64_t sum = 0;
    for (const Word& w : words_) sum += w.v.load(std::memory_order_seq_cst);
    return sum;
  }

 private:
  struct alignas(64) Word {
    std::atomic<int64_t> v{0};
  };
  Word words_[kShards];
};

}  // namespace upfs
