// fuzz_dentry: damaged arenas of the next namespace's dentries
// (container/pool/dentry.h, dentry_arena.h, dentry_recovery.h) through
// ScanDentries, the scan recovery and fsck will make, and recovery itself.
//
// The input is a list of patches to one valid image that the target
// builds once per process: four arena blocks in memory, chained, holding
// dentries of every length class (1 to 6 lines), kind, kind of record
// (create, link, rename, exchange) and state, and runs given back.
//   byte 0: flags. bit 0: after patching, the checksum of every line that
//           reads as a head is made right again, so that mutations reach
//           the checks behind it. bit 1: byte 1 (mod 8) replaces the chain's
//           head block number (0 = no chain, 5-7 outside the store).
//   then patches: offset in the image (2 bytes LE, modulo its size),
//           length (1 byte, modulo 16, 0 = 8), that many bytes.
//
// Contract (a violation traps, and libFuzzer saves the input):
//  - no crash, hang, ASan or UBSan report;
//  - the scan ends OK or with EUCLEAN and a message naming a dentry or a
//    dentry block;
//  - the reader accepts only what the writer writes: every dentry the scan
//    reads as valid, encoded again from the fields read, gives its lines
//    back bit for bit;
//  - recovery (RecoverDentries) ends OK or with EUCLEAN naming a dentry or
//    directory; applied (ApplyRecovery), the next recovery finds the same
//    live names and nothing superseded or to free.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "container/pool/dentry.h"
#include "container/pool/dentry_arena.h"
#include "container/pool/dentry_recovery.h"

namespace {

using namespace upfs;
using namespace upfs::format::pool;

constexpr uint64_t kBlocks = 5;  // block 0 is not an arena block
constexpr size_t kImageBytes = kBlocks * 4096;

class ImageStore final : public DentryStore {
 public:
  ImageStore() : words(kImageBytes / 8, 0) {}
  Status NewBlock(uint32_t* block) override {
    if (next_ >= kBlocks) return Status::Error(ENOSPC, "image full");
    *block = uint32_t(next_++);
    return Status::OK();
  }
  uint64_t* Line(uint64_t line) override { return &words[line * 8]; }
  std::atomic<uint64_t>* ChainHead() override { return &head; }
  void WriteBack(const void*, size_t) override {}
  void Fence() override {}
  uint64_t Blocks() const override { return kBlocks; }
  std::vector<uint64_t> words;
  std::atomic<uint64_t> head{0};

 private:
  uint64_t next_ = 1;
};

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "fuzz_dentry: contract broken: %s\n", what);
  std::abort();
}

// The seed image, built once.
const ImageStore& Seed() {
  static ImageStore* seed = [] {
    auto* s = new ImageStore;
    DentryArena arena(s);
    std::vector<std::pair<uint64_t, Dentry>> made;
    std::vector<std::string> names;
    names.reserve(200);
    for (int i = 0; i < 150; ++i) {
      names.push_back("n" + std::to_string(i) + std::string(size_t(i * 7 % 250), char('a' + i % 26)));
      Dentry d;
      d.state = 1 + uint64_t(i % 3);
      d.kind = 1 + uint32_t(i % 3);
      d.flags = i % 4 == 0 ? kDentryFresh : i % 4 == 1 ? 0 : i % 4 == 2 ? kDentryRename : kDentryRename | kDentryExchange;
      d.parent = 139265 + uint64_t(i);
      d.ino = 139281 + uint64_t(i);
      d.ino_gen = uint32_t(i + 1);
      d.mode = 0644;
      d.consistency = 1;
      d.uid = uint32_t(i);
      d.gid = 100;
      d.ctime_ns = 1733500000000000000ull + uint64_t(i);
      if (d.flags & kDentryRename) {
        d.source = DentryRef(64 + uint64_t(i), 1);
        d.partner = (d.flags & kDentryExchange) ? DentryRef(65, 2) : kDentryNone;
      }
      d.name = names.back();
      uint64_t head;
      if (!arena.Take(DentryLines(d.name.size()), &head, &d.gen).ok()) break;
      EncodeDentry(d, s->Line(head));
      made.emplace_back(head, d);
    }
    for (size_t i = 0; i < made.size(); i += 5)  // some runs given back
      arena.Give(made[i].first, DentryLines(made[i].second.name.size()), made[i].second.gen);
    arena.Settle();
    return s;
  }();
  return *seed;
}

// Makes the checksum of every line that reads as a head right again.
void Reseal(ImageStore* s) {
  for (uint64_t b = 1; b < kBlocks; ++b) {
    for (uint32_t i = 1; i < kLinesPerBlock; ++i) {
      uint64_t* w = s->Line(b * kLinesPerBlock + i);
      const uint32_t lines = uint32_t(w[0] >> 2 & 7);
      if ((w[0] & kDentryStateMask) == 0 || lines < 1 || lines > kDentryMaxLines || i + lines > kLinesPerBlock)
        continue;
      w[3] = (w[3] & 0xffffffff) | uint64_t(DentryChecksum(w, lines)) << 32;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  ImageStore s;
  s.words = Seed().words;
  s.head.store(Seed().head.load());
  const uint8_t flags = data[0];
  size_t at = 1;
  if (flags & 2) {
    if (size < 2) return 0;
    s.head.store(data[1] % 8);
    at = 2;
  }
  auto* bytes = reinterpret_cast<unsigned char*>(s.words.data());
  while (at + 3 <= size) {
    const size_t off = (size_t(data[at]) | size_t(data[at + 1]) << 8) % kImageBytes;
    size_t len = data[at + 2] % 16;
    if (len == 0) len = 8;
    at += 3;
    if (at + len > size) break;
    for (size_t k = 0; k < len && off + k < kImageBytes; ++k) bytes[off + k] = data[at + k];
    at += len;
  }
  if (flags & 1) Reseal(&s);
  bool mismatch = false;
  const Status st = ScanDentries(&s, [&](uint64_t line, uint32_t, DentryRead got, const Dentry& d) {
    if (got != DentryRead::kValid) return;
    const uint32_t lines = DentryLines(d.name.size());
    std::vector<uint64_t> again(size_t(lines) * 8, 0);
    EncodeDentry(d, again.data());
    if (std::memcmp(again.data(), s.Line(line), lines * 64) != 0) mismatch = true;
  });
  if (mismatch) Broken("a dentry read as valid is not what the writer writes for its fields");
  auto check_error = [](const Status& e) {
    if (e.err() != EUCLEAN) Broken("an error other than EUCLEAN");
    if (e.message().find("dentr") == std::string::npos && e.message().find("directory") == std::string::npos)
      Broken("a message that names no dentry structure");
  };
  if (!st.ok()) {
    check_error(st);
    return 0;
  }
  // Recovery decides, is made so, and the next recovery finds the same
  // names and nothing left to do.
  RecoveredDentries first, second;
  const Status r1 = RecoverDentries(&s, &first);
  if (!r1.ok()) {
    check_error(r1);
    return 0;
  }
  ApplyRecovery(&s, first);
  if (!RecoverDentries(&s, &second).ok()) Broken("a recovery applied leaves a pool the next one refuses");
  auto names = [](const RecoveredDentries& r) {
    std::set<std::pair<uint64_t, std::string>> out;
    for (const RecoveredDentry& d : r.live) out.emplace(d.line, d.name);
    return out;
  };
  if (names(first) != names(second)) Broken("the next recovery finds other live names");
  if (!second.superseded.empty() || !second.free.empty()) Broken("a recovery applied leaves work for the next");
  return 0;
}
