// GcWorker: the one background thread per process that compacts the logs
// of its files (docs/design.md, "Garbage collection", "Trigger").
//
// A write that makes a log long enough asks for a GC and goes on; the
// worker compacts while writers and readers keep going (GC never blocks
// them). Run inline, a GC stalled the write that triggered it for as long
// as it took to replay and rewrite the log: for a file written in small
// pieces, whose compacted log holds every live patch, that was 28% of a
// write's average cost and 21-31 ms at once (docs/design.md). MadFS runs
// its GC in a thread of its own too (§4.5).
//
// What a GC frees (the old chain, two epochs after it retired it) goes
// back to the shared bitmap at once, not to the worker's own free list,
// where only the worker would reuse it: writers allocate from the bitmap.
//
// The thread starts with the first request and is never joined. A process
// that exits drops the queued GCs and waits for a running one
// (DrainAtExit, from the POSIX layer's exit handler), as the write that
// triggered it would have waited: a GC cut short is a crash for its log
// (the next GC takes over from the dead owner) and leaves the blocks it
// took allocated until the file's next rebuild. One killed, or exiting
// through a path that skips the handler, still does that.
//
// It also folds the pairs of files that went quiet (File::FoldWhenQuiet,
// docs/design.md "Folding pairs back"): a timed list, each file at most
// once in it, run when due and after every queued GC.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace upfs {

class File;

class GcWorker {
 public:
  // The process's worker (a fresh one in a fork child: the parent's thread
  // does not exist there).
  static GcWorker& Get();
  // Whether writes hand their GC to the worker: yes unless
  // UPFS_BACKGROUND_GC=0 or SetBackground(false) (the crash explorer,
  // which needs every fence in the thread it records).
  static bool Background();
  static void SetBackground(bool on);

  // Queues a GC of f, unless one is queued or running. False if the
  // thread could not be started (then the caller runs the GC itself).
  bool Request(File* f);
  // Asks for f->FoldWhenQuiet() in delay_ms, or sooner if f already
  // waits for one sooner. False if the thread could not be started.
  bool RequestQuietFold(File* f, uint32_t delay_ms);
  // Until no GC of f is queued or running (a quiet fold waiting for its
  // time is not waited for).
  void Wait(File* f);
  // The same, and then no run of any file starts while the returned lock
  // is held: for an audit that reads the thread context the worker uses
  // for f, whose blocks a draining retry (every millisecond, after Wait
  // has returned) would otherwise change under it.
  std::unique_lock<std::mutex> Quiesce(File* f);
  // Drops f's queued GC and quiet fold and waits for a running one:
  // before f goes.
  void Forget(File* f);
  // Drops every queued GC and quiet fold and waits for a running one (if there is a worker).
  static void DrainAtExit();

 private:
  GcWorker() = default;
  using Clock = std::chrono::steady_clock;
  struct QuietFold {
    File* f;
    Clock::time_point due;
  };

  void Loop();
  bool StartLocked();
  bool QueuedLocked(File* f) const;
  // Adds or advances f's entry in quiet_.
  void ScheduleQuietLocked(File* f, Clock::time_point due);
  // Runs the first quiet fold that is due, if any; whether it ran one.
  bool RunDueQuietFold(std::unique_lock<std::mutex>& l);
  // Until a GC is queued, a quiet fold is due or requested anew, or (with
  // draining_ not empty) a millisecond has passed.
  void WaitForWork(std::unique_lock<std::mutex>& l);
  // Runs fn() for f without the lock; false if f was forgotten meanwhile
  // (then f may be gone and must not be kept in any list).
  template <typename Fn>
  bool RunUnlocked(std::unique_lock<std::mutex>& l, File* f, Fn fn);
  // Finishes a run of f: keeps it for another release if it still needs
  // one and nobody forgot it while it ran.
  void KeepDraining(File* f, bool released, bool wanted);

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<File*> queue_;
  // Files whose last GC retired blocks that could not go back yet (they
  // wait two epochs): retried every millisecond until they have.
  std::deque<File*> draining_;
  // Files waiting for their quiet fold, in no order (a few at a time).
  std::vector<QuietFold> quiet_;
  bool quiet_requested_ = false;  // an entry came or moved earlier since the loop last looked
  File* running_ = nullptr;
  bool running_forgotten_ = false;  // Forget or DrainAtExit came while running_ ran
  bool started_ = false;
};

}  // namespace upfs
