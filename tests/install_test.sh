#!/usr/bin/env bash
# Installs upfs into a temporary prefix and builds a program against it the
# two ways the README shows (ctest label "install"):
#   install_test.sh BUILD_DIR CONSUMER_SRC BINDIR LIBDIR INCLUDEDIR VERSION CMAKE CC CXX
# BINDIR, LIBDIR and INCLUDEDIR are CMAKE_INSTALL_* (relative to the prefix);
# CONSUMER_SRC is tests/install_consumer. Checks what `cmake --install`
# puts where, that libupfs.so needs no development files of its
# dependencies, builds tests/install_consumer/main.c with `cc $(pkg-config
# --cflags --libs upfs)` and with find_package(upfs), runs both, and runs
# the installed `upfs` tool, `upfs run` included (which must load the
# installed preload library). Removes everything it creates; exits non-zero
# with a FAIL line for every check that failed.
set -uo pipefail

if [ $# -ne 9 ]; then
  echo "usage: install_test.sh BUILD_DIR CONSUMER_SRC BINDIR LIBDIR INCLUDEDIR VERSION CMAKE CC CXX" >&2
  exit 2
fi
BUILD=$1 CONSUMER=$2 BINDIR=$3 LIBDIR=$4 INCLUDEDIR=$5 VERSION=$6 CMAKE=$7 CC=$8 CXX=$9

SHM_BASE=/dev/shm
[ -d "$SHM_BASE" ] || SHM_BASE=${TMPDIR:-/tmp}
T=$(mktemp -d "${TMPDIR:-/tmp}/upfs-install-test.XXXXXX") || { echo "FAIL: mktemp" >&2; exit 1; }
D=$(mktemp -d "$SHM_BASE/upfs-install-test.XXXXXX") || { echo "FAIL: mktemp" >&2; rm -rf "$T"; exit 1; }
PREFIX=$T/prefix
UPFS=$PREFIX/$BINDIR/upfs
LIB=$PREFIX/$LIBDIR

# `cmake --install` writes BUILD/install_manifest.txt: keep a real
# installation's manifest as it was.
MANIFEST=$BUILD/install_manifest.txt
HAD_MANIFEST=0
if [ -e "$MANIFEST" ]; then HAD_MANIFEST=1; cp -p "$MANIFEST" "$T/manifest.saved"; fi

cleanup() {
  # upfs files (and their shared state) first, with the installed tool if
  # it got that far, then the directories.
  if [ -x "$UPFS" ]; then
    find "$D" -type f -exec "$UPFS" rm --force {} + >/dev/null 2>&1
  fi
  rm -rf "$D"
  # directories the consumer made itself (it names them on its first line)
  local dir
  for dir in $(sed -n 's/^upfs_consumer: directory //p' "$T"/own.*.log 2>/dev/null); do
    case $dir in "$SHM_BASE"/upfs-consumer.*) ;; *) continue ;; esac
    [ -x "$UPFS" ] && find "$dir" -type f -exec "$UPFS" rm --force {} + >/dev/null 2>&1
    rm -rf "$dir"
  done
  if [ "$HAD_MANIFEST" = 1 ]; then cp -p "$T/manifest.saved" "$MANIFEST"; else rm -f "$MANIFEST"; fi
  rm -rf "$T"
}
trap cleanup EXIT

fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# fatal WHAT: a failure after which nothing else can be checked.
fatal() { echo "FAIL $* (stopping)"; echo "install_test: FAILED"; exit 1; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
# run_logged WHAT CMD...: runs CMD with its output in $T/log, shown on failure.
run_logged() {
  local what=$1 rc; shift
  "$@" >"$T/log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then pass "$what"; return 0; fi
  fail "$what: exit $rc; output:"; sed 's/^/    /' "$T/log"; return 1
}

# --- 1. install ------------------------------------------------------------------
run_logged "cmake --install into $PREFIX" "$CMAKE" --install "$BUILD" --prefix "$PREFIX" ||
  fatal "cmake --install"
echo "installed:"
(cd "$PREFIX" && find . | sort | sed 's/^/    /')

for f in "$BINDIR/upfs" "$LIBDIR/libupfs.so.$VERSION" "$LIBDIR/libupfs-preload.so" \
         "$INCLUDEDIR/upfs/upfs.h" "$LIBDIR/pkgconfig/upfs.pc" \
         "$LIBDIR/cmake/upfs/upfsConfig.cmake" "$LIBDIR/cmake/upfs/upfsConfigVersion.cmake" \
         "$LIBDIR/cmake/upfs/upfsTargets.cmake"; do
  check "installed $f" test -f "$PREFIX/$f"
done
for l in libupfs.so libupfs.so.0; do
  check "installed $LIBDIR/$l -> libupfs.so.$VERSION" \
    test "$(readlink -f "$LIB/$l" 2>/dev/null)" = "$(readlink -f "$LIB/libupfs.so.$VERSION")"
done
check "upfs is executable" test -x "$UPFS"
check "only the public header is installed" \
  test "$(cd "$PREFIX" && find "$INCLUDEDIR" -type f)" = "$INCLUDEDIR/upfs/upfs.h"
check "no static archive is installed" test -z "$(find "$PREFIX" -name '*.a')"
check "the installed header is the source tree's" \
  cmp -s "$CONSUMER/../../include/upfs/upfs.h" "$PREFIX/$INCLUDEDIR/upfs/upfs.h"

# --- 2. what libupfs.so needs at link and run time ------------------------------
readelf -d "$LIB/libupfs.so.$VERSION" >"$T/dynamic" 2>&1 || fatal "readelf -d libupfs.so"
check "SONAME is libupfs.so.0" grep -q 'Library soname: \[libupfs\.so\.0\]' "$T/dynamic"
# Every NEEDED entry a versioned SONAME (libpmem.so.1, not the development
# symlink libpmem.so), and no RPATH/RUNPATH into the build tree.
unversioned=$(grep NEEDED "$T/dynamic" | grep -E '\[[^]]*\.so\]')
check "NEEDED entries are runtime SONAMEs${unversioned:+: $unversioned}" test -z "$unversioned"
check "libupfs.so needs libpmem's runtime library" grep -q 'NEEDED.*\[libpmem\.so\.1\]' "$T/dynamic"
check "no RPATH/RUNPATH in the installed libupfs.so" bash -c "! grep -qE 'RPATH|RUNPATH' '$T/dynamic'"

# --- 3. a program built with pkg-config ---------------------------------------
export PKG_CONFIG_PATH=$LIB/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
check "pkg-config --modversion upfs is $VERSION" \
  test "$(pkg-config --modversion upfs 2>&1)" = "$VERSION"
if flags=$(pkg-config --cflags --libs upfs 2>"$T/log"); then
  pass "pkg-config --cflags --libs upfs: $flags"
else
  fail "pkg-config --cflags --libs upfs:"; sed 's/^/    /' "$T/log"
fi
# The .pc file is relocatable: its paths are the prefix it was installed to.
check "pkg-config gives the include directory under the prefix" \
  test "$(pkg-config --variable=includedir upfs)" -ef "$PREFIX/$INCLUDEDIR"
check "pkg-config gives the library directory under the prefix" \
  test "$(pkg-config --variable=libdir upfs)" -ef "$LIB"
check "libpmem is not on the shared link line" bash -c "! echo '$flags' | grep -q pmem"
# The header compiles on its own, in strict C11 and C++11, without warnings.
cflags=$(pkg-config --cflags upfs 2>/dev/null)
echo '#include <upfs/upfs.h>' >"$T/header_only.h"
# shellcheck disable=SC2086  # $cflags and $flags are lists of words
run_logged "<upfs/upfs.h> on its own in C11" "$CC" -std=c11 -pedantic -Wall -Wextra -Werror \
  -fsyntax-only $cflags -x c "$T/header_only.h"
# shellcheck disable=SC2086
run_logged "<upfs/upfs.h> on its own in C++11" "$CXX" -std=c++11 -pedantic -Wall -Wextra -Werror \
  -fsyntax-only $cflags -x c++ "$T/header_only.h"
# shellcheck disable=SC2086
run_logged "cc main.c \$(pkg-config --cflags --libs upfs)" \
  "$CC" -std=c11 -pedantic -Wall -Wextra -Werror -o "$T/consumer_pc" "$CONSUMER/main.c" $flags

# --- 4. a program built with find_package(upfs) -------------------------------
run_logged "configure tests/install_consumer with -DCMAKE_PREFIX_PATH=$PREFIX" \
  "$CMAKE" -S "$CONSUMER" -B "$T/consumer-build" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release
check "find_package(upfs) found the installed package" \
  grep -qx "upfs_DIR:PATH=$LIB/cmake/upfs" "$T/consumer-build/CMakeCache.txt"
run_logged "build tests/install_consumer" "$CMAKE" --build "$T/consumer-build"

# --- 5. both programs run against the installed library -------------------------
for prog in "$T/consumer_pc" "$T/consumer-build/upfs_consumer"; do
  name=${prog#"$T"/}
  if [ ! -x "$prog" ]; then fail "$name was not built"; continue; fi
  lib=$(LD_LIBRARY_PATH=$LIB ldd "$prog" | awk '$1 == "libupfs.so.0" { print $3 }')
  check "$name loads libupfs.so.0 from the prefix ($lib)" test "$lib" -ef "$LIB/libupfs.so.0"
  # once in a directory of the test's, once in one of its own making
  run_logged "$name $D" env LD_LIBRARY_PATH="$LIB" "$prog" "$D" && cat "$T/log"
  run_logged "$name (own directory)" env LD_LIBRARY_PATH="$LIB" "$prog" && cat "$T/log"
  cp "$T/log" "$T/own.${name//\//_}.log"
done
check "the programs left nothing in $D" test -z "$(ls -A "$D")"

# --- 6. the installed tool ------------------------------------------------------
run_logged "upfs --help" "$UPFS" --help && check "upfs --help lists the verbs" grep -q '^  run ' "$T/log"
check "upfs --version is $VERSION" test "$("$UPFS" --version 2>&1)" = "upfs $VERSION"
# upfs run: the preload library it loads is the installed one.
preload=$("$UPFS" run --dir "$D" -- printenv LD_PRELOAD 2>&1)
check "upfs run preloads the installed library (${preload%%:*})" \
  test "${preload%%:*}" -ef "$LIB/libupfs-preload.so"
run_logged "upfs run creates a file under --dir" \
  "$UPFS" run --dir "$D" -- sh -c "printf 'hello, upfs\n' > '$D/run.txt'"
check "the file is a upfs file" test "$(head -c 4 "$D/run.txt" 2>/dev/null)" = UPFS
check "cat under upfs run reads it back" \
  test "$("$UPFS" run --dir "$D" -- cat "$D/run.txt" 2>&1)" = "hello, upfs"
run_logged "upfs fsck" "$UPFS" fsck "$D/run.txt"
run_logged "upfs rm" "$UPFS" rm "$D/run.txt"
check "upfs rm removed the file" test ! -e "$D/run.txt"

if [ "$fails" -ne 0 ]; then
  echo "install_test: FAILED ($fails checks)"
  exit 1
fi
echo "install_test: all checks passed"
