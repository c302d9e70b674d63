#!/usr/bin/env bash
# Builds SQLite's speedtest1 benchmark (test/speedtest1.c of Debian's sqlite3
# source package) against the system libsqlite3: OUTDIR/speedtest1.
#
# Usage: scripts/build-speedtest1.sh OUTDIR
#
# - Idempotent: does nothing when OUTDIR/speedtest1 already exists.
# - The source is the Debian source package of the installed libsqlite3-dev
#   (same version when the archive still has it), fetched with
#   `apt-get source --download-only`; apt checks every file against the
#   signed Sources index, and this script checks the SHA-256 sums of the .dsc
#   once more. When no deb-src entry exists, one (mirroring the deb entries
#   of /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list) is
#   written to /etc/apt/sources.list.d/upfs-deb-src.sources, idempotently.
# - Only test/speedtest1.c is extracted (plus any Debian patch touching it,
#   applied with patch(1)); nothing is vendored in the repository.
# Needs root or sudo only to add the deb-src entry and run apt-get update.
set -euo pipefail

OUTDIR=${1:?usage: build-speedtest1.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
OUT=$OUTDIR/speedtest1
if [ -x "$OUT" ]; then
  echo "build-speedtest1: $OUT exists"
  exit 0
fi
die() { echo "build-speedtest1: $*" >&2; exit 1; }
for t in apt-get apt-cache dpkg-query tar xz cc sha256sum; do
  command -v "$t" >/dev/null 2>&1 || die "missing tool: $t"
done
[ -f /usr/include/sqlite3.h ] || die "libsqlite3-dev is not installed (scripts/install-deps.sh)"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot add a deb-src entry"
  SUDO=(sudo)
fi

VER=$(dpkg-query -W -f='${source:Version}' libsqlite3-dev)
[ -n "$VER" ] || die "cannot read the source version of libsqlite3-dev"

have_src() { apt-cache showsrc sqlite3 2>/dev/null | grep -q '^Version: '; }
have_ver() { apt-cache showsrc sqlite3 2>/dev/null | grep -qx "Version: $1"; }

# --- a deb-src entry (idempotent)
LIST=/etc/apt/sources.list.d/upfs-deb-src.sources
if ! have_src; then
  want=
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    want=$(sed 's/^Types:.*$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources)
  elif [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
    # One-line format: turn each "deb [opts] URI SUITE COMPONENTS..." into a stanza.
    want=$(grep '^deb ' /etc/apt/sources.list | sed 's/\[[^]]*\]//' | awk '{
      printf "Types: deb-src\nURIs: %s\nSuites: %s\nComponents:", $2, $3
      for (i = 4; i <= NF; ++i) printf " %s", $i
      printf "\n\n" }')
  fi
  [ -n "$want" ] || die "no Debian deb entries found to mirror as deb-src"
  if [ ! -f "$LIST" ] || [ "$(cat "$LIST")" != "$want" ]; then
    echo "build-speedtest1: writing $LIST"
    printf '%s\n' "$want" | "${SUDO[@]}" tee "$LIST" >/dev/null
  fi
  echo "build-speedtest1: apt-get update"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  have_src || die "apt-get still knows no source for sqlite3"
fi

# The installed version if the archive has it, else the archive's newest
# source of sqlite3 (speedtest1.c hardly changes within a release).
if ! have_ver "$VER"; then
  new=$(apt-cache showsrc sqlite3 | awk '/^Version: / {print $2}' | sort -V | tail -1)
  echo "build-speedtest1: source $VER not in the archive; using $new" >&2
  VER=$new
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/upfs-speedtest1.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
echo "build-speedtest1: apt-get source --download-only sqlite3=$VER"
# apt verifies each file against the hashes of the signed Sources index.
apt-get source -q --download-only "sqlite3=$VER" >apt.log 2>&1 || { cat apt.log >&2; die "apt-get source failed"; }
DSC=$(ls ./*.dsc)
# Check the SHA-256 sums listed in the .dsc (belt and braces).
awk '/^Checksums-Sha256:/ {on=1; next} /^[^ ]/ {on=0} on && NF==3 {print $1 "  " $3}' "$DSC" >sums
[ -s sums ] || die "no Checksums-Sha256 in $DSC"
sha256sum --quiet -c sums || die "checksum mismatch in the downloaded source"

ORIG=$(awk '/^Checksums-Sha256:/ {on=1; next} /^[^ ]/ {on=0} on && $3 ~ /\.orig\.tar\./ && $3 !~ /orig-/ {print $3}' "$DSC")
DEB=$(awk '/^Checksums-Sha256:/ {on=1; next} /^[^ ]/ {on=0} on && $3 ~ /\.debian\.tar\./ {print $3}' "$DSC")
[ -n "$ORIG" ] && [ -f "$ORIG" ] || die "no upstream tarball in $DSC"

member=$(tar -tf "$ORIG" | awk '/\/test\/speedtest1\.c$/ && !f {print; f=1}')
[ -n "$member" ] || die "test/speedtest1.c not in $ORIG"
tar -xf "$ORIG" "$member"
src=$member
top=${member%%/*}

# Debian patches that touch test/speedtest1.c (in series order).
if [ -n "$DEB" ] && [ -f "$DEB" ]; then
  tar -xf "$DEB" debian/patches 2>/dev/null || true
  if [ -f debian/patches/series ]; then
    command -v patch >/dev/null 2>&1 || die "missing tool: patch"
    while read -r p _; do
      case $p in ''|'#'*) continue ;; esac
      if grep -q '^+++ .*test/speedtest1\.c' "debian/patches/$p"; then
        echo "build-speedtest1: applying debian/patches/$p"
        (cd "$top" && patch -s -p1 --no-backup-if-mismatch < "../debian/patches/$p")
      fi
    done < debian/patches/series
  fi
fi

cc -O2 -o "$WORK/speedtest1" "$src" -lsqlite3 -lm -lpthread
"$WORK/speedtest1" --help >/dev/null 2>&1 || true
mv "$WORK/speedtest1" "$OUT"
echo "build-speedtest1: built $OUT from sqlite3 $VER (system libsqlite3 $(dpkg-query -W -f='${Version}' libsqlite3-0))"
