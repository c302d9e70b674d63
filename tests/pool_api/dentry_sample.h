// A live dentry of a regular file for the dentry tests, with plausible
// inode numbers (in a pool's data region).
#pragma once

#include <deque>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "container/pool/dentry.h"
#include "container/pool/dentry_arena.h"

namespace upfs {

inline Dentry SampleDentry(std::string_view name, uint32_t gen = 7) {
  Dentry d;
  d.state = format::pool::kDentryStateLive;
  d.kind = 1;
  d.gen = gen;
  d.parent = 139265;
  d.ino = 139281;
  d.ino_gen = 12;
  d.name = name;
  return d;
}

// Writes dentries into an arena's runs for the tests, keeping their names.
class SampleWriter {
 public:
  SampleWriter(DentryArena* arena, DentryStore* store) : arena_(arena), store_(store) {}
  struct Made {
    uint64_t line;
    uint32_t gen;
    uint64_t ref() const { return format::pool::DentryRef(line, gen); }
  };
  // A dentry: name in directory `parent` for inode `ino`.
  Made Write(const std::string& name, uint64_t parent, uint64_t ino,
             uint64_t state = format::pool::kDentryStateLive, uint32_t flags = 0,
             uint64_t source = format::pool::kDentryNone, uint64_t replaced = format::pool::kDentryNone,
             uint64_t partner = format::pool::kDentryNone, uint32_t kind = 1) {
    names_.push_back(name);
    Dentry d = SampleDentry(names_.back());
    d.state = state;
    d.parent = parent;
    d.ino = ino;
    d.kind = kind;
    d.flags = flags;
    d.source = source;
    d.replaced = replaced;
    d.partner = partner;
    uint64_t head;
    EXPECT_TRUE(arena_->Take(DentryLines(name.size()), &head, &d.gen).ok());
    EncodeDentry(d, store_->Line(head));
    return {head, d.gen};
  }

 private:
  DentryArena* arena_;
  DentryStore* store_;
  std::deque<std::string> names_;
};

}  // namespace upfs
