#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of fuzz/ (clang-14, ASan + UBSan) in
# build-fuzz/, writes a seed corpus with make_corpus, and runs each target
# for SECONDS (default 60):
#
#   bash scripts/fuzz.sh            # 60 s per target (what CI runs)
#   bash scripts/fuzz.sh 1800       # long mode: 30 min per target
#
# Targets: fuzz_open (upfs_open, replay, read/write/truncate/punch, close,
# reopen), fuzz_inspect (InspectFile, i.e. fsck), fuzz_pool (patches to
# a valid pool: upfs_mount, a walk of the tree, CheckPool, upfs_umount; its
# seeds are patch lists, from make_corpus --pool) and fuzz_dentry (patches
# to an arena of the next namespace's dentries it builds itself: the
# recovery scan; seeded with the flag byte alone); see fuzz/*.cc for what
# each one requires. A crash, an ASan/UBSan report, a leak, a contract
# violation (a trap), an input that runs longer than 10 s or a process over
# 2 GiB RSS fails the run. For each target it prints
#
#   fuzz TARGET: N runs, 0 crashes
#
# (N from libFuzzer's final stats), and exits non-zero if any target failed.
# Failing inputs are kept in build-fuzz/crashes/ (TARGET-crash-*,
# TARGET-leak-*, TARGET-timeout-*, TARGET-oom-*); replay one with
#
#   build-fuzz/bin/TARGET build-fuzz/crashes/TARGET-crash-...
#
# libFuzzer's output of the last run of each target is in
# build-fuzz/fuzz-TARGET.log.
#
# Environment: JOBS (build parallelism, default 2), FUZZ_TARGETS (default
# "fuzz_open fuzz_inspect fuzz_pool fuzz_dentry"), FUZZ_ARGS (extra libFuzzer flags).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DURATION="${1:-60}"
if ! [[ "$DURATION" =~ ^[0-9]+$ ]] || [ "$DURATION" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS per target]" >&2
  exit 2
fi
JOBS="${JOBS:-2}"
TARGETS="${FUZZ_TARGETS:-fuzz_open fuzz_inspect fuzz_pool fuzz_dentry}"
BUILD=build-fuzz
CRASHES="$BUILD/crashes"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/upfs-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# -- build -----------------------------------------------------------------------
echo "fuzz.sh: building $BUILD/ (clang-14, ASan+UBSan, libFuzzer)"
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DUPFS_SANITIZE=address -DUPFS_BUILD_FUZZ=ON \
    -DUPFS_BUILD_TESTS=OFF -DUPFS_BUILD_BENCH=OFF >"$WORK/cmake.log" 2>&1; then
  cat "$WORK/cmake.log"
  echo "fuzz.sh: FAILED (configure)"
  exit 1
fi
if ! cmake --build "$BUILD" -j"$JOBS" --target $TARGETS make_corpus; then
  echo "fuzz.sh: FAILED (build)"
  exit 1
fi
mkdir -p "$CRASHES"

# Sanitizer settings: leaks on, symbolized stacks, every UBSan report fatal.
SYMBOLIZER=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
[ -z "$SYMBOLIZER" ] && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ] && SYMBOLIZER=/usr/lib/llvm-14/bin/llvm-symbolizer
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}${SYMBOLIZER:+:external_symbolizer_path=$SYMBOLIZER}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}${SYMBOLIZER:+:external_symbolizer_path=$SYMBOLIZER}"

# /dev/shm bookkeeping: the targets keep their host file in a private
# /dev/shm/fuzz-upfs.* directory. That no shared state (/dev/shm/upfs-*)
# piles up is checked by the targets themselves, exactly, after every run
# (fuzz/fuzz_common.h): other processes (tests) may create and remove such
# files at the same time, so a before/after listing here could not tell.
shm_list() { (cd /dev/shm && ls -1d fuzz-upfs.* fuzz-corpus.* 2>/dev/null) | sort; }

# After a crash the target's directory (and the shared state of its input)
# is left behind: remove what this run created.
cleanup_shm() {
  local before="$1" e f id dev ino
  for e in $(comm -13 "$before" <(shm_list)); do
    case "$e" in
      fuzz-upfs.* | fuzz-corpus.*)
        for f in /dev/shm/"$e"/*; do
          [ -f "$f" ] || continue
          if [ "$(head -c 4 "$f" 2>/dev/null)" = UPFS ] && [ "$(stat -c %s "$f")" -ge 32 ]; then
            id=$(od -An -t x8 -j 24 -N 8 "$f" | tr -d ' ')
            dev=$(printf '%x' "$(stat -c %d "$f")")
            ino=$(printf '%x' "$(stat -c %i "$f")")
            rm -f "/dev/shm/upfs-$id-$dev-$ino"
          fi
        done
        rm -rf "/dev/shm/${e:?}"
        ;;
    esac
  done
}

# -- corpus ----------------------------------------------------------------------
SEEDS="$WORK/seeds"
shm_list >"$WORK/shm-before"
if ! "$BUILD/bin/make_corpus" "$SEEDS" 65536; then
  echo "fuzz.sh: FAILED (make_corpus)"
  exit 1
fi
# fuzz_pool's inputs are patch lists to a pool it builds (fuzz/fuzz_pool.cc).
POOL_SEEDS="$WORK/seeds-pool"
if ! "$BUILD/bin/make_corpus" --pool "$POOL_SEEDS"; then
  echo "fuzz.sh: FAILED (make_corpus --pool)"
  exit 1
fi

# -- fuzzing ---------------------------------------------------------------------
# artifacts: how many failing inputs of target $t are in $CRASHES.
artifacts() {
  find "$CRASHES" -maxdepth 1 \( -name "$t-crash-*" -o -name "$t-leak-*" -o -name "$t-timeout-*" \
    -o -name "$t-oom-*" \) | wc -l
}
failed=0
summary=()
for t in $TARGETS; do
  corpus="$WORK/corpus-$t"
  mkdir -p "$corpus"
  if [ "$t" = fuzz_pool ]; then
    cp "$POOL_SEEDS"/* "$corpus"/
  elif [ "$t" = fuzz_dentry ]; then
    # Its image is built in the target: an input is a flag byte and patches.
    printf '\000' >"$corpus/as-built"
    printf '\001' >"$corpus/resealed"
    printf '\002\000' >"$corpus/no-chain"
  else
    cp "$SEEDS"/* "$corpus"/
  fi
  # Every input that ever found a bug (fuzz/regressions/) is part of the
  # corpus, so libFuzzer replays it first and a regression fails at once.
  cp fuzz/regressions/* "$corpus"/ 2>/dev/null || true
  log="$BUILD/fuzz-$t.log"
  before_art=$(artifacts)
  touch "$WORK/start-$t"
  echo "fuzz.sh: $t for ${DURATION} s ($(ls -1 "$corpus" | wc -l) seeds; log: $log)"
  # The outer timeout catches a hang outside any single input (libFuzzer's
  # -timeout covers one input at a time).
  # shellcheck disable=SC2086
  timeout --signal=KILL $((DURATION + 300)) "$BUILD/bin/$t" "$corpus" \
    -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict=fuzz/upfs.dict -print_final_stats=1 -artifact_prefix="$CRASHES/$t-" \
    ${FUZZ_ARGS:-} >"$log" 2>&1
  rc=$?
  # Runs: the final stats line; in -fork mode (FUZZ_ARGS) the last "#N:" line.
  runs=$(grep -E '^stat::number_of_executed_units:' "$log" | tail -n 1 | awk '{print $2}')
  [ -z "$runs" ] && runs=$(grep -oE '^Done [0-9]+ runs' "$log" | tail -n 1 | awk '{print $2}')
  [ -z "$runs" ] && runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  [ -z "$runs" ] && runs="?"
  # Findings: new crash-, leak-, timeout- and oom- inputs (slow-unit- inputs,
  # which libFuzzer saves for inputs close to the timeout, are only listed).
  crashes=$(( $(artifacts) - before_art ))
  slow=$(find "$CRASHES" -maxdepth 1 -name "$t-slow-unit-*" -newer "$WORK/start-$t" | wc -l)
  cleanup_shm "$WORK/shm-before"
  status=ok
  if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
    status=FAILED
    [ "$crashes" -lt 1 ] && crashes=1  # a failure without an artifact (e.g. killed by timeout)
    echo "---- last lines of $log ----"
    tail -n 80 "$log"
    echo "----"
    echo "fuzz.sh: $t exited with status $rc; inputs in $CRASHES/:"
    ls -1t "$CRASHES" | grep "^$t-" | head -n 5 | sed 's/^/  /'
    echo "fuzz.sh: replay with: $BUILD/bin/$t $CRASHES/<file>"
  fi
  if [ "$slow" -gt 0 ]; then
    echo "fuzz.sh: $t: $slow slow input(s) (close to the 10 s timeout) in $CRASHES/$t-slow-unit-*"
  fi
  line="fuzz $t: $runs runs, $crashes crash$([ "$crashes" = 1 ] || echo es)"
  [ "$status" = ok ] || { line="$line (FAILED)"; failed=1; }
  summary+=("$line")
  echo "$line"
done

echo
echo "fuzz.sh summary (${DURATION} s per target):"
for l in "${summary[@]}"; do echo "  $l"; done
if [ "$failed" = 1 ]; then
  echo "fuzz.sh: FAILED"
  exit 1
fi
echo "fuzz.sh: all targets passed"
exit 0
