#include "container/pool/dentry_recovery.h"

#include <cstring>
#include <map>
#include <unordered_set>

namespace upfs {

using namespace format::pool;

namespace {

using Valid = std::unordered_map<uint64_t, RecoveredDentry>;

// The dentry `ref` names, if the line still holds it (its generation).
const RecoveredDentry* Named(const Valid& valid, uint64_t ref) {
  if (ref == kDentryNone) return nullptr;
  auto it = valid.find(DentryRefLine(ref));
  if (it == valid.end() || (it->second.d.gen & ((1u << 30) - 1)) != DentryRefGen(ref)) return nullptr;
  return &it->second;
}

// Whether rename dentry n took effect. A rename's own dentry is its commit
// point. One of an exchange's pair took effect with its partner, which
// names it back; or once the dentry it superseded is no longer live (the
// pair was whole, its old dentries were set dead, and the partner may
// since have been removed and its run reused).
bool TookEffect(const Valid& valid, const RecoveredDentry& n) {
  if (!(n.d.flags & kDentryExchange)) return true;
  const RecoveredDentry* p = Named(valid, n.d.partner);
  if (p && (p->d.flags & kDentryExchange) && Named(valid, p->d.partner) == &n) return true;
  const RecoveredDentry* s = Named(valid, n.d.source);
  return !s || s->d.state != kDentryStateLive;
}

// The lines that renames which took effect supersede: a source naming the
// same inode, a replaced dentry of the same directory and name.
std::unordered_set<uint64_t> Superseded(const Valid& valid) {
  std::unordered_set<uint64_t> out;
  for (const auto& [line, n] : valid) {
    if (!(n.d.flags & kDentryRename) || n.d.state == kDentryStatePending || !TookEffect(valid, n)) continue;
    if (const RecoveredDentry* s = Named(valid, n.d.source); s && s->d.ino == n.d.ino) out.insert(s->line);
    if (const RecoveredDentry* r = Named(valid, n.d.replaced);
        r && r->d.parent == n.d.parent && r->name == n.name)
      out.insert(r->line);
  }
  return out;
}

}  // namespace

Status RecoverDentries(DentryStore* store, RecoveredDentries* out) {
  *out = RecoveredDentries();
  Valid valid;
  UPFS_RETURN_IF_ERROR(
      ScanDentries(store, [&](uint64_t line, uint32_t lines, DentryRead got, const Dentry& d) {
        if (got == DentryRead::kTorn) {
          out->free.push_back({line, lines, DentryLineGen(store->Line(line)[0])});
        } else if (got == DentryRead::kValid) {
          RecoveredDentry& r = valid[line];
          r.line = line;
          r.lines = lines;
          r.d = d;
          r.name.assign(d.name);
        }
      }));
  for (auto& [line, r] : valid) r.d.name = r.name;
  const std::unordered_set<uint64_t> superseded = Superseded(valid);
  std::map<std::pair<uint64_t, std::string>, uint64_t> names;  // (parent, name) -> line
  std::unordered_map<uint64_t, uint64_t> dirs;                  // directory inode -> line
  for (auto& [line, r] : valid) {
    const bool live = r.d.state == kDentryStateLive && !superseded.count(line) &&
                      (!(r.d.flags & kDentryRename) || TookEffect(valid, r));
    if (!live) {
      if (r.d.state == kDentryStateLive && superseded.count(line)) out->superseded.push_back(r);
      out->free.push_back({line, r.lines, r.d.gen});
      continue;
    }
    const auto [it, fresh] = names.emplace(std::make_pair(r.d.parent, r.name), line);
    if (!fresh)
      return Status::Corrupt("dentries at lines " + std::to_string(it->second) + " and " + std::to_string(line),
                             "both live, one name \"" + r.name + "\" in directory " + std::to_string(r.d.parent));
    if (r.d.kind == 2) {
      const auto [d, first] = dirs.emplace(r.d.ino, line);
      if (!first)
        return Status::Corrupt("directory " + std::to_string(r.d.ino),
                               "two live names, dentries at lines " + std::to_string(d->second) + " and " +
                                   std::to_string(line));
    }
    out->links[r.d.ino]++;
    out->live.push_back(r);
  }
  // Pointers into `live` stay pointers into the entries' own strings.
  for (RecoveredDentry& r : out->live) r.d.name = r.name;
  for (RecoveredDentry& r : out->superseded) r.d.name = r.name;
  return Status::OK();
}

void ApplyRecovery(DentryStore* store, const RecoveredDentries& r) {
  if (!r.superseded.empty()) {
    for (const RecoveredDentry& s : r.superseded) {
      uint64_t* w = store->Line(s.line);
      w[0] = WithDentryState(w[0], kDentryStateDead);
      store->WriteBack(w, 64);
    }
    store->Fence();  // dead before any claim that superseded them is freed
  }
  if (r.free.empty()) return;
  for (const RecoveredDentries::Run& run : r.free) {
    for (uint32_t l = 0; l < run.lines; ++l) {
      uint64_t* w = store->Line(run.head + l);
      std::memset(w + 1, 0, 7 * sizeof(uint64_t));
      w[0] = FreedDentryLine(run.gen);
    }
    store->WriteBack(store->Line(run.head), size_t(run.lines) * 64);
  }
  store->Fence();
}

}  // namespace upfs
