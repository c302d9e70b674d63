#!/usr/bin/env bash
# Installs everything upfs needs to build, test and benchmark on Debian 12:
# compilers (GCC 12, clang-14 with its sanitizer runtimes), CMake, Ninja,
# libpmem, ISA-L (its CRC-32C), GoogleTest, Google Benchmark and Python 3, and the real
# applications the preload tests and the application benchmark run (SQLite,
# RocksDB's tools, LevelDB through plyvel, Redis, fio).
#
# Idempotent and non-interactive: when every package is already installed it
# changes nothing and needs no network. Uses sudo only when not root.
set -euo pipefail

PACKAGES=(
  build-essential g++-12 cmake ninja-build pkg-config
  libpmem-dev libisal-dev
  libgtest-dev googletest
  libbenchmark-dev
  clang-14 libclang-rt-14-dev llvm-14
  python3
  sqlite3 libsqlite3-dev tcl
  rocksdb-tools
  python3-plyvel
  redis-server redis-tools
  fio
  xz-utils
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: apt-get not found; install these by hand: ${missing[*]}" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: not root and no sudo; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${PACKAGES[@]}"
echo "install-deps: done"
