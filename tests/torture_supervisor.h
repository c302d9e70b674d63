// The kill torture's supervisor (torture_test.cc says what it does): forks
// the workers, kills them singly and all at once, restarts them, reads
// their intents and acknowledgements into the history, and verifies the
// file after every kill-all and at the end.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "torture_history.h"
#include "torture_protocol.h"
#include "torture_verify.h"
#include "torture_worker.h"
#include "upfs/upfs.h"

namespace upfs_torture {

struct WorkerState {
  pid_t pid = -1;        // -1: dead and reaped
  int rd = -1;
  bool dying = false;    // SIGKILL sent, not reaped yet
  int64_t kill_ns = 0;
  std::string buf;
  uint32_t next_seq = 1;
  int incarnation = 0;
  bool pending = false;  // an announced operation is in flight
  Msg intent{};
  uint64_t acked = 0;    // acknowledged operations, all incarnations
  int64_t last_ack_ns = 0;
  int64_t started_ns = 0;
  int64_t first_ack_ns = 0;  // of this incarnation (0: none yet)
  uint64_t seed = 0;
};

struct Stats {
  uint64_t kills = 0, kill_alls = 0, restarts = 0, checkpoints = 0;
  uint64_t killed_opening = 0;  // before the first acknowledgement of the incarnation
  uint64_t killed_in[6] = {};   // with an announced operation of that kind in flight
  uint64_t first_acks = 0;
  int64_t first_ack_ns_sum = 0;  // fork to first acknowledgement
  int64_t death_ns_sum = 0;      // SIGKILL to the pipe's end of file
  uint64_t acked_by_kind[6] = {};
  int64_t max_op_ns = 0;  // longest acknowledged call
  std::string max_op;
  int64_t max_survivor_ns = 0;  // longest life of a worker spared by single kills
  uint64_t acked() const {
    uint64_t s = 0;
    for (uint64_t v : acked_by_kind) s += v;
    return s;
  }
};

class Torture {
 public:
  explicit Torture(Config c) : c_(std::move(c)), hist_(c_.slots.size()), ws_(size_t(c_.workers)), rng_(c_.seed ^ 0x5eed) {}
  ~Torture() {
    KillAllAndReap();
    if (pub_.base) ::munmap(pub_.base, pub_.bytes);
  }

  // Returns "" or the failure.
  std::string Run() {
    pub_ = MakePub(c_.workers, c_.slots.size());
    if (!pub_.base) return "mmap of the publication area failed";
    const int64_t t_begin = NowNs();
    const int64_t deadline = t_begin + int64_t(c_.seconds * 1e9);
    for (int w = 0; w < c_.workers; ++w) Spawn(w);
    for (int64_t& t : last_kind_ack_ns_) t = t_begin;
    int64_t next_kill_all = NowNs() + KillAllInterval();
    bool collecting = false;        // a kill-all is under way
    int64_t collect_start = 0;
    survivor_ = int(rng_() % uint64_t(c_.workers));
    NewPlan();
    while (failure_.empty()) {
      int64_t now = NowNs();
      if (now >= deadline) break;
      // Wait for messages (and deaths), at most until the planned kill.
      int64_t wait_ns = 20 * 1000000;
      if (plan_time_ && !collecting) wait_ns = std::clamp<int64_t>(plan_at_ - now, 0, wait_ns);
      Pump(wait_ns);
      if (!failure_.empty()) break;
      now = NowNs();
      if (collecting) {
        if (std::any_of(ws_.begin(), ws_.end(), [](const WorkerState& s) { return s.pid > 0; })) {
          Watchdog(now, true);
          continue;
        }
        // Everybody is dead: verify; the next opener rebuilds the shared state.
        ++stats_.checkpoints;
        std::string e = VerifyFile(c_, hist_, "checkpoint " + std::to_string(stats_.checkpoints));
        if (!e.empty()) failure_ = e;
        for (int w = 0; failure_.empty() && w < c_.workers; ++w) Spawn(w);
        // The liveness clocks stand still while nobody runs.
        int64_t paused = NowNs() - collect_start;
        for (WorkerState& ws : ws_) ws.last_ack_ns += paused;
        for (int64_t& t : last_kind_ack_ns_) t += paused;
        next_kill_all = NowNs() + KillAllInterval();
        survivor_ = int(rng_() % uint64_t(c_.workers));
        collecting = false;
        NewPlan();
        continue;
      }
      // A reaped worker is replaced at once.
      for (int w = 0; failure_.empty() && w < c_.workers; ++w)
        if (ws_[size_t(w)].pid < 0) Spawn(w);
      Watchdog(now, false);
      if (!failure_.empty()) break;
      if (now >= next_kill_all && now + int64_t(1e9) < deadline) {
        ++stats_.kill_alls;
        for (int w = 0; w < c_.workers; ++w) KillAsync(w);
        collecting = true;
        collect_start = now;
        continue;
      }
      const WorkerState& v = ws_[size_t(plan_victim_)];
      bool fire = plan_time_ ? now >= plan_at_ : v.acked >= plan_acks_;
      if (!fire) continue;
      KillAsync(plan_victim_);  // no-op if it is already dying
      NewPlan();
    }
    const int64_t t_end = NowNs();
    KillAllAndReap();
    uint64_t kmut = stats_.killed_in[kWrite] + stats_.killed_in[kAppend] + stats_.killed_in[kTruncate];
    uint64_t kread = stats_.killed_in[kReadSlots] + stats_.killed_in[kReadZone];
    std::printf(
        "torture: %.1f s, seed %" PRIu64 ", %d workers: %" PRIu64 " kills (%" PRIu64 " kill-all events), %" PRIu64
        " restarts, %" PRIu64 " checkpoints\n"
        "  kills that hit: a write/append/truncate in flight %" PRIu64 " (pwrite %" PRIu64 ", append %" PRIu64
        ", truncate %" PRIu64 "), a read %" PRIu64 ", a worker still opening %" PRIu64 ", between calls %" PRIu64
        "\n"
        "  acknowledged ops %" PRIu64 " (pwrite %" PRIu64 ", slot reads %" PRIu64 ", zone reads %" PRIu64
        ", appends %" PRIu64 ", truncates %" PRIu64 ")\n"
        "  %" PRIu64 " appends read back right after they returned; first acknowledgement %.2f ms after the "
        "fork, death %.2f ms after SIGKILL (averages)\n"
        "  longest acknowledged call %.1f ms (%s); longest-lived worker %.1f s\n",
        Secs(t_end - t_begin), c_.seed, c_.workers, stats_.kills, stats_.kill_alls, stats_.restarts,
        stats_.checkpoints, kmut, stats_.killed_in[kWrite], stats_.killed_in[kAppend], stats_.killed_in[kTruncate],
        kread, stats_.killed_opening, stats_.kills - kmut - kread - stats_.killed_opening, stats_.acked(),
        stats_.acked_by_kind[kWrite], stats_.acked_by_kind[kReadSlots], stats_.acked_by_kind[kReadZone],
        stats_.acked_by_kind[kAppend], stats_.acked_by_kind[kTruncate],
        uint64_t(pub_.counters->readbacks.load()), stats_.first_acks ? double(stats_.first_ack_ns_sum) / 1e6 / double(stats_.first_acks) : 0.0,
        stats_.kills ? double(stats_.death_ns_sum) / 1e6 / double(stats_.kills) : 0.0,
        double(stats_.max_op_ns) / 1e6, stats_.max_op.c_str(), Secs(stats_.max_survivor_ns));
    std::fflush(stdout);
    if (!failure_.empty()) return failure_ + PostMortem(c_);
    return VerifyFile(c_, hist_, "final");
  }

 private:
  // The next single kill: a random worker other than the survivor, 0-5 ms
  // from now, or after it acknowledged a random number of operations.
  void NewPlan() {
    plan_victim_ = int(rng_() % uint64_t(c_.workers));
    if (c_.workers > 1)
      while (plan_victim_ == survivor_) plan_victim_ = int(rng_() % uint64_t(c_.workers));
    plan_time_ = rng_() % 100 < 65;
    if (plan_time_) {
      plan_at_ = NowNs() + int64_t(rng_() % 5001) * 1000;
    } else {
      plan_acks_ = ws_[size_t(plan_victim_)].acked + 1 + (rng_() % 4 == 0 ? rng_() % 300 : rng_() % 40);
    }
  }

  // Time until the next kill of all workers: 1-3 s. (Killed workers leak
  // the blocks they held until the next rebuild, a few MiB each on
  // average, and the host file never shrinks: rebuilding often keeps the
  // file, which lives in /dev/shm, at a few hundred MiB.)
  int64_t KillAllInterval() { return int64_t(1e9) + int64_t(rng_() % 2000) * 1000000; }

  void Spawn(int w) {
    WorkerState& s = ws_[size_t(w)];
    int p[2];
    if (::pipe(p) != 0) {
      failure_ = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    if (s.incarnation > 0) ++stats_.restarts;
    ++s.incarnation;
    s.seed = c_.seed * 1000003 + uint64_t(w) * 7919 + uint64_t(s.incarnation) * 104729;
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    if (pid < 0) {
      failure_ = std::string("fork: ") + std::strerror(errno);
      ::close(p[0]);
      ::close(p[1]);
      return;
    }
    if (pid == 0) {
      ::close(p[0]);
      for (const WorkerState& o : ws_)
        if (o.rd >= 0) ::close(o.rd);
      Worker(c_, w, s.next_seq, s.seed, p[1], pub_).Run();
    }
    ::close(p[1]);
    s.pid = pid;
    s.rd = p[0];
    s.dying = false;
    s.buf.clear();
    s.pending = false;
    s.started_ns = NowNs();
    s.first_ack_ns = 0;
    if (s.last_ack_ns == 0) s.last_ack_ns = s.started_ns;
  }

  // Reads whatever the workers sent within `wait_ns`, and reaps the workers
  // whose pipe reached end of file. The only writer of a worker's pipe is
  // the worker, and a process closes its files only after its memory is
  // gone, so end of file means that nothing it started can still happen.
  void Pump(int64_t wait_ns) {
    std::vector<struct pollfd> pf;
    std::vector<int> who;
    for (int w = 0; w < c_.workers; ++w)
      if (ws_[size_t(w)].rd >= 0) {
        pf.push_back({ws_[size_t(w)].rd, POLLIN, 0});
        who.push_back(w);
      }
    // Sleep rather than wait in poll: a poll would wake up at every message,
    // and the woken supervisor would preempt the worker right after its
    // write(2) to the pipe, so that kills would mostly land there. The pipe
    // holds far more than a few milliseconds of messages.
    wait_ns = std::min<int64_t>(wait_ns, 2000000);
    struct timespec ts{0, long(wait_ns)};
    while (wait_ns > 0 && ::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    struct timespec zero{0, 0};
    int r = ::ppoll(pf.data(), pf.size(), &zero, nullptr);
    if (r <= 0) return;
    for (size_t i = 0; i < pf.size() && failure_.empty(); ++i) {
      if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int w = who[i];
      WorkerState& s = ws_[size_t(w)];
      char tmp[16384];
      ssize_t n = ::read(s.rd, tmp, sizeof tmp);
      if (n > 0) {
        s.buf.append(tmp, size_t(n));
        Parse(w);
      } else if (n == 0) {
        bool was_dying = s.dying;
        Reap(w, NowNs());
        if (failure_.empty() && !was_dying)
          failure_ = Fmt("worker %d exited by itself (%s) without reporting an error", w, last_exit_.c_str());
      }
    }
  }

  void Parse(int w) {
    WorkerState& s = ws_[size_t(w)];
    size_t pos = 0;
    while (failure_.empty() && pos + sizeof(Msg) <= s.buf.size()) {
      Msg m;
      std::memcpy(&m, s.buf.data() + pos, sizeof m);
      if (m.type == kError) {
        if (pos + sizeof m + m.text_len > s.buf.size()) break;
        failure_ = "a worker found a problem: " + s.buf.substr(pos + sizeof m, m.text_len) +
                   Fmt(" (test seed %" PRIu64 ")", c_.seed);
        pos += sizeof m + m.text_len;
        break;
      }
      pos += sizeof m;
      Handle(w, m);
    }
    s.buf.erase(0, pos);
  }

  void Handle(int w, const Msg& m) {
    WorkerState& s = ws_[size_t(w)];
    if (m.worker != w || m.kind < kWrite || m.kind > kTruncate || (m.type != kIntent && m.type != kAck)) {
      failure_ = Fmt("protocol: bad message (type %u, kind %u, worker %u) on the pipe of worker %d", m.type, m.kind,
                     m.worker, w);
      return;
    }
    if (m.type == kIntent) {
      if (s.pending) {
        failure_ = Fmt("protocol: worker %d announced two operations", w);
        return;
      }
      s.pending = true;
      s.intent = m;
      if (m.kind == kWrite || m.kind == kAppend) s.next_seq = std::max(s.next_seq, m.seq + 1);
      hist_.OnIntent(m);
      return;
    }
    if (!s.pending || s.intent.kind != m.kind || s.intent.seq != m.seq ||
        (m.kind != kAppend && s.intent.arg != m.arg)) {
      failure_ = Fmt("protocol: worker %d acknowledged an operation it had not announced", w);
      return;
    }
    if (m.kind == kAppend && (m.arg < c_.zone_start || (m.arg - c_.zone_start) % kUnit != 0)) {
      failure_ = Fmt("O_APPEND write {writer=%d seq=%u len=%u} landed at %" PRIu64
                     ", which is not a record boundary of the append zone (starts at %" PRIu64 ")",
                     w + 1, m.seq, m.len, m.arg, c_.zone_start);
      return;
    }
    hist_.OnAck(s.intent, m);
    if (m.kind == kAppend) hist_.MaybePrune();
    s.pending = false;
    if (m.t_end - m.t_start > stats_.max_op_ns) {
      stats_.max_op_ns = m.t_end - m.t_start;
      stats_.max_op = DescribeOp(s.intent);
    }
    ++stats_.acked_by_kind[m.kind];
    ++s.acked;
    s.last_ack_ns = NowNs();
    last_kind_ack_ns_[m.kind] = s.last_ack_ns;
    if (s.first_ack_ns == 0) {
      s.first_ack_ns = s.last_ack_ns;
      ++stats_.first_acks;
      stats_.first_ack_ns_sum += s.first_ack_ns - s.started_ns;
    }
  }

  // Sends SIGKILL; the worker is reaped when its pipe reaches end of file.
  void KillAsync(int w) {
    WorkerState& s = ws_[size_t(w)];
    if (s.pid <= 0 || s.dying) return;
    ::kill(s.pid, SIGKILL);
    s.dying = true;
    s.kill_ns = NowNs();
    ++stats_.kills;
  }

  // The worker is dead or dying: collect its last messages and its exit
  // status; the announced operation without acknowledgement (if any) was
  // in flight and ended before `reap_ns`.
  void Reap(int w, int64_t reap_ns) {
    WorkerState& s = ws_[size_t(w)];
    if (s.rd >= 0) {
      bool to = false;
      s.buf += upfs_test::DrainFd(s.rd, 60000, &to);
      ::close(s.rd);
      s.rd = -1;
      Parse(w);
      if (failure_.empty() && !s.buf.empty()) failure_ = Fmt("protocol: partial message from worker %d", w);
      reap_ns = std::max(reap_ns, NowNs());
    }
    if (s.pid > 0) last_exit_ = upfs_test::WaitChild(s.pid);
    // A dead process commits nothing any more.
    if (pub_.base) pub_.trunc_active[w].store(0, std::memory_order_seq_cst);
    stats_.max_survivor_ns = std::max(stats_.max_survivor_ns, reap_ns - s.started_ns);
    if (s.dying) {
      stats_.death_ns_sum += reap_ns - s.kill_ns;
      if (s.first_ack_ns == 0) ++stats_.killed_opening;
      else if (s.pending) ++stats_.killed_in[s.intent.kind];
    }
    if (s.pending && s.intent.kind != kReadSlots && s.intent.kind != kReadZone) hist_.OnInflight(s.intent, reap_ns);
    s.pending = false;
    s.pid = -1;
    s.dying = false;
  }

  void KillAllAndReap() {
    for (int w = 0; w < c_.workers; ++w) KillAsync(w);
    for (int w = 0; w < c_.workers; ++w)
      if (ws_[size_t(w)].pid > 0 || ws_[size_t(w)].rd >= 0) Reap(w, NowNs());
  }

  std::string ProcInfo(pid_t pid) {
    std::string out;
    for (const char* f : {"wchan", "syscall"}) {
      std::vector<unsigned char> v;
      if (upfs_test::ReadHostFile("/proc/" + std::to_string(pid) + "/" + f, &v))
        out += std::string(" ") + f + "=" + std::string(v.begin(), v.end());
    }
    std::vector<unsigned char> st;
    if (upfs_test::ReadHostFile("/proc/" + std::to_string(pid) + "/stat", &st)) {
      std::string s(st.begin(), st.end());
      size_t rp = s.rfind(')');
      if (rp != std::string::npos && rp + 2 < s.size()) out += std::string(" state=") + s[rp + 2];
    }
    for (char& ch : out)
      if (ch == '\n') ch = ' ';
    // A backtrace, if gdb is around (best effort).
    std::string cmd = "timeout 60 gdb -p " + std::to_string(pid) +
                      " -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)' | head -40";
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char line[512];
      std::string bt;
      while (std::fgets(line, sizeof line, p)) bt += std::string("      ") + line;
      ::pclose(p);
      if (!bt.empty()) out += "\n    stack:\n" + bt;
    }
    return out;
  }

  void Watchdog(int64_t now, bool collecting) {
    std::string why;
    for (int w = 0; w < c_.workers && why.empty(); ++w) {
      const WorkerState& s = ws_[size_t(w)];
      if (s.dying && now - s.kill_ns > int64_t(10e9))
        why = Fmt("worker %d did not die within %.1f s of SIGKILL", w, Secs(now - s.kill_ns));
    }
    if (why.empty() && !collecting) {
      int64_t newest = 0;
      for (const WorkerState& s : ws_) newest = std::max(newest, s.last_ack_ns);
      if (now - newest > int64_t(10e9)) why = Fmt("no worker acknowledged any operation for %.1f s", Secs(now - newest));
      for (int w = 0; w < c_.workers && why.empty(); ++w) {
        const WorkerState& s = ws_[size_t(w)];
        int64_t since = s.last_ack_ns;
        if (now - since > int64_t(20e9))
          why = Fmt("worker %d acknowledged nothing for %.1f s (across restarts)", w, Secs(now - since));
      }
      // Each kind of operation in the mix must complete somewhere: workers
      // that block in one kind only would otherwise go unnoticed, as they
      // are killed and replaced every few milliseconds.
      unsigned lo[6] = {0, 0, c_.p_write, c_.p_read_slots, c_.p_read_zone, c_.p_append};
      unsigned hi[6] = {0, c_.p_write, c_.p_read_slots, c_.p_read_zone, c_.p_append, 100};
      for (int k = kWrite; k <= kTruncate && why.empty(); ++k) {
        if (hi[k] <= lo[k]) continue;  // not in the mix
        int64_t since = last_kind_ack_ns_[k];
        if (now - since > int64_t(20e9))
          why = Fmt("no %s was acknowledged by any worker for %.1f s", KindName(uint8_t(k)), Secs(now - since));
      }
    }
    if (why.empty()) return;
    std::string d = "liveness: " + why + " (a process blocked, possibly on a dead one); test seed " +
                    std::to_string(c_.seed) + "\n";
    for (int w = 0; w < c_.workers; ++w) {
      const WorkerState& s = ws_[size_t(w)];
      d += Fmt("  worker %d pid %d incarnation %d%s (seed %" PRIu64 ", up %.1f s, last ack %.1f s ago): ", w,
               int(s.pid), s.incarnation, s.dying ? " (killed)" : "", s.seed, Secs(now - s.started_ns),
               Secs(now - s.last_ack_ns));
      d += s.pending ? "in flight: " + DescribeOp(s.intent) + Fmt(" for %.1f s", Secs(now - s.intent.t_start))
                     : std::string(s.first_ack_ns ? "nothing in flight (between calls)" : "still opening");
      if (s.pid > 0) d += ProcInfo(s.pid);
      d += "\n";
    }
    failure_ = d;
  }

  Config c_;
  History hist_;
  std::vector<WorkerState> ws_;
  std::mt19937_64 rng_;
  Pub pub_;
  Stats stats_;
  std::string failure_;
  bool plan_time_ = true;
  int survivor_ = 0;  // not killed by single kills until the next kill-all
  int plan_victim_ = 0;
  int64_t plan_at_ = 0;
  uint64_t plan_acks_ = 0;
  std::string last_exit_;
  int64_t last_kind_ack_ns_[6] = {};
};

}  // namespace upfs_torture
