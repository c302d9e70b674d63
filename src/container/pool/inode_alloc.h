// InodeAllocator: inodes of a pool, taken and given back lock-free.
//
// Free inodes form a stack (Treiber, with a tag against ABA) whose head is
// in the volatile area and whose links go through each free inode's
// log_head word. When it is empty, a new inode block (15 inodes) is made
// and linked into the superblock's chain of inode blocks by CAS. The stack
// is soft state: recovery builds it again from the chain (every inode whose
// kind is kFree), which also takes back the inodes a killed process had
// popped and not yet used.
#pragma once

#include <cstdint>
#include <functional>

#include "container/pool/pool_format.h"
#include "engine/log.h"
#include "util/status.h"

namespace upfs {

class InodeAllocator {
 public:
  using AllocBlock = std::function<Status(uint32_t*)>;
  void Init(BlockAccess* ba, format::pool::Superblock* sb, format::pool::PoolWords* words,
            AllocBlock alloc) {
    ba_ = ba;
    sb_ = sb;
    words_ = words;
    alloc_ = std::move(alloc);
  }

  // Address of inode `ino`, checked (EUCLEAN for a number no inode block
  // can hold). Inline, the rest out of line: a create or an unlink asks
  // it about ten times (the walk, the directory's times, holds, the
  // release), and called, with its Status returned, it cost 44
  // instructions a call (callgrind of creates and unlinks).
  [[gnu::always_inline]] Status At(uint64_t ino, format::pool::Inode** out) const {
    using namespace format::pool;
    if (InodeNumberInRange(ino)) [[likely]] {
      if (char* b = ba_->MappedAddr(ino / kInodesPerBlock)) [[likely]] {
        *out = reinterpret_cast<Inode*>(b + InodeSlotOf(ino) * kInodeSize);
        return Status::OK();
      }
    }
    return AtSlow(ino, out);
  }
  // Takes a free inode for a new file of `kind`: sets image's ident (kind
  // and the inode's next generation) and adds image's open count to the
  // inode's. The image is not written yet: WriteImage does, before the
  // fence of the record that names the inode (PoolNamespace::Commit).
  Status Take(format::pool::FileType kind, format::pool::Inode* image, uint64_t* ino,
              format::pool::Inode** in);
  // Writes every byte of `image` but the open count into `in` and flushes
  // it, not fenced: the create's fence that follows makes it durable (the
  // record's reservation fence, or in a version 8 pool its own one:
  // PoolNamespace::CommitNewInode).
  // `write_back` false (a version 9 pool's regular file): stored only, its
  // two lines left for the caller to write back after the commit.
  static void WriteImage(format::pool::Inode* in, const format::pool::Inode& image, bool write_back = true);
  // Gives back inode `ino` (nothing references it any more).
  Status Free(uint64_t ino);
  // Recovery: the stack again, from every free inode of the chain.
  // fn(ino, inode) is called for every inode in use.
  Status Rebuild(const std::function<Status(uint64_t, format::pool::Inode*)>& fn);
  // Visits every inode block of the chain: fn(lblock).
  Status ForEachBlock(const std::function<Status(uint32_t)>& fn) const;

 private:
  // At for an inode past the mapping (another process grew the pool) or a
  // number no inode block can hold: out of line, with its message's
  // string work (which made At's frame and prologue a tenth of a stat's
  // own time when it was At's).
  [[gnu::cold, gnu::noinline]] Status AtSlow(uint64_t ino, format::pool::Inode** out) const;
  bool Pop(uint64_t* ino);
  void Push(uint64_t ino);
  Status NewBlock(uint64_t* first_ino);

  BlockAccess* ba_ = nullptr;
  format::pool::Superblock* sb_ = nullptr;
  format::pool::PoolWords* words_ = nullptr;
  AllocBlock alloc_;
};

}  // namespace upfs
