#include "container/perfile/inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "engine/file.h"
#include "engine/log.h"
#include "container/perfile/perfile.h"
#include "container/perfile/shared_state.h"
#include "format/format.h"
#include "format/header.h"
#include "medium/medium.h"

namespace upfs {

using namespace format;

namespace {

bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

namespace {

// Opens `path` to look at it as a upfs file, without changing its atime
// where allowed: EMEDIUMTYPE if it is not one, the damage if it is marked
// as one but lost its magic.
Status OpenToInspect(const std::string& path, FileReport* out, std::unique_ptr<Medium>* m,
                     struct stat* st) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  if (Status s = StatRegular(fd, path, st); !s.ok()) {
    close(fd);
    return s;
  }
  if (!LooksLikeUpfs(fd)) {
    close(fd);
    if (!IsMarkedUpfs(*st))
      return Status::Error(EMEDIUMTYPE, path + ": not a upfs file (no upfs magic)");
    Status s = MarkedWithoutMagic(path);
    out->problems.push_back(s.message());
    return s;
  }
  return Medium::Open(fd, path, m, /*read_only=*/true);
}

// Marks every block the log references (ref[b] = 1), listing blocks
// referenced twice or past the end; counts the free ones.
std::vector<uint8_t> MarkReferenced(const ReplayResult& res, const BlockTable& table, uint64_t cap,
                                    FileReport* out) {
  std::vector<uint8_t> ref(cap, 0);
  auto mark = [&](uint64_t b, const char* what) {
    if (b >= cap) {
      out->problems.push_back(std::string(what) + " block " + std::to_string(b) +
                              ": past the end of the file");
      return;
    }
    if (ref[b]) {
      out->problems.push_back("block map: " + std::string(what) + " block " + std::to_string(b) +
                              " is referenced twice");
      return;
    }
    ref[b] = 1;
  };
  mark(0, "header");
  for (uint32_t l : res.log_blocks) mark(l, "log");
  for (const Run& r : res.overflow)
    for (uint32_t i = 0; i < r.count; ++i) mark(uint64_t(r.lblock) + i, "overflow");
  table.ForEachHeld([&](uint32_t l) { mark(l, "data"); });
  uint64_t used = 0;
  for (uint8_t r : ref) used += r;
  out->free_blocks = cap - used;
  return ref;
}

// Mapped blocks wholly past the size must be zero. The bytes past the size
// in the tail block may hold an uncommitted append (File::AppendInPlace):
// not checked.
void CheckPastTheSize(const BlockAccess& ba, const BlockTable& table, uint64_t cap,
                      FileReport* out) {
  const uint64_t size = table.size();
  table.ForEachMapped([&](uint64_t v, uint32_t l) {
    uint64_t bs = v << kBlockShift;
    if (bs < size || l >= cap) return;
    if (!AllZero(ba.AddrUnchecked(l), kBlockSize))
      out->problems.push_back("data block " + std::to_string(l) + " (file block " +
                              std::to_string(v) + "): nonzero bytes past the end of file");
  });
}

// The shared state, if any: who uses the file, and the blocks it marks
// taken that nothing references (when nobody uses it).
void ReportSharedState(const FileHeader& h, const struct stat& st, const std::vector<uint8_t>& ref,
                       FileReport* out) {
  const uint64_t cap = ref.size();
  SharedState::Identity id{h.file_id, h.created_ns, uint64_t(st.st_dev), uint64_t(st.st_ino)};
  SharedStateView view;
  if (!InspectSharedState(id, cap, &view).ok()) return;
  out->shared_state_present = view.present;
  out->live_processes = view.live_processes;
  if (!view.bitmap_readable) return;
  int64_t leaked = 0;
  for (uint64_t b = 0; b < cap && (b >> 6) < view.taken.size(); ++b)
    if (((view.taken[b >> 6] >> (b & 63)) & 1) && !ref[b]) ++leaked;
  out->leaked_blocks = leaked;
}

}  // namespace

Status InspectFile(const std::string& path, bool full_check, FileReport* out) {
  *out = FileReport();
  out->path = path;
  std::unique_ptr<Medium> m;
  struct stat st;
  UPFS_RETURN_IF_ERROR(OpenToInspect(path, out, &m, &st));
  out->medium = MediumKindName(m->kind());
  out->durability = MediumDurability(m->kind());
  auto fail = [&](const Status& s) {
    out->problems.push_back(s.message());
    return s;
  };
  Status hs = ValidateHeader(m->base(), m->capacity());
  if (!hs.ok()) return fail(hs);
  const auto* h = reinterpret_cast<const FileHeader*>(m->base());
  out->format_version = h->format_version;
  out->file_id = h->file_id;
  out->created_ns = h->created_ns;
  out->consistency = h->consistency == uint32_t(Consistency::kSync) ? "sync" : "strict";
  out->capacity_blocks = m->capacity() >> kBlockShift;

  BlockAccess ba(m.get());
  BlockTable table;
  ReplayResult res;
  uint64_t head = h->log_head.load();
  if (head == 0 || head >= kMaxBlocks) return fail(Status::Corrupt("file header", "bad log head"));
  // A commit a crash cut short can end the log only if the file was in use
  // when its last user vanished (format.h, `in_use`).
  const bool crashed = h->in_use.load() != 0;
  const TailRule rule = full_check ? (crashed ? TailRule::kCrashed : TailRule::kStrict)
                                   : (crashed ? TailRule::kReadOnly : TailRule::kLive);
  Status rs = ReplayChain(ba, uint32_t(head), &table, &res, rule);
  if (!rs.ok()) return fail(rs);
  out->size = table.size();
  out->cut_short_words = res.cut_short_words;
  out->log_blocks = res.log_blocks.size();
  out->log_entries = res.entries;
  out->data_blocks = table.mapped_blocks();
  table.patches().ForEach([&](uint64_t v, const uint64_t*, uint32_t n) {
    out->patched_blocks += 1;
    out->patch_count += n;
    out->patch_bytes += table.patches().Bytes(v);
  });
  table.shadows().ForEach([&](uint64_t, uint32_t) { out->paired_blocks += 1; });
  for (const Run& r : res.overflow) out->overflow_blocks += r.count;

  const std::vector<uint8_t> ref = MarkReferenced(res, table, out->capacity_blocks, out);
  if (full_check) CheckPastTheSize(ba, table, out->capacity_blocks, out);
  ReportSharedState(*h, st, ref, out);
  if (!out->problems.empty()) return Status::Error(EUCLEAN, out->problems.front());
  return Status::OK();
}

Status PeekStat(int fd, const std::string& path, FileStat* out) {
  int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dfd < 0) return Status::FromErrno("dup " + path);
  std::unique_ptr<Medium> m;
  UPFS_RETURN_IF_ERROR(Medium::Open(dfd, path, &m, /*read_only=*/true));
  UPFS_RETURN_IF_ERROR(ValidateHeader(m->base(), m->capacity()));
  const auto* h = reinterpret_cast<const FileHeader*>(m->base());
  BlockAccess ba(m.get());
  // GC publishes a new chain by swapping the head, and gives the old blocks
  // back only after that: an unchanged head means the walk read live blocks.
  // (A reused block as a later head has a later sequence number.)
  auto head_now = [&](uint64_t* head, uint64_t* seq) {
    *head = h->log_head.load(std::memory_order_acquire);
    if (*head == 0 || *head >= kMaxBlocks) return Status::Corrupt("file header", "bad log head");
    UPFS_RETURN_IF_ERROR(ba.CheckRange(*head, 1, "log head"));
    *seq = reinterpret_cast<const LogBlock*>(ba.AddrUnchecked(uint32_t(*head)))->seq;
    return Status::OK();
  };
  uint64_t head = 0, seq = 0, head2 = 0, seq2 = 0;  // set by head_now (GCC 12 cannot tell)
  UPFS_RETURN_IF_ERROR(head_now(&head, &seq));
  BlockTable table;
  ReplayResult res;
  Status rs = ReplayChain(ba, uint32_t(head), &table, &res,
                          h->in_use.load() != 0 ? TailRule::kReadOnly : TailRule::kLive);
  std::atomic_thread_fence(std::memory_order_acquire);
  UPFS_RETURN_IF_ERROR(head_now(&head2, &seq2));
  if (head2 != head || seq2 != seq) return Status::Error(EAGAIN, path + ": log compacted meanwhile");
  UPFS_RETURN_IF_ERROR(rs);
  out->size = table.size();
  out->blocks = table.mapped_blocks() + table.shadows().count();
  out->mtime_ns = ReportedMtime(h->times, h->created_ns);
  out->data_ctime_ns = ReportedDataCtime(h->times, h->created_ns);
  return Status::OK();
}

}  // namespace upfs
