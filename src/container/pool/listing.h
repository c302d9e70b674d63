// Listing: the entries of one pool directory as a scan took them
// (PoolNamespace::List), for directory streams, getdents64 and the tools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "container/pool/pool_format.h"

namespace upfs {

// One entry of a Listing; `name` points into the listing.
struct Listed {
  std::string_view name;
  uint64_t ino;
  format::pool::FileType type;
};

// A directory's entries as PoolNamespace::List took them: the names in
// one buffer, so that a listing of 10,000 names is a few allocations, not
// a string for each.
class Listing {
 public:
  void clear() {
    rows_.clear();
    names_.clear();
  }
  void reserve(size_t entries) {
    rows_.reserve(entries);
    names_.reserve(entries * kNameBytesGuess);
  }
  void Add(std::string_view name, uint64_t ino, format::pool::FileType type) {
    rows_.push_back(Row{ino, names_.size(), uint32_t(name.size()), type});
    names_.append(name);
  }
  size_t size() const { return rows_.size(); }
  Listed operator[](size_t i) const {
    const Row& r = rows_[i];
    return Listed{std::string_view(names_.data() + r.off, r.len), r.ino, r.type};
  }
  class Iterator {
   public:
    Iterator(const Listing* l, size_t i) : l_(l), i_(i) {}
    Listed operator*() const { return (*l_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const Listing* l_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, rows_.size()); }

 private:
  static constexpr size_t kNameBytesGuess = 12;
  struct Row {
    uint64_t ino;
    size_t off;  // in names_
    uint32_t len;
    format::pool::FileType type;
  };
  std::vector<Row> rows_;
  std::string names_;
};

}  // namespace upfs
