// Status: an errno plus a message, returned by every fallible internal call.
// Modelled on LevelDB's Status: cheap when OK, explicit about failures.
#pragma once

#include <cerrno>
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

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

 private:
  Status(int err, std::string msg) : err_(err), msg_(std::move(msg)) {}
  int err_ = 0;
  std::string msg_;
};

}  // namespace upfs

#define UPFS_RETURN_IF_ERROR(expr)      \
  do {                                  \
    ::upfs::Status _st = (expr);        \
    if (!_st.ok()) return _st;          \
  } while (0)
