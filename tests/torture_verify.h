// The kill torture's verification of the whole file, with every worker
// dead (torture_test.cc: at checkpoints and at the end): what each slot
// and the append zone may hold, given the supervisor's history
// (torture_history.h), and the allocation state rebuilt by a fresh open.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "container/perfile/inspect.h"
#include "engine/file.h"
#include "posix/file_registry.h"
#include "test_util.h"
#include "torture_history.h"
#include "torture_protocol.h"
#include "upfs/upfs.h"

namespace upfs_torture {

// After a failure, with all workers dead: is the file itself damaged, or
// was the problem transient?
inline std::string PostMortem(const Config& c) {
  std::string out = "\n  post-mortem (all workers dead): ";
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(c.path, true, &r);
  out += st.ok() ? "InspectFile (full check) finds no problem" : "InspectFile: " + st.ToString();
  for (const std::string& p : r.problems) out += "\n    problem: " + p;
  int fd = upfs_open(c.path.c_str(), O_RDONLY);
  if (fd < 0) {
    out += std::string("; a fresh open fails: ") + upfs_last_error() + " " + upfs_test::ErrnoText(errno);
  } else {
    out += "; a fresh open succeeds";
    upfs_close(fd);
  }
  return out;
}

// The append zone of `data`: every record announced, no append twice or
// out of place, every acknowledged one whole unless a truncate that may
// have run after it cut it; counts the acknowledged appends found whole,
// cut, and gone.
inline void CheckZone(const Config& c, const History& hist, const Bytes& data, std::vector<std::string>* errs,
                      uint64_t* whole, uint64_t* cut, uint64_t* gone) {
  auto err = [&](const std::string& e) {
    if (errs->size() < 20) errs->push_back(e);
  };
  const uint64_t zs = c.zone_start;
  struct Found {
    uint64_t base;
    uint32_t count, maxpos, len;
  };
  std::unordered_map<uint64_t, Found> found;
  for (uint64_t q = zs; q + kUnit <= data.size(); q += kUnit) {
    const unsigned char* p = data.data() + q;
    if (upfs_test::AllZero(p, kUnit)) continue;
    RecordImage r;
    std::memcpy(&r, p, kUnit);
    if (!ValidAppendUnit(r, c.workers)) {
      err(Fmt("append zone: no valid append record at %" PRIu64 ": ", q) +
          upfs_test::DescribeAt(data.data(), 0, data.size(), q));
      continue;
    }
    uint64_t key = AppKey(r.writer, r.seq);
    auto ai = hist.app_index_.find(key);
    if (ai == hist.app_index_.end() || hist.appends_[ai->second].len != r.len) {
      err(Fmt("append zone: record at %" PRIu64 " of {writer=%u seq=%u len=%u}, which was never announced or was "
              "acknowledged and then cut away by an acknowledged truncate that started later (resurrected)",
              q, r.writer, r.seq, r.len));
      continue;
    }
    uint64_t b = q - uint64_t(r.pos) * kUnit;
    auto [it, fresh] = found.emplace(key, Found{b, 0, 0, r.len});
    if (!fresh && it->second.base != b) {
      err(Fmt("append zone: {writer=%u seq=%u} appears at %" PRIu64 " and at %" PRIu64 " (duplicated)", r.writer,
              r.seq, it->second.base, b));
      continue;
    }
    ++it->second.count;
    it->second.maxpos = std::max(it->second.maxpos, r.pos);
  }
  for (const auto& [key, f] : found)
    if (f.count != f.maxpos + 1 || f.base < zs)
      err(Fmt("append zone: {writer=%u seq=%u len=%u} at %" PRIu64
              " is not a prefix of its records (%u records, highest index %u)",
              unsigned(key >> 32), unsigned(key & 0xffffffffu), f.len, f.base, f.count, f.maxpos));

  // Truncates for the "may have committed after" and "definitely after"
  // tests: by end time with suffix minimum of the length; acknowledged ones
  // by start time with suffix minimum; and the latest end per length.
  std::vector<std::pair<int64_t, uint64_t>> by_end, by_start;
  std::unordered_map<uint64_t, int64_t> latest_end;
  for (const TruncRec& t : hist.truncs_) {
    by_end.push_back({t.end, t.len});
    if (t.acked) by_start.push_back({t.start, t.len});
    int64_t& le = latest_end.emplace(t.len, INT64_MIN).first->second;
    le = std::max(le, t.end);
  }
  std::sort(by_end.begin(), by_end.end());
  std::sort(by_start.begin(), by_start.end());
  auto suffix_min = [](std::vector<std::pair<int64_t, uint64_t>>& v) {
    for (size_t i = v.size(); i-- > 1;) v[i - 1].second = std::min(v[i - 1].second, v[i].second);
  };
  suffix_min(by_end);
  suffix_min(by_start);
  // Smallest length among truncates ending at or after t (may follow an op that started at t).
  auto min_len_ending_from = [&](int64_t t) {
    auto it = std::lower_bound(by_end.begin(), by_end.end(), std::make_pair(t, uint64_t{0}));
    return it == by_end.end() ? UINT64_MAX : it->second;
  };
  // Smallest length among acknowledged truncates starting after t.
  auto min_len_starting_after = [&](int64_t t) {
    auto it = std::upper_bound(by_start.begin(), by_start.end(), std::make_pair(t, UINT64_MAX));
    return it == by_start.end() ? UINT64_MAX : it->second;
  };

  for (const AppendRec& a : hist.appends_) {
    if (!a.acked) continue;
    auto fi = found.find(AppKey(a.writer, a.seq));
    std::string name = Fmt("acknowledged append {writer=%u seq=%u len=%u} at %" PRIu64, a.writer, a.seq, a.len, a.p);
    uint64_t e = a.p;
    if (fi != found.end()) {
      if (fi->second.base != a.p) {
        err(name + Fmt(" is in the file at %" PRIu64, fi->second.base));
        continue;
      }
      e = a.p + uint64_t(fi->second.count) * kUnit;
    }
    uint64_t full = a.p + a.len;
    bool allowed = e == full;
    if (!allowed && e > a.p) {
      auto le = latest_end.find(e);
      allowed = le != latest_end.end() && le->second >= a.start;
    }
    if (!allowed && e == a.p) allowed = min_len_ending_from(a.start) <= a.p;
    if (!allowed) {
      err(name + Fmt(" (t %.6f-%.6f): the file holds %" PRIu64 " of its %u bytes, and no truncate that may have "
                     "run after it cuts there (lost acknowledged append)",
                     Secs(a.start), Secs(a.end), e - a.p, a.len));
      continue;
    }
    uint64_t d = min_len_starting_after(a.end);
    uint64_t bound = std::max(a.p, std::min(full, d));
    if (e > bound) {
      err(name + Fmt(": %" PRIu64 " bytes of it survive, but an acknowledged truncate to %" PRIu64
                     " started after it was acknowledged (resurrected data)",
                     e - a.p, d));
      continue;
    }
    if (e == full) ++*whole;
    else if (e > a.p) ++*cut;
    else ++*gone;
  }
}

// Verifies the whole file; all workers must be dead. Returns "" or errors.
inline std::string VerifyFile(const Config& c, const History& hist, const std::string& label) {
  std::vector<std::string> errs;
  auto err = [&](const std::string& e) {
    if (errs.size() < 20) errs.push_back(e);
  };
  upfs::FileReport before;
  upfs::Status st = upfs::InspectFile(c.path, false, &before);
  if (!st.ok()) err("InspectFile before reopening: " + st.ToString());
  if (before.live_processes != 0)
    err(Fmt("InspectFile before reopening: %u live processes, all workers are dead", before.live_processes));

  Bytes data;
  // A fresh open for writing, which rebuilds the shared state (nobody
  // else is alive), not the File this process parked when it last closed
  // the file; its allocation state must then match the log exactly
  // (whatever the killed workers held is reclaimed); and after the close,
  // no user left.
  upfs_drop_closed_files();
  int fd = upfs_open(c.path.c_str(), O_RDWR);
  if (fd < 0) return label + ": reopen failed: " + upfs_last_error() + " " + upfs_test::ErrnoText(errno);
  bool ok = upfs_test::UpfsReadAll(fd, &data);
  std::string rerr = ok ? "" : std::string("read failed: ") + upfs_last_error();
  uint64_t leaked = 0, unmarked = 0;
  struct stat host;
  std::shared_ptr<upfs::File> file;
  if (fstat(fd, &host) == 0) file = upfs::FindWritableFile(host);
  if (!file) err("the reopened file has no writing File in the registry");
  if (file && !file->AuditAllocation(&leaked, &unmarked).ok()) err("AuditAllocation failed");
  file.reset();
  if (upfs_close(fd) != 0 && ok) rerr = std::string("close failed: ") + upfs_last_error();
  upfs_drop_closed_files();
  if (!rerr.empty()) return label + ": " + rerr;

  uint64_t size = data.size();
  if (size < c.zone_start || (size - c.zone_start) % kUnit != 0 || (!c.size_ops && size != c.zone_start))
    err(Fmt("file size %" PRIu64 ", expected %s%" PRIu64 "%s", size, c.size_ops ? "at least " : "",
            c.zone_start, c.size_ops ? " plus a multiple of 32" : ""));

  // Slots and gaps.
  uint64_t pos = 0, slots_written = 0, slots_inflight = 0;
  for (uint32_t s = 0; s < c.slots.size(); ++s) {
    const Slot& sl = c.slots[s];
    if (sl.off > pos && sl.off <= data.size() && !upfs_test::AllZero(data.data() + pos, sl.off - pos))
      err(Fmt("nonzero bytes in the gap [%" PRIu64 ", %" PRIu64 ") before slot %u: ", pos, sl.off, s) +
          upfs_test::DescribeAt(data.data(), 0, data.size(), pos));
    pos = sl.end();
    if (sl.end() > data.size()) {
      err(Fmt("slot %u lies past the end of the file", s));
      break;
    }
    RegionClass rc = ClassifyRegion(data.data() + sl.off, sl.off, sl.len);
    std::string where = Fmt("slot %u [%" PRIu64 ", %" PRIu64 ")", s, sl.off, sl.end());
    std::string last = hist.acked_count_[s] ? "last acknowledged " + hist.last_acked_[s].ToString()
                                             : std::string("no acknowledged write");
    if (rc.kind == RegionClass::kBad) {
      err(where + " is torn or foreign: " + rc.error + "; " + last);
      continue;
    }
    if (rc.kind == RegionClass::kZero) {
      if (hist.acked_count_[s])
        err(where + " is zero: all " + std::to_string(hist.acked_count_[s]) + " acknowledged writes lost; " + last);
      continue;
    }
    ++slots_written;
    const std::vector<SlotCand>& cands = hist.cands_[s];
    auto it = std::find_if(cands.begin(), cands.end(), [&](const SlotCand& c) { return c.id == rc.w; });
    if (it == cands.end()) {
      std::string cs;
      for (const SlotCand& c : cands)
        cs += Fmt(" %s%s [%.6f, %.6f]", c.acked ? "acked " : "in-flight ", c.id.ToString().c_str(),
                  Secs(c.start), Secs(c.end));
      err(where + " holds " + rc.w.ToString() +
          ", which cannot be its last write (lost acknowledged write, resurrection or foreign data); " + last +
          "; writes that could be last:" + cs);
    } else if (!it->acked) {
      ++slots_inflight;
    }
  }
  if (pos < c.zone_start && c.zone_start <= data.size() &&
      !upfs_test::AllZero(data.data() + pos, c.zone_start - pos))
    err(Fmt("nonzero bytes in the gap [%" PRIu64 ", %" PRIu64 ") after the slots", pos, c.zone_start));

  // Append zone.
  uint64_t app_whole = 0, app_cut = 0, app_gone = hist.pruned_;
  if (c.size_ops && data.size() >= c.zone_start) CheckZone(c, hist, data, &errs, &app_whole, &app_cut, &app_gone);

  // The rebuilt allocation state matched the log; fsck finds no problem,
  // and the last close removed the shared state.
  if (leaked != 0 || unmarked != 0)
    err(Fmt("after the rebuild: %" PRIu64 " blocks leaked, %" PRIu64 " referenced blocks marked free (before the "
            "rebuild, fsck counted %" PRId64 " leaked)", leaked, unmarked, before.leaked_blocks));
  upfs::FileReport after;
  st = upfs::InspectFile(c.path, true, &after);
  if (!st.ok()) err("InspectFile: " + st.ToString());
  for (const std::string& p : after.problems) err("InspectFile problem: " + p);
  if (after.live_processes != 0) err(Fmt("InspectFile: %u live processes after the last close", after.live_processes));
  if (after.shared_state_present) err("the shared state outlived the last close");
  std::printf("%s: size %zu, %" PRIu64 " of %zu slots written (%" PRIu64
              " hold a write that was in flight at a kill); acknowledged appends: %" PRIu64 " whole, %" PRIu64
              " cut by a truncate, %" PRIu64 " truncated away; leaked blocks before the rebuild %" PRId64
              ", after %" PRId64 "; capacity %" PRIu64 " blocks, data %" PRIu64 ", log %" PRIu64 "\n",
              label.c_str(), data.size(), slots_written, c.slots.size(), slots_inflight, app_whole, app_cut,
              app_gone, before.leaked_blocks, int64_t(leaked), after.capacity_blocks, after.data_blocks,
              after.log_blocks);
  std::fflush(stdout);
  if (errs.empty()) return "";
  std::string out = label + Fmt(" verification failed (test seed %" PRIu64 "):", c.seed);
  for (const std::string& e : errs) out += "\n  " + e;
  return out;
}

}  // namespace upfs_torture
