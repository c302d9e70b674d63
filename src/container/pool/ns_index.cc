#include "container/pool/ns_index.h"

#include <atomic>

#include <algorithm>
#include <utility>

#include "util/assert.h"

namespace upfs {

using format::pool::FileType;
using format::pool::RecordType;

namespace {
Status Misfit(const char* what) { return Status::Corrupt("namespace log", what); }
std::atomic<int> g_fail_validated_applies{0};
}  // namespace

void NsIndex::FailValidatedAppliesForTest(int n) { g_fail_validated_applies.store(n); }

void NsIndex::Rebase(uint64_t root, std::unique_ptr<BaseImage> base) {
  root_ = root;
  base_ = std::move(base);
  frozen_.reset();
  dirs_.Clear();
  links_.Clear();
  records_ = 0;
  ++delta_salt_;
  BumpShape();  // a reload may stand for any directories
  if (!base_) {
    DeltaDir& r = dirs_.Get(root);
    r.names = NewNames(root);
    r.info.parent = root;
    r.fresh = true;
  }
}

std::shared_ptr<const NsIndex> NsIndex::Freeze() {
  UPFS_ASSERT(!frozen_);
  auto f = std::make_shared<NsIndex>();
  f->root_ = root_;
  f->base_ = std::move(base_);
  f->dirs_ = std::move(dirs_);
  f->links_ = std::move(links_);
  f->records_ = records_;
  dirs_.Clear();
  links_.Clear();
  records_ = 0;
  ++delta_salt_;
  frozen_ = f;
  return f;
}

void NsIndex::Publish(std::unique_ptr<BaseImage> image) {
  UPFS_ASSERT(frozen_ && !base_);
  base_ = std::move(image);
  frozen_.reset();
}

void NsIndex::CollectMultiLinks(std::unordered_map<uint64_t, uint32_t>* out) const {
  if (frozen_) frozen_->CollectMultiLinks(out);
  else if (base_) base_->ForEachMultiLink([&](uint64_t ino, uint32_t links) { (*out)[ino] = links; });
  links_.ForEach([&](uint64_t ino, uint32_t links) {
    if (links > 1) (*out)[ino] = links;
    else out->erase(ino);
  });
}

void NsIndex::BuildImage(std::vector<uint64_t>* image, format::pool::CheckpointHeader* h, bool tagged,
                         uint64_t* copied_dirs) const {
  std::vector<std::pair<uint64_t, NsDirInfo>> dirs;
  ForEachDir([&](uint64_t ino, const NsDirInfo& i) { dirs.emplace_back(ino, i); });
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Reserved up front: tables, and names of up to 16 bytes (longer ones
  // grow the vector).
  uint64_t words = 0;
  for (const auto& [ino, info] : dirs)
    words += ImageWriter::TableWords(info.entries, tagged) + 2 * info.entries + format::pool::kNameSlotWords;
  ImageWriter w(image, dirs.size(), words + words / 8, tagged);
  std::vector<ImageWriter::Name> names;
  uint64_t copied = 0;
  for (const auto& [ino, info] : dirs) {
    // A directory no record touched since the image below: its table as
    // it is. (A frozen layer, which BuildImage is called on, has the image
    // right below it.)
    BaseDir b;
    if (!frozen_ && base_ && !dirs_.Find(ino) && base_->FindDir(ino, &b) &&
        w.CopyDir(*base_, b, info.parent, info.subdirs)) {
      ++copied;
      continue;
    }
    names.clear();
    names.reserve(info.entries);
    ListHashed(ino, [&](std::string_view n, const NsEntry& e, uint32_t h) { names.push_back({n, e, h}); });
    w.AddDir(ino, info.parent, info.subdirs, names);
  }
  std::unordered_map<uint64_t, uint32_t> multi;
  CollectMultiLinks(&multi);
  for (const auto& [ino, links] : multi) w.AddMultiLink(ino, links);
  w.Finish(h);
  if (copied_dirs) *copied_dirs = copied;
}

bool NsIndex::LowerDir(uint64_t ino, NsDirInfo* out) const {
  if (frozen_) return frozen_->Dir(ino, out);
  BaseDir b;
  if (!base_ || !base_->FindDir(ino, &b)) return false;
  if (out) *out = NsDirInfo{b.parent, b.subdirs, b.entries};
  return true;
}

uint32_t NsIndex::LowerLinks(uint64_t ino) const {
  if (frozen_) return frozen_->FileLinks(ino);
  return base_ ? base_->Links(ino) : 0;
}

bool NsIndex::Dir(uint64_t ino, NsDirInfo* out) const {
  if (const DeltaDir* d = dirs_.Find(ino)) {
    if (d->removed) return false;
    if (out) *out = d->info;
    return true;
  }
  return LowerDir(ino, out);
}

bool NsIndex::Find(uint64_t dir, std::string_view name, NsEntry* out) const {
  const DeltaDir* d = dirs_.Find(dir);
  if (d && d->removed) return false;
  return FindIn(d, dir, name, out);
}

namespace {

// Where the image table of the directory this thread last looked a name up
// in lies, by address only: nothing is read through them, so they may go
// stale (a newer checkpoint, another pool, a pool detached) unharmed.
struct NameHint {
  const NsIndex* index = nullptr;
  const char* tags = nullptr;
  const char* slots = nullptr;
  uint64_t mask = 0;
};
thread_local NameHint t_name_hint;

// The smallest table a hint is kept for (NoteNameHint).
constexpr uint64_t kHintMinSlots = 2048;

void NoteNameHint(const NsIndex* index, const BaseImage* base, const BaseDir* b) {
  // Only a big table's: a smaller one stays in the caches while it is
  // used, and its lookups would pay the name's hash twice for nothing. A
  // lookup elsewhere (a small directory, one only the delta has) clears
  // the hint, so that a thread done with a big directory stops guessing it.
  const char *tags = nullptr, *slots = nullptr;
  if (base && b->slots >= kHintMinSlots) base->TableLines(*b, &tags, &slots);  // false: tags stays null
  NameHint& hint = t_name_hint;
  if (hint.tags == tags && hint.index == index) return;
  hint = NameHint{index, tags, slots, tags ? b->slots - 1 : 0};
}

}  // namespace

void NsIndex::PrefetchLikely(std::string_view name) const {
  const NameHint& hint = t_name_hint;
  if (hint.index != this || !hint.tags || name.empty()) return;
  const uint64_t home = NameHash(name) & hint.mask;
  __builtin_prefetch(hint.tags + home * 8);
  __builtin_prefetch(hint.slots + home * format::pool::kNameSlotWords * 8);
}

bool NsIndex::FindIn(const DeltaDir* d, uint64_t dir, std::string_view name, NsEntry* out) const {
  return FindIn(d, dir, name, NameHash(name), out);
}

bool NsIndex::FindIn(const DeltaDir* d, uint64_t dir, std::string_view name, uint32_t h, NsEntry* out) const {
  BaseDir b;
  const bool below_in_image = !frozen_ && !(d && d->fresh) && base_ && base_->FindDir(dir, &b);
  // The image's probe starts before the delta's: in a directory too big
  // for the caches each is a miss, and the image's need not wait for the
  // delta's to end (the one of a name the delta holds is wasted).
  if (below_in_image) base_->Prefetch(b, h);
  NoteNameHint(this, below_in_image ? base_.get() : nullptr, &b);
  if (d) {
    if (const NsEntry* e = d->names.Find(name, h)) {
      if (e->type == FileType::kFree) return false;
      *out = *e;
      return true;
    }
    if (d->fresh) return false;
  }
  if (frozen_) return frozen_->Find(dir, name, out);
  return below_in_image && base_->FindName(b, name, h, out);
}

bool NsIndex::DirAndFind(uint64_t dir, std::string_view name, NsDirInfo* info, NsEntry* out,
                         bool* found) const {
  if (const DeltaDir* d = dirs_.Find(dir)) {
    if (d->removed) return false;
    *info = d->info;
    *found = FindIn(d, dir, name, out);
    return true;
  }
  if (frozen_) {
    if (!frozen_->Dir(dir, info)) return false;
    *found = frozen_->Find(dir, name, out);
    return true;
  }
  BaseDir b;
  if (!base_ || !base_->FindDir(dir, &b)) return false;
  *info = NsDirInfo{b.parent, b.subdirs, b.entries};
  const uint32_t h = NameHash(name);
  base_->Prefetch(b, h);
  NoteNameHint(this, base_.get(), &b);
  *found = base_->FindName(b, name, h, out);
  return true;
}

bool NsIndex::FindBelow(uint64_t dir, std::string_view name, uint32_t h, NsEntry* out) const {
  if (frozen_) return frozen_->Find(dir, name, out);
  BaseDir b;
  return base_ && base_->FindDir(dir, &b) && base_->FindName(b, name, h, out);
}

uint32_t NsIndex::FileLinks(uint64_t ino) const {
  if (const uint32_t* l = links_.Find(ino)) return *l;
  return LowerLinks(ino);
}

uint32_t NsIndex::Nlink(uint64_t ino, FileType type) const {
  if (type == FileType::kDirectory) {
    NsDirInfo i;
    return Dir(ino, &i) ? uint32_t(2 + i.subdirs) : 0;
  }
  return FileLinks(ino);
}

bool NsIndex::IsAncestorOrSelf(uint64_t ino, uint64_t dir) const {
  for (uint64_t d = dir, steps = 0; steps < (uint64_t{1} << 32); ++steps) {
    if (d == ino) return true;
    NsDirInfo i;
    if (!Dir(d, &i) || i.parent == d) return false;
    d = i.parent;
  }
  return false;
}

NsIndex::DeltaDir* NsIndex::Touch(uint64_t dir) {
  if (DeltaDir* d = dirs_.Find(dir)) return d->removed ? nullptr : d;
  NsDirInfo lower;
  if (!LowerDir(dir, &lower)) return nullptr;
  DeltaDir& d = dirs_.Get(dir);
  d.info = lower;
  d.names = NewNames(dir);
  return &d;
}

Status NsIndex::Insert(uint64_t dir, std::string_view name, NsEntry e, bool validated) {
  DeltaDir* d = Touch(dir);
  if (!d) return Misfit("record names a directory that does not exist");
  const uint32_t h = NameHash(name);
  // One probe of the delta's table (replay checked it and then probed it
  // again to put the name: 8% of a catch-up's instructions): the name's
  // tombstone there is taken over; a live name there, or one the layer
  // below has and no tombstone hides, is damage.
  if (NsEntry* t = d->names.Find(name, h)) {
    if (!validated && t->type != FileType::kFree) return Misfit("record adds a name that exists");
    *t = e;
  } else {
    NsEntry old;
    if (!validated && !d->fresh && FindBelow(dir, name, h, &old))
      return Misfit("record adds a name that exists");
    d->names.Insert(name, h, e);
  }
  ++d->info.entries;
  if (e.type == FileType::kDirectory) ++d->info.subdirs;
  return Status::OK();
}

Status NsIndex::Remove(uint64_t dir, std::string_view name, uint64_t expect_ino, NsEntry* removed) {
  DeltaDir* d = Touch(dir);
  if (!d) return Misfit("record names a directory that does not exist");
  // One probe of the delta's table: the name is the delta's (then its
  // entry becomes a tombstone), or the lower layer's (then a tombstone
  // hides it), or not there.
  const uint32_t h = NameHash(name);
  const NsEntry tomb{0, FileType::kFree};
  if (NsEntry* t = d->names.Find(name, h)) {
    if (t->type == FileType::kFree || t->ino != expect_ino)
      return Misfit("record removes a name that does not exist");
    *removed = *t;
    *t = tomb;
  } else {
    if (d->fresh || !FindBelow(dir, name, h, removed) || removed->ino != expect_ino)
      return Misfit("record removes a name that does not exist");
    d->names.Insert(name, h, tomb);
    ++d->hides_base;
  }
  --d->info.entries;
  if (removed->type == FileType::kDirectory) --d->info.subdirs;
  return Status::OK();
}

Status NsIndex::Apply(const NsRecord& r, bool validated) {
  if (validated && g_fail_validated_applies.load(std::memory_order_relaxed) > 0 &&
      g_fail_validated_applies.fetch_sub(1) > 0)
    return Misfit("failed for a test");
  ++records_;
  switch (r.type) {
    case RecordType::kCreate:
    case RecordType::kLink: {
      if (r.ftype == FileType::kDirectory || r.ftype == FileType::kFree)
        return Misfit("record links a directory");
      const uint32_t links = r.type == RecordType::kLink ? FileLinks(r.ino) : 0;
      if (r.type == RecordType::kLink && links == 0) return Misfit("link to an inode without a name");
      UPFS_RETURN_IF_ERROR(Insert(r.dir1, r.name1, NsEntry{r.ino, r.ftype}, validated));
      SetLinks(r.ino, links + 1);
      return Status::OK();
    }
    case RecordType::kMkdir: {
      if (IsDir(r.ino)) return Misfit("record makes a directory twice");
      UPFS_RETURN_IF_ERROR(Insert(r.dir1, r.name1, NsEntry{r.ino, FileType::kDirectory}, validated));
      DeltaDir& d = dirs_.Get(r.ino);
      d = DeltaDir();
      d.names = NewNames(r.ino);
      d.info.parent = r.dir1;
      d.fresh = true;
      return Status::OK();
    }
    case RecordType::kUnlink: {
      NsEntry e;
      UPFS_RETURN_IF_ERROR(Remove(r.dir1, r.name1, r.ino, &e));
      return Unref(e);
    }
    case RecordType::kRename: {
      // Checked before anything changes (a record that does not fit
      // leaves the index as it was), unless the committer just did so.
      // A victim's name is checked by its Remove, the first change; with
      // none, the name taken must be free before the source's goes.
      NsEntry moved, target;
      if (!validated && (!Find(r.dir1, r.name1, &moved) || moved.ino != r.ino))
        return Misfit("rename of a name that does not exist");
      if (!IsDir(r.dir2)) return Misfit("rename into a directory that does not exist");
      if (!validated && r.victim == 0 && Find(r.dir2, r.name2, &target))
        return Misfit("rename onto a name that is not its victim");
      if (r.victim != 0) {
        NsEntry v;
        UPFS_RETURN_IF_ERROR(Remove(r.dir2, r.name2, r.victim, &v));
        UPFS_RETURN_IF_ERROR(Unref(v));
        if (v.type == FileType::kDirectory) BumpShape();  // its name leads elsewhere now
      }
      UPFS_RETURN_IF_ERROR(Remove(r.dir1, r.name1, r.ino, &moved));
      // The name it takes was checked free (or the victim's, gone now).
      UPFS_RETURN_IF_ERROR(Insert(r.dir2, r.name2, moved, validated));
      if (moved.type == FileType::kDirectory) BumpShape();
      if (moved.type == FileType::kDirectory && r.dir1 != r.dir2) Touch(moved.ino)->info.parent = r.dir2;
      return Status::OK();
    }
    case RecordType::kExchange: {
      NsEntry a, b;
      if (!Find(r.dir1, r.name1, &a) || !Find(r.dir2, r.name2, &b) || a.ino != r.ino || b.ino != r.victim)
        return Misfit("exchange of names that do not exist");
      NsEntry x;
      UPFS_RETURN_IF_ERROR(Remove(r.dir1, r.name1, a.ino, &x));
      UPFS_RETURN_IF_ERROR(Remove(r.dir2, r.name2, b.ino, &x));
      UPFS_RETURN_IF_ERROR(Insert(r.dir1, r.name1, b));
      UPFS_RETURN_IF_ERROR(Insert(r.dir2, r.name2, a));
      if (a.type == FileType::kDirectory || b.type == FileType::kDirectory) BumpShape();
      if (r.dir1 != r.dir2) {
        if (a.type == FileType::kDirectory) Touch(a.ino)->info.parent = r.dir2;
        if (b.type == FileType::kDirectory) Touch(b.ino)->info.parent = r.dir1;
      }
      return Status::OK();
    }
  }
  return Misfit("unknown record type");
}

Status NsIndex::Unref(const NsEntry& e) {
  if (e.type == FileType::kDirectory) {
    NsDirInfo i;
    if (!Dir(e.ino, &i)) return Misfit("record removes a directory that does not exist");
    if (i.entries != 0) return Misfit("record removes a directory that is not empty");
    DeltaDir& d = dirs_.Get(e.ino);
    d.removed = true;
    d.names = NameTable();
    return Status::OK();
  }
  const uint32_t links = FileLinks(e.ino);
  if (links == 0) return Misfit("record removes a name of an inode without one");
  SetLinks(e.ino, links - 1);
  return Status::OK();
}

}  // namespace upfs
