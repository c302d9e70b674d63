// The kill torture (torture_test.cc): what the worker processes and the
// supervisor share: the configuration, the slot layout, the shared
// publication area and the messages of the protocol.
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
#include "util/time_ns.h"

namespace upfs_torture {

using upfs_test::ClassifyRegion;
using upfs_test::RecordImage;
using upfs_test::RegionClass;
using upfs_test::TempDir;
using upfs_test::WriteId;
using Bytes = std::vector<unsigned char>;

inline constexpr uint64_t kBlock = 4096;
inline constexpr uint64_t kUnit = upfs_test::kRecSize;  // 32
inline constexpr int kMaxWorkers = 8;

inline int64_t NowNs() { return int64_t(upfs::ClockNs(CLOCK_MONOTONIC)); }

inline double Secs(int64_t ns) { return double(ns) / 1e9; }

inline std::string Fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string Fmt(const char* f, ...) {
  char b[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(b, sizeof b, f, ap);
  va_end(ap);
  return b;
}

// ---------------------------------------------------------------------------
// Configuration and layout.

struct Slot {
  uint64_t off;
  uint32_t len;
  uint32_t owners;  // bit w: worker w (writer id w + 1) writes this slot
  uint64_t end() const { return off + len; }
};

struct Config {
  std::string path;
  int workers = 4;
  std::vector<Slot> slots;  // sorted by offset, disjoint
  std::vector<std::vector<uint32_t>> writable;  // per worker: slots it writes
  uint64_t slot_end = 0;
  uint64_t zone_start = 0;  // initial size; appends and truncates above it
  uint64_t zone_cap = 4 << 20;
  bool size_ops = false;
  // Operation mix in percent (cumulative thresholds); the rest truncates.
  unsigned p_write = 0, p_read_slots = 0, p_read_zone = 0, p_append = 0;
  double seconds = 20;
  uint64_t seed = 0;
};

inline uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Slots of all kinds, owned round-robin (neighbours belong to different
// workers), or by everybody when `shared`.
inline void MakeSlots(Config* c, uint64_t target, bool shared, bool aligned_too, std::mt19937_64& rng) {
  uint64_t pos = 0;
  uint32_t all = (1u << c->workers) - 1;
  for (uint32_t i = 0; pos < target; ++i) {
    unsigned k = unsigned(rng() % 100);
    Slot s{};
    if (aligned_too && k < 25) {
      s.off = RoundUp(pos, kBlock);
      s.len = uint32_t(kBlock);
    } else if (aligned_too && k < 35) {
      s.off = RoundUp(pos, kBlock);
      s.len = uint32_t(2 * kBlock);
    } else if (k < 75) {
      s.off = pos + rng() % 48;
      s.len = uint32_t(64 + rng() % 300);
    } else {
      s.off = pos + rng() % 48;
      s.len = uint32_t(300 + rng() % 9000);
    }
    s.owners = shared ? all : (1u << (i % uint32_t(c->workers)));
    pos = s.end();
    c->slots.push_back(s);
  }
  c->slot_end = pos;
  c->writable.assign(size_t(c->workers), {});
  for (uint32_t i = 0; i < c->slots.size(); ++i)
    for (int w = 0; w < c->workers; ++w)
      if (c->slots[i].owners & (1u << w)) c->writable[size_t(w)].push_back(i);
}

inline double Duration(double base) {
  if (const char* e = std::getenv("UPFS_TORTURE_SECONDS"); e && *e) return std::max(0.1, std::strtod(e, nullptr));
  if (const char* e = std::getenv("UPFS_TORTURE_LONG"); e && std::strcmp(e, "1") == 0) return 600;
  return base * upfs_test::Scale();
}

// Published by the workers in a shared anonymous mapping (created before the
// first fork): the last announced sequence number of each worker, the
// sequence number of its last acknowledged write to each slot, and which
// workers are inside ftruncate (with a generation counter bumped at every
// ftruncate start; the supervisor clears the flag of a worker it reaped).
struct Pub {
  struct Counters {
    std::atomic<uint64_t> trunc_gen;
    std::atomic<uint64_t> readbacks;  // appends read back and verified
  };
  Counters* counters = nullptr;
  std::atomic<uint32_t>* trunc_active = nullptr;  // [worker]
  std::atomic<uint32_t>* intent = nullptr;        // [worker]
  std::atomic<uint32_t>* acked = nullptr;         // [worker * slots + slot]
  void* base = nullptr;
  size_t bytes = 0;
  size_t nslots = 0;
  int workers = 0;
  std::atomic<uint32_t>& Acked(int w, size_t s) const { return acked[size_t(w) * nslots + s]; }
  bool NoTruncateActive() const {
    for (int w = 0; w < workers; ++w)
      if (trunc_active[w].load(std::memory_order_seq_cst) != 0) return false;
    return true;
  }
};

inline Pub MakePub(int workers, size_t nslots) {
  Pub p;
  p.nslots = nslots;
  p.workers = workers;
  p.bytes = sizeof(Pub::Counters) + sizeof(std::atomic<uint32_t>) * (2 * size_t(workers) + size_t(workers) * nslots);
  p.base = ::mmap(nullptr, p.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p.base == MAP_FAILED) {
    p.base = nullptr;
    return p;
  }
  static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);
  p.counters = static_cast<Pub::Counters*>(p.base);
  p.trunc_active = reinterpret_cast<std::atomic<uint32_t>*>(p.counters + 1);
  p.intent = p.trunc_active + workers;
  p.acked = p.intent + workers;
  return p;
}

// ---------------------------------------------------------------------------
// Messages from the workers.

enum MsgType : uint8_t { kIntent = 1, kAck = 2, kError = 3 };
enum OpKind : uint8_t { kWrite = 1, kReadSlots = 2, kReadZone = 3, kAppend = 4, kTruncate = 5 };

struct Msg {
  uint8_t type;
  uint8_t kind;
  uint16_t worker;
  uint32_t slot;
  uint32_t seq;
  uint32_t len;
  uint32_t text_len;  // kError: bytes of text following the struct
  uint32_t pad;
  uint64_t arg;       // write: offset; truncate: new length; acked append: position
  int64_t t_start;    // CLOCK_MONOTONIC ns before the call
  int64_t t_end;      // ack: after the call returned
};
static_assert(sizeof(Msg) == 48);

inline const char* KindName(uint8_t k) {
  switch (k) {
    case kWrite: return "pwrite";
    case kReadSlots: return "read slots";
    case kReadZone: return "read append zone";
    case kAppend: return "O_APPEND write";
    case kTruncate: return "ftruncate";
  }
  return "?";
}

inline std::string DescribeOp(const Msg& m) {
  switch (m.kind) {
    case kWrite:
      return Fmt("pwrite slot %u %s", m.slot, WriteId{uint16_t(m.worker + 1), m.seq, m.arg, m.len}.ToString().c_str());
    case kAppend:
      return Fmt("O_APPEND write {writer=%u seq=%u len=%u}", m.worker + 1, m.seq, m.len);
    case kTruncate:
      return Fmt("ftruncate to %" PRIu64, m.arg);
  }
  return KindName(m.kind);
}

inline bool ValidAppendUnit(const RecordImage& r, int workers) {
  return r.magic == upfs_test::kAppMagic && upfs_test::RecordValid(r) && r.off == ~uint64_t{0} && r.len > 0 &&
         r.len % kUnit == 0 && r.pos < r.len / kUnit && r.writer >= 1 && r.writer <= workers;
}

inline uint64_t AppKey(uint32_t writer, uint32_t seq) { return (uint64_t(writer) << 32) | seq; }

}  // namespace upfs_torture
