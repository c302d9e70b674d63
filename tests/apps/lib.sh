# Shared helpers of the application tests (tests/apps/*.sh, ctest label
# "apps"). Sourced by each script after `set -uo pipefail`:
#
#   . "$(dirname "$0")/lib.sh"
#   apps_init NAME PATH/TO/upfs
#
# Layout (all under /dev/shm, like tests/preload_test.sh):
#   $T       the test's temp dir, removed on exit (UPFS_APPS_KEEP=1 keeps it)
#   $UP      UPFS_DIR of every `run` (files the application creates there are
#            upfs files)
#   $PL      the same work without the library, for comparison
#   $OUT     scratch space outside UPFS_DIR
# Knobs: UPFS_APPS_LONG=1 runs the long version of every workload
# ($LONG is 1 then); UPFS_APPS_KEEP=1 keeps $T for inspection.

LONG=0
[ "${UPFS_APPS_LONG:-0}" = 1 ] && LONG=1
APPS_NAME=app
fails=0
passes=0
_cleanup_hooks=()
_start=$(date +%s.%N)

apps_init() {
  APPS_NAME=$1
  UPFS=${2:-}
  if [ -z "$UPFS" ] || [ ! -x "$UPFS" ]; then
    echo "usage: $0 PATH/TO/upfs [...]" >&2
    exit 2
  fi
  UPFS=$(cd "$(dirname "$UPFS")" && pwd)/$(basename "$UPFS")
  _shm_before=$(_shm_states)
  T=$(mktemp -d "/dev/shm/upfs-apps-$APPS_NAME.XXXXXX")
  UP=$T/up
  PL=$T/plain
  OUT=$T/outside
  mkdir -p "$UP" "$PL" "$OUT"
  trap _apps_cleanup EXIT
  trap 'exit 130' INT TERM
  # Stray files of the applications (fio's verify state, core dumps...)
  # land in the temp dir, not in the caller's directory.
  cd "$OUT" || exit 2
  echo "== $APPS_NAME on upfs ($([ "$LONG" = 1 ] && echo long || echo short) mode), temp dir $T"
}

# on_exit CMD...: run CMD (eval'd) when the script exits, before the temp
# dir goes (servers are killed here).
on_exit() { _cleanup_hooks+=("$*"); }

# The shared-state objects of upfs files (/dev/shm/upfs-<id>-<dev>-<ino>).
_shm_states() { find /dev/shm -maxdepth 1 -type f -name 'upfs-*-*-*' -printf '%f\n' 2>/dev/null | sort; }

_apps_cleanup() {
  local rc=$?
  local h
  for h in "${_cleanup_hooks[@]+"${_cleanup_hooks[@]}"}"; do eval "$h" >/dev/null 2>&1; done
  if [ "${UPFS_APPS_KEEP:-0}" = 1 ]; then
    echo "(kept $T)"
  elif [ -n "${T:-}" ] && [ -d "$T" ]; then
    find "$T" -type f -print0 2>/dev/null | xargs -0 -r "$UPFS" rm --force >/dev/null 2>&1
    rm -rf "$T"
    # Informational: shared state that outlived the test's files (another
    # upfs user running at the same time can add to this count).
    local left
    left=$(comm -13 <(echo "$_shm_before") <(_shm_states) | grep -c .)
    [ "$left" -eq 0 ] || echo "note: $left upfs shared-state object(s) appeared in /dev/shm during this test and remain after its cleanup"
  fi
  return $rc
}

pass() { echo "ok   $*"; passes=$((passes + 1)); }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# die MESSAGE: a test that cannot run (missing tool, broken setup) fails.
die() {
  echo "FAIL $*"
  fails=$((fails + 1))
  finish
}

# need TOOL...: every TOOL must be on PATH (or be an executable path).
need() {
  local t
  for t in "$@"; do
    if ! command -v "$t" >/dev/null 2>&1; then
      die "required tool '$t' is missing (scripts/install-deps.sh installs the applications)"
    fi
  done
}

# check WHAT CMD...: CMD's exit status decides; its output is shown on failure.
check() {
  local what=$1
  shift
  local log
  log=$(mktemp "$OUT/check.XXXXXX")
  if "$@" >"$log" 2>&1; then
    pass "$what"
  else
    local rc=$?
    fail "$what (exit $rc): $*"
    sed 's/^/    | /' "$log" | tail -n 60
  fi
  rm -f "$log"
}

# step WHAT CMD...: like check, but the command's output is kept in
# $OUT/last.log (and shown on failure); returns CMD's status.
step() {
  local what=$1
  shift
  if "$@" >"$OUT/last.log" 2>&1; then
    pass "$what"
    return 0
  else
    local rc=$?
    fail "$what (exit $rc): $*"
    sed 's/^/    | /' "$OUT/last.log" | tail -n 60
    return $rc
  fi
}

# run CMD...: CMD under `upfs run --dir $UP` (default mode strict).
run() { "$UPFS" run --dir "$UP" ${UPFS_APPS_MODE:+--mode "$UPFS_APPS_MODE"} -- "$@"; }

is_upfs() { [ "$(head -c 4 "$1" 2>/dev/null)" = "UPFS" ]; }
fsck_clean() { "$UPFS" fsck "$1"; }
# same GOT EXPECTED
same() {
  [ "$1" = "$2" ] || {
    echo "got:      $1"
    echo "expected: $2"
    return 1
  }
}

# upfs_files WHAT DIR [MIN] [EXCLUDE_REGEX]: every non-empty regular file
# under DIR (names matching EXCLUDE_REGEX aside) is a upfs file and
# `upfs fsck` finds it clean; at least MIN (default 1) such files exist.
# Run it after the application has exited.
upfs_files() {
  local what=$1 dir=$2 min=${3:-1} excl=${4:-}
  local n=0 bad=0 f
  local log=$OUT/upfs_files.log
  : >"$log"
  while IFS= read -r -d '' f; do
    if [ -n "$excl" ] && [[ $(basename "$f") =~ $excl ]]; then continue; fi
    if ! is_upfs "$f"; then
      echo "not a upfs file: $f ($(stat -c %s "$f") bytes, starts with: $(head -c 16 "$f" | od -An -c | tr -s ' ' | head -c 60))" >>"$log"
      bad=$((bad + 1))
      continue
    fi
    if ! "$UPFS" fsck "$f" >>"$log" 2>&1; then
      echo "fsck failed: $f" >>"$log"
      bad=$((bad + 1))
      continue
    fi
    n=$((n + 1))
  done < <(find "$dir" -type f -size +0c -print0 2>/dev/null)
  if [ "$bad" -eq 0 ] && [ "$n" -ge "$min" ]; then
    pass "$what: $n file(s) are upfs files, fsck clean"
  else
    fail "$what: $bad bad, $n good upfs file(s) (need >= $min) under $dir"
    grep '^not a upfs file: \|^fsck failed: \|^problem: \|DAMAGED\|cannot check' "$log" | sed 's/^/    | /' | tail -n 40
  fi
}

# timed LABEL CMD...: runs CMD, prints how long it took.
timed() {
  local label=$1
  shift
  local s e rc
  s=$(date +%s.%N)
  "$@"
  rc=$?
  e=$(date +%s.%N)
  printf 'time %-40s %6.1f s\n' "$label" "$(awk "BEGIN{print $e - $s}")"
  return $rc
}

# digest of stdin
digest() { sha256sum | cut -d' ' -f1; }

finish() {
  local e
  e=$(date +%s.%N)
  printf '%s: %d passed, %d failed (%.1f s)\n' "$APPS_NAME" "$passes" "$fails" "$(awk "BEGIN{print $e - $_start}")"
  [ "$fails" -eq 0 ] || exit 1
  exit 0
}
