#include "container/pool/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "util/assert.h"
#include "util/crc32c.h"

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

ImageWriter::ImageWriter(std::vector<uint64_t>* img, uint64_t dirs, uint64_t words_hint)
    : dirs_expected_(dirs), img_(*img) {
  img_.clear();
  // The directory table, padded to whole blocks.
  const uint64_t table_words = (dirs * kDirRowWords + kWordsPerBlock - 1) / kWordsPerBlock * kWordsPerBlock;
  img_.reserve(std::max(words_hint, table_words));
  img_.resize(table_words, 0);
}

uint64_t ImageWriter::TableSlots(uint64_t names) {
  uint64_t slots = 2;
  while (slots < names * 2) slots *= 2;
  return slots;
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

void ImageWriter::AddDir(uint64_t ino, uint64_t parent, uint64_t subdirs, const std::vector<Name>& names) {
  UPFS_ASSERT(dirs_ < dirs_expected_);
  const uint64_t slots = TableSlots(names.size());
  // The table, 4-word aligned (so no slot crosses a block).
  while (img_.size() % kNameSlotWords) img_.push_back(0);
  const uint64_t table = img_.size();
  img_.resize(table + slots * kNameSlotWords, 0);
  // The hash as the source keeps it (an image's slot, a delta's table):
  // not computed again.
  for (const auto& [name, e, crc] : names) {
    uint64_t s = crc & (slots - 1);
    while (img_[table + s * kNameSlotWords] != 0) s = (s + 1) & (slots - 1);
    const uint64_t name_at = PlaceName(name);  // may grow img_: index, not pointer
    uint64_t* slot = &img_[table + s * kNameSlotWords];
    slot[0] = e.ino;
    slot[1] = uint64_t(crc) | (uint64_t(e.type) << 32) | (uint64_t(name.size()) << 40);
    slot[2] = name_at;
  }
  uint64_t* row = &img_[dirs_ * kDirRowWords];
  row[0] = ino;
  row[1] = parent;
  row[2] = subdirs;
  row[3] = names.size();
  row[4] = table;
  row[5] = slots;
  ++dirs_;
  entries_ += names.size();
}

void ImageWriter::Finish(CheckpointHeader* h) {
  UPFS_ASSERT(dirs_ == dirs_expected_);
  std::sort(multi_.begin(), multi_.end());
  h->multi_words = img_.size();
  for (const auto& [ino, links] : multi_) {
    img_.push_back(ino);
    img_.push_back(links);
  }
  h->dirs = dirs_;
  h->entries = entries_;
  h->multi = multi_.size();
  h->image_words = img_.size();
  h->image_crc = Crc32c(img_.data(), img_.size() * 8);
}

// ---------------------------------------------------------------------------
// Reading in place.

Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l, const CheckpointHeader** out) {
  UPFS_RETURN_IF_ERROR(ba.CheckRange(l, 1, "checkpoint header"));
  char* p;
  UPFS_RETURN_IF_ERROR(ba.Addr(l, &p));
  const auto* h = reinterpret_cast<const CheckpointHeader*>(p);
  if (h->magic != kCheckpointMagic) return Bad("header magic missing");
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

Status BaseImage::Open(const BlockAccess& ba, const CheckpointHeader& h, uint64_t header_block, bool verify) {
  h_ = &h;
  space_ = ba.space();
  header_block_ = header_block;
  blocks_.clear();
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
  // A table must lie inside the image, its slot count a power of two.
  return out->ino != 0 && out->slots != 0 && (out->slots & (out->slots - 1)) == 0 &&
         out->slots <= h_->image_words && out->table % kNameSlotWords == 0 && out->table <= h_->image_words &&
         out->slots * kNameSlotWords <= h_->image_words - out->table && out->entries <= out->slots;
}

bool BaseImage::FindDir(uint64_t ino, BaseDir* out) const {
  uint64_t lo = 0, hi = h_->dirs;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    const uint64_t v = Word(mid * kDirRowWords);
    if (v == ino) return RowAt(mid, out);
    if (v < ino) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

bool BaseImage::DecodeSlot(uint64_t at, std::string_view* name, NsEntry* e) const {
  const uint64_t meta = Word(at + 1), name_at = Word(at + 2);
  const uint64_t type = (meta >> 32) & 0xff, len = (meta >> 40) & 0xff;
  // Without overflow: a name position near 2^64 must not wrap past the
  // check (it did: a read far outside the image, found by fuzz_pool).
  if (len == 0 || type == 0 || type > uint64_t(FileType::kSymlink) || name_at >= h_->image_words ||
      (len + 7) / 8 > h_->image_words - name_at ||
      name_at / kWordsPerBlock != (name_at + (len + 7) / 8 - 1) / kWordsPerBlock)
    return false;
  *name = std::string_view(reinterpret_cast<const char*>(&blocks_[name_at / kWordsPerBlock][name_at % kWordsPerBlock]), len);
  *e = NsEntry{Word(at), FileType(type)};
  return true;
}

namespace {

// Starts loading the attribute lines of inode `ino` (any number: a prefetch
// of an address outside the mapping is skipped, and a prefetch never
// faults), which a lookup's caller reads next.
void PrefetchInode(const BlockSpace* space, uint64_t ino) {
  const uint64_t off = (uint64_t(InodeBlockOf(ino)) << kBlockShift) + uint64_t(InodeSlotOf(ino)) * kInodeSize;
  if (off + kInodeSize > space->mapped_bytes()) return;
  const char* p = space->base() + off;
  __builtin_prefetch(p);
  __builtin_prefetch(p + kCacheLine);
}

}  // namespace

bool BaseImage::FindName(const BaseDir& d, std::string_view name, NsEntry* out) const {
  const uint32_t crc = NameHash(name);
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
