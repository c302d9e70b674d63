// File: sub-block writes as patches in the log (docs/design.md, "Sub-block
// writes"), and what every reader of a block's bytes needs of them.
#include <algorithm>
#include <cstring>

#include "engine/file.h"
#include "util/assert.h"
#include "util/optimistic_copy.h"

namespace upfs {

using namespace format;

void File::CopyPatches(const BlockTable& t, uint64_t v, uint64_t lo, uint64_t hi, char* out) const {
  uint64_t refs[kMaxPatchesPerBlock];
  const uint32_t n = t.patches().Get(v, refs);
  for (uint32_t i = 0; i < n; ++i) {
    const PatchRef r = PatchRef::Decode(refs[i]);
    const uint64_t a = std::max<uint64_t>(lo, r.offset), b = std::min<uint64_t>(hi, r.offset + r.length);
    if (a >= b) continue;
    // The log block was live when the ref was applied and is kept by our
    // pin (a read-only File validates the head instead).
    const char* src = access_.AddrUnchecked(r.lblock) + r.LogByte() + (a - r.offset);
    OptimisticCopy(out + (a - lo), src, b - a);
  }
}

void File::ComposeBlock(const BlockTable& t, uint64_t v, uint32_t l, uint64_t size, char* out) const {
  const uint64_t bs = v << kBlockShift;
  const uint64_t valid = size > bs ? std::min<uint64_t>(size - bs, kBlockSize) : 0;
  if (valid) CopyBlockBytes(t, v, l, 0, valid, out);
  std::memset(out + valid, 0, kBlockSize - valid);
}

// Writes up to this long become patches; longer ones copy their block. The
// format allows patches up to kPatchMaxBytes, but measured on /dev/shm
// (docs/design.md, "Sub-block writes"), 1 KiB patches filled the log with
// live bytes that every compaction copies and every process replays again,
// and 1 KiB overwrites ran at a third of their copy-on-write speed.
constexpr uint32_t kPatchWriteMaxBytes = 512;

Status File::PatchOnce(ThreadCtx* c, BlockTable* t, const void* buf, size_t n, uint64_t off,
                       bool* done, bool* conflicted) {
  *done = false;
  *conflicted = false;
  LogPos p = t->cursor();
  const uint64_t size = t->size();
  const uint64_t v = off >> kBlockShift;
  const uint32_t in = uint32_t(off & (kBlockSize - 1));
  if (n > kPatchWriteMaxBytes || in + n > kBlockSize || off + n > size || t->Get(v) == 0) return Status::OK();
  // A block that has as many patches as it may keep is copied whole by
  // this write instead (the fold): reads stay one block copy plus a few
  // short ones, and the log holds at most kPatchMaxBytes per block.
  uint64_t refs[kMaxPatchesPerBlock];
  const uint32_t count = t->patches().Get(v, refs);
  uint64_t bytes = n;
  for (uint32_t i = 0; i < count; ++i) bytes += PatchRef::Decode(refs[i]).length;
  if (count >= kMaxPatchesPerBlock || bytes > kPatchMaxBytes) return Status::OK();
  std::vector<uint64_t>& w = c->pending.payload;
  UPFS_ASSERT(c->pending.overflow.empty());
  w.assign(kPatchHeaderWords + PatchDataWords(in, uint32_t(n)), 0);
  w[1] = EncodePayloadWord1(uint32_t(v), 0, kPatch);
  w[2] = EncodePatchWord2(in, uint32_t(n));
  std::memcpy(reinterpret_cast<char*>(&w[kPatchHeaderWords]) + (in & 7), buf, n);
  // Anything committed since the snapshot that touches the block (a new
  // mapping, another patch, a truncate) invalidates what was checked above.
  Status st = writer_.Commit(&c->blocks, &c->scratch, &p, 0, c->pending,
                             [&](const Effect& e) { return e.TouchesBlocks(v, v + 1); }, conflicted);
  const uint32_t words = uint32_t(w.size());
  w.clear();
  UPFS_RETURN_IF_ERROR(st);
  *done = !*conflicted;
  if (*done) ApplyOwnPatch(t, p, c->pending.reserve_slot, words, v, in, uint32_t(n));
  return Status::OK();
}

// The payload is applied by its committer where it can be (ApplyOwnEntry):
// the next catch-up would decode and checksum it.
void File::ApplyOwnPatch(BlockTable* t, const LogPos& after, uint32_t rs, uint32_t words,
                         uint64_t v, uint32_t in, uint32_t n) {
  // The reservation slot comes from the commit: reading the apply word
  // back would miss where a flush evicts the line (clwb on AMD Zen does).
  if (after.last != rs + 1 + words) return;  // entries of others between payload and apply
  ApplyOwnEntry(t, after, rs, [&](Effect* eff) {
    eff->Clear();
    eff->vblock = uint32_t(v);
    eff->nblocks = 1;
    eff->runs.push_back(Run{kKeepBlock, 1});
    eff->patch = PatchRef{after.lblock, rs + 1 + kPatchHeaderWords, in, n}.Encode();
  });
}

}  // namespace upfs
