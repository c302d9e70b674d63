#include "posix/file_registry.h"

#include <sched.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "format/header.h"

namespace upfs {
namespace {

using Clock = std::chrono::steady_clock;

// Long enough to cover a program's reopen of a file it just closed, short
// enough that a closed file is soon closed for other processes too (their
// unlink frees its space, their next open may rebuild the shared state).
constexpr auto kParkFor = std::chrono::seconds(1);
constexpr size_t kDefaultParked = 16;
constexpr size_t kMaxParked = 1024;

size_t ParkedLimit() {
  static const size_t limit = [] {
    const char* v = getenv("UPFS_PARKED_FILES");
    if (!v || !*v) return kDefaultParked;
    char* end = nullptr;
    unsigned long n = strtoul(v, &end, 10);
    if (*end != '\0') return kDefaultParked;
    return n > kMaxParked ? kMaxParked : size_t(n);
  }();
  return limit;
}

struct FileKey {
  dev_t dev;
  ino_t ino;
  bool operator<(const FileKey& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};

struct Parked {
  FileKey key;
  std::unique_ptr<File> file;
  Clock::time_point since;
};

struct Registry {
  std::mutex mu;
  std::condition_variable reaper_cv;
  // Files in use. An expired entry is a File whose last user is leaving:
  // only its release (Release below) removes the entry.
  std::map<FileKey, std::weak_ptr<File>> live;
  std::vector<Parked> parked;  // oldest first
  bool reaper_running = false;
};

// Never destroyed: the reaper thread may still run while the process exits.
Registry* Reg() {
  static Registry* r = new Registry();
  return r;
}

void Release(File* f, FileKey key);

std::shared_ptr<File> Share(std::unique_ptr<File> f, FileKey key) {
  return std::shared_ptr<File>(f.release(), [key](File* p) { Release(p, key); });
}

// Destroys Files parked for kParkFor. Files are destroyed under the lock,
// like every File (see the header). Once started it stays (idle on the
// condition variable): a thread starting or ending while another thread
// forks is where fork-safety bugs of allocators and sanitizers live (CI
// once saw clang 14's ASan allocator deadlock a fork child that way), and
// thread churn would cost every burst of closes a thread creation.
void Reap() {
  Registry* r = Reg();
  std::unique_lock<std::mutex> lk(r->mu);
  for (;;) {
    if (r->parked.empty()) {
      r->reaper_cv.wait(lk);
      continue;
    }
    Clock::time_point due = r->parked.front().since + kParkFor;
    if (Clock::now() < due) {
      r->reaper_cv.wait_until(lk, due);
      continue;
    }
    const Clock::time_point now = Clock::now();
    while (!r->parked.empty() && r->parked.front().since + kParkFor <= now)
      r->parked.erase(r->parked.begin());
  }
}

// Runs when the last user of f lets go of it.
void Release(File* f, FileKey key) {
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  std::unique_ptr<File> owned(f);  // destroyed, if not parked, under the lock
  auto it = r->live.find(key);
  if (it != r->live.end() && it->second.expired()) r->live.erase(it);
  struct stat st;
  // No link left: nobody can open it again, and its space and shared state
  // must go now, as with the kernel's last close.
  if (ParkedLimit() == 0 || fstat(f->medium()->fd(), &st) != 0 || st.st_nlink == 0) return;
  if (!r->reaper_running) {
    try {
      std::thread(Reap).detach();
      r->reaper_running = true;
    } catch (const std::system_error&) {
      return;  // nothing would bound the time: do not park
    }
  }
  // The reaper sleeps without a deadline when nothing is parked; otherwise
  // it wakes for the oldest, which is due before this one.
  if (r->parked.empty()) r->reaper_cv.notify_one();
  r->parked.push_back(Parked{key, std::move(owned), Clock::now()});
  while (r->parked.size() > ParkedLimit()) r->parked.erase(r->parked.begin());
}

std::unique_ptr<File> TakeParkedLocked(Registry* r, const FileKey& key) {
  for (auto it = r->parked.begin(); it != r->parked.end(); ++it) {
    if (it->key.dev == key.dev && it->key.ino == key.ino) {
      std::unique_ptr<File> f = std::move(it->file);
      r->parked.erase(it);
      return f;
    }
  }
  return nullptr;
}

// A parked File of the inode, if the file still looks as it did: otherwise
// it is destroyed and a fresh open judges the file.
std::unique_ptr<File> TakeReusableLocked(Registry* r, const struct stat& host) {
  std::unique_ptr<File> f = TakeParkedLocked(r, FileKey{host.st_dev, host.st_ino});
  if (!f) return nullptr;
  FileStat fs;
  if (uint64_t(host.st_size) < f->medium()->capacity() ||
      !format::ValidateHeader(f->medium()->base(), f->medium()->capacity()).ok() ||
      !f->Stat(&fs).ok())
    return nullptr;
  return f;
}

// Runs fn(registry, key, File of the inode or null) with the lock held,
// once the inode's File, if any, is not half-way through its release.
template <typename Fn>
void WithLookup(const struct stat& host, Fn fn) {
  Registry* r = Reg();
  const FileKey key{host.st_dev, host.st_ino};
  for (;;) {
    // Declared before the lock, so released after it: the release of a
    // last reference takes the lock.
    std::shared_ptr<File> f;
    std::unique_lock<std::mutex> lk(r->mu);
    auto it = r->live.find(key);
    if (it != r->live.end()) {
      f = it->second.lock();
      if (!f) {
        // Its last user is in Release, waiting for this lock.
        lk.unlock();
        sched_yield();
        continue;
      }
    } else if (std::unique_ptr<File> parked = TakeReusableLocked(r, host)) {
      f = Share(std::move(parked), key);
      r->live[key] = f;
    }
    fn(r, key, f);
    return;
  }
}

}  // namespace

Status AcquireFile(const struct stat& host,
                   const std::function<Status(std::unique_ptr<File>*)>& open_new,
                   std::shared_ptr<File>* out) {
  Status st;
  WithLookup(host, [&](Registry* r, const FileKey& key, std::shared_ptr<File>& f) {
    if (!f) {
      std::unique_ptr<File> fresh;
      st = open_new(&fresh);
      if (!st.ok()) return;
      f = Share(std::move(fresh), key);
      r->live[key] = f;
    }
    *out = f;
  });
  return st;
}

std::shared_ptr<File> FindFile(const struct stat& host) {
  std::shared_ptr<File> out;
  WithLookup(host, [&](Registry*, const FileKey&, std::shared_ptr<File>& f) { out = f; });
  return out;
}

bool DropParkedFile(dev_t dev, ino_t ino) {
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  std::unique_ptr<File> f = TakeParkedLocked(r, FileKey{dev, ino});
  bool found = f != nullptr;
  f.reset();  // under the lock, as every File's destruction
  return found;
}

void DropAllParkedFiles() {
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  r->parked.clear();
}

void LockRegistryForFork() { Reg()->mu.lock(); }

void UnlockRegistryInParent() { Reg()->mu.unlock(); }

void ForgetRegistryInChild() {
  Registry* r = Reg();
  // The parent's lock is held and its reaper does not exist here.
  new (&r->mu) std::mutex();
  new (&r->reaper_cv) std::condition_variable();
  new std::vector<Parked>(std::move(r->parked));  // intentionally leaked
  r->parked.clear();
  r->live.clear();
  r->reaper_running = false;
}

std::shared_ptr<File> AdoptFileInChild(std::unique_ptr<File> f) {
  struct stat st;
  if (fstat(f->medium()->fd(), &st) != 0) return Share(std::move(f), FileKey{0, 0});
  const FileKey key{st.st_dev, st.st_ino};
  std::shared_ptr<File> s = Share(std::move(f), key);
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  r->live[key] = s;
  return s;
}

}  // namespace upfs
