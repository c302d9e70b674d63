#include "container/pool/ns_record.h"

#include <cstring>

#include "util/assert.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

constexpr uint32_t NameWords(size_t len) { return uint32_t((len + 7) / 8); }

bool KnownRecordType(uint64_t t) {
  return t >= uint64_t(RecordType::kCreate) && t <= uint64_t(RecordType::kExchange);
}

// The creation words (pool_format.h): every one tagged, so never zero.
void EncodeCreation(const NsCreation& c, uint64_t* w) {
  UPFS_ASSERT(c.mode <= 07777 && c.consistency < 16 && !(c.created_ns & kRecordWordTag));
  w[0] = kRecordWordTag | c.gen | (uint64_t(c.mode) << 32) | (uint64_t(c.consistency) << 44);
  w[1] = kRecordWordTag | (c.owner & 0xffffffffu);
  w[2] = kRecordWordTag | (c.owner >> 32);
  w[3] = kRecordWordTag | c.created_ns;
}

Status DecodeCreation(const uint64_t* w, NsCreation* c) {
  for (uint32_t i = 0; i < kCreationWords; ++i)
    if (!(w[i] & kRecordWordTag)) return Status::Corrupt("namespace log", "creation word without its tag");
  if ((w[0] >> 48) != (kRecordWordTag >> 48) || (w[1] >> 32) != (kRecordWordTag >> 32) ||
      (w[2] >> 32) != (kRecordWordTag >> 32))
    return Status::Corrupt("namespace log", "creation word with bits set that must be zero");
  c->present = true;
  c->gen = uint32_t(w[0]);
  c->mode = uint32_t(w[0] >> 32) & 07777;
  c->consistency = uint32_t(w[0] >> 44) & 0xf;
  c->owner = uint32_t(w[1]) | (uint64_t(uint32_t(w[2])) << 32);
  c->created_ns = w[3] & ~kRecordWordTag;
  return Status::OK();
}

}  // namespace

uint32_t EncodeRecord(const NsRecord& rec, uint64_t* out, bool tagged, bool creations) {
  UPFS_ASSERT(rec.name1.size() <= kMaxNameLen && rec.name2.size() <= kMaxNameLen);
  const uint32_t w1 = NameWords(rec.name1.size()), w2 = NameWords(rec.name2.size());
  const bool carries = CarriesCreation(rec.type, rec.ftype, creations);
  UPFS_ASSERT(!carries || (tagged && rec.creation.present));
  const uint32_t n = kRecordHeaderWords + w1 + w2 + (carries ? kCreationWords : 0);
  std::memset(out, 0, n * 8);
  out[0] = EncodeRecordWord0(rec.type, rec.ftype, uint32_t(rec.name1.size()),
                             uint32_t(rec.name2.size()));
  out[1] = rec.ino;
  out[2] = rec.dir1;
  out[3] = rec.dir2;
  out[4] = rec.victim;
  if (tagged) {
    UPFS_ASSERT(!(rec.dir2 & kRecordWordTag) && !(rec.victim & kRecordWordTag));
    out[3] |= kRecordWordTag;
    out[4] |= kRecordWordTag;
  }
  auto* names = reinterpret_cast<char*>(out + kRecordHeaderWords);
  // An empty name's data() may be null, which memcpy must never see.
  if (!rec.name1.empty()) std::memcpy(names, rec.name1.data(), rec.name1.size());
  if (!rec.name2.empty()) std::memcpy(names + w1 * 8, rec.name2.data(), rec.name2.size());
  if (carries) EncodeCreation(rec.creation, out + kRecordHeaderWords + w1 + w2);
  return n;
}

Status DecodeRecord(const uint64_t* words, uint32_t n, NsRecord* rec, bool tagged, bool creations) {
  if (n < kRecordHeaderWords) return Status::Corrupt("namespace log", "record too short");
  const uint64_t w0 = words[0];
  const uint64_t type = w0 & 0xff, ftype = (w0 >> 8) & 0xff;
  const uint32_t len1 = uint32_t((w0 >> 16) & 0xffff), len2 = uint32_t((w0 >> 32) & 0xffff);
  if (!KnownRecordType(type) || ftype > uint64_t(FileType::kSymlink) || (w0 >> 48) != 0 ||
      len1 == 0 || len1 > kMaxNameLen || len2 > kMaxNameLen)
    return Status::Corrupt("namespace log", "malformed record header");
  const bool carries = CarriesCreation(RecordType(type), FileType(ftype), creations);
  const uint32_t name_end = kRecordHeaderWords + NameWords(len1) + NameWords(len2);
  if (n != name_end + (carries ? kCreationWords : 0))
    return Status::Corrupt("namespace log", "malformed record header");
  rec->creation = NsCreation{};
  if (carries) {
    UPFS_RETURN_IF_ERROR(DecodeCreation(words + name_end, &rec->creation));
    rec->creation.kind = FileType(ftype);
  }
  rec->type = RecordType(type);
  rec->ftype = FileType(ftype);
  rec->ino = words[1];
  rec->dir1 = words[2];
  rec->dir2 = words[3];
  rec->victim = words[4];
  if (tagged) {
    if (!(rec->dir2 & kRecordWordTag) || !(rec->victim & kRecordWordTag))
      return Status::Corrupt("namespace log", "record word without its tag");
    rec->dir2 &= ~kRecordWordTag;
    rec->victim &= ~kRecordWordTag;
  }
  const auto* names = reinterpret_cast<const char*>(words + kRecordHeaderWords);
  rec->name1 = std::string_view(names, len1);
  rec->name2 = std::string_view(names + NameWords(len1) * 8, len2);
  const bool two = rec->type == RecordType::kRename || rec->type == RecordType::kExchange;
  if (two != (len2 != 0)) return Status::Corrupt("namespace log", "record names do not fit its type");
  // Inode numbers no inode can have (0 among them, which the index's
  // tables keep for "empty") are damage, not keys.
  if (!InodeNumberInRange(rec->ino) || !InodeNumberInRange(rec->dir1) ||
      (two && !InodeNumberInRange(rec->dir2)) || (rec->victim != 0 && !InodeNumberInRange(rec->victim)))
    return Status::Corrupt("namespace log", "record names an inode number out of range");
  // A name no path can reach ('/' or NUL in it, "." or "..") is damage,
  // not an entry to list.
  auto bad_name = [](std::string_view n) {
    return n == "." || n == ".." || n.find('/') != std::string_view::npos ||
           n.find('\0') != std::string_view::npos;
  };
  if (bad_name(rec->name1) || (two && bad_name(rec->name2)))
    return Status::Corrupt("namespace log", "record name is not a file name");
  return Status::OK();
}

}  // namespace upfs
