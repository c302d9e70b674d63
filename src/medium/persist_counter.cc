#include "medium/persist_counter.h"

#include <mutex>
#include <unordered_set>

#include "medium/pm.h"
#include "util/assert.h"

namespace upfs {

namespace {

constexpr uintptr_t kLine = 64;

uintptr_t FirstLine(const void* addr) { return reinterpret_cast<uintptr_t>(addr) / kLine; }

uintptr_t EndLine(const void* addr, size_t n) {
  return (reinterpret_cast<uintptr_t>(addr) + n + kLine - 1) / kLine;
}

// The recorder a PersistCounter counts through. A thread loads the
// recorder and then calls it, so it may call after the counter is gone:
// the recorder is never destroyed, and counts only while a counter runs.
class LineCounter final : public pm::Recorder {
 public:
  void Start() {
    std::lock_guard<std::mutex> g(mu_);
    UPFS_ASSERT(!running_);
    running_ = true;
    bytes_ = 0;
    dirty_.clear();
  }
  void Stop() {
    std::lock_guard<std::mutex> g(mu_);
    running_ = false;
  }
  uint64_t bytes() const {
    std::lock_guard<std::mutex> g(mu_);
    return bytes_;
  }

  // A non-temporal write goes to media whole lines at a time, and a line
  // it writes is no longer dirty in the cache.
  void OnCopy(void* dst, const void*, size_t n) override { CountLines(dst, n); }
  void OnZero(void* dst, size_t n) override { CountLines(dst, n); }
  void OnStore(void* dst, uint64_t) override {
    std::lock_guard<std::mutex> g(mu_);
    if (running_) dirty_.insert(FirstLine(dst));
  }
  void OnStoreBytes(void* dst, const void*, size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    if (!running_ || n == 0) return;
    for (uintptr_t l = FirstLine(dst); l < EndLine(dst, n); ++l) dirty_.insert(l);
  }
  void OnFlush(const void* addr, size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    if (!running_) return;
    for (uintptr_t l = FirstLine(addr); l < EndLine(addr, n); ++l)
      if (dirty_.erase(l)) bytes_ += kLine;
  }
  void OnFence() override {}

 private:
  void CountLines(const void* addr, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    if (!running_ || n == 0) return;
    for (uintptr_t l = FirstLine(addr); l < EndLine(addr, n); ++l) dirty_.erase(l);
    bytes_ += (EndLine(addr, n) - FirstLine(addr)) * kLine;
  }

  mutable std::mutex mu_;
  bool running_ = false;
  uint64_t bytes_ = 0;
  std::unordered_set<uintptr_t> dirty_;  // lines stored to and not yet flushed
};

LineCounter& TheLineCounter() {
  static LineCounter* c = new LineCounter;  // never destroyed (see above)
  return *c;
}

}  // namespace

PersistCounter::PersistCounter() {
  TheLineCounter().Start();
  pm::Recorder* expected = nullptr;
  const bool installed = pm::g_recorder.compare_exchange_strong(expected, &TheLineCounter());
  UPFS_ASSERT(installed);
  (void)installed;
}

PersistCounter::~PersistCounter() {
  pm::Recorder* expected = &TheLineCounter();
  pm::g_recorder.compare_exchange_strong(expected, nullptr);
  TheLineCounter().Stop();  // a late call waits for this, then counts nothing
}

uint64_t PersistCounter::bytes() const { return TheLineCounter().bytes(); }

}  // namespace upfs
