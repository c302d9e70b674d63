// The shape of an absolute path, looked at before a pool's mount table:
// whether it needs lexical splitting at the mount it enters.
#pragma once

#include <string>
#include <string_view>

namespace upfs {

// Whether an absolute path has a "." or ".." component or "//" in it,
// which SplitAtMount (pool_mounts.cc) handles. A name that only starts
// with a dot (".git", "...") is an ordinary component: taking the slow
// split for it cost every call under a hidden directory ~100-200 ns (the
// benchmark's mount directory, "/.upfs-bench-PID", measured 2x a stat's
// time). Every path call of a program with a pool mounted asks this,
// pool path or not.
bool NeedsSplit(std::string_view p);

// An absolute path without its empty ("//") and "." components, which
// mean nothing whatever the names are, but for a last "." (rmdir of "d/."
// is EINVAL, of "d/" is not) and a trailing slash (both require a
// directory). ".." stays: what it climbs out of depends on symbolic links.
std::string WithoutNoOpComponents(std::string_view p);

}  // namespace upfs
