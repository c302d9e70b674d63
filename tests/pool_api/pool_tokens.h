// The token workload of pool_concurrency_test.cc ((1) and (3) there):
// token files spread over shared directories, the movers that rename them
// between the directories, the listers that scan the directories
// meanwhile, and the final check that every token exists exactly once.
#pragma once

#include "pool_concurrency_util.h"

namespace pool_conc {

// ---------------------------------------------------------------------------
// (1) and (3): tokens.

struct TokenLayout {
  int dirs;      // K shared directories d0..
  int tokens;    // N
  int slots;     // shared slot names per directory: s0..
  int owners;    // movers: each has private names p<owner>-<x> in every directory
  int privates;  // private names per owner and directory
  int pinned;    // pin0.. in every directory, never moved

  std::string Dir(const std::string& mnt, int d) const { return mnt + "/d" + std::to_string(d); }
  static std::string Slot(int x) { return "s" + std::to_string(x); }
  static std::string Private(int o, int x) { return "p" + std::to_string(o) + "-" + std::to_string(x); }
  static std::string Pin(int x) { return "pin" + std::to_string(x); }
  static std::string PinText(int d, int x) { return "pinned " + std::to_string(d) + " " + std::to_string(x) + "\n"; }

  enum Kind { kDot, kSlot, kPrivate, kPin, kBad };
  Kind Classify(const std::string& n, int* x = nullptr) const {
    int a = -1, b = -1, used = 0;
    if (n == "." || n == "..") return kDot;
    if (std::sscanf(n.c_str(), "s%d%n", &a, &used) == 1 && size_t(used) == n.size() && a >= 0 && a < slots &&
        n == Slot(a))
      return kSlot;
    if (std::sscanf(n.c_str(), "pin%d%n", &a, &used) == 1 && size_t(used) == n.size() && a >= 0 && a < pinned &&
        n == Pin(a)) {
      if (x) *x = a;
      return kPin;
    }
    if (std::sscanf(n.c_str(), "p%d-%d%n", &a, &b, &used) == 2 && size_t(used) == n.size() && a >= 0 &&
        a < owners && b >= 0 && b < privates && n == Private(a, b))
      return kPrivate;
    return kBad;
  }
};

// Makes the directories, the pinned files and the tokens (token i in
// directory i % K, slot i / K).
inline void MakeTokens(const std::string& mnt, const TokenLayout& L) {
  ASSERT_LE((L.tokens + L.dirs - 1) / L.dirs, L.slots);
  for (int d = 0; d < L.dirs; ++d) {
    ASSERT_EQ(upfs_mkdir(L.Dir(mnt, d).c_str(), 0755), 0) << upfs_last_error();
    for (int x = 0; x < L.pinned; ++x)
      ASSERT_EQ(CreateFile(L.Dir(mnt, d) + "/" + L.Pin(x), L.PinText(d, x)), 0) << upfs_last_error();
  }
  for (int i = 0; i < L.tokens; ++i)
    ASSERT_EQ(CreateFile(L.Dir(mnt, i % L.dirs) + "/" + L.Slot(i / L.dirs), TokenText(uint32_t(i))), 0)
        << upfs_last_error();
}

struct MoverStats {
  OpStats plain, noreplace, exchange;
  uint64_t probes = 0, reads = 0;
  std::string Text() const {
    return "plain " + plain.Text() + "; noreplace " + noreplace.Text() + "; exchange " + exchange.Text() +
           "; " + std::to_string(reads) + " reads";
  }
  void Add(const MoverStats& o) {
    plain.Add(o.plain);
    noreplace.Add(o.noreplace);
    exchange.Add(o.exchange);
    probes += o.probes;
    reads += o.reads;
  }
};

// Mover `owner`: `ops` random renames. Errors go to err(text).
template <typename ErrFn>
void RunMover(const std::string& mnt, const TokenLayout& L, int owner, uint64_t ops, uint64_t seed, ErrFn err,
              MoverStats* stats) {
  std::mt19937_64 rng(seed * 7919 + uint64_t(owner));
  // Whether each of my private names may be occupied (only I fill them).
  std::vector<std::vector<bool>> maybe(L.dirs, std::vector<bool>(L.privates, false));
  struct Name {
    int dir;
    std::string name;
    bool mine_private;  // one of my private names
    int x;              // its index then
  };
  auto path = [&](const Name& n) { return L.Dir(mnt, n.dir) + "/" + n.name; };
  auto any_name = [&]() -> Name {
    int d = int(rng() % L.dirs);
    if (rng() % 10 < 6) return Name{d, L.Slot(int(rng() % L.slots)), false, -1};
    int o = int(rng() % L.owners), x = int(rng() % L.privates);
    return Name{d, L.Private(o, x), o == owner, x};
  };
  // A whole token, or ENOENT, at `p` just after something moved there.
  auto check_read = [&](const std::string& p, const char* what) {
    std::string s;
    int e = ReadFile(p, &s);
    ++stats->reads;
    uint32_t id;
    if (e == ENOENT) return;
    if (e != 0) {
      err(std::string("reading ") + p + " after " + what + ": " + ErrnoText(e));
    } else if (!ParseToken(s, &id) || id >= uint32_t(L.tokens)) {
      err(std::string("reading ") + p + " after " + what + ": not a token: '" + s + "'");
    }
  };
  for (uint64_t i = 0; i < ops; ++i) {
    const unsigned r = unsigned(rng() % 10);
    Name a = any_name();
    if (r < 4) {
      // Plain rename into one of my private names known to be free.
      std::vector<std::pair<int, int>> free_names;
      for (int d = 0; d < L.dirs; ++d)
        for (int x = 0; x < L.privates; ++x)
          if (!maybe[d][x]) free_names.push_back({d, x});
      if (free_names.empty()) {
        // Probe: a private name seen free stays free until I fill it.
        ++stats->probes;
        int d = int(rng() % L.dirs), x = int(rng() % L.privates);
        struct stat st;
        std::string p = L.Dir(mnt, d) + "/" + L.Private(owner, x);
        if (upfs_stat(p.c_str(), &st) == 0) continue;
        if (errno != ENOENT) err("stat " + p + ": " + ErrnoText(errno));
        maybe[d][x] = false;
        continue;
      }
      auto [d, x] = free_names[rng() % free_names.size()];
      Name b{d, L.Private(owner, x), true, x};
      if (a.dir == b.dir && a.name == b.name) continue;
      const int e = Rename(path(a), path(b), 0);
      stats->plain.Count(e);
      if (e == 0) {
        maybe[b.dir][b.x] = true;
        if (a.mine_private) maybe[a.dir][a.x] = false;
        if (rng() % 4 == 0) check_read(path(b), "rename");
      } else if (e == ENOENT) {
        if (a.mine_private) maybe[a.dir][a.x] = false;
      } else {
        err("rename " + path(a) + " -> " + path(b) + " (a free name): " + ErrnoText(e));
      }
    } else if (r < 7) {
      // NOREPLACE into a shared slot.
      Name b{int(rng() % L.dirs), L.Slot(int(rng() % L.slots)), false, -1};
      const bool same = a.dir == b.dir && a.name == b.name;
      const int e = Rename(path(a), path(b), RENAME_NOREPLACE);
      stats->noreplace.Count(e);
      if (e == 0 && same) {
        err(std::string("RENAME_NOREPLACE of ") + path(a) + " onto itself succeeded (the kernel: EEXIST)");
      } else if (e == 0) {
        if (a.mine_private) maybe[a.dir][a.x] = false;
        if (rng() % 4 == 0) check_read(path(b), "RENAME_NOREPLACE");
      } else if (e == ENOENT) {
        if (a.mine_private) maybe[a.dir][a.x] = false;
      } else if (e != EEXIST) {
        err(std::string("RENAME_NOREPLACE ") + path(a) + " -> " + path(b) + ": " + ErrnoText(e));
      }
    } else {
      // EXCHANGE of any two names.
      Name b = any_name();
      if (a.dir == b.dir && a.name == b.name) continue;
      const int e = Rename(path(a), path(b), RENAME_EXCHANGE);
      stats->exchange.Count(e);
      if (e == 0) {
        if (rng() % 4 == 0) check_read(path(rng() % 2 ? a : b), "RENAME_EXCHANGE");
      } else if (e != ENOENT) {
        err(std::string("RENAME_EXCHANGE ") + path(a) + " <-> " + path(b) + ": " + ErrnoText(e));
      }
    }
  }
}

struct ListerStats {
  uint64_t scans = 0, entries = 0, reads = 0;
};

// Scans every directory until stop (at least min_scans rounds of them).
inline void RunLister(const std::string& mnt, const TokenLayout& L, uint64_t seed, const std::atomic<bool>& stop,
                      uint64_t min_scans, Errors* errs, ListerStats* stats) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (uint64_t round = 0; (round < min_scans || !stop.load(std::memory_order_acquire)) && !errs->Many();
       ++round) {
    for (int d = 0; d < L.dirs; ++d) {
      const std::string dir = L.Dir(mnt, d);
      int e;
      if (!Scan(dir, &names, &e)) {
        errs->Add("scan of " + dir + ": " + ErrnoText(e));
        continue;
      }
      ++stats->scans;
      stats->entries += names.size();
      std::map<std::string, int> count;
      std::vector<int> pins(L.pinned, 0);
      int tokens = 0;
      for (const auto& n : names) {
        int x;
        const TokenLayout::Kind k = L.Classify(n, &x);
        if (++count[n] == 2) errs->Add("scan of " + dir + " lists '" + n + "' twice");
        if (k == TokenLayout::kBad) errs->Add("scan of " + dir + " lists a foreign name '" + n + "'");
        if (k == TokenLayout::kPin) ++pins[x];
        if (k == TokenLayout::kSlot || k == TokenLayout::kPrivate) ++tokens;
      }
      if (count["."] != 1 || count[".."] != 1) errs->Add("scan of " + dir + ": '.' or '..' missing");
      for (int x = 0; x < L.pinned; ++x)
        if (pins[x] != 1)
          errs->Add("scan of " + dir + " lists pinned " + L.Pin(x) + " " + std::to_string(pins[x]) + " times");
      if (tokens > L.tokens) errs->Add("scan of " + dir + " lists " + std::to_string(tokens) + " tokens");
      if (L.dirs == 1 && tokens != L.tokens)
        errs->Add("scan of the only directory lists " + std::to_string(tokens) + " tokens, not " +
                  std::to_string(L.tokens));
      // Read a few of what was listed: gone (ENOENT), or whole.
      for (int k = 0; k < 2 && !names.empty(); ++k) {
        const std::string& n = names[rng() % names.size()];
        int x;
        const TokenLayout::Kind kind = L.Classify(n, &x);
        if (kind == TokenLayout::kDot || kind == TokenLayout::kBad) continue;
        std::string s;
        const int re = ReadFile(dir + "/" + n, &s);
        ++stats->reads;
        uint32_t id;
        if (kind == TokenLayout::kPin) {
          if (re != 0 || s != L.PinText(d, x))
            errs->Add("pinned " + dir + "/" + n + " reads " + (re ? ErrnoText(re) : "'" + s + "'"));
        } else if (re != 0 && re != ENOENT) {
          errs->Add("reading listed " + dir + "/" + n + ": " + ErrnoText(re));
        } else if (re == 0 && (!ParseToken(s, &id) || id >= uint32_t(L.tokens))) {
          errs->Add("listed " + dir + "/" + n + " is not a token: '" + s + "'");
        }
      }
    }
  }
}

// The end: every token exactly once, whole; the pinned files as made;
// nothing else.
inline void CheckTokens(const std::string& mnt, const TokenLayout& L) {
  std::vector<int> seen(L.tokens, 0);
  std::vector<std::string> where(L.tokens);
  std::vector<std::string> names;
  for (int d = 0; d < L.dirs; ++d) {
    const std::string dir = L.Dir(mnt, d);
    int e;
    ASSERT_TRUE(Scan(dir, &names, &e)) << dir << ": " << ErrnoText(e);
    std::set<std::string> unique(names.begin(), names.end());
    EXPECT_EQ(unique.size(), names.size()) << dir << " lists a name twice";
    std::vector<int> pins(L.pinned, 0);
    for (const auto& n : names) {
      int x;
      const TokenLayout::Kind k = L.Classify(n, &x);
      if (k == TokenLayout::kDot) continue;
      std::string s;
      const int re = ReadFile(dir + "/" + n, &s);
      ASSERT_EQ(re, 0) << dir << "/" << n << ": " << ErrnoText(re);
      if (k == TokenLayout::kPin) {
        ++pins[x];
        EXPECT_EQ(s, L.PinText(d, x)) << dir << "/" << n;
        continue;
      }
      ASSERT_NE(k, TokenLayout::kBad) << "foreign name " << dir << "/" << n;
      uint32_t id;
      if (!ParseToken(s, &id) || id >= uint32_t(L.tokens)) {
        ADD_FAILURE() << dir << "/" << n << " holds '" << s << "', not a token";
        continue;
      }
      if (++seen[id] > 1)
        ADD_FAILURE() << "token " << id << " duplicated: at " << where[id] << " and " << dir << "/" << n;
      where[id] = dir + "/" + n;
    }
    for (int x = 0; x < L.pinned; ++x) EXPECT_EQ(pins[x], 1) << dir << "/" << L.Pin(x);
  }
  int lost = 0;
  for (int i = 0; i < L.tokens; ++i)
    if (seen[i] == 0) {
      if (++lost <= 10) ADD_FAILURE() << "token " << i << " lost";
    }
  EXPECT_EQ(lost, 0) << "tokens lost";
}

}  // namespace pool_conc
