#include "engine/gc_worker.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <system_error>

#include "engine/file.h"
#include "util/env_switch.h"

namespace upfs {

namespace {

std::atomic<GcWorker*> g_worker{nullptr};
std::atomic<int> g_background{-1};  // -1: not read from the environment yet

}  // namespace

GcWorker& GcWorker::Get() {
  GcWorker* w = g_worker.load(std::memory_order_acquire);
  if (w) return *w;
  static std::once_flag once;
  std::call_once(once, [] {
    // The worker lives as long as the process (see the header). After a
    // fork the child gets a new one: the parent's thread is not there, and
    // its mutex may have been held at the fork. The old one is left as is.
    g_worker.store(new GcWorker, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, [] { g_worker.store(new GcWorker, std::memory_order_release); });
  });
  return *g_worker.load(std::memory_order_acquire);
}

bool GcWorker::Background() {
  int b = g_background.load(std::memory_order_relaxed);
  if (b < 0) {
    b = EnvSwitchOn("UPFS_BACKGROUND_GC") ? 1 : 0;
    int expected = -1;
    if (!g_background.compare_exchange_strong(expected, b)) b = expected;
  }
  return b == 1;
}

void GcWorker::SetBackground(bool on) { g_background.store(on ? 1 : 0, std::memory_order_relaxed); }

bool GcWorker::QueuedLocked(File* f) const {
  return running_ == f || std::find(queue_.begin(), queue_.end(), f) != queue_.end();
}

bool GcWorker::StartLocked() {
  if (started_) return true;
  try {
    std::thread([this] { Loop(); }).detach();
  } catch (const std::system_error&) {
    return false;  // no thread to be had (EAGAIN): the next request tries again
  }
  started_ = true;
  return true;
}

bool GcWorker::Request(File* f) {
  std::lock_guard<std::mutex> g(mu_);
  if (QueuedLocked(f)) return true;
  if (!StartLocked()) return false;
  queue_.push_back(f);
  work_.notify_one();
  return true;
}

bool GcWorker::RequestQuietFold(File* f, uint32_t delay_ms) {
  std::lock_guard<std::mutex> g(mu_);
  if (!StartLocked()) return false;
  ScheduleQuietLocked(f, Clock::now() + std::chrono::milliseconds(delay_ms));
  work_.notify_one();
  return true;
}

void GcWorker::ScheduleQuietLocked(File* f, Clock::time_point due) {
  for (QuietFold& q : quiet_) {
    if (q.f != f) continue;
    if (due < q.due) {
      q.due = due;
      quiet_requested_ = true;
    }
    return;
  }
  quiet_.push_back({f, due});
  quiet_requested_ = true;
}

void GcWorker::Wait(File* f) {
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return !QueuedLocked(f); });
}

std::unique_lock<std::mutex> GcWorker::Quiesce(File* f) {
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return !QueuedLocked(f); });
  return l;  // a run starts only under mu_
}

void GcWorker::Forget(File* f) {
  std::unique_lock<std::mutex> l(mu_);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), f), queue_.end());
  draining_.erase(std::remove(draining_.begin(), draining_.end(), f), draining_.end());
  std::erase_if(quiet_, [f](const QuietFold& q) { return q.f == f; });
  if (running_ == f) running_forgotten_ = true;  // not put back in a list after its run
  done_.wait(l, [&] { return running_ != f; });
}

void GcWorker::DrainAtExit() {
  GcWorker* w = g_worker.load(std::memory_order_acquire);
  if (!w) return;
  std::unique_lock<std::mutex> l(w->mu_);
  w->queue_.clear();
  w->draining_.clear();
  w->quiet_.clear();
  if (w->running_) w->running_forgotten_ = true;
  w->done_.wait(l, [&] { return w->running_ == nullptr; });
}

// Runs fn(f) for a file without the lock, marked running so that Forget
// waits for it. A Forget that came meanwhile is waiting to destroy f: the
// caller must not keep f anywhere (it was once put back in draining_ after
// Forget had emptied it, and a later retry released blocks of a destroyed
// File).
template <typename Fn>
bool GcWorker::RunUnlocked(std::unique_lock<std::mutex>& l, File* f, Fn fn) {
  running_ = f;
  running_forgotten_ = false;
  l.unlock();
  fn();
  l.lock();
  const bool wanted = !running_forgotten_;
  running_ = nullptr;
  return wanted;
}

void GcWorker::KeepDraining(File* f, bool released, bool wanted) {
  if (wanted && !released && std::find(draining_.begin(), draining_.end(), f) == draining_.end())
    draining_.push_back(f);
  done_.notify_all();  // after the lists say what f's run decided
}

void GcWorker::WaitForWork(std::unique_lock<std::mutex>& l) {
  auto woken = [&] { return !queue_.empty() || quiet_requested_; };
  quiet_requested_ = false;
  if (!draining_.empty()) {
    work_.wait_for(l, std::chrono::milliseconds(1), woken);
  } else if (!quiet_.empty()) {
    Clock::time_point first = quiet_[0].due;
    for (const QuietFold& q : quiet_) first = std::min(first, q.due);
    work_.wait_until(l, first, woken);
  } else {
    work_.wait(l, woken);
  }
}

bool GcWorker::RunDueQuietFold(std::unique_lock<std::mutex>& l) {
  const Clock::time_point now = Clock::now();
  auto due = std::find_if(quiet_.begin(), quiet_.end(), [&](const QuietFold& q) { return q.due <= now; });
  if (due == quiet_.end()) return false;
  File* f = due->f;
  quiet_.erase(due);
  uint32_t again_ms = 0;
  bool released = false;
  const bool wanted = RunUnlocked(l, f, [&] {
    again_ms = f->FoldWhenQuiet();
    released = f->ReleaseGcBlocks();
  });
  // Not put back if f was forgotten while it ran (it may be gone).
  if (wanted && again_ms) ScheduleQuietLocked(f, Clock::now() + std::chrono::milliseconds(again_ms));
  KeepDraining(f, released, wanted);
  return true;
}

void GcWorker::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (queue_.empty()) WaitForWork(l);
    if (!queue_.empty()) {
      File* f = queue_.front();
      queue_.pop_front();
      bool released = false;
      const bool wanted = RunUnlocked(l, f, [&] {
        // Best effort, as inline: on an error the log just stays longer,
        // and the next write past the trigger asks again.
        (void)f->CollectGarbage(false);
        released = f->ReleaseGcBlocks();
      });
      KeepDraining(f, released, wanted);
      continue;
    }
    // Quiet folds after the GCs writers asked for, one at a time (each
    // is a bounded batch: File::FoldWhenQuiet).
    if (RunDueQuietFold(l)) continue;
    // The blocks a GC retired wait two epochs before they can go back.
    // One file at a time, taken from the shared list under the lock, so
    // that Forget can still remove the ones not yet retried.
    for (size_t n = draining_.size(); n > 0 && !draining_.empty() && queue_.empty(); --n) {
      File* f = draining_.front();
      draining_.pop_front();
      bool released = false;
      const bool wanted = RunUnlocked(l, f, [&] { released = f->ReleaseGcBlocks(); });
      KeepDraining(f, released, wanted);
    }
  }
}

}  // namespace upfs
