// The kill torture's supervisor's knowledge: the acknowledged and in-flight
// operations, and what each location may therefore hold.
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
// What the supervisor knows about the acknowledged and in-flight operations.

struct SlotCand {
  WriteId id;
  int64_t start, end;  // end: the reap time for an operation in flight
  bool acked;
};

struct AppendRec {
  uint16_t writer;
  uint32_t seq, len;
  uint64_t p = 0;  // acknowledged position
  int64_t start = 0, end = 0;
  bool acked = false, done = false;
};

struct TruncRec {
  uint64_t len;
  int64_t start, end;
  bool acked;
};

class History {
 public:
  explicit History(size_t nslots)
      : cands_(nslots), max_acked_start_(nslots, INT64_MIN), last_acked_(nslots), acked_count_(nslots, 0) {}

  void OnIntent(const Msg& m) {
    if (m.kind == kAppend) {
      AppendRec a{};
      a.writer = uint16_t(m.worker + 1);
      a.seq = m.seq;
      a.len = m.len;
      a.start = m.t_start;
      app_index_[AppKey(a.writer, a.seq)] = appends_.size();
      appends_.push_back(a);
    }
  }

  // `intent` is the announced operation, `ack` its acknowledgement.
  void OnAck(const Msg& intent, const Msg& ack) {
    switch (intent.kind) {
      case kWrite: {
        SlotCand c{WriteId{uint16_t(intent.worker + 1), intent.seq, intent.arg, intent.len}, ack.t_start, ack.t_end,
                   true};
        std::vector<SlotCand>& v = cands_[intent.slot];
        // A write that ended before this one started cannot be the last.
        v.erase(std::remove_if(v.begin(), v.end(), [&](const SlotCand& o) { return o.end < c.start; }), v.end());
        max_acked_start_[intent.slot] = std::max(max_acked_start_[intent.slot], c.start);
        if (c.end >= max_acked_start_[intent.slot]) v.push_back(c);
        last_acked_[intent.slot] = c.id;
        ++acked_count_[intent.slot];
        break;
      }
      case kAppend: {
        AppendRec& a = appends_[app_index_.at(AppKey(intent.worker + 1, intent.seq))];
        a.acked = true;
        a.done = true;
        a.p = ack.arg;
        a.start = ack.t_start;
        a.end = ack.t_end;
        break;
      }
      case kTruncate:
        truncs_.push_back({intent.arg, ack.t_start, ack.t_end, true});
        break;
    }
  }

  void OnInflight(const Msg& intent, int64_t reap_ns) {
    switch (intent.kind) {
      case kWrite: {
        SlotCand c{WriteId{uint16_t(intent.worker + 1), intent.seq, intent.arg, intent.len}, intent.t_start, reap_ns,
                   false};
        if (c.end >= max_acked_start_[intent.slot]) cands_[intent.slot].push_back(c);
        break;
      }
      case kAppend: {
        AppendRec& a = appends_[app_index_.at(AppKey(intent.worker + 1, intent.seq))];
        a.done = true;
        a.end = reap_ns;
        break;
      }
      case kTruncate:
        truncs_.push_back({intent.arg, intent.t_start, reap_ns, false});
        break;
    }
  }

  // Drops the acknowledged appends that an acknowledged truncate, started
  // after they were acknowledged, cut below their start: they must be gone
  // for good (a record of theirs turning up later is reported as unknown).
  // Keeps the supervisor's memory bounded in long runs.
  void MaybePrune() {
    if (appends_.size() < prune_at_) return;
    std::vector<std::pair<int64_t, uint64_t>> by_start;
    for (const TruncRec& t : truncs_)
      if (t.acked) by_start.push_back({t.start, t.len});
    std::sort(by_start.begin(), by_start.end());
    for (size_t i = by_start.size(); i-- > 1;) by_start[i - 1].second = std::min(by_start[i - 1].second, by_start[i].second);
    std::vector<AppendRec> keep;
    for (const AppendRec& a : appends_) {
      if (a.acked) {
        auto it = std::upper_bound(by_start.begin(), by_start.end(), std::make_pair(a.end, UINT64_MAX));
        if (it != by_start.end() && it->second <= a.p) {
          ++pruned_;
          continue;
        }
      }
      keep.push_back(a);
    }
    appends_.swap(keep);
    app_index_.clear();
    for (size_t i = 0; i < appends_.size(); ++i) app_index_[AppKey(appends_[i].writer, appends_[i].seq)] = i;
    prune_at_ = std::max<size_t>(200000, 2 * appends_.size());
  }

  std::vector<std::vector<SlotCand>> cands_;  // per slot: writes that may be the slot's final content
  std::vector<int64_t> max_acked_start_;
  std::vector<WriteId> last_acked_;
  std::vector<uint64_t> acked_count_;
  std::vector<AppendRec> appends_;
  std::unordered_map<uint64_t, size_t> app_index_;
  std::vector<TruncRec> truncs_;
  uint64_t pruned_ = 0;  // acknowledged appends dropped by MaybePrune
  size_t prune_at_ = 200000;
};

}  // namespace upfs_torture
