#include "container/pool/dentry_tables.h"

namespace upfs {

using namespace format::pool;

std::string_view DentryNames::NameAt(uint64_t ref, std::string* buf) {
  return PeekDentryName(s_->Line(ref), uint32_t(kLinesPerBlock - ref % kLinesPerBlock), buf);
}

uint64_t DentryNames::HashOf(uint64_t ref) {
  thread_local std::string buf;
  return Hash(NameAt(ref, &buf));
}

uint32_t DentryNames::OwnerOf(uint64_t ref) { return DentryOwner(s_->Line(ref)[0]); }

bool DentryNames::Names(uint64_t ref, uint64_t parent, std::string_view name) {
  const uint64_t* w = s_->Line(ref);
  return w[1] == parent && DentryNameIs(w, uint32_t(kLinesPerBlock - ref % kLinesPerBlock), name);
}

Status RebuildTables(TableMemory* mem, DentryNames* names, const RecoveredDentries& r,
                     FunctionRef<std::atomic<uint64_t>*(uint64_t dir)> anchor) {
  for (const RecoveredDentry& d : r.live) {
    SharedDirTable table(mem, names, anchor(d.d.parent));
    const uint64_t hash = names->Hash(d.name);
    bool claimed;
    uint64_t existing;
    UPFS_RETURN_IF_ERROR(table.Claim(
        hash, d.line, [&](uint64_t ref) { return names->Names(ref, d.d.parent, d.name); }, &claimed, &existing));
    // Recovery refused two live names of one name: a claim always wins.
    if (!claimed) return Status::Corrupt("dentry at line " + std::to_string(d.line), "its name is in its table twice");
    table.Publish(hash, d.line);
  }
  return Status::OK();
}

}  // namespace upfs
