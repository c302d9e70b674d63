#include "posix/pool_escape.h"

namespace upfs {

namespace {

struct NotedEscape {
  int which = 0;
  std::string path;
};

// Whether t_escape holds an escape: apart from it, because every pool call
// clears it, and a thread_local with a destructor (the path) is reached
// through a guard (two calls to __tls_get_addr in a shared library).
thread_local bool t_escape_set = false;
thread_local NotedEscape t_escape;
thread_local int t_hops = 0;
constexpr int kMaxHops = 40;  // as the kernel's MAXSYMLINKS

// The absolute path an escape `rest` from the pool mounted at `mount_dir`
// leads to.
std::string EscapeTarget(std::string_view mount_dir, std::string_view rest) {
  if (!rest.empty() && rest.front() == '/') return std::string(rest);
  // "..", then what followed it: the parent of the mount directory (which
  // is absolute and lexically normal) takes the ".." and the kernel, or
  // the mount the path enters, the rest as it is written.
  std::string_view after = rest.substr(rest.size() >= 2 ? 2 : rest.size());
  const size_t slash = mount_dir.rfind('/');
  std::string out(mount_dir.substr(0, slash == std::string_view::npos ? 0 : slash));
  out += after;
  return out.empty() ? std::string("/") : out;
}

}  // namespace

void NoteEscape(const Mount& m, std::string_view rest, int which) {
  t_escape_set = true;
  t_escape.which = which;
  t_escape.path = EscapeTarget(m.dir, rest);
}

void ClearEscape() { t_escape_set = false; }

bool TakeEscape(std::string* path, int* which) {
  if (!t_escape_set) return false;
  t_escape_set = false;
  *path = std::move(t_escape.path);
  *which = t_escape.which;
  return true;
}

EscapeHop::EscapeHop() : ok_(++t_hops <= kMaxHops) {}
EscapeHop::~EscapeHop() { --t_hops; }

}  // namespace upfs
