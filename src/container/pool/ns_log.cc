#include "container/pool/ns_log.h"

#include <algorithm>
#include <cstring>

#include "medium/pm.h"
#include "util/assert.h"
#include "util/crc32c.h"

namespace upfs {

using namespace format;
using namespace format::pool;

namespace {

// Slots entry e of the namespace log takes: a kReserve, its payload's too
// (no checked appends there, unlike a file's log: engine/log.h).
uint32_t NsEntrySlots(uint64_t e) { return KindOf(e) == EntryKind::kReserve ? 1 + ReserveCount(e) : 1; }

// Writes line `line` of log block b back and fences: a payload's last
// line, left open for its kApply, once the kApply is known to land past it.
void WriteBackLine(LogBlock* b, uint32_t line) {
  pm::Flush(reinterpret_cast<char*>(b) + size_t(line) * kCacheLine, kCacheLine);
  pm::Fence();
}

Status CheckNsBlock(const BlockAccess& ba, uint32_t l, uint64_t seq, const char* what) {
  UPFS_RETURN_IF_ERROR(ba.CheckRange(l, 1, what));
  char* p;
  UPFS_RETURN_IF_ERROR(ba.Addr(l, &p));
  const auto* b = reinterpret_cast<const LogBlock*>(p);
  if (!NsNextWordValid(b->next.load(std::memory_order_acquire)))
    return Status::Corrupt("namespace log", "block " + std::to_string(l) + " has no log magic");
  if (seq != 0 && b->seq != seq)
    return Status::Corrupt("namespace log", "block " + std::to_string(l) + " out of sequence");
  return Status::OK();
}

}  // namespace

Status NsLog::InitBlock(BlockAccess* ba, uint32_t lblock, uint64_t seq) {
  char* p;
  UPFS_RETURN_IF_ERROR(ba->Addr(lblock, &p));
  alignas(64) static thread_local unsigned char img[kBlockSize];
  std::memset(img, 0, sizeof(img));
  auto* b = reinterpret_cast<LogBlock*>(img);
  b->next.store(NsNextWord(0), std::memory_order_relaxed);
  b->seq = seq;
  pm::CopyNT(p, img, kBlockSize);
  pm::Fence();
  return Status::OK();
}

void NsLog::Bind(BlockAccess* ba, AllocBlock alloc, FreeBlock free) {
  // Once: a reload (a new checkpoint, under the index lock) only moves the
  // position, while other threads use these without that lock (Reserve's
  // alloc_, MakeDurable's ba_).
  if (ba_) {
    UPFS_ASSERT(ba_ == ba);
    return;
  }
  ba_ = ba;
  alloc_ = std::move(alloc);
  free_ = std::move(free);
}

Status NsLog::Init(BlockAccess* ba, uint32_t head, AllocBlock alloc, FreeBlock free) {
  Bind(ba, std::move(alloc), std::move(free));
  UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, head, 0, "namespace log head"));
  pos_ = NsPos{head, 0, Block(head)->seq};
  torn_tail_.reset();
  NewView();
  PublishPos();
  std::lock_guard<SpinMutex> g(durable_mu_);
  durable_ = pos_;
  return Status::OK();
}

void NsLog::NewView() {
  static std::atomic<uint64_t> next{1};
  view_ = next.fetch_add(1, std::memory_order_relaxed) << 40;
}

Status NsLog::InitAt(BlockAccess* ba, NsPos pos, AllocBlock alloc, FreeBlock free) {
  Bind(ba, std::move(alloc), std::move(free));
  return MoveTo(pos);
}

Status NsLog::MoveTo(NsPos pos) {
  UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, pos.lblock, pos.seq, "namespace log position"));
  if (pos.slot > kSlotsPerLogBlock) return Status::Corrupt("namespace log", "position out of range");
  pos_ = pos;
  torn_tail_.reset();
  NewView();
  PublishPos();
  std::lock_guard<SpinMutex> g(durable_mu_);
  durable_ = pos_;
  return Status::OK();
}

void NsLog::PublishPos() {
  const uint32_t v = hint_version_.load(std::memory_order_relaxed);
  hint_version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  hint_place_.store(uint64_t(pos_.lblock) << 32 | pos_.slot, std::memory_order_relaxed);
  hint_seq_.store(pos_.seq, std::memory_order_relaxed);
  hint_version_.store(v + 2, std::memory_order_release);
}

NsPos NsLog::PosHint() const {
  for (;;) {
    const uint32_t v = hint_version_.load(std::memory_order_acquire);
    if (v & 1) continue;  // a publish is a few stores: spin
    const uint64_t place = hint_place_.load(std::memory_order_relaxed);
    const uint64_t seq = hint_seq_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (hint_version_.load(std::memory_order_relaxed) == v)
      return NsPos{uint32_t(place >> 32), uint32_t(place), seq};
  }
}

bool NsLog::AnyNew() const {
  // Reservations are not records: one that another thread (or process) has
  // made and not yet committed is looked past, read-only. Answering "new"
  // for it sent every lookup that found one (with two threads creating in
  // one directory, 11-16% of them, counted: each thread's reservation
  // waits at the tail for the index lock) to the exclusive lock for a
  // catch-up that only stepped over it. Slots never go back to empty, and a kApply is
  // written into the first empty one, so a record committed before this
  // call is met before the first empty slot. A few reservations at most
  // (one per commit in flight, and dead ones until the next catch-up);
  // past kLookPast, or anything unexpected, the catch-up decides.
  // Sequentially consistent loads: a hold's count is incremented and then
  // this asked, against a remover's commit and then its read of the
  // count (docs/design.md, "Holds"); on x86 a plain load either way.
  constexpr int kLookPast = 4;
  const LogBlock* b = Block(pos_.lblock);
  uint32_t s = pos_.slot;
  for (int i = 0; i <= kLookPast && s < kSlotsPerLogBlock; ++i) {
    const uint64_t e = b->slots[s].load(std::memory_order_seq_cst);
    if (e == 0) return false;
    if (KindOf(e) != EntryKind::kReserve || !ReserveWellFormed(e)) return true;
    s += NsEntrySlots(e);
    if (s > kSlotsPerLogBlock) return true;  // damage: the catch-up reports it
  }
  if (s < kSlotsPerLogBlock) return true;
  return NextBlock(b->next.load(std::memory_order_seq_cst)) != 0;
}

Status NsLog::DecodeAt(const LogBlock* b, uint32_t apply_slot, uint64_t apply, NsRecord* rec) const {
  const uint32_t rs = ApplySlot(apply);
  if (!ApplyWellFormed(apply) || rs >= apply_slot)
    return Status::Corrupt("namespace log", "commit entry names no earlier reservation");
  const uint64_t reserve = b->slots[rs].load(std::memory_order_acquire);
  const uint32_t n = ReserveCount(reserve);
  if (KindOf(reserve) != EntryKind::kReserve || rs + 1 + n > apply_slot)
    return Status::Corrupt("namespace log", "commit entry names no reservation");
  const auto* words = reinterpret_cast<const uint64_t*>(&b->slots[rs + 1]);
  if (Crc32c(words, n * 8) != ApplyCrc(apply))
    return Status::Corrupt("namespace log", "record checksum mismatch");
  return DecodeRecord(words, n, rec, one_wait_, creations_);
}

bool NsLog::TornCommit(const LogBlock* b, uint64_t apply) const {
  if (!accept_torn_tail_ || !ApplyWellFormed(apply)) return false;
  const uint32_t rs = ApplySlot(apply);
  if (rs >= pos_.slot) return false;
  const uint64_t reserve = b->slots[rs].load(std::memory_order_acquire);
  const uint32_t n = ReserveCount(reserve);
  if (KindOf(reserve) != EntryKind::kReserve || n == 0 || rs + 1 + n > pos_.slot) return false;
  const auto* words = reinterpret_cast<const uint64_t*>(&b->slots[rs + 1]);
  if (Crc32c(words, n * 8) == ApplyCrc(apply)) return false;  // whole, so damaged elsewhere
  bool lost = false;
  if (one_wait_) {
    // Version 8: the payload is written back with the kApply, any line of
    // it may be lost, and no word of a valid one is zero.
    for (uint32_t i = 0; i < n; ++i) lost = lost || words[i] == 0;
  } else {
    // Only the payload's last line is written back with the kApply (Reserve),
    // so only there can a crash leave the kApply without payload words.
    const uint32_t last = rs + n;
    if (SlotLine(last) != SlotLine(pos_.slot)) return false;
    // A word that did not reach the media reads zero (a slot is zero until
    // it is written, once). Reserve leaves in that line only words that are
    // zero or never zero, so a lost one shows as a zero where a valid record
    // has none; damage (a flipped bit) does not.
    for (uint32_t s = std::max(rs + 1, LineFirstSlot(SlotLine(last))); s <= last; ++s)
      lost = lost || (words[s - rs - 1] == 0 && PayloadWordNeverZero(words[0], s - rs - 1));
  }
  return lost && NothingReturnedAfter();
}

bool NsLog::NothingReturnedAfter() const {
  // A commit that returned made every record before it durable first
  // (MakeDurable), and a thread has one commit in flight at most.
  return CommitsAfter(kMaxCommitsInFlight) <= kMaxCommitsInFlight;
}

uint64_t NsLog::CommitsAfter(uint64_t limit) const {
  uint64_t count = 0;
  NsPos p{pos_.lblock, pos_.slot + 1, pos_.seq};
  for (uint64_t blocks = 0; count <= limit && blocks <= (uint64_t{1} << 28);) {
    const LogBlock* b = Block(p.lblock);
    if (p.slot >= kSlotsPerLogBlock) {
      const uint64_t next = b->next.load(std::memory_order_acquire);
      if (!NsNextWordValid(next) || NextBlock(next) == 0) break;
      if (!CheckNsBlock(*ba_, NextBlock(next), p.seq + 1, "namespace log block").ok()) break;
      p = NsPos{NextBlock(next), 0, p.seq + 1};
      ++blocks;
      continue;
    }
    const uint64_t e = b->slots[p.slot].load(std::memory_order_acquire);
    if (e == 0) break;
    count += KindOf(e) == EntryKind::kApply;
    p.slot += KindOf(e) == EntryKind::kReserve && ReserveWellFormed(e) ? 1 + ReserveCount(e) : 1;
  }
  return count;
}

Status NsLog::Advance(const std::function<Status(const NsRecord&)>* fn, bool* at_tail) {
  *at_tail = false;
  for (;;) {
    if (torn_tail_ && pos_ == *torn_tail_) {
      *at_tail = true;
      return Status::OK();
    }
    LogBlock* b = Block(pos_.lblock);
    if (pos_.slot >= kSlotsPerLogBlock) {
      const uint64_t next = b->next.load(std::memory_order_acquire);
      if (!NsNextWordValid(next)) return Status::Corrupt("namespace log", "block link damaged");
      if (NextBlock(next) == 0) {
        *at_tail = true;
        return Status::OK();
      }
      UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, NextBlock(next), pos_.seq + 1, "namespace log block"));
      pos_ = NsPos{NextBlock(next), 0, pos_.seq + 1};
      continue;
    }
    const uint64_t e = b->slots[pos_.slot].load(std::memory_order_acquire);
    if (e == 0) {
      *at_tail = true;
      return Status::OK();
    }
    switch (KindOf(e)) {
      case EntryKind::kReserve: {
        const uint32_t n = ReserveCount(e);
        if (!ReserveWellFormed(e) || pos_.slot + 1 + n > kSlotsPerLogBlock)
          return Status::Corrupt("namespace log", "reservation past the end of its block");
        pos_.slot += 1 + n;
        break;
      }
      case EntryKind::kApply: {
        ++view_;  // before the apply: one that fails half way changed the index too
        if (fn) {
          NsRecord rec;
          if (Status st = DecodeAt(b, pos_.slot, e, &rec); !st.ok()) {
            if (!TornCommit(b, e)) return st;
            torn_tail_ = pos_;
            --view_;
            *at_tail = true;
            return Status::OK();
          }
          UPFS_RETURN_IF_ERROR((*fn)(rec));
        }
        pos_.slot += 1;
        break;
      }
      default:
        return Status::Corrupt("namespace log", "unknown entry kind in slot " +
                                                    std::to_string(pos_.slot) + " of block " +
                                                    std::to_string(pos_.lblock));
    }
  }
}

Status NsLog::ReadNew(const std::function<Status(const NsRecord&)>& fn) {
  bool at_tail;
  const NsPos was = pos_;
  Status st = Advance(&fn, &at_tail);
  if (!(pos_ == was)) PublishPos();  // also where a damaged record stopped it
  return st;
}

Status NsLog::MoveToNextBlock(NsPos* p, bool removal) {
  LogBlock* b = Block(p->lblock);
  // The successor first: if there is no room for one, the block stays open
  // and its last slots still take what fits there (removals, Reserve).
  uint64_t next = b->next.load(std::memory_order_acquire);
  uint32_t fresh = 0;
  if (NextBlock(next) == 0) {
    UPFS_RETURN_IF_ERROR(alloc_(&fresh, removal));
    if (Status st = InitBlock(ba_, fresh, p->seq + 1); !st.ok()) {
      free_(fresh);
      return st;
    }
  }
  // Fill what is left of the block with one dead reservation, so that no
  // entry goes into a block once it has a successor. Durable before the
  // link: a reader after a crash must not stop at an empty slot with
  // records in the next block.
  uint32_t s = p->slot;
  while (s < kSlotsPerLogBlock) {
    uint64_t e = b->slots[s].load(std::memory_order_acquire);
    if (e == 0) {
      uint64_t expected = 0;
      if (pm::Cas64(&b->slots[s], expected, EncodeReserve(kSlotsPerLogBlock - s - 1))) {
        pm::PersistWord(&b->slots[s]);
        break;
      }
      e = expected;
    }
    s += NsEntrySlots(e);
  }
  if (fresh != 0) {
    uint64_t expected = NsNextWord(0);
    if (pm::Cas64(&b->next, expected, NsNextWord(fresh))) {
      pm::PersistWord(&b->next);
      next = NsNextWord(fresh);
    } else {
      free_(fresh);
      next = expected;
    }
  } else {
    next = b->next.load(std::memory_order_acquire);
  }
  if (!NsNextWordValid(next) || NextBlock(next) == 0)
    return Status::Corrupt("namespace log", "block link damaged");
  UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, NextBlock(next), p->seq + 1, "namespace log block"));
  *p = NsPos{NextBlock(next), 0, p->seq + 1};
  return Status::OK();
}

namespace {

// Whether the payload `words` (n of them, after the kReserve in `rs`) may
// leave its last line, which the kApply in `apply` shares, to be written
// back with the kApply: every word of it is zero or never zero in a valid
// record (a rename's victim may be either), so that recovery can tell a
// word a crash lost from damage (NsLog::TornCommit).
bool LosableLine(const uint64_t* words, uint32_t n, uint32_t rs, uint32_t apply) {
  for (uint32_t s = std::max(rs + 1, LineFirstSlot(SlotLine(apply))); s <= rs + n; ++s)
    if (words[s - rs - 1] != 0 && !PayloadWordNeverZero(words[0], s - rs - 1)) return false;
  return true;
}

}  // namespace

Status NsLog::Reserve(const NsRecord& rec, NsPos from, Reservation* r, FunctionRef<void()> with_payload) {
  alignas(64) uint64_t words[kMaxRecordWords];
  const uint32_t n = EncodeRecord(rec, words, one_wait_, creations_);
  NsPos p = from;
  // The caller is pinned, so a block still in the log stays so while this
  // runs; one that left it before (freed, and perhaps made an inode or data
  // block since) no longer carries the log's magic and this position's
  // sequence number (which is never 0).
  if (!CheckNsBlock(*ba_, p.lblock, p.seq, "namespace log position").ok())
    return Status::Error(ESTALE, "namespace log position left behind");
  // The last kRemovalSlots of a block take only removals, which may then
  // be committed when no block is left for the log's next one (a full
  // pool), and free the space everything else waits for.
  const uint32_t end =
      rec.type == RecordType::kUnlink ? kSlotsPerLogBlock : kSlotsPerLogBlock - kRemovalSlots;
  for (;;) {
    // The reservation, its payload and the commit entry after it must fit
    // in the block.
    if (p.slot + n + 2 > end) {
      UPFS_RETURN_IF_ERROR(MoveToNextBlock(&p, rec.type == RecordType::kUnlink));
      continue;
    }
    LogBlock* b = Block(p.lblock);
    uint64_t expected = 0;
    if (pm::Cas64(&b->slots[p.slot], expected, EncodeReserve(n))) {
      // The reservation word and its payload are persisted by one fence.
      // A crash may keep the payload without the word that says how long
      // it is: such words lie past the committed tail (a record committed
      // after this one would have persisted the word first, TryCommit),
      // and recovery clears them before anyone reserves there again
      // (DiscardPastTail).
      // Whatever comes with the payload is written after the CAS above: a
      // locked instruction after a non-temporal store waits for its
      // write-back, and two such waits per record cost twice one.
      if (with_payload) with_payload();
      // Ordinary stores and flushes: a payload is a line or two, mostly
      // partial ones, which non-temporal stores wrote back far more slowly
      // here (docs/design.md, "The namespace log").
      pm::StoreWords(&b->slots[p.slot + 1], words, n);
      const uint32_t apply = p.slot + n + 1;
      UPFS_ASSERT(apply < end);
      // Version 8 writes nothing back here: the whole payload goes with
      // the kApply, under MakeDurable's one fence (docs/design.md, "One
      // wait a commit"), and a flush here would make the locked
      // instructions before that fence wait for it. Before version 8,
      // every line of it is written back now but the one the kApply is to
      // share (the slot after the payload, unless that starts a line):
      // MakeDurable writes that one back with the kApply, so a commit's
      // log writes persist in one round, not two ("A commit's last line"
      // there). A crash may then persist the kApply without some of that
      // line's words, which recovery reads as a commit cut short
      // (TornCommit); TryCommit writes the line back first if the kApply
      // lands in another line.
      bool share = false;
      if (!one_wait_) {
        share = SlotLine(apply) == SlotLine(apply - 1) && LosableLine(words, n, p.slot, apply);
        const uint32_t upto = share ? LineFirstSlot(SlotLine(apply)) : apply;
        if (upto > p.slot) pm::Flush(&b->slots[p.slot], (upto - p.slot) * 8);
        pm::Fence();
      }
      *r = Reservation{p.lblock, p.slot, n, Crc32c(words, n * 8), p.seq,
                       share ? SlotLine(apply) : Reservation::kNoOpenLine};
      return Status::OK();
    }
    p.slot += NsEntrySlots(expected);
  }
}

Status NsLog::TryCommit(const Reservation& r, bool* committed, bool* lost_reservation, Pending* pending) {
  *committed = false;
  *lost_reservation = false;
  if (pos_.lblock != r.lblock || pos_.slot >= kSlotsPerLogBlock) {
    *lost_reservation = true;  // the block filled up before this record's turn
    return Status::OK();
  }
  UPFS_ASSERT(pos_.slot > r.slot + r.words);
  LogBlock* b = Block(pos_.lblock);
  if (r.open_line != Reservation::kNoOpenLine && r.open_line != SlotLine(pos_.slot)) {
    // Others committed first and the kApply lands past the payload's last
    // line: that line is made durable on its own, before the kApply exists
    // (TornCommit accepts a torn payload only in the kApply's line).
    WriteBackLine(b, r.open_line);
  }
  uint64_t expected = 0;
  if (!pm::Cas64(&b->slots[pos_.slot], expected, EncodeApply(r.slot, r.crc))) return Status::OK();
  pos_.slot += 1;
  ++view_;
  PublishPos();
  {
    std::lock_guard<SpinMutex> g(durable_mu_);
    pending->from = durable_;
  }
  pending->to = pos_;
  *committed = true;
  return Status::OK();
}

void NsLog::SettleFilledOpenLine(Reservation* r) {
  if (r->open_line == Reservation::kNoOpenLine) return;
  LogBlock* b = Block(r->lblock);
  // The entries after the payload, up to the line's end (the first slot
  // is in the line: Reserve leaves a line open only then). Walked entry by
  // entry, as Reserve walks them: a payload's words may be zero (written
  // later, or zero in the record).
  for (uint32_t s = r->slot + r->words + 1; s < kSlotsPerLogBlock && SlotLine(s) == r->open_line;) {
    const uint64_t e = b->slots[s].load(std::memory_order_acquire);
    if (e == 0) return;  // a free slot: the kApply may still share the line
    s += NsEntrySlots(e);
  }
  WriteBackLine(b, r->open_line);
  r->open_line = Reservation::kNoOpenLine;
}

void NsLog::FlushSegment(LogBlock* b, uint32_t first, uint32_t end) const {
  if (end > first) pm::Flush(&b->slots[first], (end - first) * 8);
  if (!one_wait_) return;
  // Version 8: each record committed in the segment is written back whole,
  // its payload too (which may lie before `first`), before the fence that
  // makes its kApply durable for sure: a returned commit then never
  // follows a record recovery would find cut short.
  for (uint32_t s = first; s < end;) {
    const uint64_t e = b->slots[s].load(std::memory_order_acquire);
    if (KindOf(e) == EntryKind::kReserve && ReserveWellFormed(e)) {
      s += 1 + ReserveCount(e);
      continue;
    }
    // A kApply whose reservation starts before the segment: the part of
    // it there (the rest is in the segment's own flush).
    const uint32_t rs = ApplySlot(e);
    if (KindOf(e) == EntryKind::kApply && ApplyWellFormed(e) && rs < first) {
      const uint64_t reserve = b->slots[rs].load(std::memory_order_acquire);
      if (KindOf(reserve) == EntryKind::kReserve)
        pm::Flush(&b->slots[rs], (std::min(rs + 1 + ReserveCount(reserve), first) - rs) * 8);
    }
    s += 1;
  }
}

void NsLog::MakeDurable(const Pending& p) {
  NsPos f = p.from;
  while (f.lblock != p.to.lblock) {
    LogBlock* fb = Block(f.lblock);
    if (f.slot < kSlotsPerLogBlock) FlushSegment(fb, f.slot, kSlotsPerLogBlock);
    pm::Flush(&fb->next, 8);
    const uint32_t nb = NextBlock(fb->next.load(std::memory_order_acquire));
    if (nb == 0) break;
    f = NsPos{nb, 0, f.seq + 1};
  }
  const uint32_t first = f.lblock == p.to.lblock ? f.slot : 0;
  UPFS_ASSERT(p.to.slot > first);
  FlushSegment(Block(p.to.lblock), first, p.to.slot);
  pm::Fence();
  std::lock_guard<SpinMutex> g(durable_mu_);
  if (durable_.seq < p.to.seq || (durable_.seq == p.to.seq && durable_.slot < p.to.slot)) durable_ = p.to;
}

Status NsLog::DiscardPastTail() {
  bool at_tail;
  UPFS_RETURN_IF_ERROR(Advance(nullptr, &at_tail));
  UPFS_ASSERT(at_tail);
  NsPos p = pos_;
  for (uint64_t blocks = 0;; ++blocks) {
    LogBlock* b = Block(p.lblock);
    for (uint32_t s = p.slot; s < kSlotsPerLogBlock; ++s) {
      if (b->slots[s].load(std::memory_order_relaxed) == 0) continue;
      pm::Store64(&b->slots[s], 0);
      pm::Flush(&b->slots[s], 8);
    }
    // Blocks linked after the tail's block hold nothing committed either
    // (a record committed in one would have persisted every slot before
    // it): emptied, they are used in turn as the log grows.
    const uint32_t next = NextBlock(b->next.load(std::memory_order_acquire));
    if (next == 0) break;
    if (blocks > (uint64_t{1} << 28)) return Status::Corrupt("namespace log", "chain loops");
    UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, next, p.seq + 1, "namespace log block"));
    p = NsPos{next, 0, p.seq + 1};
  }
  pm::Fence();
  torn_tail_.reset();  // zeroed: the next record goes there
  return Status::OK();
}

Status NsLog::Measure(uint32_t head, uint64_t* blocks, uint64_t* records) const {
  *blocks = 0;
  *records = 0;
  uint32_t l = head;
  uint64_t seq = 0;
  while (l != 0) {
    UPFS_RETURN_IF_ERROR(CheckNsBlock(*ba_, l, seq, "namespace log block"));
    const LogBlock* b = Block(l);
    seq = b->seq + 1;
    ++*blocks;
    for (uint32_t s = 0; s < kSlotsPerLogBlock;) {
      const uint64_t e = b->slots[s].load(std::memory_order_acquire);
      if (e == 0) break;
      if (KindOf(e) == EntryKind::kApply) ++*records;
      s += NsEntrySlots(e);
    }
    if (*blocks > (uint64_t{1} << 28)) return Status::Corrupt("namespace log", "chain loops");
    l = NextBlock(b->next.load(std::memory_order_acquire));
  }
  return Status::OK();
}

}  // namespace upfs
