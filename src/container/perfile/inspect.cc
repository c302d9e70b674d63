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

Status InspectFile(const std::string& path, bool full_check, FileReport* out) {
  *out = FileReport();
  out->path = path;
  // O_NOATIME where allowed: looking at a file does not change its atime.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  struct stat st;
  if (Status s = StatRegular(fd, path, &st); !s.ok()) {
    close(fd);
    return s;
  }
  if (!LooksLikeUpfs(fd)) {
    close(fd);
    if (!(st.st_mode & kHostMarkerBit) || st.st_size < off_t(kBlockSize) ||
        st.st_size % off_t(kBlockSize) != 0)
      return Status::Error(EMEDIUMTYPE, path + ": not a upfs file (no upfs magic)");
    // Marked as a upfs file: something wrote over its header.
    Status s = Status::Corrupt("file header", path +
                                                  ": marked as a upfs file but the upfs magic is "
                                                  "gone (overwritten by a program that bypassed "
                                                  "upfs?)");
    out->problems.push_back(s.message());
    return s;
  }
  std::unique_ptr<Medium> m;
  UPFS_RETURN_IF_ERROR(Medium::Open(fd, path, &m, /*read_only=*/true));
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
  Status rs = ReplayChain(ba, uint32_t(head), &table, &res, /*check_tail=*/full_check);
  if (!rs.ok()) return fail(rs);
  out->size = table.size();
  out->log_blocks = res.log_blocks.size();
  out->log_entries = res.entries;
  out->data_blocks = table.mapped_blocks();
  for (const Run& r : res.overflow) out->overflow_blocks += r.count;

  // Which blocks are referenced, and by what.
  const uint64_t cap = out->capacity_blocks;
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
  table.ForEachMapped([&](uint64_t, uint32_t l) { mark(l, "data"); });
  uint64_t used = 0;
  for (uint8_t r : ref) used += r;
  out->free_blocks = cap - used;

  if (full_check) {
    // Mapped blocks wholly past the size are zero. The bytes past the size
    // in the tail block may hold an uncommitted append (see
    // File::AppendInPlace): not checked.
    uint64_t size = table.size();
    table.ForEachMapped([&](uint64_t v, uint32_t l) {
      uint64_t bs = v << kBlockShift;
      if (bs < size || l >= cap) return;
      if (!AllZero(ba.AddrUnchecked(l), kBlockSize))
        out->problems.push_back("data block " + std::to_string(l) + " (file block " +
                                std::to_string(v) + "): nonzero bytes past the end of file");
    });
  }

  SharedState::Identity id{h->file_id, h->created_ns, uint64_t(st.st_dev), uint64_t(st.st_ino)};
  SharedStateView view;
  Status ss = InspectSharedState(id, cap, &view);
  if (ss.ok()) {
    out->shared_state_present = view.present;
    out->live_processes = view.live_processes;
    if (view.bitmap_readable) {
      int64_t leaked = 0;
      for (uint64_t b = 0; b < cap && (b >> 6) < view.taken.size(); ++b)
        if (((view.taken[b >> 6] >> (b & 63)) & 1) && !ref[b]) ++leaked;
      out->leaked_blocks = leaked;
    }
  }
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
  uint64_t head, seq, head2, seq2;
  UPFS_RETURN_IF_ERROR(head_now(&head, &seq));
  BlockTable table;
  ReplayResult res;
  Status rs = ReplayChain(ba, uint32_t(head), &table, &res, /*check_tail=*/false);
  std::atomic_thread_fence(std::memory_order_acquire);
  UPFS_RETURN_IF_ERROR(head_now(&head2, &seq2));
  if (head2 != head || seq2 != seq) return Status::Error(EAGAIN, path + ": log compacted meanwhile");
  UPFS_RETURN_IF_ERROR(rs);
  out->size = table.size();
  out->blocks = table.mapped_blocks();
  out->mtime_ns = ReportedMtime(h->times, h->created_ns);
  out->data_ctime_ns = ReportedDataCtime(h->times, h->created_ns);
  return Status::OK();
}

}  // namespace upfs
