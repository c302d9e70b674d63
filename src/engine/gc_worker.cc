#include "engine/gc_worker.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "engine/file.h"

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
    const char* v = getenv("UPFS_BACKGROUND_GC");
    b = (v && v[0] == '0') ? 0 : 1;
    int expected = -1;
    if (!g_background.compare_exchange_strong(expected, b)) b = expected;
  }
  return b == 1;
}

void GcWorker::SetBackground(bool on) { g_background.store(on ? 1 : 0, std::memory_order_relaxed); }

bool GcWorker::QueuedLocked(File* f) const {
  return running_ == f || std::find(queue_.begin(), queue_.end(), f) != queue_.end();
}

void GcWorker::Request(File* f) {
  std::lock_guard<std::mutex> g(mu_);
  if (QueuedLocked(f)) return;
  queue_.push_back(f);
  if (!started_) {
    started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  work_.notify_one();
}

void GcWorker::Wait(File* f) {
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return !QueuedLocked(f); });
}

void GcWorker::Forget(File* f) {
  std::unique_lock<std::mutex> l(mu_);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), f), queue_.end());
  done_.wait(l, [&] { return running_ != f; });
}

void GcWorker::DrainAtExit() {
  GcWorker* w = g_worker.load(std::memory_order_acquire);
  if (!w) return;
  std::unique_lock<std::mutex> l(w->mu_);
  w->queue_.clear();
  w->done_.wait(l, [&] { return w->running_ == nullptr; });
}

void GcWorker::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_.wait(l, [&] { return !queue_.empty(); });
    File* f = queue_.front();
    queue_.pop_front();
    running_ = f;
    l.unlock();
    // Best effort, as inline: on an error the log just stays longer, and
    // the next write past the trigger asks again.
    (void)f->CollectGarbage(false);
    l.lock();
    running_ = nullptr;
    done_.notify_all();
  }
}

}  // namespace upfs
