#include "container/pool/parent_cache.h"

#include <array>

#include "container/pool/pool_format.h"

namespace upfs {

namespace {

// A few directories a thread creates in at once (a build's object and
// dependency directories, an extraction's current ones); replaced in turn.
constexpr size_t kEntries = 4;

struct ThreadEntries {
  std::array<ParentCache::Entry, kEntries> e;
  size_t next = 0;
  uint64_t uses = 0;
  uint64_t lookups = 0;
};

ThreadEntries& Mine() {
  static thread_local ThreadEntries t;
  return t;
}

// The entry of `dir` in attachment `instance`, or null.
ParentCache::Entry* Lookup(ThreadEntries& t, uint64_t instance, std::string_view dir) {
  for (ParentCache::Entry& e : t.e)
    if (e.instance == instance && e.dir == dir) return &e;
  return nullptr;
}

}  // namespace

const ParentCache::Entry* ParentCache::Find(uint64_t instance, std::string_view dir) {
  return Lookup(Mine(), instance, dir);
}

void ParentCache::Remember(uint64_t instance, std::string_view dir, const WalkTrace& walk) {
  ThreadEntries& t = Mine();
  Entry* slot = Lookup(t, instance, dir);
  if (!slot) {
    slot = &t.e[t.next];
    t.next = (t.next + 1) % kEntries;
    slot->instance = instance;
    slot->dir.assign(dir);
  }
  slot->walk = walk;
}

void ParentCache::Forget(uint64_t instance, std::string_view dir) {
  if (Entry* e = Lookup(Mine(), instance, dir)) e->instance = 0;
}

uint64_t ParentCache::uses() { return Mine().uses; }
void ParentCache::CountUse() { ++Mine().uses; }
uint64_t ParentCache::lookups() { return Mine().lookups; }
void ParentCache::CountLookup() { ++Mine().lookups; }

bool SplitCreatePath(std::string_view path, std::string_view* dir, std::string_view* name) {
  if (path.empty() || path.front() != '/' || path.back() == '/') return false;
  const size_t slash = path.rfind('/');
  *dir = path.substr(0, slash);
  *name = path.substr(slash + 1);
  return *name != "." && *name != ".." && name->size() <= format::pool::kMaxNameLen;
}

}  // namespace upfs
