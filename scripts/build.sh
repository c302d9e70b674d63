#!/usr/bin/env bash
# Configures and builds upfs (Release, Ninja).
#
#   bash scripts/build.sh [BUILD_DIR] [EXTRA CMAKE ARGS...]
#
# BUILD_DIR defaults to build; outputs land in BUILD_DIR/bin (upfs, tests,
# upfs_microbench) and BUILD_DIR/lib (libupfs.so). JOBS (default 2) sets the
# parallelism; BUILD_TYPE (default Release) the CMake build type; TARGETS
# (space-separated, default all) what to build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir="${1:-build}"
[ $# -gt 0 ] && shift
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@"
# shellcheck disable=SC2086 # TARGETS is a list
cmake --build "$dir" -j"${JOBS:-2}" ${TARGETS:+--target $TARGETS}
