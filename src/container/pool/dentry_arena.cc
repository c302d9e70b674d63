#include "container/pool/dentry_arena.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#include "util/assert.h"

namespace upfs {

using namespace format::pool;

Status DentryArena::AddBlock() {
  uint32_t b;
  UPFS_RETURN_IF_ERROR(s_->NewBlock(&b));
  auto* h = reinterpret_cast<DentryBlockHeader*>(s_->Line(uint64_t(b) * kLinesPerBlock));
  std::atomic<uint64_t>* chain = s_->ChainHead();
  uint64_t head = chain->load(std::memory_order_acquire);
  // The header, durable before the chain names the block: a chain whose
  // newest block had no header yet would read as damage.
  for (;;) {
    h->magic = kDentryBlockMagic;
    h->next = head;
    s_->WriteBack(h, sizeof *h);
    s_->Fence();
    if (chain->compare_exchange_strong(head, b, std::memory_order_acq_rel)) break;
  }
  s_->WriteBack(chain, sizeof *chain);
  s_->Fence();
  // The last block's unused lines stay this arena's.
  while (bump_end_ > bump_) {
    const uint32_t n = uint32_t(std::min<uint64_t>(bump_end_ - bump_, kDentryMaxLines));
    Free(bump_, n);
    bump_ += n;
  }
  bump_ = uint64_t(b) * kLinesPerBlock + 1;
  bump_end_ = uint64_t(b) * kLinesPerBlock + kLinesPerBlock;
  return Status::OK();
}

void DentryArena::Free(uint64_t head, uint32_t lines) { free_[lines].push_back(head); }

Status DentryArena::Take(uint32_t lines, uint64_t* head, uint32_t* gen) {
  UPFS_ASSERT(lines >= 1 && lines <= kDentryMaxLines);
  bool found = false;
  for (uint32_t n = lines; n <= kDentryMaxLines && !found; ++n) {
    if (free_[n].empty()) continue;
    *head = free_[n].back();
    free_[n].pop_back();
    if (n > lines) Free(*head + lines, n - lines);  // the rest stays free
    found = true;
  }
  if (!found) {
    if (bump_end_ - bump_ < lines) UPFS_RETURN_IF_ERROR(AddBlock());
    *head = bump_;
    bump_ += lines;
  }
  // A line of the run may have headed a later dentry than the run's head
  // (runs are split and taken again in other lengths).
  uint32_t highest = 0;
  for (uint32_t l = 0; l < lines; ++l) highest = std::max(highest, DentryLineGen(s_->Line(*head + l)[0]));
  *gen = highest + 1;
  if (*gen == 0) *gen = 1;  // 2^32 reuses of one line: wrapped
  return Status::OK();
}

void DentryArena::Give(uint64_t head, uint32_t lines, uint32_t gen) {
  UPFS_ASSERT(lines >= 1 && lines <= kDentryMaxLines);
  for (uint32_t l = 0; l < lines; ++l) {
    uint64_t* w = s_->Line(head + l);
    std::memset(w + 1, 0, 7 * sizeof(uint64_t));
    w[0] = FreedDentryLine(gen);
  }
  s_->WriteBack(s_->Line(head), size_t(lines) * 64);
  given_.emplace_back(head, lines);
}

void DentryArena::Settle() {
  if (given_.empty()) return;
  s_->Fence();
  for (const auto& [head, lines] : given_) Free(head, lines);
  given_.clear();
}

uint64_t DentryArena::FreeLines() const {
  uint64_t n = bump_end_ - bump_;
  for (uint32_t k = 1; k <= kDentryMaxLines; ++k) n += k * free_[k].size();
  return n;
}

Status ScanDentries(DentryStore* s,
                    FunctionRef<void(uint64_t line, uint32_t lines, DentryRead got, const Dentry& d)> fn) {
  std::unordered_set<uint64_t> seen;
  uint64_t b = s->ChainHead()->load(std::memory_order_acquire);
  while (b != 0) {
    const std::string where = "dentry block " + std::to_string(b);
    if (b >= s->Blocks()) return Status::Corrupt(where, "outside the pool's " + std::to_string(s->Blocks()));
    if (!seen.insert(b).second) return Status::Corrupt(where, "met twice: the chain loops");
    const auto* h = reinterpret_cast<const DentryBlockHeader*>(s->Line(b * kLinesPerBlock));
    if (h->magic != kDentryBlockMagic || h->zero != 0) return Status::Corrupt(where, "header");
    for (uint32_t i = 1; i < kLinesPerBlock;) {
      const uint64_t line = b * kLinesPerBlock + i;
      Dentry d;
      uint32_t lines;
      std::string why;
      const DentryRead got = ReadDentry(s->Line(line), kLinesPerBlock - i, &d, &lines, &why);
      if (got == DentryRead::kDamaged) return Status::Corrupt("dentry at line " + std::to_string(i) + " of " + where, why);
      fn(line, lines, got, d);
      i += lines;
    }
    b = h->next;
  }
  return Status::OK();
}

}  // namespace upfs
