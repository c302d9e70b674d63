#!/usr/bin/env bash
# The full test suite, as CI runs it (.ci/run):
#
#   1. deps  scripts/install-deps.sh, and speedtest1 from Debian's sqlite3
#            source (scripts/build-speedtest1.sh build/apps)
#   2. main  RelWithDebInfo build in build/ (GCC), every test, the real
#            applications (label apps) included:
#            ctest --output-on-failure
#   3. asan  ASan+UBSan build in build-asan/ (clang-14):
#            ctest -L 'unit|corruption|differential|semantics',
#            UPFS_TEST_SCALE=0.2
#   4. tsan  TSan build in build-tsan/ (clang-14) of the programs it runs
#            (target concurrency_tests):
#            ctest -L concurrency, UPFS_TEST_SCALE=0.2
#   5. fuzz  libFuzzer build in build-fuzz/ (clang-14, ASan+UBSan):
#            scripts/fuzz.sh FUZZ_SECONDS (each target that long; any
#            crash, leak, hang or contract violation fails the stage)
#
# After each test stage, whatever new upfs objects the stage left in
# /dev/shm fail it ("STAGE-litter").
#
# Every stage runs even when an earlier one failed; the script exits non-zero
# if any failed. It ends with a summary of the stages whose last line is
# ctest's own summary line (of the first failing stage, else of the main
# run), e.g. "100% tests passed, 0 tests failed out of 57".
#
# Environment: JOBS (build parallelism, default 2), CTEST_JOBS (tests run in
# parallel per stage, default 2: the suite is made for it, tests that must
# run alone say so, RUN_SERIAL or RESOURCE_LOCK), SKIP_DEPS=1 (skip stage 1),
# STAGES="main asan tsan fuzz" (run a subset), FUZZ_SECONDS (per fuzz
# target, default 60).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS="${JOBS:-2}"
CTEST_JOBS="${CTEST_JOBS:-2}"
STAGES="${STAGES:-main asan tsan fuzz}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
START=$(date +%s)
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/upfs-test.XXXXXX")
trap 'rm -rf "$LOGDIR"' EXIT

names=()
results=()
summaries=()

# record NAME STATUS [LOGFILE]: remembers a stage's result and, from its log,
# ctest's summary line.
record() {
  local summary=""
  if [ -n "${3:-}" ] && [ -f "$3" ]; then
    summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$3" | tail -n 1 || true)
  fi
  names+=("$1")
  results+=("$2")
  summaries+=("$summary")
}

banner() {
  echo
  echo "==================== $* ($(date +%H:%M:%S), $(( $(date +%s) - START )) s in) ===================="
}

# build_tree DIR TARGETS CMAKE_ARGS...: configure and build one tree with
# scripts/build.sh, TARGETS ("" for every target) and what they need. The
# arguments' CMAKE_BUILD_TYPE comes after build.sh's and wins.
build_tree() {
  local dir="$1" targets="$2"
  shift 2
  TARGETS="$targets" JOBS="$JOBS" bash scripts/build.sh "$dir" "$@"
}

# run_ctest DIR LOG CTEST_ARGS...: runs ctest in DIR (behind the command in
# the CTEST_PREFIX array, if any), its output tee'd into LOG.
CTEST_PREFIX=()
run_ctest() {
  local dir="$1" log="$2"
  shift 2
  (cd "$dir" && "${CTEST_PREFIX[@]}" ctest --output-on-failure --no-tests=error \
    -j"$CTEST_JOBS" "$@") 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

stage_wanted() { [[ " $STAGES " == *" $1 "* ]]; }

# upfs's objects in /dev/shm (shared state, flock objects, test directories):
# a stage's tests must leave none behind. Compared with what was there
# before the stage, so that a developer's machine with leftovers of older
# runs is judged fairly.
shm_objects() { ls -1 /dev/shm 2>/dev/null | grep -E '^upfs-' | sort || true; }
# check_litter STAGE BEFORE: records STAGE-litter as failed if the stage left
# new upfs objects in /dev/shm.
check_litter() {
  local left
  left=$(comm -13 <(echo "$2") <(shm_objects))
  if [ -n "$left" ]; then
    echo "test.sh: stage $1 left these in /dev/shm:"
    echo "$left" | sed 's/^/  /'
    record "$1-litter" FAILED
  fi
}

# -- 1. dependencies ----------------------------------------------------------
if [ "${SKIP_DEPS:-0}" != 1 ]; then
  banner "deps: scripts/install-deps.sh"
  if bash scripts/install-deps.sh && bash scripts/build-speedtest1.sh build/apps; then
    record deps ok
  else
    record deps FAILED
  fi
fi

# -- 2. main build, every test ---------------------------------------------------
if stage_wanted main; then
  banner "main: RelWithDebInfo build in build/"
  log="$LOGDIR/main.log"
  if build_tree build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
    banner "main: ctest (all labels)"
    before=$(shm_objects)
    if run_ctest build "$log"; then record main ok "$log"; else record main FAILED "$log"; fi
    check_litter main "$before"
  else
    record main "FAILED (build)"
  fi
fi

# -- 3. ASan + UBSan -------------------------------------------------------------
if stage_wanted asan; then
  banner "asan: ASan+UBSan build in build-asan/ (clang-14)"
  log="$LOGDIR/asan.log"
  if build_tree build-asan "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUPFS_SANITIZE=address \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DUPFS_BUILD_BENCH=OFF; then
    banner "asan: ctest -L 'unit|corruption|differential|semantics' (UPFS_TEST_SCALE=0.2)"
    before=$(shm_objects)
    if UPFS_TEST_SCALE=0.2 \
        ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
        UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
        run_ctest build-asan "$log" -L 'unit|corruption|differential|semantics'; then
      record asan ok "$log"
    else
      record asan FAILED "$log"
    fi
    check_litter asan "$before"
  else
    record asan "FAILED (build)"
  fi
fi

# -- 4. TSan ---------------------------------------------------------------------
if stage_wanted tsan; then
  banner "tsan: TSan build in build-tsan/ (clang-14), the concurrency tests' programs"
  log="$LOGDIR/tsan.log"
  # Only the programs it runs: the ASan stage has built everything with
  # clang already.
  if build_tree build-tsan concurrency_tests -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUPFS_SANITIZE=thread \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DUPFS_BUILD_BENCH=OFF; then
    banner "tsan: ctest -L concurrency (UPFS_TEST_SCALE=0.2)"
    # TSan's shadow memory layout breaks under high mmap randomization on some
    # kernels; running without address randomization avoids that.
    if setarch "$(uname -m)" -R true >/dev/null 2>&1; then CTEST_PREFIX=(setarch "$(uname -m)" -R); fi
    # The test programs carry die_after_fork=0 themselves
    # (tests/tsan_defaults.cc); these options add to it.
    before=$(shm_objects)
    if UPFS_TEST_SCALE=0.2 TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}" \
        run_ctest build-tsan "$log" -L concurrency; then
      record tsan ok "$log"
    else
      record tsan FAILED "$log"
    fi
    check_litter tsan "$before"
    CTEST_PREFIX=()
  else
    record tsan "FAILED (build)"
  fi
fi

# -- 5. fuzzing ------------------------------------------------------------------
# scripts/fuzz.sh prints one "fuzz TARGET: N runs, K crashes" line per target
# and no ctest summary, so the stage is recorded without a log.
if stage_wanted fuzz; then
  banner "fuzz: libFuzzer build in build-fuzz/ (clang-14, ASan+UBSan), ${FUZZ_SECONDS} s per target"
  fuzz_start=$(date +%s)
  if JOBS="$JOBS" bash scripts/fuzz.sh "$FUZZ_SECONDS"; then record fuzz ok; else record fuzz FAILED; fi
  echo "fuzz: stage took $(( $(date +%s) - fuzz_start )) s"
fi

# -- summary -----------------------------------------------------------------------
elapsed=$(( $(date +%s) - START ))
failed=0
final=""
echo
echo "==================== test.sh summary ($((elapsed / 60)) min $((elapsed % 60)) s) ===================="
for i in "${!names[@]}"; do
  printf '  %-5s %-15s %s\n' "${names[$i]}" "${results[$i]}" "${summaries[$i]}"
  if [ "${results[$i]}" != ok ]; then
    failed=1
    if [ -z "$final" ] && [ -n "${summaries[$i]}" ]; then final="${summaries[$i]}"; fi
  fi
done
if [ "$failed" = 1 ]; then
  echo "test.sh: FAILED"
else
  echo "test.sh: all stages passed"
fi
# The last line: ctest's own summary (first failing stage's, else main's).
if [ -z "$final" ]; then
  for i in "${!names[@]}"; do
    if [ "${names[$i]}" = main ] && [ -n "${summaries[$i]}" ]; then final="${summaries[$i]}"; fi
  done
fi
if [ -z "$final" ]; then
  for i in "${!names[@]}"; do
    if [ -n "${summaries[$i]}" ]; then final="${summaries[$i]}"; fi
  done
fi
[ -n "$final" ] && echo "$final"
exit "$failed"
