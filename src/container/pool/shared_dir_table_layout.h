// The memory of one directory table (shared_dir_table.h): a header line, the
// count stripes (a line each), then the slots. Soft: never written back,
// built again by recovery, so it has no version or checksum of its own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace upfs::shared_dir_table_layout {

// Line 0. log2_slots and stripes are set before the table is published
// (the anchor's release store) and never change.
struct Header {
  uint64_t log2_slots;
  uint64_t stripes;
  // 0, or kGrowing | the growing thread's identity.
  std::atomic<uint64_t> grow;
  // The table a grower is filling (0: none), so that a thread taking a dead
  // grower's work over can give it back.
  std::atomic<uint64_t> successor;
  uint64_t reserved[4];
};
static_assert(sizeof(Header) == 64);
inline constexpr uint64_t kGrowing = uint64_t{1} << 63;

// One stripe of the directory's counts: its live names, and the slots ever
// used (live, pending or tombstone: what a probe run is made of). A thread
// adds to the stripe of the CPU it runs on, so that two threads creating
// in one directory write no common line.
struct alignas(64) Stripe {
  std::atomic<int64_t> live;
  std::atomic<int64_t> used;
};
static_assert(sizeof(Stripe) == 64);

inline constexpr uint64_t kMinLog2Slots = 4;
inline constexpr uint64_t kMaxLog2Slots = 32;
inline constexpr uint64_t kMaxStripes = 8;

inline uint64_t Bytes(uint64_t log2_slots, uint64_t stripes) {
  return sizeof(Header) + stripes * sizeof(Stripe) + (uint64_t{8} << log2_slots);
}

}  // namespace upfs::shared_dir_table_layout
