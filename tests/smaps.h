// Sums of /proc/self/smaps fields over chosen mappings, for tests that
// check what the kernel mapped (resident pages, huge pages).
#pragma once

#include <cctype>
#include <cstdio>
#include <cstring>

namespace upfs_test {

// The sum, in KiB, of `field` (e.g. "Rss:") over the mappings whose first
// line `mapping(line)` accepts; -1 if smaps cannot be read. A mapping's
// first line starts with its address (lowercase hex), the attribute lines
// after it with a capital.
template <typename Pred>
long SmapsKib(Pred mapping, const char* field) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const size_t field_len = std::strlen(field);
  long kib = 0, v = 0;
  bool chosen = false;
  char line[1024];
  while (std::fgets(line, sizeof line, f)) {
    if (std::isdigit(static_cast<unsigned char>(line[0])) || (line[0] >= 'a' && line[0] <= 'f'))
      chosen = mapping(line);
    else if (chosen && std::strncmp(line, field, field_len) == 0 &&
             std::sscanf(line + field_len, " %ld kB", &v) == 1)
      kib += v;
  }
  std::fclose(f);
  return kib;
}

}  // namespace upfs_test
