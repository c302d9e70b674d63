// Fresh inodes: a version 9 pool's new regular file or directory waits for
// the media once, not twice (docs/design.md, "One wait a create"). Its
// image is stored without a fence of its own, and its create record
// carries the values the image was made from (NsCreation), so that
// recovery can write an image a crash lost again from the record. Until
// the image is known durable the inode's ident carries
// format::pool::kIdentFresh; an image whose bit is clear was durable
// before the bit was cleared ("sealed").
//
// The rule every writer of an inode's durable words keeps: it calls
// SealIfFresh first and writes line 0 (the ident's) back before its own
// fence (the engine through LogRoot::persist_with_head). Recovery
// rewrites an image from its create record only while the bit is set or
// the ident is not the record's, and then no change after the create can
// have been made durable.
#pragma once

#include <cstdint>

#include "container/pool/pool_format.h"
#include "engine/log.h"

namespace upfs {

// Room for an inode image outside the pool, zeroed (an Inode has atomic
// members and a union: not constructible by itself).
struct InodeImage {
  alignas(64) unsigned char bytes[format::pool::kInodeSize] = {};
  format::pool::Inode* get() { return reinterpret_cast<format::pool::Inode*>(bytes); }
};

// The values a version 9 create record carries for a new regular file or
// directory (docs/format.md, "The namespace log": four words after the
// name).
struct NsCreation {
  bool present = false;
  format::pool::FileType kind = format::pool::FileType::kRegular;  // the record's file type
  uint32_t gen = 0;          // the inode's generation in its new life
  uint32_t mode = 0;         // permission bits (07777)
  uint32_t consistency = 0;  // Consistency
  uint64_t owner = 0;        // uid:32 | gid:32
  uint64_t created_ns = 0;   // also the first ctime, atime, mtime and data ctime
};

// The creation values of `image` (a regular file's or a directory's,
// ident set).
NsCreation CreationOf(const format::pool::Inode& image);

// Whether `in`'s current ident says its image is the durable one of the
// life `c` made: the same generation and kind, the fresh bit clear.
bool ImageSealedFor(const format::pool::Inode& in, const NsCreation& c);

// Lines 0 and 1 of the image `c` makes (the rest zero), fresh bit set: an
// empty file (no log: a kept log given at birth is named by the image
// only) or directory.
void ImageFromCreation(const NsCreation& c, format::pool::Inode* out);

// Recovery: stores lines 0 and 1 of the image `c` makes into `in`, fresh
// bit set (a crash during recovery makes it again), and writes them back;
// the caller fences.
void RewriteImage(format::pool::Inode* in, const NsCreation& c);

// The most lines of a released file's log that a new file's create
// rewrites when it takes the block as its own (Pool::TakeRecycledLog):
// a fresh image that names a kept log is durable only with them.
inline constexpr uint32_t kKeptLogLinesMax = 8;

// Writes back what a fresh image is durable only with: its two lines and,
// if it names a log (a kept one, given at birth, which its record does not
// name), that log's first kKeptLogLinesMax lines. Not fenced.
void WriteBackFreshImage(format::pool::Inode* in, const BlockAccess& ba);

// Makes a fresh image durable and clears its bit: written back
// (WriteBackFreshImage) and fenced, then the bit cleared by CAS, written
// back and fenced.
void SealImage(format::pool::Inode* in, const BlockAccess& ba);

// Before a durable in-place change of `in`: a fresh image is sealed first.
// With the bit seen clear, the clear is visible to this thread, and the
// caller's write-back of line 0 before its fence persists it.
inline void SealIfFresh(format::pool::Inode* in, const BlockAccess& ba) {
  if (in->ident.load(std::memory_order_acquire) & format::pool::kIdentFresh) SealImage(in, ba);
}

// The creator, after its record's fence made the image durable: clears the
// bit without writing it back. The next durable change of the inode writes
// it back before its fence: a namespace call's write-back of line 0, the
// engine's first commit or head swap (LogRoot::persist_with_head), or a
// checkpoint.
void ClearFresh(format::pool::Inode* in);

}  // namespace upfs
