// make_corpus's one way of writing a seed file (make_corpus.cc, pool_seeds.cc).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace corpus {

using Bytes = std::vector<unsigned char>;

inline bool WriteFile(const std::string& path, const Bytes& b) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = b.empty() || write(fd, b.data(), b.size()) == ssize_t(b.size());
  return close(fd) == 0 && ok;
}

}  // namespace corpus
