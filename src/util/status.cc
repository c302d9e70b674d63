#include "util/status.h"

#include <cstring>

namespace upfs {

const std::string& Status::message() const {
  static const std::string kEmpty;
  return msg_ ? *msg_ : kEmpty;
}

std::string* Status::CopyMessage(const std::string& m) { return new std::string(m); }

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = message();
  s += " (";
  s += std::strerror(err_);
  s += ")";
  return s;
}

}  // namespace upfs
