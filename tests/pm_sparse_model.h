// A cache-line model of persistence over a sparse host file, for crash-state
// exploration of large, mostly empty files (a pool is 34 MiB of header and
// volatile area before its first data block, nearly all of it holes).
//
// The same model as the per-file explorer's (docs/design.md, "Crash
// testing"): a cached store (Store64, a successful Cas64) makes its line
// dirty, durable only after a Flush and then a Fence; a non-temporal copy or
// fill makes its lines pending, durable at the next Fence; until then any
// subset of the lines in flight may have reached the media, each whole and
// at its latest value; growing the host file is metadata, durable at once.
//
// A fence orders only its own thread's flushes and non-temporal stores: the
// operation under test and a racer run while it is held are two actors
// (SetActor), and a racer's fence does not make durable what the operation
// flushed and has yet to fence (a line both flushed is written back whole).
//
// With torn images (WriteImage's `torn`), one in-flight line persists only
// in some of the 8-byte words written to it since it was last durable: the
// failure atomicity the format assumes (8 bytes, as PMDK's), not a whole
// line.
//
// What differs is the representation: the durable bytes are kept per 4 KiB
// block, only for blocks that hold something, and a crash image is written
// straight to a file (holes stay holes), so that one image costs a few
// dozen pwrite calls, not a copy of the whole pool.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "medium/medium.h"
#include "medium/pm.h"

namespace upfs::crashtest {

class SparsePersistenceModel : public pm::Recorder {
 public:
  static constexpr uint64_t kLine = 64;
  static constexpr uint64_t kBlock = 4096;

  // Called at each fence, before it takes effect.
  using CrashPoint = std::function<void()>;

  void Attach(Medium* m) { medium_ = m; }
  void SetCrashPoint(CrashPoint cp) { crash_point_ = std::move(cp); }
  // 1: the operation under test; 2: a racer, while the operation is held.
  void SetActor(uint8_t actor) { actor_ = actor; }

  // The durable bytes start as the file's current content (its data
  // extents; all-zero blocks are left out, they read back as holes).
  bool Reset(const std::string& path) {
    durable_.clear();
    lines_.clear();
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    struct stat st;
    if (fstat(fd, &st) != 0) return false;
    file_bytes_ = uint64_t(st.st_size);
    std::string buf(kBlock, '\0');
    off_t pos = 0;
    for (;;) {
      off_t data = lseek(fd, pos, SEEK_DATA);
      if (data < 0) break;  // ENXIO: no data past pos
      off_t hole = lseek(fd, data, SEEK_HOLE);
      if (hole < 0) hole = off_t(file_bytes_);
      for (uint64_t b = uint64_t(data) / kBlock * kBlock; b < uint64_t(hole); b += kBlock) {
        if (pread(fd, buf.data(), kBlock, off_t(b)) != ssize_t(kBlock)) break;
        if (buf.find_first_not_of('\0') != std::string::npos) durable_[b / kBlock] = buf;
      }
      pos = hole;
    }
    close(fd);
    return true;
  }

  void OnCopy(void* dst, const void* src, size_t n) override { Write(dst, src, n, true); }
  void OnZero(void* dst, size_t n) override {
    std::vector<char> z(n, 0);
    Write(dst, z.data(), n, true);
  }
  void OnStore(void* dst, uint64_t value) override {
    Write(dst, &value, 8, false);
    if (store_point_) store_point_();
  }
  void OnStoreBytes(void* dst, const void* src, size_t n) override {
    Write(dst, src, n, false);
    if (store_point_) store_point_();
  }
  void SetStorePoint(std::function<void()> sp) { store_point_ = std::move(sp); }
  void OnFlush(const void* addr, size_t n) override {
    uint64_t off;
    if (!Offset(addr, &off)) return;
    for (uint64_t l = off / kLine * kLine; l < off + n; l += kLine) {
      auto it = lines_.find(l);
      if (it != lines_.end()) it->second.flushed |= actor_;
    }
  }
  void OnFence() override {
    if (crash_point_) crash_point_();
    for (auto it = lines_.begin(); it != lines_.end();) {
      if ((it->second.nt | it->second.flushed) & actor_) {
        Apply(it->first, it->second.bytes);
        it = lines_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Lines in flight, in offset order.
  std::vector<uint64_t> InFlight() const {
    std::vector<uint64_t> v;
    for (const auto& [off, st] : lines_) v.push_back(off);
    return v;
  }

  // The words of in-flight line `l` written since it was last durable (bit
  // w: the line's word w).
  uint8_t DirtyWords(uint64_t l) const { return lines_.at(l).dirty; }
  // Whether in-flight line `l` took a cached store (Store64, Cas64,
  // StoreWords): the words of entries and commit points, where tearing
  // matters (non-temporal copies are data and images, fenced before what
  // commits them).
  bool Cached(uint64_t l) const { return lines_.at(l).cached; }

  // One in-flight line persisted only in the words of `words`.
  struct Torn {
    uint64_t line;
    uint8_t words;
  };

  // Writes the crash image with the chosen in-flight lines persisted to
  // `path` (created or replaced), and the `torn` line if given (not among
  // `chosen`). Returns false if the file cannot be made.
  bool WriteImage(const std::vector<uint64_t>& chosen, const std::string& path,
                  const Torn* torn = nullptr) const {
    // Blocks a chosen line lands in are composed in DRAM; the others go
    // from the durable map as they are.
    std::map<uint64_t, std::string> patched;
    auto block_of = [&](uint64_t l) -> std::string& {
      const uint64_t b = l / kBlock;
      auto it = patched.find(b);
      if (it == patched.end()) {
        auto d = durable_.find(b);
        it = patched.emplace(b, d == durable_.end() ? std::string(kBlock, '\0') : d->second).first;
      }
      return it->second;
    };
    for (uint64_t l : chosen) std::memcpy(block_of(l).data() + l % kBlock, lines_.at(l).bytes, kLine);
    if (torn) {
      std::string& block = block_of(torn->line);
      for (uint32_t w = 0; w < kLine / 8; ++w)
        if (torn->words >> w & 1)
          std::memcpy(block.data() + torn->line % kBlock + w * 8, lines_.at(torn->line).bytes + w * 8, 8);
    }
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    bool ok = ftruncate(fd, off_t(ImageBytes())) == 0;
    for (const auto& [b, bytes] : durable_)
      if (ok && !patched.count(b)) ok = pwrite(fd, bytes.data(), kBlock, off_t(b * kBlock)) == ssize_t(kBlock);
    for (const auto& [b, bytes] : patched)
      if (ok) ok = pwrite(fd, bytes.data(), kBlock, off_t(b * kBlock)) == ssize_t(kBlock);
    close(fd);
    return ok;
  }

 private:
  struct LineState {
    char bytes[kLine];
    uint8_t nt = 0;        // actors that wrote it non-temporally: durable at their next fence
    uint8_t flushed = 0;   // actors that flushed it: durable at their next fence
    uint8_t dirty = 0;     // words written since the line was durable
    bool cached = false;   // one of them by a cached store
  };

  bool Offset(const void* addr, uint64_t* off) const {
    if (!medium_) return false;
    auto a = reinterpret_cast<uintptr_t>(addr);
    auto b = reinterpret_cast<uintptr_t>(medium_->base());
    if (a < b || a >= b + medium_->mapped_bytes()) return false;
    *off = a - b;
    return true;
  }
  // The host file grows by fallocate/ftruncate, which is metadata: durable
  // at once, so an image is as long as the file is now.
  uint64_t ImageBytes() const {
    uint64_t n = std::max<uint64_t>(file_bytes_, medium_ ? medium_->capacity() : 0);
    if (!durable_.empty()) n = std::max<uint64_t>(n, (durable_.rbegin()->first + 1) * kBlock);
    return n;
  }
  void DurableLine(uint64_t l, char* out) const {
    auto it = durable_.find(l / kBlock);
    if (it == durable_.end()) std::memset(out, 0, kLine);
    else std::memcpy(out, it->second.data() + (l % kBlock), kLine);
  }
  void Write(void* dst, const void* src, size_t n, bool nt) {
    uint64_t off;
    if (!Offset(dst, &off)) return;
    const char* s = static_cast<const char*>(src);
    for (uint64_t l = off / kLine * kLine; l < off + n; l += kLine) {
      auto it = lines_.find(l);
      if (it == lines_.end()) {
        LineState st;
        DurableLine(l, st.bytes);
        it = lines_.emplace(l, st).first;
      }
      uint64_t lo = std::max(l, off), hi = std::min(l + kLine, off + n);
      std::memcpy(it->second.bytes + (lo - l), s + (lo - off), hi - lo);
      for (uint64_t w = (lo - l) / 8; w <= (hi - 1 - l) / 8; ++w) it->second.dirty |= uint8_t(1u << w);
      if (nt) it->second.nt |= actor_;
      // A store after a flush needs another flush.
      if (!nt) it->second.flushed = 0;
      if (!nt) it->second.cached = true;
    }
  }
  void Apply(uint64_t l, const char* bytes) {
    auto it = durable_.find(l / kBlock);
    if (it == durable_.end()) it = durable_.emplace(l / kBlock, std::string(kBlock, '\0')).first;
    std::memcpy(it->second.data() + (l % kBlock), bytes, kLine);
  }

  Medium* medium_ = nullptr;
  uint64_t file_bytes_ = 0;
  std::map<uint64_t, std::string> durable_;  // block number -> its 4 KiB
  std::map<uint64_t, LineState> lines_;
  CrashPoint crash_point_;
  std::function<void()> store_point_;
  uint8_t actor_ = 1;
};

}  // namespace upfs::crashtest
