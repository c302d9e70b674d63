#include "crash_pool_workloads.h"

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

namespace upfs::crashtest {

namespace {

NsOp Raced(NsOp a, NsOp b, int fence) {
  a.race = std::make_shared<NsOp>(std::move(b));
  a.race_fence = fence;
  return a;
}
// Held at its `store`-th 8-byte store (where no fence is) instead.
NsOp RacedAtStore(NsOp a, NsOp b, int store) {
  a.race = std::make_shared<NsOp>(std::move(b));
  a.race_store = store;
  return a;
}

// A symbolic link target past the inode's 128 bytes (a block of its own),
// and the longest name (the longest record payload).
const std::string kLongTarget(200, 't');
const std::string kLongName(255, 'n');

// Namespace operations alone: creates, renames, links and removals.
void AddNamespaceWorkloads(std::vector<Workload>* w) {
  w->push_back({"ns-create",
               {},
               {Mkdir("/a"), Mkdir("/b", 0700), Create("/a/f"), Create("/b/g", 0600), Mkdir("/a/d"),
                Symlink("/a/s", "f"), Symlink("/b/long", kLongTarget), Create("/a/" + kLongName),
                Chmod("/a/f", 0604), Chmod("/a", 0711), Chmod("/", 0775)}});
  // Durable changes of attributes alone: each moves its inode's ctime
  // (checked against what returned), the tree not at all.
  w->push_back({"ns-attrs",
               {Mkdir("/a"), Create("/a/f"), Link("/a/f", "/a/g"), Symlink("/a/s", "f")},
               {Utimens("/a/f"), Utimens("/a"), Chmod("/a/g", 0600), Utimens("/a/s"), Utimens("/")}});
  w->push_back({"ns-rename",
               {Mkdir("/a"), Mkdir("/b"), Create("/a/f"), Create("/a/g"), Create("/b/h"), Mkdir("/a/d"),
                Create("/a/d/x"), Mkdir("/b/e"), Mkdir("/a/m")},
               {Rename("/a/f", "/a/f2"),          // within a directory
                Rename("/a/f2", "/b/f3"),         // across directories
                Rename("/a/g", "/b/h"),           // over an existing file: its inode is freed
                Rename("/a/d", "/b/d2"),          // a directory with content, across
                Rename("/b/d2", "/b/e"),          // a directory over an empty one
                Exchange("/b/f3", "/a/m"),        // a file and a directory, across
                Exchange("/b/e", "/a/f3"),        // two directories, across (swapped back)
                Rename("/b/h", "/a/" + kLongName)}});
  w->push_back({"ns-link-unlink",
               {Mkdir("/a"), Mkdir("/b"), Create("/a/f"), Create("/a/g"), Symlink("/a/s", "g")},
               {Link("/a/f", "/b/f1"), Link("/a/f", "/a/f2"), Link("/a/s", "/b/s2"), Unlink("/a/f"),
                Unlink("/b/f1"), Unlink("/a/f2"), Unlink("/a/s"), Mkdir("/a/d"), Rmdir("/a/d"),
                Unlink("/b/s2"), Rmdir("/b"), Rename("/a/g", "/a/g2")}});
}

// Namespace operations mixed with writes to pool files.
void AddDataWorkloads(std::vector<Workload>* w) {
  // A file's data times (mtime, and the ctime its writes set) are durable
  // from an fsync's return on, as the kernel's; between fsyncs they may
  // be lost. Each op is explored before the next runs, so the clock moves
  // between them (the coarse clock's tick is a few ms).
  w->push_back({"ns-fsync-times",
               {Create("/f"), Create("/g")},
               {Write("/f", 0, 100, 1), Write("/f", 200, 100, 2), Fsync("/f"), Write("/f", 50, 10, 3),
                Truncate("/f", 120), Fsync("/f"), Append("/f", 30, 4), Write("/g", 0, 5000, 5), Fsync("/g"),
                Rename("/g", "/f"), Fsync("/f"), Write("/f", 10, 10, 6)}});
  w->push_back({"mixed-data",
               {Mkdir("/d"), Create("/d/f")},
               {Write("/d/f", 0, 4096, 1), Write("/d/f", 100, 50, 2), Append("/d/f", 5000, 3),
                Create("/d/g"), Write("/d/g", 0, 10000, 4),
                Rename("/d/f", "/d/g"),           // over a file with data: its blocks are freed
                Link("/d/g", "/h"), Truncate("/h", 3000), Unlink("/d/g"), Write("/h", 8192, 100, 5),
                Rename("/h", "/d/h"), Unlink("/d/h"),  // the last link of a file with data
                Create("/d/k"), Write("/d/k", 0, 300000, 6), Chmod("/d/k", 0600)}});
  // Sub-block patches in a pool file's log: alone, over each other, at a
  // block's end, nine on one block (the ninth folds it), a truncate into a
  // patched block, and a patched file renamed over and unlinked.
  w->push_back({"pool-patches",
               {Create("/p"), Write("/p", 0, 12288, 1), Create("/q"), Write("/q", 0, 5000, 2)},
               {Write("/p", 100, 128, 3), Write("/p", 150, 7, 4), Write("/p", 4090, 6, 5),
                Write("/p", 8192, 512, 6), Write("/p", 8200, 40, 7), Write("/p", 8300, 40, 8),
                Write("/p", 8400, 40, 9), Write("/p", 8500, 40, 10), Write("/p", 8600, 40, 11),
                Write("/p", 8700, 40, 12), Write("/p", 8800, 40, 13), Write("/p", 8900, 40, 14),
                Truncate("/p", 8250), Write("/q", 10, 20, 15), Rename("/q", "/p"), Unlink("/p")}});
  // Appends inside a pool file's tail block (checked appends, one
  // persisted round each), between namespace operations, one filling the
  // block, and one over bytes a truncate gave back.
  w->push_back({"pool-appends",
               {Create("/a"), Write("/a", 0, 100, 1)},
               {Append("/a", 100, 2), Create("/b"), Append("/a", 200, 3), Append("/a", 3696, 4),
                Append("/a", 50, 5), Truncate("/a", 4000), Append("/a", 60, 6), Rename("/a", "/c"),
                Append("/c", 10, 7)}});
  // A released file's log kept for the next new file's (pool_files.cc):
  // its lines with entries rewritten and fenced before the new inode's log
  // head names the block; one log too long to keep (freed instead).
  {
    Workload r{"recycled-logs",
               {Create("/a"), Write("/a", 0, 512, 1), Write("/a", 512, 512, 2), Create("/b"),
                Write("/b", 0, 100, 3), Create("/long")},
               {Unlink("/a"), Create("/c"), Write("/c", 0, 300, 4), Unlink("/b"), Create("/d"),
                Write("/d", 0, 40, 5), Rename("/d", "/c"), Create("/e"), Write("/e", 0, 4096, 6),
                Write("/e", 10, 20, 7), Unlink("/long"), Create("/f"), Write("/f", 0, 10, 8)}};
    for (int i = 0; i < 40; ++i) r.setup.push_back(Append("/long", 8, 10 + i));
    w->push_back(r);
  }
  w->push_back({"unlink-open",
               {Create("/f"), Write("/f", 0, 20000, 1), Create("/keep"), Write("/keep", 0, 5000, 2)},
               {UnlinkOpen("/f", 0, 4096, 3),     // released by the last holder, after the write
                Create("/g"),                     // takes the freed inode again
                Write("/g", 0, 100, 4), Write("/keep", 4000, 2000, 5)}});
}

// The namespace log's own events: block rollover, with racers, and a full pool.
void AddLogWorkloads(std::vector<Workload>* w) {
  {
    // Namespace log rollover (510 slots a block: a create of a 4-byte name
    // takes 8) and inode block rollover (15 inodes a block).
    Workload r{"ns-rollover", {}, {}};
    for (int i = 0; i < 72; ++i) {
      char n[16];
      std::snprintf(n, sizeof(n), "/n%03d", i);
      r.ops.push_back(i % 9 == 8 ? Mkdir(n) : Create(n));
    }
    r.explore_from = 56;
    w->push_back(r);
  }
  {
    // Each of these creates is raced by another at its reservation's fence,
    // across the end of the first namespace log block: a racer may close
    // the block under a held reservation, which must then be made again
    // in the next block.
    Workload r{"ns-rollover-races", {}, {}};
    for (int i = 0; i < 40; ++i) {
      char n[16], m[16];
      std::snprintf(n, sizeof(n), "/n%03d", i);
      std::snprintf(m, sizeof(m), "/r%03d", i);
      r.ops.push_back(Raced(Create(n), i % 3 == 2 ? Mkdir(m) : Create(m), 1));
    }
    r.explore_from = 26;
    w->push_back(r);
  }
  {
    // Removals in a full pool: the second block of the log has room for
    // ten unlinks of these names (8 slots each) when the pool runs out of
    // free blocks; the eleventh takes the log's next block from the
    // reserve (pool_log_reserve.cc), whose word is cleared durably before
    // the block is made and linked.
    Workload r{"full-pool-removals", {}, {}};
    for (int i = 0; i < 110; ++i) {
      char n[16];
      std::snprintf(n, sizeof(n), "/n%03d", i);
      r.setup.push_back(Create(n));
    }
    r.setup.push_back(NoFreeBlocks());
    for (int i = 0; i < 14; ++i) {
      char n[16];
      std::snprintf(n, sizeof(n), "/n%03d", i);
      r.ops.push_back(Unlink(n));
    }
    r.explore_from = 8;
    w->push_back(r);
  }
}

// Deep trees, pool growth and checkpoints.
void AddTreeWorkloads(std::vector<Workload>* w) {
  w->push_back({"ns-deep",
               {Mkdir("/a"), Mkdir("/a/b"), Mkdir("/a/b/c"), Create("/a/b/c/f"), Write("/a/b/c/f", 0, 7000, 1),
                Mkdir("/z"), Symlink("/a/b/l", kLongTarget)},
               {Rename("/a/b", "/z/b"),           // a subtree moves under another parent
                Write("/z/b/c/f", 6000, 3000, 2), Symlink("/z/l", "b/c/f"), Rmdir("/a"),
                Unlink("/z/b/l"),                 // a long target's block is freed
                Symlink("/z/b/l2", kLongTarget + "2"), Rename("/z/b/c", "/c"), Exchange("/c", "/z"),
                Chmod("/c/b", 0500)}});
  w->push_back({"pool-growth",
               {Create("/big"), Create("/small"), Write("/small", 0, 1000, 1)},
               {Write("/big", 0, 3 << 20, 2),    // past the pool's first 2 MiB of data: it grows
                Create("/after"), Write("/after", 0, 4096, 3), Unlink("/big"), Create("/x"),
                Write("/x", 0, 70000, 4), Rename("/x", "/small")}});
  {
    // Checkpoints: the index as an image in the pool plus the records
    // after it. The first is written after a full log block; the second
    // retires that block (the log is kept from the previous checkpoint's
    // position) and the first image; the third frees what the second
    // retired, and the writes after it reuse those blocks. Hard links
    // exercise the image's multi-link table.
    Workload c{"checkpoint", {Mkdir("/d"), Create("/d/f"), Write("/d/f", 0, 5000, 1), Link("/d/f", "/l1")}, {}};
    for (int i = 0; i < 64; ++i) {
      char n[16];
      std::snprintf(n, sizeof(n), "/d/n%03d", i);
      c.setup.push_back(Create(n));
    }
    c.ops = {Checkpoint(), Create("/x"), Link("/d/f", "/l2"), Rename("/d/n000", "/y"), Unlink("/l1"),
             Checkpoint(), Mkdir("/e"), Rename("/d", "/e/d"), Unlink("/e/d/n001"), Checkpoint(),
             Create("/big"), Write("/big", 0, 200000, 2), Symlink("/s", std::string(300, 's')),
             Unlink("/l2"), Rmdir("/e/d") /* ENOTEMPTY */, Checkpoint(), Chmod("/e", 0700)};
    w->push_back(c);
  }
}

// Commits raced by a second thread at chosen fences and stores, on a pool
// of `version` (0: this build's). A create or mkdir waits twice before
// version 9 (its image fenced before its record, then the record) and once
// since; the races are placed where they were meant to be in either.
Workload NsRaces(uint32_t version) {
  // Before the commit, its inode and reserved payload durable (a version
  // 9 create or mkdir has no fence there: held at a store instead), and
  // after it committed but before it is durable (after the index lock).
  const bool one_wait = version == 0 || version >= 9;
  const int committed = one_wait ? 1 : 2;
  const auto before = [&](NsOp a, NsOp b) { return one_wait ? RacedAtStore(a, b, 1) : Raced(a, b, 1); };
  // Races: a second thread commits while the first is held before its
  // commit, so the first must skip the other's slots or commit after it;
  // or after the first committed but before its commit is durable, so the
  // second's fence must cover the first's record too (a create in the
  // directory the first makes: its record must never survive without the
  // mkdir's); and one that must fail: the directory goes while a mkdir in
  // it is under way.
  Workload r{"ns-races",
             {Mkdir("/a"), Mkdir("/b"), Create("/a/x"), Create("/a/y")},
             {before(Create("/a/p"), Create("/a/q")), before(Create("/a/r"), Mkdir("/a/s")),
              Raced(Rename("/a/x", "/a/x2"), Create("/a/t"), 1), Raced(Mkdir("/a/u"), Unlink("/a/y"), committed),
              Raced(Mkdir("/a/v"), Create("/a/v/f"), committed), before(Mkdir("/b/z"), Rmdir("/b")),
              Raced(Write("/a/p", 0, 5000, 7), Rename("/a/p", "/a/p2"), 1),
              RacedAtStore(Create("/a/sa"), Create("/a/sb"), 1), RacedAtStore(Create("/a/sc"), Create("/a/sd"), 2),
              RacedAtStore(Create("/a/se"), Create("/a/sf"), 3), RacedAtStore(Mkdir("/a/sg"), Create("/a/sh"), 4)}};
  if (version != 0) {
    r.name += "-v" + std::to_string(version);
    r.pool_version = version;
  }
  return r;
}

void AddRaceWorkloads(std::vector<Workload>* w) { w->push_back(NsRaces(0)); }

// A version 9 pool's new files and directories (one wait a create:
// fresh_inode.h), each made and, while its maker is held at its one fence
// (its image and record written back, not yet fenced), changed by a racer
// that must seal the image first: a chmod, a file's first write, a
// checkpoint that takes the record out of what recovery reads, a link and
// a rename (durable ctime touches), a create in a new directory (its
// times); then changes after the maker returned.
void AddFreshImageWorkloads(std::vector<Workload>* w) {
  w->push_back({"fresh-images",
               {Mkdir("/d"), Create("/d/old")},
               {Raced(Create("/d/a", 0600), Chmod("/d/a", 0604), 1),
                Raced(Create("/d/b"), Write("/d/b", 0, 100, 1), 1), Raced(Create("/d/c"), Checkpoint(), 1),
                Raced(Create("/d/e"), Link("/d/e", "/d/e2"), 1), Raced(Create("/d/f"), Rename("/d/f", "/f2"), 1),
                Create("/d/g"), Chmod("/d/g", 0600), Write("/d/g", 0, 5000, 2), Checkpoint(),
                Chmod("/d/g", 0640), Create("/h"), Write("/h", 0, 10, 3)}});
  // New files that take a released file's kept log: its rewritten lines
  // are durable with the fresh image (the record names no log), by the
  // creator's fence or by a racer's seal (a chmod, a first write, a
  // checkpoint).
  w->push_back({"fresh-kept-logs",
               {Create("/a"), Write("/a", 0, 512, 1), Create("/b"), Write("/b", 0, 300, 2), Create("/k"),
                Write("/k", 0, 100, 3)},
               {Unlink("/a"), Raced(Create("/c"), Chmod("/c", 0600), 1), Write("/c", 0, 10, 4), Unlink("/b"),
                Raced(Create("/d"), Write("/d", 5, 20, 5), 1), Unlink("/c"), Raced(Create("/e"), Checkpoint(), 1),
                Unlink("/d"), Create("/f"), Chmod("/f", 0640), Unlink("/k"), Create("/g")}});
  w->push_back({"fresh-dirs",
               {Mkdir("/d")},
               {Raced(Mkdir("/d/a", 0700), Chmod("/d/a", 0750), 1), Raced(Mkdir("/d/b"), Create("/d/b/f"), 1),
                Raced(Mkdir("/d/c"), Checkpoint(), 1), Raced(Mkdir("/d/e"), Rename("/d/e", "/e2"), 1),
                Mkdir("/d/g"), Create("/d/g/x"), Mkdir("/d/g/y"), Checkpoint(), Chmod("/d/g", 0711),
                Rmdir("/d/g/y"), Mkdir("/k"), Rename("/d/g", "/k/g")}});
}

// A copy of workload `name` on a pool of `version`, named for it.
void CopyAtVersion(std::vector<Workload>* w, const std::string& name, uint32_t version) {
  for (const Workload& x : std::vector<Workload>(*w)) {
    if (x.name != name) continue;
    Workload v = x;
    v.name += "-v" + std::to_string(version);
    v.pool_version = version;
    w->push_back(std::move(v));
  }
}

// Copies of some of the above on pools of older format versions.
void AddOlderVersionWorkloads(std::vector<Workload>* w) {
  // Version 7 pools commit with two persistence waits and a payload line
  // left open for the kApply (LosableLine, SettleFilledOpenLine): the
  // workloads whose records and races exercise that, on such a pool.
  CopyAtVersion(w, "ns-rename", 7);
  w->push_back(NsRaces(7));
  // Version 8 pools commit a create with two waits (one wait a commit, but
  // not a create): the races at its fences, and its creates and mkdirs.
  w->push_back(NsRaces(8));
  CopyAtVersion(w, "ns-create", 8);
}

}  // namespace

std::vector<Workload> MakeWorkloads() {
  std::vector<Workload> w;
  AddNamespaceWorkloads(&w);
  AddDataWorkloads(&w);
  AddLogWorkloads(&w);
  AddTreeWorkloads(&w);
  AddRaceWorkloads(&w);
  AddFreshImageWorkloads(&w);
  AddOlderVersionWorkloads(&w);
  return w;
}

}  // namespace upfs::crashtest
