// SharedDirTable's view of a table's memory, shared by dir_table*.cc.
#pragma once

#include <atomic>
#include <cstdint>

#include "container/pool/shared_dir_table.h"
#include "container/pool/shared_dir_table_layout.h"

namespace upfs {

struct SharedDirTable::Table {
  shared_dir_table_layout::Header h;

  uint64_t mask() const { return (uint64_t{1} << h.log2_slots) - 1; }
  uint64_t slots() const { return uint64_t{1} << h.log2_slots; }
  // A name's home slot: the top bits of its hash, so that slot order is
  // hash order, in a table of any size.
  uint64_t Home(uint64_t hash) const { return hash >> (64 - h.log2_slots); }
  shared_dir_table_layout::Stripe* stripe(uint64_t i) {
    return reinterpret_cast<shared_dir_table_layout::Stripe*>(reinterpret_cast<char*>(this) + sizeof(h)) + i;
  }
  std::atomic<uint64_t>* slot_words() {
    return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(this) + sizeof(h) +
                                                    h.stripes * sizeof(shared_dir_table_layout::Stripe));
  }
  std::atomic<uint64_t>& slot(uint64_t i) { return slot_words()[i]; }
  // Distance of slot i from `home` along the probe order.
  uint64_t Distance(uint64_t home, uint64_t i) const { return (i - home) & mask(); }
};

namespace shared_dir_table_internal {
// Spins, yields, and every kLivenessEvery rounds asks whether `owner` is
// alive (a system call); used by every wait for another thread.
inline constexpr uint32_t kSpinsBeforeYield = 64;
inline constexpr uint32_t kLivenessEvery = 1024;
// A claim whose probe run (to its first never-used slot) is this long or
// longer looks at the table's load first.
inline constexpr uint64_t kProbeCheck = 8;
// Grow when the slots ever used pass this share of the table (tenths).
inline constexpr int64_t kMaxUsedTenths = 6;
void Pause(uint32_t round);
}  // namespace shared_dir_table_internal

}  // namespace upfs
