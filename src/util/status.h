// Status: an errno plus a message, returned by every fallible internal call.
// Modelled on LevelDB's Status: cheap when OK, explicit about failures.
#pragma once

#include <cerrno>
#include <memory>
#include <string>
#include <utility>

namespace upfs {

class Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  static Status Error(int err, std::string msg) { return Status(err, std::move(msg)); }
  // The file is a upfs file but `structure` is damaged.
  static Status Corrupt(std::string structure, std::string detail) {
    return Status(EUCLEAN, structure + ": " + detail);
  }
  static Status FromErrno(const std::string& what) { return Status(errno, what); }

  // Inline up to the message, which only a failure has: copying an OK
  // status is two words (callgrind counted 18 instructions and a call per
  // copy when the whole constructor was out of line).
  Status(const Status& o) : err_(o.err_), msg_(o.msg_ ? CopyMessage(*o.msg_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }
  const std::string& message() const;
  std::string ToString() const;

 private:
  Status(int err, std::string msg) : err_(err), msg_(new std::string(std::move(msg))) {}
  static std::string* CopyMessage(const std::string& m);
  int err_ = 0;
  // Null when OK: an OK status, returned by every call on every hot path,
  // is two words with nothing to construct or destroy out of line.
  std::unique_ptr<std::string> msg_;
};

}  // namespace upfs

// Binds the status rather than copying it: an lvalue (a Status a caller
// kept) is copied only when it is returned, i.e. on failure.
#define UPFS_RETURN_IF_ERROR(expr)                                              \
  do {                                                                          \
    auto&& _st = (expr);                                                        \
    if (!_st.ok()) return ::upfs::Status(std::forward<decltype(_st)>(_st));     \
  } while (0)
