#include "container/pool/pool_check.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "container/ofd_lock.h"
#include "container/pool/checkpoint.h"
#include "container/pool/inode_alloc.h"
#include "container/pool/ns_index.h"
#include "container/pool/ns_log.h"
#include "container/pool/pool.h"
#include "engine/alloc_bitmap.h"
#include "engine/log.h"
#include "medium/medium.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

bool UsersByteHeld(int fd) { return OfdByteHeldElsewhere(fd, kUsersLockByte); }

// The walk over one read-only mapping.
class Checker {
 public:
  Checker(Medium* m, const Superblock* sb, PoolReport* r)
      : m_(m), ba_(m), sb_(sb), r_(r),
        words_(std::make_unique<BitmapWords>()),
        bits_(new std::atomic<uint64_t>[Capacity(m) / 64 + 1]()),
        bitmap_(words_.get(), bits_.get()), marker_(&bitmap_) {}
  static uint64_t Capacity(const Medium* m) {
    return std::min<uint64_t>(m->capacity() / kBlockSize, kMaxPoolBlocks);
  }

  Status Run();

 private:
  void Problem(std::string p) { r_->problems.push_back(std::move(p)); }
  Status ReadNamespace();
  void CheckPastTail(const NsPos& tail);
  Status WalkInodes();
  Status CheckInode(uint64_t ino, Inode* in);
  // A named new file whose image a crash may have lost is what its create
  // record makes, as recovery will write it: *in then points to that
  // image, made in *room.
  bool AsRecovered(uint64_t ino, Inode** in, InodeImage* room) const;
  Status MarkFile(uint64_t ino, Inode* in);
  void CompareBitmap();

  Medium* m_;
  BlockAccess ba_;
  const Superblock* sb_;
  PoolReport* r_;
  std::unique_ptr<BitmapWords> words_;
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
  AllocationBitmap bitmap_;
  BlockMarker marker_;
  // After a crash, as recovery reads them, a file's last commit may have
  // been cut short too.
  TailRule file_tail_rule_ = TailRule::kStrict;
  NsIndex index_;
  std::unordered_map<uint64_t, uint32_t> names_;  // names per inode (directories: 0)
  // The latest creation of each new regular file the log after the
  // checkpoint holds (version 9: recovery may write its image from it).
  std::unordered_map<uint64_t, NsCreation> creations_;
  InodeAllocator inodes_;
};

Status Checker::ReadNamespace() {
  NsLog log;
  log.SetOneWait(sb_->version >= kFirstOneWaitPoolVersion);
  log.SetCreations(sb_->version >= kFirstFreshCreatePoolVersion);
  auto no_alloc = [](uint32_t*, bool) { return Status::Error(EROFS, "read-only check"); };
  if (const uint64_t ck = sb_->checkpoint.load(); ck != 0) {
    const CheckpointHeader* h;
    UPFS_RETURN_IF_ERROR(ReadCheckpointHeader(ba_, ck, sb_->version, &h));
    auto base = std::make_unique<BaseImage>();
    UPFS_RETURN_IF_ERROR(base->Open(ba_, *h, ck));
    base->ForEachDir([&](const BaseDir& d) {
      if (std::string why; !base->CheckTable(d, &why))
        Problem("checkpoint: directory " + std::to_string(d.ino) + "'s table: " + why);
    });
    index_.Rebase(sb_->root_ino, std::move(base));
    UPFS_RETURN_IF_ERROR(log.InitAt(&ba_, NsPos{h->cont_lblock, h->cont_slot, h->cont_seq}, no_alloc,
                                    [](uint32_t) {}));
    ForEachCheckpointBlock(ck, *h, [&](uint32_t l) { marker_.Mark(l, "checkpoint"); });
    r_->checkpoint_number = h->number;
    r_->checkpoint_entries = h->entries;
    r_->checkpoint_image_blocks = CeilBlocks(h->image_words * 8);
    r_->checkpoint_interval_blocks = CheckpointIntervalBlocks(h->image_words);
  } else {
    UPFS_RETURN_IF_ERROR(log.Init(&ba_, uint32_t(sb_->nslog_head.load()), no_alloc, [](uint32_t) {}));
    index_.Rebase(sb_->root_ino, nullptr);
    r_->checkpoint_interval_blocks = CheckpointIntervalBlocks(0);
  }
  // After a crash (as recovery reads it): the last commit may have been cut
  // short, and the log then ends before it.
  log.AcceptTornTail(!r_->clean && r_->attached_processes == 0);
  file_tail_rule_ = !r_->clean && r_->attached_processes == 0 ? TailRule::kCrashed : TailRule::kStrict;
  const bool crashed = !r_->clean && r_->attached_processes == 0;
  UPFS_RETURN_IF_ERROR(log.ReadNew([&](const NsRecord& rec) {
    // After a crash, as recovery judges images: the last life wins; a
    // symbolic link's record carries none, and ends what an earlier life's
    // said. (In a pool left clean, or in use, every image is what its
    // creator stored.)
    if (crashed && (rec.type == RecordType::kCreate || rec.type == RecordType::kMkdir))
      creations_[rec.ino] = rec.creation;
    return index_.Apply(rec);
  }));
  if (const auto& t = log.torn_tail())
    r_->torn_commit = "slot " + std::to_string(t->slot) + " of namespace log block " + std::to_string(t->lblock);
  CheckPastTail(log.pos());
  // Names per inode, counted from the whole view: the link counts the
  // index derives must agree with them.
  index_.ForEachDir([&](uint64_t dir, const NsDirInfo&) {
    names_[dir] += 0;
    index_.List(dir, [&](std::string_view, const NsEntry& e) { ++names_[e.ino]; });
  });
  UPFS_RETURN_IF_ERROR(log.Measure(uint32_t(sb_->nslog_head.load()), &r_->log_blocks, &r_->log_records));
  for (uint64_t l = sb_->nslog_head.load(); l != 0;) {
    marker_.Mark(l, "namespace log");
    l = NextBlock(reinterpret_cast<const LogBlock*>(ba_.AddrUnchecked(l))->next.load());
  }
  if (sb_->version >= kFirstLogReservePoolVersion)
    for (const auto& w : sb_->nslog_reserve) {
      const uint64_t l = w.load();
      if (l >= kDataStart && l < r_->capacity_blocks) {
        marker_.Mark(l, "namespace log reserve");
        ++r_->log_reserve_blocks;
      }
      else if (l != 0)
        Problem("namespace log reserve block " + std::to_string(l) + " out of range");
    }
  return Status::OK();
}

// Past the committed tail (the first empty slot) a block holds zeros, or
// dead reservations (a writer that died before its kApply, with an earlier
// slot not yet durable); anything else is damage that readers do not see
// (they stop at the empty slot) but that the next record committed there
// would be read together with. And a block gets a successor only once it is
// closed (its last slots covered by a reservation), so the tail is in one
// only if a crash lost the closing reservation after another thread had
// linked the successor on the strength of it (its fence does not persist
// the reservation's line): recovery then leaves the successor linked and
// empty, to be used in turn (NsLog::DiscardPastTail), and any entry in it
// is damage. Only
// when nobody is attached (a writer may be between its words otherwise)
// and the pool was left clean: after a crash, a payload whose reservation
// word was lost may lie past the tail, and recovery clears it
// (NsLog::DiscardPastTail).
void Checker::CheckPastTail(const NsPos& tail) {
  if (!r_->clean || r_->attached_processes != 0 || tail.slot >= kSlotsPerLogBlock) return;
  const auto* b = reinterpret_cast<const LogBlock*>(ba_.AddrUnchecked(tail.lblock));
  const std::string where = " of namespace log block " + std::to_string(tail.lblock);
  uint64_t blocks = 0;
  for (uint32_t n = NextBlock(b->next.load()); n != 0 && blocks <= (uint64_t{1} << 28); ++blocks) {
    if (!ba_.CheckRange(n, 1, "namespace log block").ok()) break;  // ReadNamespace said so
    const auto* nb = reinterpret_cast<const LogBlock*>(ba_.AddrUnchecked(n));
    for (uint32_t s = 0; s < kSlotsPerLogBlock; ++s)
      if (nb->slots[s].load() != 0) {
        Problem("namespace log: the committed tail is at slot " + std::to_string(tail.slot) + where +
                ", whose successor " + std::to_string(n) + " holds entries");
        return;
      }
    n = NextBlock(nb->next.load());
  }
  for (uint32_t s = tail.slot; s < kSlotsPerLogBlock;) {
    const uint64_t e = b->slots[s].load();
    if (e == 0) {
      ++s;
    } else if (KindOf(e) == EntryKind::kReserve && ReserveWellFormed(e) &&
               s + 1 + ReserveCount(e) <= kSlotsPerLogBlock) {
      s += 1 + ReserveCount(e);
    } else {
      Problem("namespace log: non-zero word in slot " + std::to_string(s) + where +
              ", past the committed tail (slot " + std::to_string(tail.slot) + ")");
      return;
    }
  }
}

Status Checker::MarkFile(uint64_t ino, Inode* in) {
  if (const uint64_t t = in->target_block.load(); t != 0) {
    if (t < kDataStart || t >= m_->capacity() / kBlockSize) {  // (t + 1) * kBlockSize could wrap
      Problem("inode " + std::to_string(ino) + ": symbolic link target block out of range");
      return Status::OK();
    }
    marker_.Mark(t, "symbolic link target");
    ++r_->file_blocks;
  }
  const uint64_t head = in->log_head.load();
  if (head == 0) return Status::OK();
  if (head < kDataStart || head >= kMaxPoolBlocks) {
    Problem("inode " + std::to_string(ino) + ": log head out of range");
    return Status::OK();
  }
  BlockTable table;
  ReplayResult res;
  if (Status st = ReplayChain(ba_, uint32_t(head), &table, &res, file_tail_rule_); !st.ok()) {
    Problem("file " + std::to_string(ino) + ": " + st.message());
    return Status::OK();
  }
  if (res.cut_short_words)
    r_->torn_commit += std::string(r_->torn_commit.empty() ? "" : "; ") + "the end of file " +
                       std::to_string(ino) + "'s log";
  for (uint32_t l : res.log_blocks) marker_.Mark(l, "log");
  for (const format::Run& run : res.overflow)
    for (uint32_t i = 0; i < run.count; ++i) marker_.Mark(run.lblock + i, "overflow");
  uint64_t data = 0, prev_v = 0, prev_l = 0;
  table.ForEachMapped([&](uint64_t v, uint32_t l) {
    marker_.Mark(l, "data");
    if (const uint32_t s = table.ShadowOf(v, l)) marker_.Mark(s, "shadow");
    // A run: consecutive file blocks in consecutive pool blocks.
    if (data == 0 || v != prev_v + 1 || l != prev_l + 1) ++r_->data_runs;
    prev_v = v;
    prev_l = l;
    ++data;
  });
  r_->data_blocks += data;
  r_->file_blocks += res.log_blocks.size() + data;
  return Status::OK();
}

bool Checker::AsRecovered(uint64_t ino, Inode** in, InodeImage* room) const {
  auto c = creations_.find(ino);
  if (c == creations_.end() || !c->second.present || ImageSealedFor(**in, c->second)) return false;
  ImageFromCreation(c->second, room->get());
  *in = room->get();
  return true;
}

Status Checker::CheckInode(uint64_t ino, Inode* in) {
  auto it = names_.find(ino);
  const uint32_t links = it == names_.end() ? 0 : it->second;
  InodeImage made;
  if (links != 0 && AsRecovered(ino, &in, &made)) ++r_->images_from_records;
  const uint64_t id = in->ident.load();
  const FileType kind = IdentKind(id);
  if (kind == FileType::kFree) return Status::OK();
  ++r_->inodes_in_use;
  if (kind > FileType::kSymlink || (id & IdentZeroBits(sb_->version)) != 0 ||
      ((id & kIdentFresh) && kind == FileType::kSymlink)) {
    Problem("inode " + std::to_string(ino) + ": unknown kind");
    return Status::OK();
  }
  if (links == 0 && ino != sb_->root_ino) {
    ++r_->orphans;  // unlinked while open, or a creation cut short: recovery frees it
    return MarkFile(ino, in);
  }
  if ((kind == FileType::kDirectory) != index_.IsDir(ino))
    Problem("inode " + std::to_string(ino) + ": kind does not match the namespace");
  if (kind != FileType::kDirectory && index_.Nlink(ino, kind) != links)
    Problem("inode " + std::to_string(ino) + ": the index counts " +
            std::to_string(index_.Nlink(ino, kind)) + " links, the directories hold " + std::to_string(links));
  if (in->mode.load() & ~uint64_t(07777)) Problem("inode " + std::to_string(ino) + ": mode out of range");
  if (kind == FileType::kRegular) {
    ++r_->files;
    r_->extra_links += links - 1;
    if (in->consistency != uint32_t(Consistency::kStrict) && in->consistency != uint32_t(Consistency::kSync))
      Problem("inode " + std::to_string(ino) + ": no consistency mode");
  } else if (kind == FileType::kSymlink) {
    ++r_->symlinks;
    r_->extra_links += links - 1;
    if (in->target_len == 0 || in->target_len >= kBlockSize ||
        (in->target_len > kInlineTargetMax) != (in->target_block.load() != 0))
      Problem("inode " + std::to_string(ino) + ": symbolic link target length");
  }
  return MarkFile(ino, in);
}

Status Checker::WalkInodes() {
  inodes_.Init(&ba_, const_cast<Superblock*>(sb_), nullptr, nullptr);
  return inodes_.ForEachBlock([&](uint32_t l) -> Status {
    ++r_->inode_blocks;
    marker_.Mark(l, "inode");
    for (uint32_t s = 1; s < kInodesPerBlock; ++s) {
      Inode* in;
      UPFS_RETURN_IF_ERROR(inodes_.At(InodeNumber(l, s), &in));
      UPFS_RETURN_IF_ERROR(CheckInode(InodeNumber(l, s), in));
    }
    return Status::OK();
  });
}

void Checker::CompareBitmap() {
  const auto* words = reinterpret_cast<const PoolWords*>(ba_.AddrUnchecked(kWordsBlock));
  if (!r_->clean || r_->attached_processes != 0 || words->magic != kVolatileMagic ||
      words->pool_id != sb_->pool_id)
    return;
  const auto* bits = reinterpret_cast<const std::atomic<uint64_t>*>(ba_.AddrUnchecked(kBitmapBlock));
  // Extents given back (version 10): taken, referenced by nothing. Read
  // through the set the pool's processes use (engine/punched_extents.h).
  std::optional<SharedPunchedExtents> punched;
  if (sb_->version >= kFirstGiveBackPoolVersion)
    punched.emplace(reinterpret_cast<std::atomic<uint64_t>*>(ba_.AddrUnchecked(kPunchedBlock)),
                    kMaxPoolBlocks / kPartitionBlocks,
                    const_cast<std::atomic<uint64_t>*>(&words->punched_blocks));
  auto given_back = [&](uint64_t b) { return punched && punched->Test(b / kPartitionBlocks); };
  int64_t leaked = 0, punched_blocks = 0;
  for (uint64_t b = kDataStart; b < r_->capacity_blocks; ++b) {
    const bool taken = (bits[b >> 6].load() >> (b & 63)) & 1;
    const bool used = bitmap_.Test(b);
    if (given_back(b)) {
      ++punched_blocks;
      if (used || !taken) {
        Problem("block " + std::to_string(b) + " lies in an extent given back to the host but is " +
                (used ? "in use" : "free in the allocation bitmap"));
        break;
      }
      continue;
    }
    if (taken && !used) ++leaked;
    if (used && !taken) {
      Problem("block " + std::to_string(b) + " is in use but free in the allocation bitmap");
      break;
    }
  }
  r_->leaked_blocks = leaked;
  r_->given_back_blocks = punched_blocks;
  // The count covers every bit, also those of extents a truncation of the
  // file cut off (holes either way).
  uint64_t recorded = 0;
  if (punched) punched->ForEach([&](uint64_t) { recorded += kPartitionBlocks; });
  if (punched && recorded != punched->blocks())
    Problem("the volatile area counts " + std::to_string(punched->blocks()) +
            " blocks given back, its extents hold " + std::to_string(recorded));
  // The summaries must hide no free space (on a quiet pool they agree).
  auto* mbits = const_cast<std::atomic<uint64_t>*>(bits);
  auto* summary = reinterpret_cast<std::atomic<uint64_t>*>(ba_.AddrUnchecked(kSummaryBlock));
  AllocationBitmap on_media(const_cast<BitmapWords*>(&words->bitmap), mbits, summary, kMaxPoolBlocks);
  if (std::string why; !on_media.SummariesAgree(r_->capacity_blocks, &why)) Problem(why);
}

Status Checker::Run() {
  r_->capacity_blocks = Capacity(m_);
  words_->Reset(r_->capacity_blocks);
  for (uint32_t b = 0; b < kDataStart; ++b) marker_.Mark(b, "pool header");
  UPFS_RETURN_IF_ERROR(ReadNamespace());
  UPFS_RETURN_IF_ERROR(WalkInodes());
  // The root is an inode in use as a directory (no name leads to it).
  {
    Inode* root;
    if (!inodes_.At(sb_->root_ino, &root).ok() || IdentKind(root->ident.load()) != FileType::kDirectory)
      Problem("inode " + std::to_string(sb_->root_ino) + ": the root directory's inode is not in use as a directory");
  }
  // Every name must lead to an inode in use of its kind.
  index_.ForEachDir([&](uint64_t dir, const NsDirInfo&) {
    ++r_->directories;
    index_.List(dir, [&](std::string_view name, const NsEntry& e) {
      Inode* in;
      InodeImage made;
      const bool found = inodes_.At(e.ino, &in).ok();
      if (found) AsRecovered(e.ino, &in, &made);
      if (!found || IdentKind(in->ident.load()) != e.type)
        Problem("name '" + std::string(name) + "' in directory " + std::to_string(dir) +
                " refers to inode " + std::to_string(e.ino) + ", which is not in use as such");
    });
  });
  if (Status st = marker_.status(); !st.ok()) Problem(st.message());
  for (uint64_t b = 0; b < r_->capacity_blocks; ++b) r_->referenced_blocks += bitmap_.Test(b);
  CompareBitmap();
  return Status::OK();
}

}  // namespace

Status CheckPool(const std::string& path, PoolReport* out) {
  *out = PoolReport();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  alignas(64) static thread_local Superblock sb;
  uint64_t bytes;
  if (Status st = ReadSuperblock(fd, path, &sb, &bytes); !st.ok()) {
    close(fd);
    return st;
  }
  out->pool_bytes = bytes;
  out->version = sb.version;
  out->clean = sb.clean.load() == 1;
  out->attached_processes = UsersByteHeld(fd) ? 1 : 0;
  std::unique_ptr<Medium> m;
  UPFS_RETURN_IF_ERROR(Medium::Open(fd, path, &m, /*read_only=*/true));
  out->medium = MediumKindName(m->kind());
  out->durability = MediumDurability(m->kind());
  Checker c(m.get(), reinterpret_cast<const Superblock*>(m->base()), out);
  return c.Run();
}

}  // namespace upfs
