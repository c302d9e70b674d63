#!/usr/bin/env bash
# Fails if the engine, as linked into the preload library, still calls a
# function the library interposes: that call would come back through the
# interposer (recursion, or upfs treating its own host descriptors as upfs
# descriptors). Every such call must be listed in renames.txt.
#   check_renames.sh NM CORE_RENAMED.a LIBUPFS_PRELOAD.so
set -euo pipefail
nm=$1 core=$2 lib=$3
undefined=$("$nm" -u --format=posix "$core" | awk '$2 == "U" {print $1}' | sort -u)
exported=$("$nm" -D --defined-only --format=posix "$lib" | awk '{print $1}' | sort -u)
bad=$(comm -12 <(echo "$undefined") <(echo "$exported") | grep -v '^upfs_' || true)
if [ -n "$bad" ]; then
  echo "check_renames: the engine calls interposed functions; add them to src/preload/renames.txt:" >&2
  echo "$bad" | sed 's/^/  /' >&2
  exit 1
fi
