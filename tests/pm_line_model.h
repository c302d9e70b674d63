// The per-file crash explorer's persistence model (docs/design.md, "Crash
// testing"): cache lines of one host file, each durable only after a flush
// and a fence of the thread (actor) that flushed it, or a non-temporal
// write and that actor's fence; until then any subset of the lines in
// flight may reach the media, whole. The pool explorer's sparse, torn-line
// counterpart is pm_sparse_model.h.
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
#include <vector>

#include "medium/medium.h"
#include "medium/pm.h"

namespace upfs::crashtest {

inline constexpr uint64_t kLine = 64;

class PersistenceModel : public pm::Recorder {
 public:
  // Called at each fence (before it takes effect) and at operation ends.
  using CrashPoint = std::function<void(const char* where)>;

  void Attach(Medium* m) { medium_ = m; }
  void SetCrashPoint(CrashPoint cp) { crash_point_ = std::move(cp); }
  // Called after each 8-byte store the operation makes (not its racer's),
  // for racing it where no fence is: between a reservation's CAS and its
  // apply, say.
  void SetStorePoint(std::function<void()> sp) { store_point_ = std::move(sp); }

  // The durable bytes start as the file's current content.
  void Reset(const std::string& path) {
    durable_.clear();
    lines_.clear();
    int fd = open(path.c_str(), O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    durable_.resize(st.st_size);
    if (st.st_size && pread(fd, durable_.data(), st.st_size, 0) != st.st_size) std::abort();
    close(fd);
  }

  void OnCopy(void* dst, const void* src, size_t n) override { Write(dst, src, n, true); }
  void OnZero(void* dst, size_t n) override {
    std::vector<char> z(n, 0);
    Write(dst, z.data(), n, true);
  }
  void OnStore(void* dst, uint64_t value) override {
    Write(dst, &value, 8, false);
    StorePoint();
  }
  void OnStoreBytes(void* dst, const void* src, size_t n) override {
    Write(dst, src, n, false);
    StorePoint();
  }
  void OnFlush(const void* addr, size_t n) override {
    uint64_t off;
    if (!Offset(addr, &off)) return;
    for (uint64_t l = off / kLine * kLine; l < off + n; l += kLine) {
      auto it = lines_.find(l);
      if (it != lines_.end()) it->second.flushed |= Actor();
    }
  }
  void OnFence() override {
    if (crash_point_ && !in_crash_point_) {
      in_crash_point_ = true;
      crash_point_("fence");
      in_crash_point_ = false;
    }
    // A fence orders only its own thread's flushes and non-temporal
    // stores: a racer's fence does not make durable what the operation it
    // interrupted flushed and has yet to fence (a line both flushed is
    // written back whole, with both threads' bytes).
    for (auto it = lines_.begin(); it != lines_.end();) {
      if ((it->second.nt | it->second.flushed) & Actor()) {
        Apply(it->first, it->second);
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
  // The crash image with the given in-flight lines persisted.
  std::vector<char> Image(const std::vector<uint64_t>& chosen) const {
    std::vector<char> img = durable_;
    GrowTo(&img);
    for (uint64_t l : chosen) {
      const LineState& st = lines_.at(l);
      if (l + kLine > img.size()) img.resize(l + kLine, 0);
      std::memcpy(img.data() + l, st.bytes, kLine);
    }
    return img;
  }

 private:
  struct LineState {
    char bytes[kLine];
    // Bit masks of actors (the operation, its racer): written
    // non-temporally, or flushed, by that actor: durable at its next fence.
    uint8_t nt = 0;
    uint8_t flushed = 0;
  };
  void StorePoint() {
    if (store_point_ && !in_crash_point_) {
      in_crash_point_ = true;
      store_point_();
      in_crash_point_ = false;
    }
  }
  // The operation is actor 1; a racer running at one of its fences is 2.
  uint8_t Actor() const { return in_crash_point_ ? 2 : 1; }

  bool Offset(const void* addr, uint64_t* off) const {
    if (!medium_) return false;
    auto a = reinterpret_cast<uintptr_t>(addr);
    auto b = reinterpret_cast<uintptr_t>(medium_->base());
    if (a < b || a >= b + medium_->mapped_bytes()) return false;
    *off = a - b;
    return true;
  }
  void GrowTo(std::vector<char>* img) const {
    // The host file grows by fallocate, which is metadata: durable at once.
    uint64_t cap = medium_ ? medium_->capacity() : 0;
    if (img->size() < cap) img->resize(cap, 0);
  }
  void Write(void* dst, const void* src, size_t n, bool nt) {
    uint64_t off;
    if (!Offset(dst, &off)) return;
    GrowTo(&durable_);
    const char* s = static_cast<const char*>(src);
    for (uint64_t l = off / kLine * kLine; l < off + n; l += kLine) {
      auto it = lines_.find(l);
      if (it == lines_.end()) {
        LineState st;
        std::memcpy(st.bytes, durable_.data() + l, kLine);
        it = lines_.emplace(l, st).first;
      }
      uint64_t lo = std::max(l, off), hi = std::min(l + kLine, off + n);
      std::memcpy(it->second.bytes + (lo - l), s + (lo - off), hi - lo);
      if (nt) it->second.nt |= Actor();
      // A store after a flush needs another flush.
      if (!nt) it->second.flushed = 0;
    }
  }
  void Apply(uint64_t l, const LineState& st) {
    GrowTo(&durable_);
    std::memcpy(durable_.data() + l, st.bytes, kLine);
  }

  Medium* medium_ = nullptr;
  std::vector<char> durable_;
  std::map<uint64_t, LineState> lines_;
  CrashPoint crash_point_;
  std::function<void()> store_point_;
  bool in_crash_point_ = false;
};

}  // namespace upfs::crashtest
