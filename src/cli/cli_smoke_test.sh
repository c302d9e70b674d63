#!/usr/bin/env bash
# Smoke test of the `upfs` tool (ctest label "cli"):
#   cli_smoke_test.sh PATH/TO/upfs
# Exercises help and usage errors, convert both ways on a sparse file, info,
# fsck on clean, damaged and foreign files, and a tiny bench run with --json.
set -uo pipefail

UPFS="${1:?usage: cli_smoke_test.sh PATH/TO/upfs}"
BASE="${UPFS_TEST_DIR:-/dev/shm}"
DIR=$(mktemp -d "$BASE/upfs-cli-test.XXXXXX")
# upfs rm also removes the shared state in /dev/shm of each upfs file.
trap '"$UPFS" rm --force "$DIR"/*.upfs >/dev/null 2>&1; rm -rf "$DIR"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/smoke_lib.sh"

# -- help and usage ---------------------------------------------------------
expect 0 "upfs --help" "$UPFS" --help
contains "convert" "--help lists the verbs"
expect 2 "upfs without arguments" "$UPFS"
expect 2 "unknown verb" "$UPFS" frobnicate
for v in info fsck convert bench rm; do
  expect 0 "upfs help $v" "$UPFS" help "$v"
  contains "usage: upfs $v" "help $v shows its usage"
  expect 0 "upfs $v --help" "$UPFS" "$v" --help
done
expect 2 "info without FILE" "$UPFS" info
expect 2 "fsck with two files" "$UPFS" fsck a b
expect 2 "convert without direction" "$UPFS" convert a b
expect 2 "convert with both directions" "$UPFS" convert --to-upfs --to-plain a b
expect 2 "convert bad mode" "$UPFS" convert --to-upfs a b --mode fast
expect 2 "bench unknown option" "$UPFS" bench --frob
expect 2 "bench bad rounds" "$UPFS" bench --rounds x
expect 2 "bench filter matching nothing" "$UPFS" bench --filter nothing-like-this

# -- convert --------------------------------------------------------------------
# A sparse 20 MiB file: random data at 0, 5 MiB and the last 1000 bytes.
PLAIN="$DIR/plain.bin"
head -c 300000 /dev/urandom >"$PLAIN"
truncate -s 20M "$PLAIN"
dd if=/dev/urandom of="$PLAIN" bs=1M seek=5 count=2 conv=notrunc status=none
head -c 1000 /dev/urandom | dd of="$PLAIN" bs=1 seek=$((20 * 1024 * 1024 - 1000)) conv=notrunc status=none

expect 0 "convert --to-upfs" "$UPFS" convert --to-upfs "$PLAIN" "$DIR/a.upfs" --verify
expect 1 "convert refuses to overwrite" "$UPFS" convert --to-upfs "$PLAIN" "$DIR/a.upfs"
contains "--force" "the refusal mentions --force"
expect 0 "convert --force --mode sync" "$UPFS" convert --to-upfs "$PLAIN" "$DIR/a.upfs" --force --mode sync
expect 0 "convert --to-plain" "$UPFS" convert --to-plain "$DIR/a.upfs" "$DIR/back.bin" --verify
if cmp -s "$PLAIN" "$DIR/back.bin"; then ok "round trip is byte-identical"; else bad "round trip differs"; fi
expect 1 "convert --to-plain of a plain file" "$UPFS" convert --to-plain "$PLAIN" "$DIR/x.bin"
contains "not a upfs file" "the error says not a upfs file"
if [ -e "$DIR/x.bin" ]; then bad "failed convert left its output"; else ok "failed convert left no output"; fi
expect 1 "convert of a missing file" "$UPFS" convert --to-upfs "$DIR/missing" "$DIR/y.upfs"
expect 1 "convert onto its input" "$UPFS" convert --to-plain "$DIR/a.upfs" "$DIR/a.upfs" --force
: >"$DIR/empty.bin"
expect 0 "convert an empty file" "$UPFS" convert --to-upfs "$DIR/empty.bin" "$DIR/empty.upfs"
expect 0 "convert it back" "$UPFS" convert --to-plain "$DIR/empty.upfs" "$DIR/empty2.bin"
if [ -f "$DIR/empty2.bin" ] && [ ! -s "$DIR/empty2.bin" ]; then ok "empty stays empty"; else bad "empty file round trip"; fi

# -- info and fsck ----------------------------------------------------------------
expect 0 "info" "$UPFS" info "$DIR/a.upfs"
contains "20,971,520 bytes" "info shows the virtual size"
contains "sync" "info shows the consistency mode"
contains "tmpfs" "info shows the medium"
expect 0 "fsck of a clean file" "$UPFS" fsck "$DIR/a.upfs"
contains "clean" "fsck says clean"
expect 1 "info of a plain file" "$UPFS" info "$PLAIN"
expect 1 "fsck of a plain file" "$UPFS" fsck "$PLAIN"
contains "not a upfs file" "fsck says not a upfs file"
expect 1 "fsck of a missing file" "$UPFS" fsck "$DIR/missing"

# Damage: a byte of the checksummed header (created_ns at offset 32),
# inverted so that the file always changes.
cp "$DIR/a.upfs" "$DIR/damaged.upfs"
old=$(od -An -tu1 -j33 -N1 "$DIR/damaged.upfs" | tr -d ' ')
printf "\\$(printf '%03o' $((255 - old)))" | dd of="$DIR/damaged.upfs" bs=1 seek=33 conv=notrunc status=none
expect 1 "fsck of a damaged header" "$UPFS" fsck "$DIR/damaged.upfs"
contains "DAMAGED" "fsck says DAMAGED"
expect 1 "info of a damaged header" "$UPFS" info "$DIR/damaged.upfs"

# -- rm ---------------------------------------------------------------------------
cp "$PLAIN" "$DIR/plain2.bin"
expect 0 "rm of a plain file" "$UPFS" rm "$DIR/plain2.bin"
expect 1 "rm of a missing file" "$UPFS" rm "$DIR/missing"
expect 0 "rm --force of a missing file" "$UPFS" rm --force "$DIR/missing"
expect 2 "rm without FILE" "$UPFS" rm
expect 0 "convert for rm" "$UPFS" convert --to-upfs "$PLAIN" "$DIR/gone.upfs"
expect 0 "rm of a upfs file" "$UPFS" rm "$DIR/gone.upfs"
if [ -e "$DIR/gone.upfs" ]; then bad "rm left the file"; else ok "rm removed the file"; fi

# -- bench ------------------------------------------------------------------------
expect 0 "tiny bench with --json" "$UPFS" bench --dir "$DIR" --size 8M --seconds 0.02 --rounds 2 \
  --filter read-rand-4k,append-4k,overwrite-128,mixed --json "$DIR/bench.json"
contains "upfs/kernel" "bench prints the table"
contains "non-temporal copy" "bench prints the physical reference"
contains "a persisted line" "bench prints the floor of a durable write"
if python3 - "$DIR/bench.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
names = [r["name"] for r in rows]
assert names == ["read-rand-4k", "append-4k", "overwrite-128", "mixed-2t-4k"], names
for r in rows:
    writes = r["name"] != "read-rand-4k"
    keys = {"name", "upfs_ops", "kernel_ops", "ratio"} | ({"pm_bytes_per_byte"} if writes else set())
    assert set(r) == keys, r
    assert r["upfs_ops"] > 0 and r["kernel_ops"] > 0, r
    assert abs(r["ratio"] - r["upfs_ops"] / r["kernel_ops"]) < 1e-3 * r["ratio"], r
    # Every byte written reaches the medium at least once; a 4 KiB write
    # adds a commit line or two, not another block.
    if writes:
        assert r["pm_bytes_per_byte"] >= 1.0, r
    if r["name"] in ("append-4k", "mixed-2t-4k"):
        assert r["pm_bytes_per_byte"] < 1.5, r
EOF
then ok "bench JSON is well formed"; else bad "bench JSON"; fi
if ls -d "$DIR"/upfs-bench.* >/dev/null 2>&1; then bad "bench left its directory"; else ok "bench cleaned up"; fi
expect 0 "tiny metadata bench" "$UPFS" bench --dir "$DIR" --size 8M --seconds 0.02 --rounds 1 \
  --filter create-512,open-close
contains "create-512" "bench runs create-512"
contains "open-close" "bench runs open-close"
if ls -d "$DIR"/upfs-bench.* >/dev/null 2>&1; then bad "metadata bench left its directory"; else ok "metadata bench cleaned up"; fi
expect 0 "tiny cold-read bench (a new process per round)" "$UPFS" bench --dir "$DIR" --size 8M \
  --seconds 0.02 --rounds 2 --filter read-seq-4k-cold
contains "read-seq-4k-cold" "bench runs read-seq-4k-cold"
if ls -d "$DIR"/upfs-bench.* >/dev/null 2>&1; then bad "cold-read bench left its directory"; else ok "cold-read bench cleaned up"; fi
expect 1 "the cold reader refuses a missing file" "$UPFS" bench --cold-reader "$DIR/nothing" --seconds 0.01
contains "nothing" "the cold reader names the file"

summary
