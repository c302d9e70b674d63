#!/usr/bin/env bash
# The quick start: installs the dependencies, builds upfs (Release) into
# build/, and runs the short benchmark on /dev/shm, which prints upfs against
# the kernel file system, workload by workload: first files, then a pool (a
# whole namespace in one file) against a kernel directory.
#
#   bash scripts/demo.sh
#
# It builds what it runs and what a program uses upfs through: the CLI, the
# library and the preload library, not the test programs (scripts/test.sh
# builds those; two thirds of a whole build's time). The benchmark's JSON
# results are left in build/bench-quick.json and build/bench-pool-quick.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
TARGETS="upfs_cli upfs upfs_preload" bash scripts/build.sh build
echo
echo "== upfs bench --quick (files on /dev/shm, removed afterwards) =="
build/bin/upfs bench --quick --dir /dev/shm --json build/bench-quick.json
echo
echo "== upfs bench --quick --pool (a pool on /dev/shm against a directory there, removed afterwards) =="
build/bin/upfs bench --quick --pool --dir /dev/shm --json build/bench-pool-quick.json
echo
echo "JSON results: build/bench-quick.json, build/bench-pool-quick.json"
echo "(chart: python3 bench/plot.py build/bench-quick.json)"
