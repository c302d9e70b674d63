#include "posix/file_registry.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "container/container.h"
#include "engine/gc_worker.h"
#include "util/leak.h"

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

// A process may have two Files of an inode: one that writes, and one that
// only reads (File::OpenReadOnly), which has no allocation state and so
// cannot conflict with the writer.
struct FileKey {
  dev_t dev;
  ino_t ino;
  bool writable;
  bool operator<(const FileKey& o) const {
    if (dev != o.dev) return dev < o.dev;
    if (ino != o.ino) return ino < o.ino;
    return writable < o.writable;
  }
  bool operator==(const FileKey& o) const {
    return dev == o.dev && ino == o.ino && writable == o.writable;
  }
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
  // The reaper waits without a deadline (nothing was parked when it last
  // looked): the only time a newly parked File must wake it.
  bool reaper_idle = false;
};

// The process the registry belongs to: where it was made, or the fork child
// that took it over (ForgetRegistryInChild). 0: no registry yet.
std::atomic<pid_t> g_registry_pid{0};

// Never destroyed: the reaper thread may still run while the process exits.
Registry* Reg() {
  static Registry* r = [] {
    g_registry_pid.store(getpid(), std::memory_order_relaxed);
    return new Registry();
  }();
  return r;
}

void Release(File* f, FileKey key);

// At exit nothing destroys the Files still parked or open, and the shared
// state of a file lives while some process has it open: remove, if no
// other process uses them, the shared state of the parked Files (nobody
// uses them) and of the open Files whose host file has no link left (they
// can never be opened again). An open file that still has a name keeps its
// shared state for its next user, whose last close removes it: other
// threads may still be inside a call on it. A killed process leaves its
// shared state behind; `upfs sweep` removes it.
void LeaveFilesAtExit() {
  // A compaction in the GC thread finishes first (see GcWorker).
  GcWorker::DrainAtExit();
  Registry* r = Reg();
  // Released after the lock: dropping a last reference takes the lock.
  std::vector<std::shared_ptr<File>> open_files;
  // Another thread may hold the lock while the process exits: give up
  // rather than hang the exit.
  std::unique_lock<std::mutex> lk(r->mu, std::defer_lock);
  for (int i = 0; i < 100 && !lk.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!lk.owns_lock()) return;
  for (Parked& p : r->parked)
    HostFileContainer().Leaving(*p.file);
  for (auto& [key, weak] : r->live) {
    std::shared_ptr<File> f = weak.lock();
    struct stat st;
    if (f && fstat(HostFileContainer().HostFd(*f), &st) == 0 && st.st_nlink == 0)
      HostFileContainer().Leaving(*f);
    if (f) open_files.push_back(std::move(f));
  }
}

std::shared_ptr<File> Share(std::unique_ptr<File> f, FileKey key) {
  static const bool registered = [] { return atexit(LeaveFilesAtExit) == 0; }();
  (void)registered;
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
      r->reaper_idle = true;
      r->reaper_cv.wait(lk);
      r->reaper_idle = false;
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
  if (ParkedLimit() == 0 || fstat(HostFileContainer().HostFd(*f), &st) != 0 || st.st_nlink == 0) return;
  if (!r->reaper_running) {
    try {
      std::thread(Reap).detach();
      r->reaper_running = true;
    } catch (const std::system_error&) {
      return;  // nothing would bound the time: do not park
    }
  }
  // The reaper sleeps without a deadline when nothing was parked when it
  // last looked; otherwise it wakes by a deadline no later than this one's
  // (the oldest's then, which was parked before this one) and looks again.
  // So it is woken only from that idle wait: a program that opens and
  // closes one file in a loop takes the parked File at each open and parks
  // it again at each close, and a wake-up at every close (a futex call
  // here, the reaper's wake and wait on the other CPU) was about a third of
  // a per-file open and close (perf of scratch `oc`).
  if (r->reaper_idle) r->reaper_cv.notify_one();
  r->parked.push_back(Parked{key, std::move(owned), Clock::now()});
  while (r->parked.size() > ParkedLimit()) r->parked.erase(r->parked.begin());
}

std::unique_ptr<File> TakeParkedLocked(Registry* r, const FileKey& key) {
  for (auto it = r->parked.begin(); it != r->parked.end(); ++it) {
    if (it->key == key) {
      std::unique_ptr<File> f = std::move(it->file);
      r->parked.erase(it);
      return f;
    }
  }
  return nullptr;
}

// A parked File of the inode, if the file still looks as it did: otherwise
// it is destroyed and a fresh open judges the file.
std::unique_ptr<File> TakeReusableLocked(Registry* r, const FileKey& key, const struct stat& host) {
  std::unique_ptr<File> f = TakeParkedLocked(r, key);
  if (!f) return nullptr;
  FileStat fs;
  if (!HostFileContainer().StillCurrent(*f, host) || !f->Stat(&fs).ok())
    return nullptr;
  return f;
}

// Runs fn(registry, key, File of the inode or null) with the lock held,
// once the inode's File, if any, is not half-way through its release.
template <typename Fn>
void WithLookup(const struct stat& host, bool writable, Fn fn) {
  Registry* r = Reg();
  const FileKey key{host.st_dev, host.st_ino, writable};
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
    } else if (std::unique_ptr<File> parked = TakeReusableLocked(r, key, host)) {
      f = Share(std::move(parked), key);
      r->live[key] = f;
    }
    fn(r, key, f);
    return;
  }
}

}  // namespace

Status AcquireFile(const struct stat& host, bool writable,
                   const std::function<Status(std::unique_ptr<File>*)>& open_new,
                   std::shared_ptr<File>* out) {
  // A reader is served by the process's writing File if it has one.
  if (!writable && (*out = FindWritableFile(host))) return Status::OK();
  Status st;
  WithLookup(host, writable, [&](Registry* r, const FileKey& key, std::shared_ptr<File>& f) {
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

std::shared_ptr<File> FindWritableFile(const struct stat& host) {
  std::shared_ptr<File> out;
  WithLookup(host, true, [&](Registry*, const FileKey&, std::shared_ptr<File>& f) { out = f; });
  return out;
}

std::shared_ptr<File> FindFile(const struct stat& host) {
  std::shared_ptr<File> out = FindWritableFile(host);
  if (!out)
    WithLookup(host, false, [&](Registry*, const FileKey&, std::shared_ptr<File>& f) { out = f; });
  return out;
}

bool DropParkedFile(dev_t dev, ino_t ino) {
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  std::unique_ptr<File> w = TakeParkedLocked(r, FileKey{dev, ino, true});
  std::unique_ptr<File> ro = TakeParkedLocked(r, FileKey{dev, ino, false});
  bool found = w != nullptr;  // only a writing File has shared state to remove
  w.reset();  // under the lock, as every File's destruction
  ro.reset();
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
  g_registry_pid.store(getpid(), std::memory_order_relaxed);
  // The parent's lock is held and its reaper does not exist here.
  new (&r->mu) std::mutex();
  new (&r->reaper_cv) std::condition_variable();
  IntentionallyLeaked(new std::vector<Parked>(std::move(r->parked)));
  r->parked.clear();
  r->live.clear();
  r->reaper_running = false;
  r->reaper_idle = false;
}

void LeaveFilesBeforeExit() {
  const pid_t owner = g_registry_pid.load(std::memory_order_relaxed);
  if (owner == 0 || owner != getpid()) return;
  LeaveFilesAtExit();
}

std::shared_ptr<File> AdoptFileInChild(std::unique_ptr<File> f) {
  struct stat st;
  const bool writable = !f->read_only();
  if (fstat(HostFileContainer().HostFd(*f), &st) != 0) return Share(std::move(f), FileKey{0, 0, writable});
  const FileKey key{st.st_dev, st.st_ino, writable};
  std::shared_ptr<File> s = Share(std::move(f), key);
  Registry* r = Reg();
  std::lock_guard<std::mutex> g(r->mu);
  r->live[key] = s;
  return s;
}

}  // namespace upfs
