#include "util/status.h"

#include <cstring>

namespace upfs {

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = msg_;
  s += " (";
  s += std::strerror(err_);
  s += ")";
  return s;
}

}  // namespace upfs
