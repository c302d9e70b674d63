#include "container/pool/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "util/crc32c.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

constexpr uint64_t kDirRowWords = 4;

uint32_t HeaderCrc(const CheckpointHeader& h) {
  uint32_t c = Crc32c(&h, offsetof(CheckpointHeader, header_crc));
  return Crc32c(h.runs, h.nruns * sizeof(Run), c);
}

Status Bad(const std::string& what) { return Status::Corrupt("checkpoint", what); }

// The image's words, gathered from its runs into one buffer.
Status ReadImage(const BlockAccess& ba, const CheckpointHeader& h, std::vector<uint64_t>* words) {
  words->resize(h.image_words);
  uint64_t at = 0;
  const uint64_t bytes = h.image_words * 8;
  for (uint32_t r = 0; r < h.nruns && at < bytes; ++r) {
    for (uint32_t i = 0; i < h.runs[r].count && at < bytes; ++i) {
      char* p;
      UPFS_RETURN_IF_ERROR(ba.Addr(h.runs[r].lblock + i, &p));
      const uint64_t n = std::min<uint64_t>(kBlockSize, bytes - at);
      std::memcpy(reinterpret_cast<char*>(words->data()) + at, p, n);
      at += n;
    }
  }
  if (at != bytes) return Bad("image shorter than its header says");
  if (Crc32c(words->data(), bytes) != h.image_crc) return Bad("image checksum mismatch");
  return Status::OK();
}

}  // namespace

void SerializeIndex(const NsIndex& index, std::vector<uint64_t>* image, uint64_t* dirs,
                    uint64_t* entries) {
  std::vector<std::pair<uint64_t, const NsDir*>> order;
  index.ForEachDir([&](uint64_t ino, const NsDir& d) { order.emplace_back(ino, &d); });
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  *dirs = order.size();
  *entries = 0;
  image->assign(order.size() * kDirRowWords, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const NsDir& d = *order[i].second;
    uint64_t* row = image->data() + i * kDirRowWords;  // before the vector grows
    row[0] = order[i].first;
    row[1] = d.parent;
    row[2] = image->size();
    row[3] = d.names.size();
    d.names.ForEach([&](std::string_view name, const NsEntry& e) {
      image->push_back(e.ino);
      image->push_back(uint64_t(e.type) | (uint64_t(name.size()) << 8));
      const size_t w = (name.size() + 7) / 8, base = image->size();
      image->resize(base + w, 0);
      std::memcpy(image->data() + base, name.data(), name.size());
      ++*entries;
    });
  }
}

Status ReadCheckpointHeader(const BlockAccess& ba, uint64_t l, const CheckpointHeader** out) {
  UPFS_RETURN_IF_ERROR(ba.CheckRange(l, 1, "checkpoint header"));
  char* p;
  UPFS_RETURN_IF_ERROR(ba.Addr(l, &p));
  const auto* h = reinterpret_cast<const CheckpointHeader*>(p);
  if (h->magic != kCheckpointMagic) return Bad("header magic missing");
  if (h->nruns > kMaxCheckpointRuns) return Bad("too many runs");
  if (h->header_crc != HeaderCrc(*h)) return Bad("header checksum mismatch");
  uint64_t blocks = 0;
  for (uint32_t r = 0; r < h->nruns; ++r) {
    if (h->runs[r].lblock < kDataStart) return Bad("image run inside the pool header");
    UPFS_RETURN_IF_ERROR(ba.CheckRange(h->runs[r].lblock, h->runs[r].count, "checkpoint image"));
    blocks += h->runs[r].count;
  }
  if (h->image_words > blocks * (kBlockSize / 8)) return Bad("image larger than its blocks");
  if (h->cont_slot > kSlotsPerLogBlock || h->keep_seq > h->cont_seq) return Bad("log position out of range");
  UPFS_RETURN_IF_ERROR(ba.CheckRange(h->cont_lblock, 1, "checkpoint log position"));
  UPFS_RETURN_IF_ERROR(ba.CheckRange(h->keep_lblock, 1, "checkpoint log position"));
  *out = h;
  return Status::OK();
}

Status LoadCheckpoint(const BlockAccess& ba, const CheckpointHeader& h, uint64_t root, NsIndex* index) {
  std::vector<uint64_t> w;
  UPFS_RETURN_IF_ERROR(ReadImage(ba, h, &w));
  if (h.dirs == 0 || h.dirs * kDirRowWords > w.size()) return Bad("directory table out of range");
  index->Reset(root);
  index->Reserve(h.dirs, h.entries);
  uint64_t seen = 0;
  for (uint64_t i = 0; i < h.dirs; ++i) {
    const uint64_t* row = &w[i * kDirRowWords];
    if (i > 0 && row[0] <= w[(i - 1) * kDirRowWords]) return Bad("directory table out of order");
    uint64_t at = row[2];
    NsDir* d = index->LoadDir(row[0], row[1], row[3]);
    for (uint64_t e = 0; e < row[3]; ++e) {
      if (at + 2 > w.size()) return Bad("entry out of range");
      const uint64_t ino = w[at], meta = w[at + 1];
      const uint64_t type = meta & 0xff, len = (meta >> 8) & 0xff;
      if ((meta >> 16) != 0 || len == 0 || type == 0 || type > uint64_t(FileType::kSymlink) ||
          at + 2 + (len + 7) / 8 > w.size())
        return Bad("malformed entry");
      const std::string_view name(reinterpret_cast<const char*>(&w[at + 2]), len);
      UPFS_RETURN_IF_ERROR(index->LoadEntry(d, name, NsEntry{ino, FileType(type)}));
      at += 2 + (len + 7) / 8;
      ++seen;
    }
  }
  if (seen != h.entries) return Bad("entry count mismatch");
  return index->CheckLoaded();
}

}  // namespace upfs
