#include "crash_workloads.h"

#include <linux/falloc.h>

namespace upfs::crashtest {

std::vector<Workload> MakeWorkloads() {
  std::vector<Workload> w;
  auto W = [](uint64_t off, uint64_t len, uint32_t seed) { return Op{Op::kWrite, off, len, 0, seed, nullptr, 0}; };
  auto A = [](uint64_t len, uint32_t seed) { return Op{Op::kAppend, 0, len, 0, seed, nullptr, 0}; };
  auto T = [](uint64_t len) { return Op{Op::kTruncate, 0, len, 0, 0, nullptr, 0}; };
  auto F = [](int mode, uint64_t off, uint64_t len) {
    return Op{Op::kFallocate, off, len, mode, 0, nullptr, 0};
  };
  Op gc{Op::kGc, 0, 0, 0, 0, nullptr, 0};

  w.push_back({"aligned-writes", format::Consistency::kStrict, {},
               {W(0, 4096, 1), W(4096, 4096, 2), W(0, 4096, 3), W(8192, 8192, 4)}});
  w.push_back({"unaligned-writes", format::Consistency::kStrict, {W(0, 20000, 9)},
               {W(100, 50, 1), W(4000, 200, 2), W(5000, 9000, 3), W(19990, 30, 4)}});
  w.push_back({"multi-block-write", format::Consistency::kStrict, {W(0, 8192, 9)},
               {W(1000, 300000, 1), W(0, 270336, 2)}});
  w.push_back({"extend-and-append", format::Consistency::kStrict, {},
               {W(0, 100, 1), A(5000, 2), A(4096, 3), W(30000, 10, 4), A(1, 5)}});
  {
    // Appends that stay inside the tail block commit as one checked append
    // (kGrowTailChecked) in one persisted round; one fills the block
    // exactly, one races another small append (which copies the tail block
    // on write: the append holds the tail claim), and one races a small
    // write elsewhere, whose commit must write the append's bytes back
    // before it (rule 3: they are not in the log).
    Workload g{"small-appends", format::Consistency::kStrict, {W(0, 100, 9)},
               {A(100, 1), A(1000, 2), A(2896, 3), A(50, 4)}};
    for (int k = 1; k <= 2; ++k) {
      Op a = A(100, 10 + k);
      a.race = std::make_shared<Op>(A(200, 20 + k));
      a.race_fence = k;
      g.ops.push_back(a);
    }
    for (int k = 1; k <= 2; ++k) {
      Op a = A(100, 30 + k);
      a.race = std::make_shared<Op>(W(10, 20, 40 + k));
      a.race_fence = k;
      g.ops.push_back(a);
    }
    w.push_back(g);
  }
  w.push_back({"truncate", format::Consistency::kStrict, {W(0, 50000, 9)},
               {T(30000), T(10001), T(40000), T(0), W(0, 5000, 1), T(4096)}});
  w.push_back({"fallocate", format::Consistency::kStrict, {W(0, 20000, 9)},
               {F(0, 18000, 10000), F(FALLOC_FL_KEEP_SIZE, 30000, 20000),
                F(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 9000), W(35000, 100, 1)}});
  {
    // Log-block rollover: 510 entries fill the first log block.
    Workload r{"log-rollover", format::Consistency::kStrict, {}, {}};
    for (uint32_t i = 0; i < 515; ++i) r.ops.push_back(W(uint64_t(i % 8) * 4096, 4096, i));
    r.explore_from = 500;
    w.push_back(r);
  }
  {
    // Allocator growth: past the initial 2 MiB into a new extent.
    Workload g{"allocator-growth", format::Consistency::kStrict, {W(0, 1900000, 9)},
               {A(300000, 1), W(2200000, 5000, 2)}};
    w.push_back(g);
  }
  {
    // GC: enough entries for a compaction, then compact and keep writing.
    Workload g{"gc", format::Consistency::kStrict, {}, {}};
    for (uint32_t i = 0; i < 1100; ++i) g.setup.push_back(W(uint64_t(i % 4) * 4096, 4096, i));
    g.ops = {gc, W(0, 4096, 7), W(100, 10, 8), gc, T(5000)};
    w.push_back(g);
  }
  {
    // Two writers racing on one block: B commits while A is between its
    // copy and its commit, so A must see the conflict and redo its edges.
    Workload r{"racing-writers", format::Consistency::kStrict, {W(0, 16384, 9)}, {}};
    for (int k = 1; k <= 3; ++k) {
      Op a = W(100, 3000, 10 + k);
      a.race = std::make_shared<Op>(W(2000, 3000, 20 + k));
      a.race_fence = k;
      r.ops.push_back(a);
    }
    Op ap = A(5000, 30);
    ap.race = std::make_shared<Op>(A(3000, 31));
    ap.race_fence = 1;
    r.ops.push_back(ap);
    w.push_back(r);
  }
  {
    // GC compacting the log while a writer is in the middle of a write.
    Workload g{"gc-concurrent", format::Consistency::kStrict, {}, {}};
    for (uint32_t i = 0; i < 1100; ++i) g.setup.push_back(W(uint64_t(i % 4) * 4096, 4096, i));
    for (int k = 1; k <= 2; ++k) {
      Op a = W(4000, 200, 40 + k);
      a.race = std::make_shared<Op>(gc);
      a.race_fence = k;
      g.ops.push_back(a);
    }
    w.push_back(g);
  }
  {
    // What `upfs convert --to-upfs` does: large sequential chunks, holes
    // skipped, then a sync.
    Workload c{"convert-to-upfs", format::Consistency::kStrict, {},
               {W(0, 1 << 20, 1), W(3 << 20, 1 << 20, 2), T(5 << 20)}};
    w.push_back(c);
  }
  {
    // Sub-block writes (granule flips with anywhere shadows; in the -pairs
    // variant, a version 4 file, pairs of neighbours; in the -patches
    // variant, a version 3 file, patches in the log): one alone (a block's
    // first flip), one over it, odd lengths and alignments, one at the end
    // of a block, one across a block edge (copied on write), 2 KiB, nine on
    // one block (a patched block's next write folds it), and a truncate
    // inside it.
    Workload p{"sub-block-writes", format::Consistency::kStrict, {W(0, 20000, 9)},
               {W(100, 128, 1), W(150, 100, 2), W(1001, 7, 3), W(4090, 6, 4), W(4090, 20, 5),
                W(8192, 2048, 6)}};
    for (uint32_t i = 0; i < 9; ++i) p.ops.push_back(W(12288 + 100 * i + i, 50 + i, 10 + i));
    p.ops.push_back(T(12300));
    w.push_back(p);
    p.name = "sub-block-writes-pairs";
    p.version = format::kFirstAnywhereShadowVersion - 1;
    w.push_back(p);
    p.name = "sub-block-writes-patches";
    p.version = format::kFirstGranuleVersion - 1;
    w.push_back(p);
  }
  {
    // Small writes a GC folds and compacts (flips: the forced GC folds
    // every pair back into one fresh block; patches: it folds a block with
    // 6 or more, copies the others), while more follow and pair again and a
    // copy on write ends a pairing (or folds); a GC racing a small write
    // (the fold commits between the flip's data fence and its CAS, which
    // then conflicts), and a small write racing the GC (at the fold's data
    // fence: the fold then conflicts and is dropped).
    Workload g{"sub-block-gc", format::Consistency::kStrict, {W(0, 16384, 9)}, {}};
    for (uint32_t i = 0; i < 1100; ++i)
      g.setup.push_back(W(uint64_t(i % 4) * 4096 + (i * 37) % 3000, 16 + i % 200, i));
    g.ops = {gc, W(300, 64, 7), W(4096 + 10, 100, 8), gc, W(0, 4096, 9), W(8000, 500, 10)};
    Op a = W(12000, 300, 11);
    a.race = std::make_shared<Op>(gc);
    a.race_fence = 1;
    g.ops.push_back(a);
    for (uint32_t i = 0; i < 6; ++i) g.ops.push_back(W(2 * 4096 + 200 + 500 * i, 48, 40 + i));
    Op f = gc;
    f.race = std::make_shared<Op>(W(2 * 4096 + 3500, 40, 50));
    f.race_fence = 1;
    g.ops.push_back(f);
    w.push_back(g);
    {
      // The quiet fold (File::FoldWhenQuiet): the same pairs folded by the
      // worker's run for a quiet file, which compacts the log after its
      // folds whatever its length; a small write racing it at the fold's
      // data fence, and one between two such runs.
      Workload q = g;
      q.name = "sub-block-quiet-fold";
      Op quiet{Op::kQuietFold, 0, 0, 0, 0, nullptr, 0};
      q.ops = {quiet, W(300, 64, 7), W(4096 + 10, 100, 8)};
      Op r = quiet;
      r.race = std::make_shared<Op>(W(2 * 4096 + 3500, 40, 50));
      r.race_fence = 1;
      q.ops.push_back(r);
      q.ops.push_back(W(8000, 500, 10));
      q.ops.push_back(quiet);
      w.push_back(q);
      q.name = "sub-block-quiet-fold-pairs";  // version 4: pairs folded whole
      q.version = format::kFirstAnywhereShadowVersion - 1;
      w.push_back(q);
    }
    g.name = "sub-block-gc-pairs";
    g.version = format::kFirstAnywhereShadowVersion - 1;
    w.push_back(g);
    g.name = "sub-block-gc-patches";
    g.version = format::kFirstGranuleVersion - 1;
    w.push_back(g);
  }
  {
    // Writers racing on one block with small writes: overlapping ones (the
    // second commits while the first is before its commit, so the first
    // conflicts and writes again; with flips the racer finds the granule
    // claim held and copies on write), one against a copy-on-write of the
    // block, and a copy-on-write edge against one.
    Workload r{"sub-block-racing", format::Consistency::kStrict, {W(0, 16384, 9)}, {}};
    for (int k = 1; k <= 3; ++k) {
      Op a = W(200, 300, 10 + k);
      a.race = std::make_shared<Op>(W(400, 200, 20 + k));
      a.race_fence = k;
      r.ops.push_back(a);
    }
    Op b = W(5000, 100, 30);
    b.race = std::make_shared<Op>(W(4096, 4096, 31));
    b.race_fence = 2;
    r.ops.push_back(b);
    // The second commits between the first's reservation and its apply (no
    // fence comes between them: a patch persists in one round), on the
    // same block (the first patches again after it) and on another.
    Op d = W(300, 100, 34);
    d.race = std::make_shared<Op>(W(350, 100, 35));
    d.race_store = 1;
    r.ops.push_back(d);
    Op e = W(600, 100, 36);
    e.race = std::make_shared<Op>(W(4096 + 600, 100, 37));
    e.race_store = 1;
    r.ops.push_back(e);
    Op c = W(8192 + 100, 5000, 32);
    c.race = std::make_shared<Op>(W(8192 + 300, 64, 33));
    c.race_fence = 1;
    r.ops.push_back(c);
    // A small write raced right after its commit's CAS (a toggle's store 1
    // is its CAS: its granules are non-temporal copies), before it writes
    // its entry back: whoever commits after it must write that entry back
    // first (rule 3), a writer of another block and one of the same block
    // (which finds the claim held and copies on write).
    r.ops.push_back(W(12288 + 10, 20, 40));  // pairs block 3
    for (uint32_t k = 0; k < 2; ++k) {
      Op t = W(12288 + 130 + 300 * k, 60, 41 + k);
      t.race = std::make_shared<Op>(k == 0 ? W(4096 + 50, 30, 43) : W(12288 + 2000, 40, 44));
      t.race_store = 1;
      r.ops.push_back(t);
    }
    w.push_back(r);
    r.name = "sub-block-racing-pairs";
    r.version = format::kFirstAnywhereShadowVersion - 1;
    w.push_back(r);
    r.name = "sub-block-racing-patches";
    r.version = format::kFirstGranuleVersion - 1;
    w.push_back(r);
  }
  w.push_back({"sync-mode", format::Consistency::kSync, {W(0, 20000, 9)},
               {W(100, 8000, 1), W(4096, 4096, 2), W(19000, 3000, 3), T(7000), A(100, 4)}});
  return w;
}

}  // namespace upfs::crashtest
