#include "container/pool/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "util/assert.h"
#include "util/crc32c.h"
#include "util/thread_held.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

constexpr uint64_t kWordsPerBlock = kBlockSize / 8;

Status Bad(const std::string& what) { return Status::Corrupt("checkpoint", what); }


}  // namespace

uint32_t CheckpointHeaderCrc(const CheckpointHeader& h) {
  uint32_t c = Crc32c(&h, offsetof(CheckpointHeader, header_crc));
  c = Crc32c(&h.multi, 16, c);
  return Crc32c(h.runs, std::min(h.nruns, kMaxCheckpointRuns) * sizeof(Run), c);
}

// ---------------------------------------------------------------------------
// Writing.

ImageWriter::ImageWriter(std::vector<uint64_t>* img, uint64_t dirs, uint64_t words_hint, bool tagged)
    : tagged_(tagged), dirs_expected_(dirs), img_(*img) {
  img_.clear();
  // The directory table, padded to whole blocks.
  const uint64_t table_words = (dirs * kDirRowWords + kWordsPerBlock - 1) / kWordsPerBlock * kWordsPerBlock;
  img_.reserve(std::max(words_hint, table_words));
  img_.resize(table_words, 0);
}

uint64_t ImageWriter::TableSlots(uint64_t names, bool tagged) {
  // Tagged: probes walk the tags, 8 to a cache line, so a table can be
  // fuller (4/5) and its tags stay small enough to stay cached (100,000
  // names: 1 MiB of tags).
  uint64_t slots = tagged ? 4 : 2;
  while (tagged ? slots * 4 < names * 5 : slots < names * 2) slots *= 2;
  return slots;
}

uint64_t ImageWriter::TableWords(uint64_t names, bool tagged) {
  return TableSlots(names, tagged) * (kNameSlotWords + (tagged ? 1 : 0));
}

uint64_t ImageWriter::PlaceName(std::string_view name) {
  // A name never crosses a block: readers map the image block by block.
  const uint64_t words = (name.size() + 7) / 8;
  const uint64_t in_block = img_.size() % kWordsPerBlock;
  if (in_block + words > kWordsPerBlock) img_.resize(img_.size() + (kWordsPerBlock - in_block), 0);
  const uint64_t at = img_.size();
  img_.resize(at + words, 0);
  std::memcpy(img_.data() + at, name.data(), name.size());
  return at;
}

uint64_t ImageWriter::AlignTable() {
  // 4-word aligned, so that no slot crosses a block (the tags are a
  // multiple of 4 words too).
  while (img_.size() % kNameSlotWords) img_.push_back(0);
  return img_.size();
}

void ImageWriter::AddRow(uint64_t ino, uint64_t parent, uint64_t subdirs, uint64_t entries, uint64_t table,
                         uint64_t slots) {
  UPFS_ASSERT(dirs_ < dirs_expected_);
  uint64_t* row = &img_[dirs_ * kDirRowWords];
  row[0] = ino;
  row[1] = parent;
  row[2] = subdirs;
  row[3] = entries;
  row[4] = table;
  row[5] = slots;
  ++dirs_;
  entries_ += entries;
}

void ImageWriter::AddDir(uint64_t ino, uint64_t parent, uint64_t subdirs, const std::vector<Name>& names) {
  const uint64_t slots = TableSlots(names.size(), tagged_);
  const uint64_t table = AlignTable();
  const uint64_t first_slot = table + (tagged_ ? slots : 0);
  img_.resize(table + TableWords(names.size(), tagged_), 0);
  // The hash as the source keeps it (an image's slot, a delta's table):
  // not computed again.
  for (const auto& [name, e, crc] : names) {
    UPFS_ASSERT(e.ino != 0 && e.ino <= UINT32_MAX);
    uint64_t s = crc & (slots - 1);
    while (img_[first_slot + s * kNameSlotWords] != 0) s = (s + 1) & (slots - 1);
    const bool inline_name = tagged_ && name.size() <= kInlineNameMax;
    const uint64_t name_at = inline_name ? 0 : PlaceName(name);  // may grow img_: index, not pointer
    uint64_t* slot = &img_[first_slot + s * kNameSlotWords];
    slot[0] = e.ino;
    slot[1] = uint64_t(crc) | (uint64_t(e.type) << 32) | (uint64_t(name.size()) << 40);
    if (inline_name) std::memcpy(&slot[2], name.data(), name.size());
    else slot[2] = name_at;
    if (tagged_) img_[table + s] = (uint64_t(crc) << 32) | e.ino;
  }
  AddRow(ino, parent, subdirs, names.size(), table, slots);
}

bool ImageWriter::CopyDir(const BaseImage& from, const BaseDir& d, uint64_t parent, uint64_t subdirs) {
  const uint64_t* src = from.FlatTable(d);
  if (!tagged_ || !from.tagged() || !src || d.slots != TableSlots(d.entries, true)) return false;
  const uint64_t mark = img_.size();
  const uint64_t table = AlignTable();
  img_.insert(img_.end(), src, src + TableWords(d.entries, true));
  const uint64_t first_slot = table + d.slots;
  uint64_t used = 0;
  for (uint64_t s = 0; s < d.slots; ++s) {
    const uint64_t at = first_slot + s * kNameSlotWords;
    if (img_[at] == 0) continue;
    ++used;
    // A name past a slot's bytes lies apart, where this image places it.
    if (((img_[at + 1] >> 40) & 0xff) <= kInlineNameMax) continue;
    std::string_view name;
    if (!from.NameInSlot(d, s, &name)) {
      img_.resize(mark);
      return false;
    }
    const uint64_t name_at = PlaceName(name);  // grows img_: assigned after
    img_[at + 2] = name_at;
  }
  if (used != d.entries) {
    img_.resize(mark);
    return false;
  }
  AddRow(d.ino, parent, subdirs, d.entries, table, d.slots);
  return true;
}

void ImageWriter::Finish(CheckpointHeader* h) {
  UPFS_ASSERT(dirs_ == dirs_expected_);
  std::sort(multi_.begin(), multi_.end());
  h->multi_words = img_.size();
  for (const auto& [ino, links] : multi_) {
    img_.push_back(ino);
    img_.push_back(links);
  }
  h->magic = tagged_ ? kCheckpointMagic : kCheckpointMagicV2;
  h->dirs = dirs_;
  h->entries = entries_;
  h->multi = multi_.size();
  h->image_words = img_.size();
  h->image_crc = Crc32c(img_.data(), img_.size() * 8);
}

// ---------------------------------------------------------------------------
// Reading in place.

Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l, uint32_t pool_version,
                            const CheckpointHeader** out) {
  UPFS_RETURN_IF_ERROR(ba.CheckRange(l, 1, "checkpoint header"));
  char* p;
  UPFS_RETURN_IF_ERROR(ba.Addr(l, &p));
  const auto* h = reinterpret_cast<const CheckpointHeader*>(p);
  if (h->magic != CheckpointMagicFor(pool_version)) {
    if (h->magic == kCheckpointMagic || h->magic == kCheckpointMagicV2)
      return Bad(std::string("header of the ") + (h->magic == kCheckpointMagic ? "tagged" : "untagged") +
                 " format in a pool of version " + std::to_string(pool_version));
    return Bad("header magic missing");
  }
  if (h->nruns > kMaxCheckpointRuns) return Bad("too many runs");
  if (h->header_crc != CheckpointHeaderCrc(*h)) return Bad("header checksum mismatch");
  uint64_t blocks = 0;
  for (uint32_t r = 0; r < h->nruns; ++r) {
    if (h->runs[r].lblock < kDataStart) return Bad("image run inside the pool header");
    UPFS_RETURN_IF_ERROR(ba.CheckRange(h->runs[r].lblock, h->runs[r].count, "checkpoint image"));
    blocks += h->runs[r].count;
  }
  if (h->image_words > blocks * kWordsPerBlock) return Bad("image larger than its blocks");
  // Without overflow: counts near 2^64 must not wrap past the checks.
  if (h->dirs == 0 || h->dirs > h->image_words / kDirRowWords) return Bad("directory table out of range");
  if (h->multi_words > h->image_words || h->multi > (h->image_words - h->multi_words) / 2)
    return Bad("multi-link table out of range");
  if (h->cont_slot > kSlotsPerLogBlock || h->keep_seq > h->cont_seq) return Bad("log position out of range");
  UPFS_RETURN_IF_ERROR(ba.CheckRange(h->cont_lblock, 1, "checkpoint log position"));
  UPFS_RETURN_IF_ERROR(ba.CheckRange(h->keep_lblock, 1, "checkpoint log position"));
  *out = h;
  return Status::OK();
}

namespace {

// A thread's rows of the directories it last found, direct-mapped by inode
// number. The table of directories is sorted by number and searched by
// bisection: with 100,000 directories 17 probes, the last few of them
// misses once the table (6 MiB) is out of the caches, for every step of a
// path through a directory. An entry answers only for the image it was
// found in (its id): an image is never changed once opened, and a newer
// one has another id. Made on a thread's first lookup (7 KiB) and freed
// when the thread ends (ThreadHeld), so that the threads of a program that
// never use a pool pay nothing.
struct CachedDirRow {
  uint64_t image = 0;
  BaseDir row;  // row.ino is the key
};
constexpr int kDirRowCacheBits = 7;
struct DirRowCache {
  CachedDirRow rows[1 << kDirRowCacheBits];
};
struct DirRowHolder {
  std::unique_ptr<DirRowCache> owned = std::make_unique<DirRowCache>();
  DirRowCache* cache = owned.get();
};

CachedDirRow& DirRowSlot(uint64_t ino) {
  DirRowCache* c = ThreadHeld<DirRowHolder, &DirRowHolder::cache>();
  return c->rows[(ino * 0x9E3779B97F4A7C15ull) >> (64 - kDirRowCacheBits)];
}

std::atomic<uint64_t> g_next_image_id{1};

}  // namespace

Status BaseImage::Open(const BlockAccess& ba, const CheckpointHeader& h, uint64_t header_block, bool verify) {
  // A new id first: rows cached for what this object viewed before (an
  // earlier Open) must not answer for this image.
  id_ = g_next_image_id.fetch_add(1, std::memory_order_relaxed);
  h_ = &h;
  tagged_ = h.magic == kCheckpointMagic;
  space_ = ba.space();
  header_block_ = header_block;
  blocks_.clear();
  flat_ = nullptr;
  image_words_ = 0;
  uint32_t crc = 0;
  uint64_t left = h.image_words;
  for (uint32_t r = 0; r < h.nruns && left > 0; ++r) {
    for (uint32_t i = 0; i < h.runs[r].count && left > 0; ++i) {
      char* p;
      UPFS_RETURN_IF_ERROR(ba.Addr(h.runs[r].lblock + i, &p));
      blocks_.push_back(reinterpret_cast<const uint64_t*>(p));
      const uint64_t n = std::min(left, kWordsPerBlock);
      if (verify) crc = Crc32c(p, n * 8, crc);
      left -= n;
    }
  }
  if (left != 0) return Bad("image shorter than its header says");
  if (verify && crc != h.image_crc) return Bad("image checksum mismatch");
  image_words_ = h.image_words;
  flat_ = blocks_.empty() ? nullptr : blocks_[0];
  for (size_t i = 1; i < blocks_.size() && flat_; ++i)
    if (blocks_[i] != blocks_[0] + i * kWordsPerBlock) flat_ = nullptr;
  BaseDir prev;
  for (uint64_t i = 0; i < h.dirs; ++i) {
    BaseDir d;
    if (!RowAt(i, &d) || (i > 0 && d.ino <= prev.ino)) return Bad("directory table damaged");
    prev = d;
  }
  return Status::OK();
}

bool BaseImage::RowAt(uint64_t i, BaseDir* out) const {
  const uint64_t at = i * kDirRowWords;
  *out = BaseDir{Word(at), Word(at + 1), Word(at + 2), Word(at + 3), Word(at + 4), Word(at + 5)};
  // A table must lie inside the image, its slot count a power of two (at
  // least 4 if tagged: the slots after the tags stay 4-word aligned).
  const uint64_t words_per_slot = kNameSlotWords + (tagged_ ? 1 : 0);
  return out->ino != 0 && out->slots >= (tagged_ ? 4u : 1u) && (out->slots & (out->slots - 1)) == 0 &&
         out->slots <= image_words_ && out->table % kNameSlotWords == 0 && out->table <= image_words_ &&
         out->slots * words_per_slot <= image_words_ - out->table && out->entries <= out->slots;
}

bool BaseImage::FindDir(uint64_t ino, BaseDir* out) const {
  CachedDirRow& c = DirRowSlot(ino);
  if (c.image == id_ && c.row.ino == ino) {
    *out = c.row;
    return true;
  }
  uint64_t lo = 0, hi = h_->dirs;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    const uint64_t v = Word(mid * kDirRowWords);
    if (v == ino) {
      if (!RowAt(mid, out)) return false;
      c = CachedDirRow{id_, *out};
      return true;
    }
    if (v < ino) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

bool BaseImage::DecodeSlot(uint64_t at, std::string_view* name, NsEntry* e) const {
  const uint64_t meta = Word(at + 1);
  const uint64_t type = (meta >> 32) & 0xff, len = (meta >> 40) & 0xff;
  if (len == 0 || type == 0 || type > uint64_t(FileType::kSymlink)) return false;
  // In the slot: words 2-3 lie in the slot's block (RowAt placed the table
  // inside the image, 4-word aligned).
  const uint64_t name_at = tagged_ && len <= kInlineNameMax ? at + 2 : Word(at + 2);
  // Without overflow: a name position near 2^64 must not wrap past the
  // check (it did: a read far outside the image, found by fuzz_pool).
  if (name_at >= image_words_ || (len + 7) / 8 > image_words_ - name_at ||
      name_at / kWordsPerBlock != (name_at + (len + 7) / 8 - 1) / kWordsPerBlock)
    return false;
  *name = std::string_view(WordPtr(name_at), len);
  *e = NsEntry{Word(at), FileType(type)};
  return true;
}

namespace {

// Starts loading the attribute lines of inode `ino` (any number: one whose
// inode lies outside the mapping is skipped, and a prefetch never faults),
// which a lookup's caller reads next. The bound is on the number, not on
// its offset: a damaged slot's number near 2^64 wrapped the offset (a
// pointer outside the mapping, found by fuzz_pool).
void PrefetchInode(const BlockSpace* space, uint64_t ino) {
  if (ino >= space->mapped_bytes() / kInodeSize) return;
  const char* p = space->base() + InodeOffset(ino);
  __builtin_prefetch(p);
  __builtin_prefetch(p + kCacheLine);
}

}  // namespace

void BaseImage::Prefetch(const BaseDir& d, uint32_t crc) const {
  const uint64_t home = crc & (d.slots - 1);
  if (tagged_) __builtin_prefetch(WordPtr(d.table + home));
  __builtin_prefetch(WordPtr(SlotAt(d, home)));
}

// The tags hold the inode: its lines and the slot's load in parallel, so
// a lookup in a directory too big for the caches waits for one miss, not
// for the slot's, then the name's, then the inode's. (The home slot's line
// is already on its way when the caller prefetched: Prefetch.)
bool BaseImage::FindTagged(const BaseDir& d, std::string_view name, uint32_t crc, NsEntry* out) const {
  const uint64_t mask = d.slots - 1;
  for (uint64_t i = 0, s = crc & mask; i < d.slots; ++i, s = (s + 1) & mask) {
    const uint64_t tag = Word(d.table + s);
    if (tag == 0) return false;
    if (uint32_t(tag >> 32) != crc) continue;
    if (space_) PrefetchInode(space_, uint32_t(tag));
    const uint64_t at = SlotAt(d, s);
    std::string_view n;
    // The slot must agree with its tag (damage otherwise: not this name).
    if (DecodeSlot(at, &n, out) && out->ino == uint32_t(tag) && uint32_t(Word(at + 1)) == crc &&
        SameName(n, name))
      return true;
  }
  return false;
}

bool BaseImage::FindName(const BaseDir& d, std::string_view name, uint32_t crc, NsEntry* out) const {
  if (tagged_) return FindTagged(d, name, crc, out);
  for (uint64_t i = 0, s = crc & (d.slots - 1); i < d.slots; ++i, s = (s + 1) & (d.slots - 1)) {
    const uint64_t at = d.table + s * kNameSlotWords;
    if (Word(at) == 0) return false;
    if (uint32_t(Word(at + 1)) != crc) continue;
    // The hash matched, so this is almost surely the name: its inode's
    // miss then overlaps the name's (in a big directory neither is cached).
    if (space_) PrefetchInode(space_, Word(at));
    std::string_view n;
    if (DecodeSlot(at, &n, out) && SameName(n, name)) return true;
  }
  return false;
}

bool BaseImage::CheckTable(const BaseDir& d, std::string* why) const {
  const uint64_t mask = d.slots - 1;
  auto fail = [&](uint64_t slot, std::string_view what) {
    *why = "slot " + std::to_string(slot) + ": " + std::string(what);
    return false;
  };
  uint64_t used = 0, empty = d.slots;
  for (uint64_t s = 0; s < d.slots; ++s) {
    const uint64_t at = SlotAt(d, s), ino = Word(at);
    const uint64_t tag = tagged_ ? Word(d.table + s) : 0;
    if (ino == 0) {
      if (tag != 0) return fail(s, "a tag without its slot");
      empty = s;
      continue;
    }
    ++used;
    std::string_view name;
    NsEntry e;
    if (!DecodeSlot(at, &name, &e)) return fail(s, "type, length or name position out of range");
    const uint32_t crc = uint32_t(Word(at + 1));
    if (NameHash(name) != crc) return fail(s, "the name's checksum does not match");
    if ((Word(at + 1) >> 48) != 0) return fail(s, "reserved bits set");
    if (tagged_ && tag != ((uint64_t(crc) << 32) | ino)) return fail(s, "the tag does not match the slot");
    if (tagged_ && name.size() <= kInlineNameMax) {
      char words[2 * 8];
      std::memcpy(words, WordPtr(at + 2), sizeof(words));
      for (size_t i = name.size(); i < sizeof(words); ++i)
        if (words[i] != 0) return fail(s, "bytes after the name");
    }
  }
  if (used != d.entries) {
    *why = std::to_string(used) + " names, the row says " + std::to_string(d.entries);
    return false;
  }
  if (empty == d.slots) return fail(0, "no empty slot: a lookup of an absent name would never end");
  // A lookup walks from a name's home slot to the first empty one, so each
  // name lies in the run of full slots that began at or before its home:
  // one walk round the table from an empty slot checks them all.
  uint64_t run_start = (empty + 1) & mask;
  for (uint64_t i = 1; i <= d.slots; ++i) {
    const uint64_t s = (empty + i) & mask, at = SlotAt(d, s);
    if (Word(at) == 0) {
      run_start = (s + 1) & mask;
      continue;
    }
    const uint64_t home = uint32_t(Word(at + 1)) & mask;
    if (((s - home) & mask) > ((s - run_start) & mask)) return fail(s, "not on its name's probe run");
  }
  return true;
}

uint32_t BaseImage::Links(uint64_t ino) const {
  uint64_t lo = 0, hi = h_->multi;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    const uint64_t v = Word(h_->multi_words + 2 * mid);
    if (v == ino) return uint32_t(Word(h_->multi_words + 2 * mid + 1));
    if (v < ino) lo = mid + 1;
    else hi = mid;
  }
  return 1;
}

}  // namespace upfs
