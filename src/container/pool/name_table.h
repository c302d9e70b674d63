// NameTable: one directory's names in DRAM, an open-addressing hash table
// (linear probing, deletion by backward shift) whose names live in one
// arena. Loading a checkpoint of 100,000 names costs no allocation per name,
// and a lookup touches one slot array and the arena.
//
// A probe walks a dense array of 4-byte tags (the 32-bit hash with its top
// bit set; 0 marks an empty slot) beside the 32-byte slots: sixteen to a
// cache line, an eighth of the slots' bytes (50,000 names: 256 KiB of tags
// against 2 MiB of slots), so that they stay cached far longer. A lookup of a name the
// table does not hold (a directory's older names are in the image below)
// then costs no miss, and one that it holds loads a slot only on a match.
//
// A name's home slot is the top bits of its hash times the table's own odd
// multiplier, not the hash's low bits. Names often arrive in another
// table's order: `rm -rf` removes a directory's names as a listing gave
// them, in the image's order (the hash's low bits) or an older delta's,
// and each removal of an image name is a tombstone here. A stretch of that
// order is a stretch of the bits that would place them: placed by those
// bits, the tombstones filled the low half of a delta of 16,384 slots at
// the image's density, the names made since the checkpoint lay over them,
// and one probe run was 9,876 slots long. A lookup walked 622
// slots on average (about 4,400 instructions), and the checkpoints while a
// 100,000-name directory was removed took 2 billion (`upfs bench --pool
// --quick --filter pool-stat --rounds 1 --seconds 0.05`, under callgrind).
// With a multiplier of its own per table (NameTable(salt)), no other
// table's order is a stretch of this one's.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "container/pool/pool_format.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

struct NsEntry {
  uint64_t ino = 0;
  format::pool::FileType type{};
};

// A name's hash: CRC-32C, which the checkpoint image keeps for every name
// (so that a checkpoint moving names between the two never hashes again).
inline uint32_t NameHash(std::string_view name) { return Crc32c(name.data(), name.size()); }

// a == b, for names: most are short, and a memcmp call per comparison was
// 7% of a stat's samples. Up to 16 bytes, two loads per side that overlap
// in the middle (never past either end); under 4, the first, middle and
// last bytes, which are all of them.
inline bool SameName(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  auto load8 = [](const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  };
  auto load4 = [](const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  };
  const char *x = a.data(), *y = b.data();
  if (n >= 8 && n <= 16) return load8(x) == load8(y) && load8(x + n - 8) == load8(y + n - 8);
  if (n >= 4 && n < 8) return load4(x) == load4(y) && load4(x + n - 4) == load4(y + n - 4);
  if (n < 4) return n == 0 || (x[0] == y[0] && x[n / 2] == y[n / 2] && x[n - 1] == y[n - 1]);
  return std::memcmp(x, y, n) == 0;
}

class NameTable {
 public:
  // `salt` chooses the placement: tables whose names may move into one
  // another (a directory's delta and the next delta after a checkpoint)
  // take different salts.
  explicit NameTable(uint64_t salt = 0) : mult_(Multiplier(salt)) {}

  NsEntry* Find(std::string_view name) { return Find(name, NameHash(name)); }
  // `h`: NameHash(name), known already.
  NsEntry* Find(std::string_view name, uint32_t h) {
    if (count_ == 0) return nullptr;
    size_t i = Home(h);
    // The home slot loads with its tag, not after it: in a table too big
    // for the caches that is one miss instead of two for most names.
    __builtin_prefetch(&slots_[i]);
    return Probe(name, h, &i) ? &slots_[i].e : nullptr;
  }
  const NsEntry* Find(std::string_view name) const { return const_cast<NameTable*>(this)->Find(name); }
  const NsEntry* Find(std::string_view name, uint32_t h) const {
    return const_cast<NameTable*>(this)->Find(name, h);
  }

  // False if the name is there already.
  bool Insert(std::string_view name, NsEntry e) { return Insert(name, NameHash(name), e); }
  // `h`: NameHash(name), known already.
  bool Insert(std::string_view name, uint32_t h, NsEntry e) {
    if ((count_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.empty() ? 8 : slots_.size() * 2);
    size_t i = Home(h);
    if (Probe(name, h, &i)) return false;
    Slot& s = slots_[i];
    s.hash = h;
    s.e = e;
    s.off = uint32_t(arena_.size());
    s.len = uint16_t(name.size());
    tags_[i] = TagOf(h);
    arena_.append(name);
    ++count_;
    return true;
  }
  // The name's entry becomes e, whether it was there or not.
  void Put(std::string_view name, uint32_t h, NsEntry e) {
    if (count_ != 0) {
      size_t i = Home(h);
      if (Probe(name, h, &i)) {
        slots_[i].e = e;
        return;
      }
    }
    Insert(name, h, e);
  }

  // False if the name is not there.
  bool Erase(std::string_view name) {
    if (count_ == 0) return false;
    const uint64_t h = NameHash(name);
    size_t i = Home(h);
    if (!Probe(name, h, &i)) return false;
    garbage_ += slots_[i].len;
    // Backward shift: move later members of the probe run into the hole.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (tags_[j] == 0) break;
      const size_t home = Home(tags_[j]);  // the tag keeps the bits Home reads
      // Slot j may move to i if i lies cyclically in [home, j).
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        tags_[i] = tags_[j];
        i = j;
      }
    }
    tags_[i] = 0;
    --count_;
    if (garbage_ > 4096 && garbage_ > arena_.size() / 2) Rehash(slots_.size());
    return true;
  }

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // The longest run of occupied slots: what a lookup that misses walks at
  // worst (tests; a scan of the tags).
  size_t LongestRun() const {
    size_t best = 0, run = 0;
    for (size_t k = 0; k < 2 * tags_.size(); ++k) {  // twice round: a run may wrap
      run = tags_[k & mask_] != 0 ? run + 1 : 0;
      best = std::max(best, run);
    }
    return std::min(best, tags_.size());
  }
  void Reserve(size_t n) {
    size_t cap = 8;
    while (cap * 3 < n * 4) cap *= 2;
    if (cap > slots_.size()) Rehash(cap);
  }
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (tags_[i] != 0) fn(NameOf(slots_[i]), slots_[i].e);
  }
  // fn(name, entry, NameHash(name)).
  template <typename Fn>
  void ForEachHashed(Fn fn) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (tags_[i] != 0) fn(NameOf(slots_[i]), slots_[i].e, uint32_t(slots_[i].hash));
  }

 private:
  struct Slot {
    uint64_t hash;
    NsEntry e;
    uint32_t off;
    uint16_t len;
  };
  std::string_view NameOf(const Slot& s) const { return std::string_view(arena_.data() + s.off, s.len); }
  static uint32_t TagOf(uint64_t h) { return uint32_t(h) | 0x80000000u; }
  // The hash's low 31 bits (those a tag keeps), times the multiplier; the
  // product's top bits. Only called with slots (shift_ < 64).
  size_t Home(uint64_t h) const { return size_t((uint64_t(uint32_t(h) & 0x7fffffffu) * mult_) >> shift_); }
  static uint64_t Multiplier(uint64_t salt) {
    uint64_t z = salt + 0x9e3779b97f4a7c15ull;  // splitmix64's step and finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 1;
  }
  // Walks from *i (name's home, h its hash) to its slot (true) or to the
  // first empty one (false), leaving *i there. Slots are loaded only where
  // the tag matches.
  bool Probe(std::string_view name, uint64_t h, size_t* i) const {
    const uint32_t tag = TagOf(h);
    for (;; *i = (*i + 1) & mask_) {
      const uint32_t t = tags_[*i];
      if (t == 0) return false;
      if (t == tag && slots_[*i].hash == h && SameName(NameOf(slots_[*i]), name)) return true;
    }
  }

  // Rebuilds with `cap` slots and a compacted arena.
  void Rehash(size_t cap) {
    std::vector<Slot> old;
    old.swap(slots_);
    std::vector<uint32_t> old_tags;
    old_tags.swap(tags_);
    std::string old_arena;
    old_arena.swap(arena_);
    UPFS_ASSERT(cap <= (size_t{1} << 31));  // a tag's bits below its top one are the hash's
    slots_.assign(cap, Slot{});
    tags_.assign(cap, 0);
    mask_ = cap - 1;
    shift_ = 64 - unsigned(__builtin_ctzll(cap));
    arena_.reserve(old_arena.size() - garbage_ + 64);
    garbage_ = 0;
    for (size_t k = 0; k < old.size(); ++k) {
      if (old_tags[k] == 0) continue;
      const Slot& s = old[k];
      size_t i = Home(s.hash);
      while (tags_[i] != 0) i = (i + 1) & mask_;
      slots_[i] = s;
      tags_[i] = TagOf(s.hash);
      slots_[i].off = uint32_t(arena_.size());
      arena_.append(old_arena.data() + s.off, s.len);
    }
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> tags_;  // 0: slots_[i] is empty
  std::string arena_;
  uint64_t mult_;
  size_t mask_ = 0;
  unsigned shift_ = 64;  // 64 - log2(slots)
  size_t count_ = 0;
  size_t garbage_ = 0;  // arena bytes of erased names
};

// The probe start of an inode number in the tables below (a multiply, not
// a division by a prime as std::unordered_map's).
inline uint64_t MixIno(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 33);
}

// What the two tables below share: slots keyed by inode number (0 never is
// one, and marks an empty slot), linear probing from MixIno, a power-of-two
// size, nothing ever erased. Slot: { uint64_t ino; ... }, movable.
template <typename Slot>
class InoSlots {
 public:
  size_t size() const { return count_; }
  void Clear() {
    slots_.clear();
    mask_ = 0;
    count_ = 0;
  }

 protected:
  // The slot holding ino, or null.
  const Slot* Lookup(uint64_t ino) const {
    if (count_ == 0) return nullptr;
    for (size_t i = MixIno(ino) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].ino == ino) return &slots_[i];
      if (slots_[i].ino == 0) return nullptr;
    }
  }
  // The slot holding ino, claimed (and counted) if it was not there; the
  // table grows first past `num`/`den` full.
  Slot& Claim(uint64_t ino, size_t num, size_t den) {
    UPFS_ASSERT(ino != 0);
    if ((count_ + 1) * den > slots_.size() * num) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t i = MixIno(ino) & mask_;
    while (slots_[i].ino != 0 && slots_[i].ino != ino) i = (i + 1) & mask_;
    if (slots_[i].ino == 0) {
      slots_[i].ino = ino;
      ++count_;
    }
    return slots_[i];
  }
  std::vector<Slot> slots_;

 private:
  void Rehash(size_t cap) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(cap);
    mask_ = cap - 1;
    for (Slot& s : old) {
      if (s.ino == 0) continue;
      size_t i = MixIno(s.ino) & mask_;
      while (slots_[i].ino != 0) i = (i + 1) & mask_;
      slots_[i] = std::move(s);
    }
  }

  size_t mask_ = 0;
  size_t count_ = 0;
};

struct LinkSlot {
  uint64_t ino = 0;
  uint32_t links = 0;
};

// LinkTable: the link count of every non-directory a record after the
// checkpoint touched; a count of 0 is kept (the inode lost its last name).
// Applying a create costs no allocation (a node-based map cost a malloc
// inside the index lock).
class LinkTable : public InoSlots<LinkSlot> {
 public:
  const uint32_t* Find(uint64_t ino) const {
    const LinkSlot* s = Lookup(ino);
    return s ? &s->links : nullptr;
  }
  void Set(uint64_t ino, uint32_t links) { Claim(ino, 3, 4).links = links; }
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const LinkSlot& s : slots_)
      if (s.ino != 0) fn(s.ino, s.links);
  }
};

template <typename T>
struct DirSlot {
  uint64_t ino = 0;
  std::unique_ptr<T> value;
};

// DirTable: the delta's directories (T: NsIndex's DeltaDir), each
// allocated once and never moved (the index hands out pointers), never
// erased (a removed directory stays, marked so). A path lookup asks it
// twice per component; the node-based std::unordered_map it replaces cost
// a division by a prime and a node per lookup.
template <typename T>
class DirTable : public InoSlots<DirSlot<T>> {
  using Base = InoSlots<DirSlot<T>>;

 public:
  T* Find(uint64_t ino) { return Value(ino); }
  const T* Find(uint64_t ino) const { return Value(ino); }
  bool Contains(uint64_t ino) const { return Find(ino) != nullptr; }
  // The value of `ino`, made (value-initialized) if there is none.
  T& Get(uint64_t ino) {
    DirSlot<T>& s = Base::Claim(ino, 1, 2);
    if (!s.value) s.value = std::make_unique<T>();
    return *s.value;
  }
  // fn(ino, value) for every entry.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const DirSlot<T>& s : Base::slots_)
      if (s.ino != 0) fn(s.ino, static_cast<const T&>(*s.value));
  }

 private:
  // The slot holds a pointer: a const table finds it too (Find const
  // hands it out as const).
  T* Value(uint64_t ino) const {
    const DirSlot<T>* s = Base::Lookup(ino);
    return s ? s->value.get() : nullptr;
  }
};

}  // namespace upfs
