#include "container/pool/ns_index.h"

#include <tuple>

namespace upfs {

using format::pool::FileType;
using format::pool::RecordType;

namespace {
Status Misfit(const char* what) { return Status::Corrupt("namespace log", what); }
}  // namespace

void NsIndex::Reset(uint64_t root) {
  root_ = root;
  dirs_.clear();
  links_.Clear();
  dirs_[root].parent = root;
}

uint32_t NsIndex::Nlink(uint64_t ino) const {
  if (const NsDir* d = Dir(ino)) return 2 + d->subdirs;
  return links_.Get(ino);
}

bool NsIndex::IsAncestorOrSelf(uint64_t ino, uint64_t dir) const {
  for (uint64_t d = dir;;) {
    if (d == ino) return true;
    const NsDir* nd = Dir(d);
    if (!nd || nd->parent == d) return false;
    d = nd->parent;
  }
}

Status NsIndex::Insert(NsDir* d, std::string_view name, NsEntry e) {
  if (!d->names.Insert(name, e)) return Misfit("record adds a name that exists");
  if (e.type == FileType::kDirectory) {
    ++d->subdirs;
  } else {
    links_.Add(e.ino);
  }
  return Status::OK();
}

void NsIndex::Unref(const NsEntry& e, uint64_t parent) {
  if (e.type == FileType::kDirectory) {
    if (NsDir* p = MutableDir(parent)) --p->subdirs;
    dirs_.erase(e.ino);
    return;
  }
  links_.Drop(e.ino);
}

Status NsIndex::Remove(NsDir* d, uint64_t dir_ino, std::string_view name, uint64_t expect_ino) {
  const NsEntry* found = d->names.Find(name);
  if (!found || found->ino != expect_ino) return Misfit("record removes a name that does not exist");
  const NsEntry e = *found;
  d->names.Erase(name);
  if (e.type == FileType::kDirectory) {
    const NsDir* victim = Dir(e.ino);
    if (victim && !victim->names.empty()) return Misfit("record removes a directory that is not empty");
  }
  Unref(e, dir_ino);
  return Status::OK();
}

void NsIndex::Reserve(uint64_t dirs, uint64_t entries) {
  dirs_.reserve(dirs);
  links_.Reserve(entries);
}

NsDir* NsIndex::LoadDir(uint64_t ino, uint64_t parent, uint64_t entries) {
  NsDir& d = dirs_[ino];
  d.parent = parent;
  d.names.Reserve(entries);
  return &d;
}

Status NsIndex::LoadEntry(NsDir* d, std::string_view name, NsEntry e) {
  if (name.find('/') != std::string_view::npos || name == "." || name == "..")
    return Misfit("checkpoint entry with an impossible name");
  return Insert(d, name, e);
}

Status NsIndex::CheckLoaded() const {
  uint64_t named = 0;
  for (const auto& [ino, d] : dirs_) {
    if (ino != root_ && !Dir(d.parent)) return Misfit("checkpoint directory without its parent");
    bool ok = true;
    d.names.ForEach([&](std::string_view, const NsEntry& e) {
      if (e.type != format::pool::FileType::kDirectory) return;
      const NsDir* c = Dir(e.ino);
      if (!c || c->parent != ino) ok = false;
      ++named;
    });
    if (!ok) return Misfit("checkpoint entry names a directory not in the image");
  }
  if (named + 1 != dirs_.size()) return Misfit("checkpoint directory without a name");
  return Status::OK();
}

Status NsIndex::Apply(const NsRecord& r) {
  NsDir* d1 = MutableDir(r.dir1);
  if (!d1) return Misfit("record names a directory that does not exist");
  switch (r.type) {
    case RecordType::kCreate:
    case RecordType::kLink:
      if (r.ftype == FileType::kDirectory || r.ftype == FileType::kFree)
        return Misfit("record links a directory");
      if (r.type == RecordType::kLink && Nlink(r.ino) == 0) return Misfit("link to a free inode");
      return Insert(d1, r.name1, NsEntry{r.ino, r.ftype});
    case RecordType::kMkdir: {
      if (dirs_.count(r.ino)) return Misfit("record makes a directory twice");
      UPFS_RETURN_IF_ERROR(Insert(d1, r.name1, NsEntry{r.ino, FileType::kDirectory}));
      dirs_[r.ino].parent = r.dir1;
      return Status::OK();
    }
    case RecordType::kUnlink:
      return Remove(d1, r.dir1, r.name1, r.ino);
    case RecordType::kRename: {
      NsDir* d2 = MutableDir(r.dir2);
      if (!d2) return Misfit("rename into a directory that does not exist");
      const NsEntry* src = Find(*d1, r.name1);
      if (!src || src->ino != r.ino) return Misfit("rename of a name that does not exist");
      const NsEntry moved = *src;
      if (r.victim != 0) UPFS_RETURN_IF_ERROR(Remove(d2, r.dir2, r.name2, r.victim));
      else if (Find(*d2, r.name2)) return Misfit("rename over a name it does not name");
      d1->names.Erase(r.name1);
      d2->names.Insert(r.name2, moved);
      if (moved.type == FileType::kDirectory && r.dir1 != r.dir2) {
        --d1->subdirs;
        ++d2->subdirs;
        dirs_[moved.ino].parent = r.dir2;
      }
      return Status::OK();
    }
    case RecordType::kExchange: {
      NsDir* d2 = MutableDir(r.dir2);
      if (!d2) return Misfit("exchange with a directory that does not exist");
      NsEntry* pa = d1->names.Find(r.name1);
      NsEntry* pb = d2->names.Find(r.name2);
      if (!pa || !pb || pa->ino != r.ino || pb->ino != r.victim)
        return Misfit("exchange of names that do not exist");
      std::swap(*pa, *pb);
      const NsEntry now_in_1 = *pa, now_in_2 = *pb;
      if (r.dir1 != r.dir2) {
        for (auto [e, from, to] : {std::tuple{now_in_2, d1, d2}, std::tuple{now_in_1, d2, d1}}) {
          if (e.type != FileType::kDirectory) continue;
          --from->subdirs;
          ++to->subdirs;
          dirs_[e.ino].parent = to == d1 ? r.dir1 : r.dir2;
        }
      }
      return Status::OK();
    }
  }
  return Misfit("unknown record type");
}

}  // namespace upfs
