// make_corpus OUTDIR [MAX_BYTES]: writes the seed corpus of the fuzz targets.
//
//  - Files made through the C API (empty, small, unaligned writes, a log of
//    several blocks from many overwrites, truncates, punched holes and
//    fallocate, a sync-mode file, a sparse file, appends, a log compacted by
//    GC). From each, the host bytes are copied: the first MAX_BYTES (default
//    64 KiB), the shortest whole-block prefix that is still a clean upfs
//    file (when there is one; the allocator places most structures in the
//    first blocks), a packed copy (Pack: the blocks the log refers to,
//    renumbered into as few blocks as there are) when that fits, and
//    prefixes cut at 2, 3 and 5 blocks.
//  - Hand-built images (format.h encoders) for what the C API rarely makes
//    in a few blocks: an overflow payload, a chain of two log blocks with a
//    padding reservation, keep runs, kTouch entries, an abandoned
//    reservation, 256 inline runs, a huge sparse size. Each is checked clean
//    by InspectFile before it is written.
//  - Foreign files: text, zeros, 0xff, the magic alone, a header without its
//    magic (an interrupted creation), a header without a log block.
//  - With --pool OUTDIR: fuzz_pool's seeds instead (pool_seeds.cc).
//
// Prints one summary line; exits non-zero if anything failed.
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "container/perfile/inspect.h"
#include "corpus_files.h"
#include "pool_seeds.h"
#include "format/format.h"
#include "upfs/upfs.h"
#include "util/crc32c.h"

namespace {

namespace fmt = upfs::format;
using corpus::Bytes;
using corpus::WriteFile;
constexpr uint64_t kB = fmt::kBlockSize;

std::string g_out;
std::string g_scratch;
size_t g_max = 64 << 10;
std::set<Bytes> g_seen;
int g_written = 0, g_clean = 0, g_failures = 0;

void Fail(const std::string& what) {
  fprintf(stderr, "make_corpus: %s\n", what.c_str());
  ++g_failures;
}

bool ReadFile(const std::string& path, Bytes* b) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return false;
  }
  b->resize(size_t(st.st_size));
  size_t done = 0;
  while (done < b->size()) {
    ssize_t r = read(fd, b->data() + done, b->size() - done);
    if (r <= 0) break;
    done += size_t(r);
  }
  close(fd);
  return done == b->size();
}

// True if InspectFile (full check) calls the bytes a clean upfs file.
bool IsClean(const Bytes& b, std::string* why = nullptr) {
  std::string p = g_scratch + "/check.upfs";
  if (!WriteFile(p, b)) return false;
  upfs::FileReport r;
  upfs::Status st = upfs::InspectFile(p, true, &r);
  upfs_unlink(p.c_str());
  if (why) *why = st.ok() ? "" : st.message();
  return st.ok() && r.problems.empty();
}

void Emit(const std::string& name, Bytes b) {
  if (b.size() > g_max) b.resize(g_max);
  if (!g_seen.insert(b).second) return;  // same bytes as an earlier seed
  if (!WriteFile(g_out + "/" + name, b)) {
    Fail("cannot write " + g_out + "/" + name + ": " + strerror(errno));
    return;
  }
  ++g_written;
  if (IsClean(b)) ++g_clean;
}

Bytes Prefix(const Bytes& b, uint64_t n) { return Bytes(b.begin(), b.begin() + std::min<uint64_t>(n, b.size())); }

// Packs a clean image: renumbers every block the log refers to (header,
// log blocks, blocks named by any entry or payload run, overflow blocks) in
// order into a file of just those blocks, rewriting the pointers and the
// checksums that cover them. Entries that were overwritten later still
// name their blocks, so only files whose logs name few blocks pack small
// (a log compacted by GC, a few appends). Returns false if the log has
// something it does not understand.
bool Pack(const Bytes& src, Bytes* out) {
  auto get = [&](const Bytes& b, uint64_t off) {
    uint64_t v = 0;
    if (off + 8 <= b.size()) memcpy(&v, b.data() + off, 8);
    return v;
  };
  auto put = [](Bytes* b, uint64_t off, uint64_t v) { memcpy(b->data() + off, &v, 8); };
  const uint64_t nblocks = src.size() / kB;
  auto slot_off = [](uint64_t l, uint32_t s) { return l * kB + 16 + 8 * uint64_t(s); };

  // Pass 1: what is referenced.
  std::set<uint64_t> refs = {0};
  std::vector<uint64_t> chain;
  auto add_run = [&](uint64_t l, uint64_t n) {
    if (l == 0 || l == fmt::kKeepBlock) return true;
    if (l + n > nblocks) return false;
    for (uint64_t i = 0; i < n; ++i) refs.insert(l + i);
    return true;
  };
  for (uint64_t l = get(src, 64); l != 0; l = fmt::NextBlock(get(src, l * kB))) {
    if (l >= nblocks || chain.size() > nblocks || !fmt::NextWordValid(get(src, l * kB))) return false;
    chain.push_back(l);
    refs.insert(l);
    for (uint32_t s = 0; s < fmt::kSlotsPerLogBlock;) {
      uint64_t e = get(src, slot_off(l, s));
      if (e == 0) break;
      switch (fmt::KindOf(e)) {
        case fmt::EntryKind::kMap:
        case fmt::EntryKind::kMapExtend: {
          fmt::InlineMap m = fmt::DecodeInline(e);
          if (!add_run(m.lblock, m.count)) return false;
          ++s;
          break;
        }
        case fmt::EntryKind::kTouch:
        case fmt::EntryKind::kGrowTail: ++s; break;
        case fmt::EntryKind::kGrowTailChecked: {
          const bool flip = fmt::IsGranuleFlip(e);
          const uint64_t w1 = get(src, slot_off(l, s + 1));
          const uint64_t l1 = flip ? fmt::GranuleFlipBlock(e) : fmt::GrowTailCheckedBlock(w1);
          // A pair's set names two blocks; an anywhere shadow, a toggle's
          // home and a checked append's tail one.
          const bool pair = flip && fmt::GranuleFlipSet(w1) && !fmt::GranuleFlipAnywhere(w1);
          if (!add_run(l1, pair ? 2 : 1)) return false;
          s += fmt::kGrowTailCheckedSlots;
          break;
        }
        case fmt::EntryKind::kReserve: s += 1 + fmt::ReserveCount(e); break;
        case fmt::EntryKind::kApply: {
          uint32_t rs = fmt::ApplySlot(e);
          uint64_t w1 = get(src, slot_off(l, rs + 2));
          uint32_t nruns = uint32_t((w1 >> 32) & 0xffff);
          if ((w1 >> 48) & fmt::kPayloadOverflow) {
            fmt::Run ov = fmt::DecodeRun(get(src, slot_off(l, rs + 3)));
            if (!add_run(ov.lblock, ov.count)) return false;
            for (uint32_t i = 0; i < nruns; ++i) {
              fmt::Run r = fmt::DecodeRun(get(src, ov.lblock * kB + 8 * i));
              if (!add_run(r.lblock, r.count)) return false;
            }
          } else {
            for (uint32_t i = 0; i < nruns; ++i) {
              fmt::Run r = fmt::DecodeRun(get(src, slot_off(l, rs + 3 + i)));
              if (!add_run(r.lblock, r.count)) return false;
            }
          }
          ++s;
          break;
        }
        default: return false;
      }
    }
  }
  // Pass 2: copy the blocks in order and rewrite every block number.
  std::vector<uint64_t> order(refs.begin(), refs.end());
  std::vector<uint32_t> to(nblocks, 0);
  for (size_t i = 0; i < order.size(); ++i) to[order[i]] = uint32_t(i);
  Bytes d(order.size() * kB);
  for (size_t i = 0; i < order.size(); ++i) memcpy(d.data() + i * kB, src.data() + order[i] * kB, kB);
  auto remap = [&](fmt::Run r) {
    if (r.lblock != 0 && r.lblock != fmt::kKeepBlock) r.lblock = to[r.lblock];
    return r;
  };
  put(&d, 64, to[get(src, 64)]);
  for (uint64_t l : chain) {
    uint64_t nl = to[l];
    uint32_t next = fmt::NextBlock(get(src, l * kB));
    put(&d, nl * kB, fmt::NextWord(next ? to[next] : 0));
    for (uint32_t s = 0; s < fmt::kSlotsPerLogBlock;) {
      uint64_t e = get(src, slot_off(l, s));
      if (e == 0) break;
      switch (fmt::KindOf(e)) {
        case fmt::EntryKind::kMap:
        case fmt::EntryKind::kMapExtend: {
          fmt::InlineMap m = fmt::DecodeInline(e);
          m.lblock = to[m.lblock];
          put(&d, slot_off(nl, s), fmt::EncodeInline(m));
          ++s;
          break;
        }
        case fmt::EntryKind::kTouch:
        case fmt::EntryKind::kGrowTail: ++s; break;
        case fmt::EntryKind::kGrowTailChecked: {
          const uint64_t w1 = get(src, slot_off(l, s + 1));
          // A pair stays two adjacent blocks: Pass 1 kept both, in order.
          if (fmt::IsGranuleFlip(e))
            put(&d, slot_off(nl, s), fmt::EncodeGranuleFlip0(fmt::GranuleFlipVblock(e), to[fmt::GranuleFlipBlock(e)]));
          else
            put(&d, slot_off(nl, s + 1),
                fmt::EncodeGrowTailChecked1(to[fmt::GrowTailCheckedBlock(w1)], fmt::GrowTailCheckedCrc(w1)));
          s += fmt::kGrowTailCheckedSlots;
          break;
        }
        case fmt::EntryKind::kReserve: s += 1 + fmt::ReserveCount(e); break;
        case fmt::EntryKind::kApply: {
          uint32_t rs = fmt::ApplySlot(e);
          uint32_t n = fmt::ReserveCount(get(src, slot_off(l, rs)));
          uint64_t w1 = get(src, slot_off(l, rs + 2));
          uint32_t nruns = uint32_t((w1 >> 32) & 0xffff);
          if ((w1 >> 48) & fmt::kPayloadOverflow) {
            fmt::Run ov = fmt::DecodeRun(get(src, slot_off(l, rs + 3)));
            std::vector<uint64_t> runs(nruns);
            for (uint32_t i = 0; i < nruns; ++i) {
              runs[i] = fmt::EncodeRun(remap(fmt::DecodeRun(get(src, ov.lblock * kB + 8 * i))));
              put(&d, to[ov.lblock] * kB + 8 * i, runs[i]);
            }
            put(&d, slot_off(nl, rs + 3), fmt::EncodeRun(remap(ov)));
            put(&d, slot_off(nl, rs + 4), upfs::Crc32c(runs.data(), runs.size() * 8));
          } else {
            for (uint32_t i = 0; i < nruns; ++i)
              put(&d, slot_off(nl, rs + 3 + i),
                  fmt::EncodeRun(remap(fmt::DecodeRun(get(src, slot_off(l, rs + 3 + i))))));
          }
          std::vector<uint64_t> words(n);
          for (uint32_t i = 0; i < n; ++i) words[i] = get(d, slot_off(nl, rs + 1 + i));
          put(&d, slot_off(nl, s), fmt::EncodeApply(rs, upfs::Crc32c(words.data(), n * 8)));
          ++s;
          break;
        }
        default: return false;
      }
    }
  }
  *out = std::move(d);
  return true;
}

// ---------------------------------------------------------------------------
// Files made through the C API.

void FromApi(const std::string& name, upfs_consistency mode, const std::function<bool(int)>& ops) {
  std::string path = g_scratch + "/" + name + ".upfs";
  int fd = upfs_open_mode(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600, mode);
  if (fd < 0) {
    Fail(name + ": upfs_open_mode: " + upfs_last_error());
    return;
  }
  bool ok = ops(fd);
  if (!ok) Fail(name + ": an operation failed: " + upfs_last_error());
  if (upfs_close(fd) != 0) Fail(name + ": upfs_close: " + upfs_last_error());
  Bytes host;
  if (!ReadFile(path, &host)) Fail(name + ": cannot read the host file");
  upfs_unlink(path.c_str());
  if (!ok || host.size() < 2 * kB) return;
  std::string why;
  if (!IsClean(host, &why)) Fail(name + ": the file made through the C API is not clean: " + why);
  Emit(name, host);
  for (uint64_t k = 2; k * kB <= std::min<uint64_t>(host.size(), g_max); ++k) {
    Bytes p = Prefix(host, k * kB);
    if (IsClean(p)) {
      Emit(name + "-min", p);
      break;
    }
  }
  Bytes packed;
  if (Pack(host, &packed) && packed.size() <= g_max && packed.size() < host.size()) {
    if (IsClean(packed, &why))
      Emit(name + "-packed", packed);
    else
      Fail(name + ": the packed copy is not clean: " + why);
  }
  for (uint64_t k : {2, 3, 5}) Emit(name + "-cut" + std::to_string(k), Prefix(host, k * kB));
}

bool PW(int fd, const void* p, size_t n, off_t off) { return upfs_pwrite(fd, p, n, off) == ssize_t(n); }

Bytes Pattern(size_t n, unsigned seed) {
  Bytes b(n);
  uint32_t h = seed * 2654435761u + 1;
  for (auto& c : b) {
    h = h * 1103515245u + 12345u;
    c = uint8_t(h >> 16);
  }
  return b;
}

void ApiSeeds() {
  const Bytes big = Pattern(1 << 20, 1);
  FromApi("api-empty", UPFS_STRICT, [](int) { return true; });
  FromApi("api-small", UPFS_STRICT, [&](int fd) { return PW(fd, big.data(), 100, 0); });
  FromApi("api-unaligned", UPFS_STRICT, [&](int fd) {
    return PW(fd, big.data(), 4095, 1) && PW(fd, big.data() + 7, 5000, 4097) &&
           PW(fd, big.data() + 9, 1, 12287) && PW(fd, big.data() + 11, 10000, 20001);
  });
  FromApi("api-overwrites", UPFS_STRICT, [&](int fd) {
    // More than two log blocks of entries (510 slots each), copy-on-write.
    for (int i = 0; i < 1100; ++i)
      if (!PW(fd, big.data() + i, 16, off_t((uint64_t(i) * 997) % 24000))) return false;
    return true;
  });
  FromApi("api-patches", UPFS_STRICT, [&](int fd) {
    // Sub-block writes (granule flips with anywhere shadows, in a version 5
    // file): odd sizes and alignments, a block's first flip and toggles of
    // it, nine on one block, one across a block edge (copied on write),
    // then a truncate inside a paired block.
    if (!PW(fd, big.data(), 20000, 0)) return false;
    const std::pair<off_t, size_t> w[] = {{100, 1}, {1001, 7}, {4090, 6}, {8192, 512}, {4093, 9}};
    for (const auto& [off, n] : w)
      if (!PW(fd, big.data() + 3, n, off)) return false;
    for (int i = 0; i < 9; ++i)
      if (!PW(fd, big.data() + i, 40, 12288 + 200 * i + i)) return false;
    return upfs_ftruncate(fd, 12500) == 0;
  });
  FromApi("api-sync-overwrites", UPFS_SYNC, [&](int fd) {
    // The same in sync mode: in-place kTouch entries, so the three log
    // blocks stay among the first blocks of the file.
    if (!PW(fd, big.data(), 24000, 0)) return false;
    for (int i = 0; i < 1100; ++i)
      if (!PW(fd, big.data() + i, 16, off_t((uint64_t(i) * 997) % 24000))) return false;
    return true;
  });
  FromApi("api-truncate", UPFS_STRICT, [&](int fd) {
    return PW(fd, big.data(), 40000, 0) && upfs_ftruncate(fd, 10000) == 0 &&
           upfs_ftruncate(fd, 50000) == 0 && upfs_ftruncate(fd, 4097) == 0 &&
           PW(fd, big.data() + 3, 10, 30000) && upfs_ftruncate(fd, 30001) == 0;
  });
  FromApi("api-holes", UPFS_STRICT, [&](int fd) {
    return PW(fd, big.data(), 24 << 10, 0) &&
           upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192) == 0 &&
           upfs_fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 14000, 1000) == 0 &&
           upfs_fallocate(fd, FALLOC_FL_KEEP_SIZE, 24 << 10, 8 << 10) == 0 &&
           upfs_fallocate(fd, 0, 40000, 5000) == 0;
  });
  FromApi("api-sync", UPFS_SYNC, [&](int fd) {
    if (!PW(fd, big.data(), 16 << 10, 0)) return false;
    for (int i = 0; i < 20; ++i)  // in place: kTouch entries
      if (!PW(fd, big.data() + 100 + i, 100, off_t(i * 300))) return false;
    return PW(fd, big.data() + 5, 6000, 3000) &&  // spans blocks
           PW(fd, big.data() + 6, 5000, 16 << 10) &&  // appends
           upfs_ftruncate(fd, 18000) == 0;
  });
  FromApi("api-sparse", UPFS_STRICT, [&](int fd) {
    return PW(fd, big.data(), 10, 0) && PW(fd, big.data() + 1, 10, (off_t(1) << 33) + 5) &&
           PW(fd, big.data() + 2, 5000, off_t(1) << 24);
  });
  FromApi("api-appends", UPFS_STRICT, [&](int fd) {
    for (int i = 0; i < 8; ++i)
      if (upfs_write(fd, big.data() + i, 1000) != 1000) return false;
    return true;
  });
  FromApi("api-bigwrite", UPFS_STRICT, [&](int fd) {
    // More than 64 blocks at once: a payload rather than an inline entry.
    return PW(fd, big.data(), 300 << 10, 0) && PW(fd, big.data(), 10, 100);
  });
  FromApi("api-gc", UPFS_SYNC, [&](int fd) {
    // Enough entries for more than kGcSlackBlocks log blocks: GC compacts
    // the log (in sync mode, so that the blocks stay few).
    if (!PW(fd, big.data(), 12000, 0)) return false;
    for (int i = 0; i < 18000; ++i)
      if (!PW(fd, big.data() + (i % 4096), 8, off_t((uint64_t(i) * 613) % 12000))) return false;
    return true;
  });
}

// ---------------------------------------------------------------------------
// Hand-built images.

class Image {
 public:
  Image(uint32_t blocks, fmt::Consistency c, uint32_t head) : b_(blocks * kB, 0) {
    memcpy(b_.data(), fmt::kMagic, sizeof(fmt::kMagic));
    Put32(8, fmt::kFormatVersion);
    Put32(12, fmt::kBlockSize);
    Put32(16, uint32_t(c));
    Put64(24, 0x5eed5eed00000000ull + blocks);  // file id
    Put64(32, 1700000000000000000ull);          // created_ns
    Put32(40, upfs::Crc32c(b_.data(), 40));
    Put64(64, head);
    Put64(128, 1700000000000000000ull);
  }
  void Log(uint32_t l, uint64_t seq, uint32_t next) {
    Put64(l * kB, fmt::NextWord(next));
    Put64(l * kB + 8, seq);
  }
  void Slot(uint32_t l, uint32_t s, uint64_t v) { Put64(l * kB + 16 + 8 * s, v); }
  uint64_t GetSlot(uint32_t l, uint32_t s) const {
    uint64_t v;
    memcpy(&v, b_.data() + l * kB + 16 + 8 * s, 8);
    return v;
  }
  // A reservation at slot s with `words` as payload and its apply right
  // after it. Returns the slot after the apply.
  uint32_t Payload(uint32_t l, uint32_t s, const std::vector<uint64_t>& words) {
    Slot(l, s, fmt::EncodeReserve(uint32_t(words.size())));
    for (size_t i = 0; i < words.size(); ++i) Slot(l, s + 1 + uint32_t(i), words[i]);
    uint32_t crc = upfs::Crc32c(words.data(), words.size() * 8);
    Slot(l, s + 1 + uint32_t(words.size()), fmt::EncodeApply(s, crc));
    return s + 2 + uint32_t(words.size());
  }
  void Data(uint32_t l, unsigned seed, size_t bytes = kB) {
    Bytes p = Pattern(bytes, seed);
    memcpy(b_.data() + l * kB, p.data(), bytes);
  }
  void Put64(uint64_t off, uint64_t v) { memcpy(b_.data() + off, &v, 8); }
  void Put32(uint64_t off, uint32_t v) { memcpy(b_.data() + off, &v, 4); }
  Bytes& bytes() { return b_; }

 private:
  Bytes b_;
};

uint64_t Map(uint32_t v, uint32_t l, uint32_t n, bool extend) {
  return fmt::EncodeInline(fmt::InlineMap{v, l, n, extend});
}

void EmitHand(const std::string& name, Image& img) {
  std::string why;
  if (!IsClean(img.bytes(), &why)) {
    Fail(name + ": hand-built image is not clean: " + why);
    return;
  }
  Emit(name, img.bytes());
}

void HandSeeds() {
  using fmt::Run;
  {
    // Overflow payload: 300 runs in overflow block 2, mapping data blocks
    // 3..5 among holes and keep runs.
    Image img(6, fmt::Consistency::kStrict, 1);
    img.Log(1, 1, 0);
    std::vector<uint64_t> runs;
    runs.push_back(fmt::EncodeRun(Run{3, 2}));
    runs.push_back(fmt::EncodeRun(Run{0, 1}));
    runs.push_back(fmt::EncodeRun(Run{5, 1}));
    while (runs.size() < 300)
      runs.push_back(fmt::EncodeRun(Run{runs.size() % 2 ? 0u : fmt::kKeepBlock, 1}));
    for (size_t i = 0; i < runs.size(); ++i) img.Put64(2 * kB + 8 * i, runs[i]);
    uint64_t size = 301 * kB - 123;
    img.Payload(1, 0,
                {size, fmt::EncodePayloadWord1(0, 300, fmt::kSizeMax | fmt::kPayloadOverflow),
                 fmt::EncodeRun(Run{2, 1}), upfs::Crc32c(runs.data(), runs.size() * 8)});
    img.Data(3, 3);
    img.Data(4, 4);
    img.Data(5, 5);
    EmitHand("hand-overflow", img);
  }
  {
    // Two log blocks (seq 7 and 8): the first full, ending in a padding
    // reservation; a size-setting payload, inline maps, kTouch, keep runs.
    Image img(6, fmt::Consistency::kStrict, 1);
    img.Log(1, 7, 2);
    img.Log(2, 8, 0);
    uint32_t s = img.Payload(1, 0, {8192, fmt::EncodePayloadWord1(0, 1, fmt::kSizeSet),
                                    fmt::EncodeRun(Run{3, 1})});
    for (; s < 500; ++s) img.Slot(1, s, s % 2 ? Map(1, 4, 1, true) : Map(0, 3, 1, false));
    img.Slot(1, 500, fmt::EncodeReserve(9));  // padding: slots 501..509
    img.Slot(2, 0, fmt::EncodeTouch(0, 2));
    img.Slot(2, 1, Map(2, 5, 1, true));
    img.Payload(2, 2, {3 * kB - 1000, fmt::EncodePayloadWord1(0, 1, fmt::kSizeSet),
                       fmt::EncodeRun(Run{fmt::kKeepBlock, 3})});
    img.Data(3, 6);
    img.Data(4, 7);
    img.Data(5, 8, kB - 1000);  // zero tail past the size
    EmitHand("hand-two-log-blocks", img);
  }
  {
    // Sync mode: an extending map of three blocks, in-place touches, an
    // abandoned reservation full of junk, then more entries.
    Image img(6, fmt::Consistency::kSync, 1);
    img.Log(1, 1, 0);
    img.Slot(1, 0, Map(0, 2, 3, true));
    img.Slot(1, 1, fmt::EncodeTouch(1, 1));
    img.Slot(1, 2, fmt::EncodeReserve(5));
    for (uint32_t i = 3; i < 8; ++i) img.Slot(1, i, 0xdeadbeefcafef00dull * i);
    img.Slot(1, 8, fmt::EncodeTouch(0, 3));
    img.Slot(1, 9, Map(3, 5, 1, true));
    img.Data(2, 9);
    img.Data(3, 10);
    img.Data(4, 11);
    img.Data(5, 12);
    EmitHand("hand-sync-touch", img);
  }
  {
    // The largest inline payload: 256 runs, data blocks among holes.
    Image img(6, fmt::Consistency::kStrict, 1);
    img.Log(1, 1, 0);
    std::vector<uint64_t> w = {0, fmt::EncodePayloadWord1(10, 256, fmt::kSizeMax)};
    uint32_t vblocks = 0;
    for (uint32_t i = 0; i < 256; ++i) {
      Run r = i == 7 ? Run{2, 2} : i == 100 ? Run{4, 2} : Run{0, 1 + i % 3};
      w.push_back(fmt::EncodeRun(r));
      vblocks += r.count;
    }
    w[0] = uint64_t(10 + vblocks) * kB;
    img.Payload(1, 0, w);
    for (uint32_t l = 2; l < 6; ++l) img.Data(l, 20 + l);
    EmitHand("hand-inline-256-runs", img);
  }
  {
    // A huge sparse file: one block far out, a size near 1 TiB.
    Image img(3, fmt::Consistency::kStrict, 1);
    img.Log(1, 1, 0);
    img.Slot(1, 0, Map(100000, 2, 1, true));
    img.Payload(1, 1, {uint64_t(1) << 40, fmt::EncodePayloadWord1(0, 0, fmt::kSizeMax)});
    img.Data(2, 30);
    EmitHand("hand-sparse-huge", img);
  }
  {
    // The log head not at block 1, and a log block after data.
    Image img(5, fmt::Consistency::kStrict, 4);
    img.Log(4, 1000000, 0);
    img.Slot(4, 0, Map(0, 1, 3, true));
    img.Payload(4, 1, {2 * kB + 5, fmt::EncodePayloadWord1(0, 0, fmt::kSizeSet)});
    img.Data(1, 40);
    img.Data(2, 41);
    img.Data(3, 42, 5);
    EmitHand("hand-head-elsewhere", img);
  }
}

// ---------------------------------------------------------------------------
// Foreign files.

void ForeignSeeds() {
  std::string text =
      "This is not a upfs file.\nIt is plain text, with CR LF\r\nand a SUB \x1a byte, "
      "like what a text-mode copy of a upfs file would look like.\n";
  Emit("foreign-text", Bytes(text.begin(), text.end()));
  Emit("foreign-zeros", Bytes(2 * kB, 0));
  Emit("foreign-ones", Bytes(2 * kB, 0xff));
  Bytes magic(2 * kB, 0);
  memcpy(magic.data(), fmt::kMagic, sizeof(fmt::kMagic));
  Emit("foreign-magic-only", magic);
  Emit("foreign-magic-short", Bytes(fmt::kMagic, fmt::kMagic + sizeof(fmt::kMagic)));
  Image img(2, fmt::Consistency::kStrict, 1);
  img.Log(1, 1, 0);
  Bytes interrupted = img.bytes();
  memset(interrupted.data(), 0, sizeof(fmt::kMagic));  // the magic is written last
  Emit("foreign-interrupted-creation", interrupted);
  Emit("foreign-header-only", Prefix(img.bytes(), kB));
  Bytes mangled = img.bytes();  // CR LF turned into LF, as a text-mode copy would
  mangled.erase(mangled.begin() + 5);
  Emit("foreign-mangled-magic", mangled);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--pool") return corpus::PoolSeeds(argv[2]);
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: make_corpus OUTDIR [MAX_BYTES]\n       make_corpus --pool OUTDIR\n");
    return 2;
  }
  g_out = argv[1];
  if (argc == 3) g_max = size_t(strtoull(argv[2], nullptr, 0));
  if (g_max < 2 * kB) g_max = 2 * kB;
  mkdir(g_out.c_str(), 0755);
  char tmpl[] = "/dev/shm/fuzz-corpus.XXXXXX";
  if (!mkdtemp(tmpl)) {
    perror("make_corpus: mkdtemp");
    return 1;
  }
  g_scratch = tmpl;
  ApiSeeds();
  HandSeeds();
  ForeignSeeds();
  rmdir(g_scratch.c_str());
  printf("make_corpus: %d seeds in %s (%d of them clean upfs files), %d failures\n", g_written,
         g_out.c_str(), g_clean, g_failures);
  return g_failures ? 1 : 0;
}
