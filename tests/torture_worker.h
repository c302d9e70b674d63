// The kill torture's worker process: opens the file, announces each call
// (intent), makes it, acknowledges it, and checks what it reads.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/file.h"
#include "container/perfile/inspect.h"
#include "posix/file_registry.h"
#include "test_util.h"
#include "upfs/upfs.h"
#include "torture_protocol.h"

namespace upfs_torture {

// ---------------------------------------------------------------------------
// Worker process.


class Worker {
 public:
  Worker(const Config& c, int w, uint32_t seq_base, uint64_t seed, int out, const Pub& pub)
      : c_(c), w_(w), next_seq_(seq_base), rng_(seed), seed_(seed), out_(out), pub_(pub),
        last_seen_(c.slots.size()), max_seen_(c.slots.size() * size_t(c.workers), 0) {}

  [[noreturn]] void Run() {
    fd_ = upfs_open(c_.path.c_str(), O_RDWR);
    if (fd_ < 0) Fail(std::string("upfs_open failed: ") + upfs_last_error() + " " + upfs_test::ErrnoText(errno));
    if (c_.size_ops) {
      afd_ = upfs_open(c_.path.c_str(), O_WRONLY | O_APPEND);
      if (afd_ < 0)
        Fail(std::string("upfs_open O_APPEND failed: ") + upfs_last_error() + " " + upfs_test::ErrnoText(errno));
    }
    for (;;) {
      unsigned k = unsigned(rng_() % 100);
      if (k < c_.p_write) DoWrite();
      else if (k < c_.p_read_slots) DoReadSlots();
      else if (k < c_.p_read_zone) DoReadZone();
      else if (k < c_.p_append) DoAppend();
      else DoTruncate();
    }
  }

 private:
  void Send(const Msg& m) { upfs_test::PipeWriteAll(out_, &m, sizeof m); }

  Msg Make(uint8_t type, uint8_t kind) {
    Msg m{};
    m.type = type;
    m.kind = kind;
    m.worker = uint16_t(w_);
    return m;
  }

  [[noreturn]] void Fail(const std::string& what) {
    std::string text = Fmt("worker %d (pid %d, seed %" PRIu64 "): ", w_, int(getpid()), seed_) + what;
    if (text.size() > 3800) text.resize(3800);
    Msg m = Make(kError, 0);
    m.text_len = uint32_t(text.size());
    std::string buf(reinterpret_cast<const char*>(&m), sizeof m);
    buf += text;
    upfs_test::PipeWriteAll(out_, buf.data(), buf.size());  // one write: <= PIPE_BUF
    _exit(2);
  }

  std::string CallError(const char* what) {
    return std::string(what) + " failed: " + upfs_last_error() + " " + upfs_test::ErrnoText(errno);
  }

  void DoWrite() {
    const std::vector<uint32_t>& mine = c_.writable[size_t(w_)];
    uint32_t s = mine[rng_() % mine.size()];
    const Slot& sl = c_.slots[s];
    WriteId id{uint16_t(w_ + 1), next_seq_++, sl.off, sl.len};
    buf_.resize(sl.len);
    upfs_test::FillPositional(id, buf_.data());
    Msg m = Make(kIntent, kWrite);
    m.slot = s;
    m.seq = id.seq;
    m.len = id.len;
    m.arg = id.off;
    pub_.intent[w_].store(id.seq, std::memory_order_seq_cst);
    m.t_start = NowNs();
    Send(m);
    int64_t t0 = NowNs();
    ssize_t r = upfs_pwrite(fd_, buf_.data(), sl.len, off_t(sl.off));
    int64_t t1 = NowNs();
    if (r != ssize_t(sl.len)) Fail(CallError(("pwrite " + id.ToString()).c_str()) + Fmt(" (returned %zd)", r));
    pub_.Acked(w_, s).store(id.seq, std::memory_order_seq_cst);
    m.type = kAck;
    m.t_start = t0;
    m.t_end = t1;
    Send(m);
  }

  // Checks what a read returned for slot s over [a, b) (absolute), given the
  // acknowledged sequence numbers published before the read and the intents
  // published after it. Returns "" or an error.
  std::string CheckSlotView(uint32_t s, const unsigned char* data, uint64_t a, uint64_t b,
                            const uint32_t* acked_before, const uint32_t* intent_after) {
    const Slot& sl = c_.slots[s];
    RegionClass rc = ClassifyRegion(data, a, b - a);
    std::string where = Fmt("slot %u [%" PRIu64 ", %" PRIu64 ") read over [%" PRIu64 ", %" PRIu64 ")", s, sl.off,
                            sl.end(), a, b);
    if (rc.kind == RegionClass::kBad) return "torn or foreign content in " + where + ": " + rc.error;
    if (rc.kind == RegionClass::kZero) {
      // The region holds at least one whole aligned 32-byte window, which a
      // written slot would never leave zero.
      for (int w = 0; w < c_.workers; ++w)
        if (acked_before[w] != 0)
          return where + " reads as zero, but writer " + std::to_string(w + 1) + " had acknowledged seq " +
                 std::to_string(acked_before[w]) + " there before the read started (lost acknowledged write)";
      if (last_seen_[s].writer != 0)
        return where + " reads as zero after this reader saw " + last_seen_[s].ToString() + " there";
      return "";
    }
    const WriteId& id = rc.w;
    if (id.off != sl.off || id.len != sl.len || id.writer < 1 || id.writer > c_.workers ||
        !(sl.owners & (1u << (id.writer - 1))))
      return where + " holds " + id.ToString() + ", which does not belong to this slot";
    int wi = id.writer - 1;
    if (id.seq < acked_before[wi])
      return where + " holds " + id.ToString() + ", but its writer had acknowledged seq " +
             std::to_string(acked_before[wi]) + " there before the read started (lost acknowledged write)";
    if (id.seq > intent_after[wi])
      return where + " holds " + id.ToString() + ", newer than anything its writer had announced (" +
             std::to_string(intent_after[wi]) + ")";
    uint32_t& mx = max_seen_[size_t(s) * size_t(c_.workers) + size_t(wi)];
    if (id != last_seen_[s]) {
      if (id.seq <= mx)
        return where + " holds " + id.ToString() + " after this reader saw " + last_seen_[s].ToString() +
               " and seq " + std::to_string(mx) + " of that writer there (went backwards)";
      last_seen_[s] = id;
      mx = id.seq;
    }
    return "";
  }

  void DoReadSlots() {
    const std::vector<Slot>& S = c_.slots;
    size_t n = S.size();
    size_t i = rng_() % n, j = std::min(n, i + 1 + size_t(rng_() % 4));
    uint64_t lo = S[i].off, hi = S[j - 1].end();
    lo -= std::min<uint64_t>(lo, rng_() % 200);
    hi = std::min<uint64_t>(c_.slot_end, hi + rng_() % 200);
    // The slots that intersect [lo, hi): [first, last).
    size_t first = i, last = j;
    while (first > 0 && S[first - 1].end() > lo) --first;
    while (last < n && S[last].off < hi) ++last;
    acked_.assign((last - first) * size_t(c_.workers), 0);
    for (size_t s = first; s < last; ++s)
      for (int w = 0; w < c_.workers; ++w)
        acked_[(s - first) * size_t(c_.workers) + size_t(w)] = pub_.Acked(w, s).load(std::memory_order_seq_cst);
    buf_.resize(hi - lo);
    Msg m = Make(kIntent, kReadSlots);
    m.t_start = NowNs();
    Send(m);
    int64_t t0 = NowNs();
    ssize_t r = upfs_pread(fd_, buf_.data(), hi - lo, off_t(lo));
    int64_t t1 = NowNs();
    m.type = kAck;
    m.t_start = t0;
    m.t_end = t1;
    Send(m);
    if (r != ssize_t(hi - lo))
      Fail(CallError(Fmt("pread [%" PRIu64 ", %" PRIu64 ")", lo, hi).c_str()) + Fmt(" (returned %zd)", r));
    uint32_t intent[kMaxWorkers];
    for (int w = 0; w < c_.workers; ++w) intent[w] = pub_.intent[w].load(std::memory_order_seq_cst);
    uint64_t pos = lo;
    for (size_t s = first; s < last; ++s) {
      const Slot& sl = S[s];
      // The gap before the slot must be zero.
      uint64_t ga = std::max(pos, lo), gb = std::min(sl.off, hi);
      if (ga < gb && !upfs_test::AllZero(buf_.data() + (ga - lo), gb - ga))
        Fail(Fmt("nonzero bytes in the gap [%" PRIu64 ", %" PRIu64 ") before slot %zu: ", ga, gb, s) +
             upfs_test::DescribeAt(buf_.data(), lo, hi - lo, ga));
      pos = std::max(pos, sl.end());
      uint64_t a = std::max(sl.off, lo), b = std::min(sl.end(), hi);
      if (a >= b) continue;
      bool whole = a == sl.off && b == sl.end();
      if (!whole && b - a < 64) continue;  // too little to identify a record
      std::string e = CheckSlotView(uint32_t(s), buf_.data() + (a - lo), a, b,
                                    &acked_[(s - first) * size_t(c_.workers)], intent);
      if (!e.empty()) Fail(e);
    }
    if (pos < hi && !upfs_test::AllZero(buf_.data() + (pos - lo), hi - pos))
      Fail(Fmt("nonzero bytes in the gap after slot %zu", last - 1));
  }

  void DoReadZone() {
    off_t size = upfs_test::UpfsSize(fd_);
    if (size < 0) Fail(CallError("fstat"));
    uint64_t zs = c_.zone_start;
    if (uint64_t(size) < zs || (uint64_t(size) - zs) % kUnit != 0)
      Fail(Fmt("file size %lld is below the append zone (%" PRIu64 ") or not on a record boundary", (long long)size, zs));
    uint64_t units = (uint64_t(size) - zs) / kUnit;
    // Mostly a window of up to 8 KiB; now and then all of it (and past the
    // end, which must read short).
    uint64_t a = 0, b = units + 2;
    if (rng_() % 32 != 0) {
      a = rng_() % (units + 1);
      b = a + 1 + rng_() % 256;
    }
    buf_.resize((b - a) * kUnit);
    Msg m = Make(kIntent, kReadZone);
    m.t_start = NowNs();
    Send(m);
    int64_t t0 = NowNs();
    ssize_t r = upfs_pread(fd_, buf_.data(), buf_.size(), off_t(zs + a * kUnit));
    int64_t t1 = NowNs();
    m.type = kAck;
    m.t_start = t0;
    m.t_end = t1;
    Send(m);
    if (r < 0) Fail(CallError("pread of the append zone"));
    uint32_t intent[kMaxWorkers];
    for (int w = 0; w < c_.workers; ++w) intent[w] = pub_.intent[w].load(std::memory_order_seq_cst);
    if (r % ssize_t(kUnit) != 0)
      Fail(Fmt("pread of the append zone at %" PRIu64 " returned %zd bytes, not a whole number of records",
               zs + a * kUnit, r));
    std::unordered_map<uint64_t, uint64_t> base;  // append -> position of its record 0
    RecordImage prev{};
    bool prev_valid = false;
    for (uint64_t k = 0; k < uint64_t(r) / kUnit; ++k) {
      uint64_t q = zs + (a + k) * kUnit;
      const unsigned char* p = buf_.data() + k * kUnit;
      if (upfs_test::AllZero(p, kUnit)) {
        prev_valid = false;
        continue;
      }
      RecordImage rec;
      std::memcpy(&rec, p, kUnit);
      if (!ValidAppendUnit(rec, c_.workers))
        Fail(Fmt("append zone: no valid append record at %" PRIu64 ": ", q) +
             upfs_test::DescribeAt(buf_.data(), zs + a * kUnit, uint64_t(r), q));
      if (rec.seq > intent[rec.writer - 1])
        Fail(Fmt("append zone: record at %" PRIu64 " of {writer=%u seq=%u} is newer than anything its writer had "
                 "announced (%u)",
                 q, rec.writer, rec.seq, intent[rec.writer - 1]));
      if (rec.pos > 0 && k > 0 &&
          !(prev_valid && prev.writer == rec.writer && prev.seq == rec.seq && prev.len == rec.len &&
            prev.pos + 1 == rec.pos))
        Fail(Fmt("append zone: record %u of {writer=%u seq=%u len=%u} at %" PRIu64
                 " does not follow record %u of the same append",
                 rec.pos, rec.writer, rec.seq, rec.len, q, rec.pos - 1));
      uint64_t b0 = q - uint64_t(rec.pos) * kUnit;
      auto [it, fresh] = base.emplace(AppKey(rec.writer, rec.seq), b0);
      if (!fresh && it->second != b0)
        Fail(Fmt("append zone: {writer=%u seq=%u} appears at %" PRIu64 " and at %" PRIu64, rec.writer, rec.seq,
                 it->second, b0));
      prev = rec;
      prev_valid = true;
    }
  }

  void DoAppend() {
    // Read the append back right after it returned, when no ftruncate can
    // have run in between: none in progress now, and none started by the
    // end of the read back (same generation).
    bool readback = rng_() % 2 == 0;
    uint64_t gen = pub_.counters->trunc_gen.load(std::memory_order_seq_cst);
    readback = readback && pub_.NoTruncateActive();
    uint32_t units = 1 + uint32_t(rng_() % 4 == 0 ? rng_() % 384 : rng_() % 16);
    if (rng_() % 8 == 0) units = uint32_t(kBlock / kUnit) * (1 + uint32_t(rng_() % 2));  // whole blocks
    WriteId id{uint16_t(w_ + 1), next_seq_++, 0, units * uint32_t(kUnit)};
    buf_.resize(id.len);
    upfs_test::FillAppend(id, buf_.data());
    Msg m = Make(kIntent, kAppend);
    m.seq = id.seq;
    m.len = id.len;
    pub_.intent[w_].store(id.seq, std::memory_order_seq_cst);
    m.t_start = NowNs();
    Send(m);
    int64_t t0 = NowNs();
    ssize_t r = upfs_write(afd_, buf_.data(), id.len);
    int64_t t1 = NowNs();
    if (r != ssize_t(id.len)) Fail(CallError(("O_APPEND write " + id.ToString()).c_str()) + Fmt(" (returned %zd)", r));
    off_t end = upfs_lseek(afd_, 0, SEEK_CUR);
    if (end < off_t(id.len)) Fail(CallError("lseek after O_APPEND write"));
    m.type = kAck;
    m.arg = uint64_t(end) - id.len;
    m.t_start = t0;
    m.t_end = t1;
    Send(m);
    if (!readback) return;
    rb_.resize(id.len);
    ssize_t n = upfs_pread(fd_, rb_.data(), id.len, off_t(m.arg));
    if (n < 0) Fail(CallError("pread of an append just written"));
    if (pub_.counters->trunc_gen.load(std::memory_order_seq_cst) != gen) return;
    if (size_t(n) != id.len || std::memcmp(rb_.data(), buf_.data(), id.len) != 0) {
      std::string what = Fmt("acknowledged O_APPEND write {writer=%u seq=%u len=%u} at %" PRIu64
                             " reads back wrong right after it returned (no ftruncate ran meanwhile): %zd bytes",
                             id.writer, id.seq, id.len, m.arg, n);
      if (n > 0) what += ", first: " + upfs_test::DescribeAt(rb_.data(), m.arg, uint64_t(n), m.arg);
      Fail(what);
    }
    pub_.counters->readbacks.fetch_add(1, std::memory_order_relaxed);
  }

  void DoTruncate() {
    off_t size = upfs_test::UpfsSize(fd_);
    if (size < 0) Fail(CallError("fstat"));
    uint64_t zs = c_.zone_start, zone = uint64_t(size) > zs ? uint64_t(size) - zs : 0;
    uint64_t len;
    unsigned k = unsigned(rng_() % 40);
    if (zone > c_.zone_cap) {
      len = zs + rng_() % (zone / 2 + 1);
    } else if (k < 16) {
      len = uint64_t(size) + kUnit * (1 + rng_() % 256);  // grow by up to 8 KiB
    } else if (k < 39) {
      len = uint64_t(size) - std::min<uint64_t>(zone, kUnit * (rng_() % 256));  // cut a little
    } else {
      len = zs + rng_() % (zone + 1);  // cut deep
    }
    len = zs + (len - zs) / kUnit * kUnit;
    Msg m = Make(kIntent, kTruncate);
    m.arg = len;
    m.t_start = NowNs();
    Send(m);
    pub_.trunc_active[w_].store(1, std::memory_order_seq_cst);
    pub_.counters->trunc_gen.fetch_add(1, std::memory_order_seq_cst);
    int64_t t0 = NowNs();
    int r = upfs_ftruncate(fd_, off_t(len));
    int64_t t1 = NowNs();
    if (r != 0) Fail(CallError(Fmt("ftruncate to %" PRIu64, len).c_str()));
    pub_.trunc_active[w_].store(0, std::memory_order_seq_cst);
    m.type = kAck;
    m.t_start = t0;
    m.t_end = t1;
    Send(m);
  }

  const Config& c_;
  int w_;
  uint32_t next_seq_;
  std::mt19937_64 rng_;
  uint64_t seed_;
  int out_;
  Pub pub_;
  int fd_ = -1, afd_ = -1;
  Bytes buf_, rb_;
  std::vector<uint32_t> acked_;
  std::vector<WriteId> last_seen_;  // per slot (writer 0: nothing seen)
  std::vector<uint32_t> max_seen_;  // per slot and writer
};

}  // namespace upfs_torture
