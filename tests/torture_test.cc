// Multi-process kill torture on one strict-mode upfs file.
//
// A supervisor (the test process) forks worker processes that each open the
// file themselves (after the fork; the supervisor holds no upfs descriptor
// while workers run) and loop over a random mix of operations on it.
//
// Kills. The supervisor SIGKILLs a random worker 0-5 ms after the previous
// kill, or after the victim acknowledged a random number of operations, and
// starts a fresh worker in its place as soon as the dead one is reaped. One
// worker, the *survivor*, is spared by these single kills, so that at any
// time one process lives for seconds while the others die around it. Every
// 1-3 s all workers are killed at once; then the supervisor verifies the
// whole file ("checkpoint", see below) and starts all workers again, the
// first of which rebuilds the shared state. At the end it kills everybody
// and verifies once more. A dead worker is detected by end of file on its
// pipe: the worker is the pipe's only writer, and a process closes its files
// only after its memory is gone, so nothing it started can still land.
//
// Protocol. Before every call a worker sends an *intent* message (what it
// is about to do, with a CLOCK_MONOTONIC start time) and after the call
// returns an *ack* (start and end time of the call, and for an append the
// position it landed at, from lseek). Messages are fixed 48-byte structs
// written with one write(2) each, so they are atomic: after reaping a
// worker the supervisor knows exactly which operations were acknowledged
// and which one (at most one) was in flight; an in-flight operation gets
// the reap time as its end. Sequence numbers are per worker and increase
// over all its writes and appends; a restarted worker continues after the
// highest sequence number announced by its predecessors (acknowledged or in
// flight), so every record in the file is unique.
//
// Layout of the file (DisjointSlotsAppendTruncate, 4 workers):
//   [0, slot_end)          fixed slots. Each slot belongs to one worker and
//                          is always overwritten as a whole by one pwrite of
//                          self-describing records (test_util.h). Slots are
//                          4 KiB-aligned 1- or 2-block ranges, or unaligned
//                          ranges of 64..9300 bytes packed next to slots of
//                          other workers, so neighbouring workers share
//                          blocks.
//   [slot_end, zone_start) zeros (alignment gap).
//   [zone_start, size)     the append zone: O_APPEND records (multiples of
//                          32 bytes) and zeros exposed by growing truncates.
//                          Every worker may ftruncate, but never below
//                          zone_start and always to zone_start + a multiple
//                          of 32, so a truncate cannot touch the slots and
//                          every append record stays on a 32-byte unit.
//                          Truncates may legitimately destroy acknowledged
//                          appends; the checks below account for that.
//
// Invariants checked by every worker while it runs (its reads race with
// everything else):
//   - every slot it reads is zero (never written) or entirely one write of
//     that slot's geometry by a writer allowed there (no torn write), and
//     the bytes between slots are zero;
//   - per slot, the write seen never goes back: once the reader saw write X,
//     a different write Y from the same writer must have a higher sequence
//     number (no reordering, no resurrection), and a slot never returns to
//     zero;
//   - freshness: each worker publishes, in a shared anonymous mapping, the
//     sequence number of its last acknowledged write to each slot; a read
//     started after that publication must see that write or a later one of
//     that writer (a lost acknowledged write shows up here);
//   - nothing from the future: a sequence number seen is at most the
//     writer's last published intent (loaded after the read returned);
//   - in the append zone every 32-byte unit is zero or a valid append
//     record, records of one append are consecutive with increasing index,
//     and no append appears at two places;
//   - read-your-append: half of the appends are read back right after they
//     returned, when no ftruncate can have run in between (none was in
//     progress before the append, none started until the read back ended:
//     workers publish "inside ftruncate" flags and a generation counter);
//     the bytes must be exactly the append, at the acknowledged position.
//
// Invariants checked by the supervisor at checkpoints and at the end, after
// all workers are dead, through a fresh open (which rebuilds the shared
// allocation state, nobody else being alive):
//   - slots: every slot is whole; its content is a write that can be the
//     last one to that slot in real time: the last acknowledged write, or a
//     write (acknowledged, or in flight when its writer was killed) that did
//     not end before some acknowledged write to that slot started. A slot
//     whose acknowledged writes were all lost, or that holds a write that
//     provably preceded an acknowledged one, fails;
//   - appends: every record in the zone belongs to an announced append (no
//     foreign data); each append appears at most once, as a prefix of its
//     records (shorter than the whole only if cut by a truncate). Every
//     acknowledged append sits at the position it was acknowledged at and is
//     complete, unless a truncate that may have committed after it (one that
//     did not end before the append started) cuts it exactly where it now
//     ends (or below its start, for an append that is gone); and no byte of
//     it survives past a truncate that provably started after it ended;
//   - size: at least zone_start, and zone_start plus a multiple of 32;
//   - the supervisor's open for writing rebuilt the bitmap from the log,
//     reclaiming whatever the killed workers held: File::AuditAllocation
//     finds no leaked block and no referenced block marked free;
//   - InspectFile with the full check, after the supervisor's close: no
//     problems, no live process, and no shared state left (the last close
//     removes it).
//
// Liveness, watched while the workers run: the acknowledged operations of
// all workers together must grow at least every 10 s, every worker role
// must acknowledge something at least every 20 s (across restarts), every
// kind of operation in the mix must be acknowledged by some worker at least
// every 20 s, and a killed worker must die within 10 s. A process blocked
// on a dead one fails here, with the workers' in-flight operations and
// stacks in the message. The bounds are generous on purpose (shared
// machines); the longest acknowledged call and the longest-lived worker are
// printed.
//
// SharedSlots: two workers overwrite the same unaligned, block-sharing slots
// (both write every slot) and read them; the same checks apply per writer.
//
// Knobs: UPFS_TEST_SCALE multiplies the duration (20 s for the first test,
// 10 s for the second at 1.0); UPFS_TORTURE_LONG=1 runs each test for 600 s
// (run the binary directly: ctest's per-test timeout is 600 s);
// UPFS_TORTURE_SECONDS=<s> sets the duration explicitly; UPFS_TEST_SEED
// fixes the layout and the workers' operation sequences (kill timing, and
// so what each incarnation gets to do, is never reproducible).
#include <gtest/gtest.h>

#include <fcntl.h>

#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>

#include "test_util.h"
#include "torture_protocol.h"
#include "torture_supervisor.h"
#include "upfs/upfs.h"

namespace {

using namespace upfs_torture;

void CreateFile(const std::string& path, uint64_t size) {
  int fd = upfs_open_mode(path.c_str(), O_CREAT | O_RDWR, 0644, UPFS_STRICT);
  ASSERT_GE(fd, 0) << upfs_last_error();
  ASSERT_EQ(upfs_ftruncate(fd, off_t(size)), 0) << upfs_last_error();
  ASSERT_EQ(upfs_close(fd), 0);
}

TEST(Torture, DisjointSlotsAppendTruncate) {
  TempDir dir;
  Config c;
  c.path = dir.File("torture.dat");
  c.workers = 4;
  c.seed = upfs_test::TestSeed(2001);
  c.seconds = Duration(20);
  std::mt19937_64 rng(c.seed);
  MakeSlots(&c, 1 << 20, /*shared=*/false, /*aligned_too=*/true, rng);
  c.zone_start = RoundUp(c.slot_end, kBlock);
  c.size_ops = true;
  c.p_write = 45;        // 45 % overwrites of own slots
  c.p_read_slots = 60;   // 15 % reads of slots
  c.p_read_zone = 66;    //  6 % reads of the append zone
  c.p_append = 95;       // 29 % appends, 5 % truncates
  std::printf("torture (disjoint slots, appends, truncates): %d workers, %zu slots in [0, %" PRIu64
              "), append zone from %" PRIu64 ", %.0f s, seed %" PRIu64 "\n",
              c.workers, c.slots.size(), c.slot_end, c.zone_start, c.seconds, c.seed);
  ASSERT_NO_FATAL_FAILURE(CreateFile(c.path, c.zone_start));
  Torture t(c);
  std::string e = t.Run();
  EXPECT_EQ(e, "");
}

TEST(Torture, SharedSlots) {
  TempDir dir;
  Config c;
  c.path = dir.File("torture-shared.dat");
  c.workers = 2;
  c.seed = upfs_test::TestSeed(2002);
  c.seconds = Duration(10);
  std::mt19937_64 rng(c.seed);
  MakeSlots(&c, 256 << 10, /*shared=*/true, /*aligned_too=*/false, rng);
  c.zone_start = RoundUp(c.slot_end, kBlock);
  c.size_ops = false;
  c.p_write = 55;
  c.p_read_slots = 100;
  c.p_read_zone = 100;
  c.p_append = 100;
  std::printf("torture (2 writers on the same unaligned slots): %zu slots in [0, %" PRIu64 "), %.0f s, seed %" PRIu64
              "\n",
              c.slots.size(), c.slot_end, c.seconds, c.seed);
  ASSERT_NO_FATAL_FAILURE(CreateFile(c.path, c.zone_start));
  Torture t(c);
  std::string e = t.Run();
  EXPECT_EQ(e, "");
}

}  // namespace
