#include "posix/path_shape.h"

#include <emmintrin.h>

namespace upfs {
namespace {

// Whether the slash at s (s + 1 < end) starts "//", "/." or "/.." that
// ends a component.
bool SplitsAt(const char* s, const char* end) {
  if (s[1] == '/') return true;
  if (s[1] != '.') return false;
  const char* after = s + 2;  // past "/."
  if (after < end && *after == '.') ++after;
  return after == end || *after == '/';
}

}  // namespace

bool NeedsSplit(std::string_view p) {
  const char* s = p.data();
  const char* const end = s + p.size();
  // Sixteen bytes at a time while a seventeenth follows (each lane's next
  // byte is read too, never past the path): a lane is a candidate when it
  // holds a slash followed by a slash or a dot, and only candidates are
  // looked at byte by byte. The byte loop alone cost about 8 instructions
  // a byte (122 of a 15-byte path's stat of 2,072), and the programs the
  // preload library serves pass paths of 50-100 bytes. (Before it, two
  // std::string::find calls were 9% of a stat's samples, and a memchr per
  // slash still 4%.)
  const __m128i slash = _mm_set1_epi8('/'), dot = _mm_set1_epi8('.');
  for (; end - s >= 17; s += 16) {
    const __m128i here = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i next = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 1));
    const __m128i after_slash = _mm_or_si128(_mm_cmpeq_epi8(next, slash), _mm_cmpeq_epi8(next, dot));
    for (unsigned m = unsigned(_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(here, slash), after_slash)));
         m != 0; m &= m - 1) {
      if (SplitsAt(s + __builtin_ctz(m), end)) return true;
    }
  }
  for (; s + 1 < end; ++s) {  // a slash at the end has nothing after it
    if (*s == '/' && SplitsAt(s, end)) return true;
  }
  return false;
}

std::string WithoutNoOpComponents(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    const std::string_view c = p.substr(i, j - i);
    const bool last = p.find_first_not_of('/', j) == std::string_view::npos;
    if (!c.empty() && (c != "." || last)) (out += '/') += c;
    i = j + 1;
  }
  if (out.empty() || p.back() == '/') out += '/';
  return out;
}

}  // namespace upfs
