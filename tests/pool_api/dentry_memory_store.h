// Arena blocks in memory for the dentry tests (container/pool/
// dentry_arena.h's DentryStore): write-backs and fences counted, and the
// order of header write-backs and fences recorded.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "container/pool/dentry_arena.h"

namespace upfs {

class MemoryStore final : public DentryStore {
 public:
  explicit MemoryStore(uint64_t blocks) : words_(blocks * 512, 0), blocks_(blocks) {}
  Status NewBlock(uint32_t* block) override {
    if (next_ >= blocks_) return Status::Error(ENOSPC, "test store full");
    *block = uint32_t(next_++);
    return Status::OK();
  }
  uint64_t* Line(uint64_t line) override { return &words_[line * 8]; }
  std::atomic<uint64_t>* ChainHead() override { return &head_; }
  void WriteBack(const void* p, size_t) override {
    ++write_backs;
    const auto* w = static_cast<const uint64_t*>(p);
    if (w >= words_.data() && w < words_.data() + words_.size() && (w - words_.data()) % 512 == 0)
      events.push_back("header " + std::to_string((w - words_.data()) / 512));
  }
  void Fence() override {
    ++fences;
    events.push_back("fence, chain at " + std::to_string(head_.load()));
  }
  std::vector<std::string> events;
  uint64_t Blocks() const override { return blocks_; }
  int write_backs = 0, fences = 0;

 private:
  std::vector<uint64_t> words_;
  uint64_t blocks_;
  uint64_t next_ = 1;  // block 0 is never an arena block
  std::atomic<uint64_t> head_{0};
};

}  // namespace upfs
