#!/usr/bin/env bash
# libupfs.so's dynamic symbol table holds exactly the functions its headers
# declare (src/libupfs.map): the C API of include/upfs/upfs.h and the
# preload library's entry points of src/posix/preload_hooks.h; none of the
# engine's C++ symbols (they were all exported once, every call between
# the engine's files going through the PLT).
#   exports_test.sh NM LIBUPFS HEADER...
set -euo pipefail
nm=$1 lib=$2
shift 2
declared=$(grep -ohE '\bupfs_[a-z0-9_]+[[:space:]]*\(' "$@" | tr -d '( \t' | sort -u)
exported=$("$nm" -D --defined-only --format=posix "$lib" | awk '{print $1}' | sort -u)
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -z "$exported" ] || [ -n "$extra" ] || [ -n "$missing" ]; then
  [ -z "$exported" ] && echo "exports_test: $lib exports nothing" >&2
  [ -n "$extra" ] && echo "exports_test: exported but declared in no header ($(echo "$extra" | wc -l)):" >&2 &&
    echo "$extra" | head -20 | sed 's/^/  /' >&2
  [ -n "$missing" ] && echo "exports_test: declared but not exported:" >&2 && echo "$missing" | sed 's/^/  /' >&2
  exit 1
fi
echo "exports_test: $(echo "$exported" | wc -l) functions exported, each declared in a header"
