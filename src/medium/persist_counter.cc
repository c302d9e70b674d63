#include "medium/persist_counter.h"

#include "util/assert.h"

namespace upfs {

namespace {

constexpr uintptr_t kLine = 64;

uintptr_t FirstLine(const void* addr) { return reinterpret_cast<uintptr_t>(addr) / kLine; }

uintptr_t EndLine(const void* addr, size_t n) {
  return (reinterpret_cast<uintptr_t>(addr) + n + kLine - 1) / kLine;
}

// The recorder a counter is installed through. A thread loads the
// recorder and then calls it, so it may call after the counter is gone;
// the forwarder is never destroyed and drops such late calls.
class Forwarder final : public pm::Recorder {
 public:
  void Attach(PersistCounter* c) {
    std::lock_guard<std::mutex> g(mu_);
    UPFS_ASSERT(current_ == nullptr);
    current_ = c;
  }
  void Detach() {
    std::lock_guard<std::mutex> g(mu_);
    current_ = nullptr;
  }
  void OnCopy(void* dst, const void* src, size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    if (current_) current_->OnCopy(dst, src, n);
  }
  void OnZero(void* dst, size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    if (current_) current_->OnZero(dst, n);
  }
  void OnStore(void* dst, uint64_t value) override {
    std::lock_guard<std::mutex> g(mu_);
    if (current_) current_->OnStore(dst, value);
  }
  void OnFlush(const void* addr, size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    if (current_) current_->OnFlush(addr, n);
  }
  void OnFence() override {}

 private:
  std::mutex mu_;
  PersistCounter* current_ = nullptr;
};

Forwarder& TheForwarder() {
  static Forwarder* f = new Forwarder;  // never destroyed (see above)
  return *f;
}

}  // namespace

PersistCounter::PersistCounter() {
  TheForwarder().Attach(this);
  pm::Recorder* expected = nullptr;
  const bool installed = pm::g_recorder.compare_exchange_strong(expected, &TheForwarder());
  UPFS_ASSERT(installed);
  (void)installed;
}

PersistCounter::~PersistCounter() {
  pm::Recorder* expected = &TheForwarder();
  pm::g_recorder.compare_exchange_strong(expected, nullptr);
  TheForwarder().Detach();  // a late call waits for this, then counts nothing
}

uint64_t PersistCounter::bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return bytes_;
}

// A non-temporal write goes to media whole lines at a time, and a line it
// writes is no longer dirty in the cache.
void PersistCounter::CountLines(const void* addr, size_t n) {
  if (n == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  for (uintptr_t l = FirstLine(addr); l < EndLine(addr, n); ++l) dirty_.erase(l);
  bytes_ += (EndLine(addr, n) - FirstLine(addr)) * kLine;
}

void PersistCounter::OnCopy(void* dst, const void*, size_t n) { CountLines(dst, n); }

void PersistCounter::OnZero(void* dst, size_t n) { CountLines(dst, n); }

void PersistCounter::OnStore(void* dst, uint64_t) {
  std::lock_guard<std::mutex> g(mu_);
  dirty_.insert(FirstLine(dst));
}

void PersistCounter::OnFlush(const void* addr, size_t n) {
  if (n == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  for (uintptr_t l = FirstLine(addr); l < EndLine(addr, n); ++l) {
    if (dirty_.erase(l)) bytes_ += kLine;
  }
}

}  // namespace upfs
