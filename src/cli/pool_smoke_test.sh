#!/usr/bin/env bash
# Smoke test of the tool's pool verbs (ctest label "cli"):
#   pool_smoke_test.sh PATH/TO/upfs
# mkfs, ls and cp: a tree with modes, times, symbolic and hard links and a
# sparse file copied into a pool, from it to another pool and out again must
# come back identical (diff -r, and find's view of every attribute cp keeps);
# the errors each verb owes its user; and a tiny `bench --pool`.
set -uo pipefail

UPFS="${1:?usage: pool_smoke_test.sh PATH/TO/upfs}"
BASE="${UPFS_TEST_DIR:-/dev/shm}"
DIR=$(mktemp -d "$BASE/upfs-pool-test.XXXXXX")
# Pools keep nothing outside their file; upfs rm also removes the shared
# state of the per-file upfs file the test makes.
trap '"$UPFS" rm --force "$DIR"/*.upfs >/dev/null 2>&1; rm -rf "$DIR"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/smoke_lib.sh"
P="$DIR/a.pool"
Q="$DIR/b.pool"

# -- help and usage ---------------------------------------------------------
for v in mkfs ls cp; do
  expect 0 "upfs help $v" "$UPFS" help "$v"
  contains "usage: upfs $v" "help $v shows its usage"
done
expect 2 "mkfs without POOL" "$UPFS" mkfs
expect 2 "mkfs bad size" "$UPFS" mkfs "$P" --size lots
expect 2 "ls unknown short option" "$UPFS" ls -x "$P"
expect 2 "cp with one operand" "$UPFS" cp "$P:/x"

# -- mkfs ----------------------------------------------------------------------
expect 0 "mkfs" "$UPFS" mkfs "$P" --size 16M
expect 1 "mkfs of an existing file" "$UPFS" mkfs "$P"
contains "already exists" "mkfs says the pool exists"
expect 0 "mkfs of a second pool" "$UPFS" mkfs "$Q"
expect 0 "ls of an empty pool" "$UPFS" ls "$P"
if [ -s "$DIR/out" ]; then bad "an empty pool lists something"; else ok "an empty pool lists nothing"; fi

# -- a tree to copy ------------------------------------------------------------
S="$DIR/src"
mkdir -p "$S/d/deep/er" "$S/ro" "$S/with space"
head -c 3000000 /dev/urandom >"$S/d/random.bin"
echo hello >"$S/d/hello.txt"
: >"$S/empty"
ln "$S/d/hello.txt" "$S/d/deep/hard"             # a hard link pair
ln -s ../hello.txt "$S/d/deep/rel-link"           # a relative symbolic link
ln -s /nowhere/at/all "$S/dangling"               # a dangling one
truncate -s 50M "$S/sparse"                       # holes around two extents
echo middle | dd of="$S/sparse" bs=1 seek=20000000 conv=notrunc status=none
echo end | dd of="$S/sparse" bs=1 seek=52428000 conv=notrunc status=none
echo x >"$S/with space/file name"
chmod 640 "$S/d/hello.txt"; chmod 2755 "$S/d/deep"; chmod 500 "$S/ro"; chmod 711 "$S/d/random.bin"
touch -m -d '2001-02-03 04:05:06.123456789' "$S/d/hello.txt"
touch -a -d '2002-03-04 05:06:07.987654321' "$S/d/hello.txt" "$S/empty"
touch -h -d '2003-01-01 00:00:00.5' "$S/d/deep/rel-link"
touch -d '2004-01-01' "$S/d/deep/er" "$S/ro" "$S/d/deep"
# Every attribute cp keeps, as find sees it (the top directory's name aside).
attrs() { (cd "$1" && find . -printf '%P|%M|%n|%s|%T@|%A@|%U|%G|%l\n' | sort); }
# find's own reads of directories and links move their atimes to now
# (relatime: the atime was not after the mtime); a second pass sees them
# settled, and so does cp.
attrs "$S" >/dev/null
attrs "$S" >"$DIR/src.attrs"

# -- into a pool, between pools, out of a pool ---------------------------------
expect 0 "cp -r into a pool" "$UPFS" cp -r "$S" "$P:/"
expect 0 "ls the pool's root" "$UPFS" ls "$P"
contains "src" "the copy is in the root"
expect 0 "ls -l a directory" "$UPFS" ls -l "$P:/src/d"
contains "-rw-r----- 2 " "ls -l shows the mode and the links of a hard-linked file"
contains "2001-02-03 " "ls -l shows the kept modification time"
expect 0 "ls -lR" "$UPFS" ls -lR "$P:/src"
contains "rel-link -> ../hello.txt" "ls -l shows a symbolic link's target"
contains "/src/d/deep/er:" "ls -R lists the deepest directory"
contains "drwxr-sr-x" "ls -l shows the set-group-id bit"
expect 0 "ls of a file" "$UPFS" ls -l "$P:/src/empty"
expect 0 "cp -r from pool to pool" "$UPFS" cp -r "$P:/src" "$Q:/copy"
expect 0 "cp -r out of a pool" "$UPFS" cp -r "$Q:/copy" "$DIR/back"
attrs "$DIR/back" >"$DIR/back.attrs"  # before diff reads (and so touches) it
if diff "$DIR/src.attrs" "$DIR/back.attrs" >"$DIR/attrs.diff"; then
  ok "modes, links, sizes, times and owners survive the round trip"
else
  bad "attributes differ after the round trip:"; sed 's/^/    /' "$DIR/attrs.diff"
fi
if diff -r --no-dereference "$S" "$DIR/back" >/dev/null; then ok "contents survive the round trip"; else bad "diff -r differs"; fi
if [ "$(stat -c %i "$DIR/back/d/hello.txt")" = "$(stat -c %i "$DIR/back/d/deep/hard")" ]; then
  ok "a hard link stays a hard link"; else bad "hard link became two files"; fi
if [ "$(stat -c %b "$DIR/back/sparse")" -lt 1000 ]; then ok "holes stay holes"; else
  bad "sparse file came back with $(stat -c %b "$DIR/back/sparse") blocks"; fi

# -- single files and existing destinations -----------------------------------
expect 0 "cp a file into a pool directory" "$UPFS" cp "$S/d/hello.txt" "$P:/src/ro"
expect 0 "cp it out into a host directory" "$UPFS" cp "$P:/src/ro/hello.txt" "$DIR"
if cmp -s "$S/d/hello.txt" "$DIR/hello.txt"; then ok "file round trip"; else bad "file round trip differs"; fi
echo replaced >"$DIR/new.txt"
expect 0 "cp over an existing pool file" "$UPFS" cp "$DIR/new.txt" "$P:/src/d/hello.txt"
expect 0 "cp its other link out" "$UPFS" cp "$P:/src/d/deep/hard" "$DIR/hard.txt"
if [ "$(cat "$DIR/hard.txt")" = replaced ]; then ok "overwriting keeps the other link"; else bad "other link not updated"; fi

expect 0 "cp of several sources into a pool directory" "$UPFS" cp -r "$S/empty" "$S/with space" "$Q:/copy/d" "$P:/src/ro"
expect 0 "ls it" "$UPFS" ls "$P:/src/ro"
contains "with space" "every source arrived"
expect 0 "ls the tree that came from the other pool" "$UPFS" ls "$P:/src/ro/d"
contains "random.bin" "a pool source arrived"
expect 1 "several sources into a file" "$UPFS" cp "$S/empty" "$S/sparse" "$P:/src/empty"
contains "not a directory" "the error says the target must be a directory"

# A per-file upfs file on the host holds its contents in its own format:
# cp reads and overwrites it through upfs.
expect 0 "convert a file to upfs" "$UPFS" convert --to-upfs "$S/d/random.bin" "$DIR/r.upfs"
expect 0 "cp a upfs file into a pool" "$UPFS" cp "$DIR/r.upfs" "$P:/r"
expect 0 "cp it out again" "$UPFS" cp "$P:/r" "$DIR/r.back"
if cmp -s "$S/d/random.bin" "$DIR/r.back"; then ok "a upfs file's contents go in"; else bad "upfs file copied as raw bytes"; fi
expect 0 "cp over the upfs file" "$UPFS" cp "$P:/src/empty" "$DIR/r.upfs"
expect 0 "convert it back" "$UPFS" convert --to-plain "$DIR/r.upfs" "$DIR/r.plain"
if [ -f "$DIR/r.plain" ] && [ ! -s "$DIR/r.plain" ]; then ok "a upfs file is overwritten through upfs"; else bad "upfs file overwrite"; fi
expect 0 "rm the upfs file" "$UPFS" rm "$DIR/r.upfs"

# -- errors ---------------------------------------------------------------------
expect 1 "cp of a directory without -r" "$UPFS" cp "$P:/src" "$DIR/x"
contains "-r" "the error suggests -r"
expect 1 "cp between host paths" "$UPFS" cp "$S/empty" "$DIR/x"
contains "no operand is in a pool" "the error says why"
expect 1 "cp of a missing pool path" "$UPFS" cp "$P:/nothing" "$DIR/x"
contains "No such file or directory" "the error names the cause"
expect 1 "cp into a missing pool directory" "$UPFS" cp "$S/empty" "$P:/no/such/dir"
expect 1 "cp of a tree into itself" "$UPFS" cp -r "$P:/src" "$P:/src/d/inside"
expect 1 "ls of a missing path" "$UPFS" ls "$P:/nothing"
expect 1 "ls of a file that is not a pool" "$UPFS" ls "$S/empty"
contains "not a pool" "ls says not a pool"
expect 1 "the cold reader of a missing pool file" \
  "$UPFS" bench --cold-reader "$DIR/cold/nothing" --seconds 0.01 --pool "$P" --mount "$DIR/cold"
contains "no such file" "the cold reader names the cause"
expect 0 "fsck of the first pool" "$UPFS" fsck "$P"
expect 0 "fsck of the second pool" "$UPFS" fsck "$Q"
expect 0 "info of the first pool" "$UPFS" info "$P"
contains "version 10 (tagged checkpoint images, checked appends and granule flips with anywhere shadows in files' logs, a namespace log reserve, one-wait namespace commits and creates, free space given back)" "info shows the pool's format version"
contains "4 blocks in reserve" "info shows the namespace log's reserve"
contains "files" "info shows the namespace"

# -- bench --pool -----------------------------------------------------------------
expect 0 "tiny bench --pool" "$UPFS" bench --pool --dir "$DIR" --size 8M --seconds 0.02 --rounds 1 \
  --json "$DIR/bench.json"
contains "pool-readdir-10k" "bench --pool prints the pool rounds"
contains "two threads made" "bench --pool prints two threads' creates against one thread's"
contains "in a pool of its own" "bench --pool prints two threads' creates in two pools"
if python3 - "$DIR/bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
names = [r["name"] for r in rows]
assert len(names) == 15 and all(n.startswith("pool-") for n in names), names
writing = {"pool-create-512", "pool-overwrite-rand-4k", "pool-append-4k"}
for r in rows:
    keys = {"name", "upfs_ops", "kernel_ops", "ratio"}
    if r["name"] in writing:
        keys.add("pm_bytes_per_byte")
        assert r["pm_bytes_per_byte"] >= 1.0, r
    if r["name"] == "pool-create-2t":
        scaling = {"upfs_one_thread_ops", "kernel_one_thread_ops", "upfs_scaling", "kernel_scaling",
                   "upfs_two_pools_scaling"}
        keys |= scaling
        assert all(r[k] > 0 for k in scaling), r
    assert set(r) == keys, r
    assert r["upfs_ops"] > 0 and r["kernel_ops"] > 0, r
PY
then ok "bench --pool JSON is well formed"; else bad "bench --pool JSON"; fi
if ls -d "$DIR"/upfs-bench.* >/dev/null 2>&1; then bad "bench --pool left its directory"; else ok "bench --pool cleaned up"; fi

summary
