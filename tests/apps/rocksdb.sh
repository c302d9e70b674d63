#!/usr/bin/env bash
# RocksDB on upfs (db_bench, ldb and sst_dump from Debian's rocksdb-tools),
# compared with the same runs on a plain /dev/shm directory.
#
# db_bench's data is deterministic for a fixed --seed with one thread (keys
# come from Random64(seed + thread id), values from a fixed-seed generator),
# so the upfs and the plain DB hold the same key/value pairs even though
# flushes and compactions happen at different moments: `ldb dump --hex`
# digests must be identical. Further deterministic data is written with
# ldb load/batchput/put/delete/deleterange.
# Usage: rocksdb.sh PATH/TO/upfs     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
apps_init rocksdb "${1:-}"
need db_bench ldb sst_dump

num=300000
[ "$LONG" = 1 ] && num=2000000
# Small memtables and files: many flushes, SST files on several levels and
# compactions, also in the short run.
common=(--seed=4242 --threads=1 --num=$num --compression_type=none --file_checksum=true
  --write_buffer_size=524288 --target_file_size_base=524288 --max_bytes_for_level_base=2097152
  --max_background_jobs=2 --stats_interval_seconds=0 --progress_reports=false --histogram=false)

# bench DIR DB ARGS...: db_bench (under upfs when DIR is $UP).
bench() {
  local where=$1 db=$2
  shift 2
  if [ "$where" = "$UP" ]; then
    run db_bench --db="$db" "${common[@]}" "$@"
  else
    db_bench --db="$db" "${common[@]}" "$@"
  fi
}
# ldbx DIR ARGS...: ldb on DIR/db (under upfs when DIR is $UP).
ldbx() {
  local where=$1
  shift
  if [ "$where" = "$UP" ]; then run ldb --db="$where/db" "$@"; else ldb --db="$where/db" "$@"; fi
}

benches=fillrandom,overwrite,readrandom,verifychecksum,verifyfilechecksums
# db_bench's own verification: a benchmark that fails prints an error and
# makes db_bench exit non-zero; readrandom reports how many keys it found.
db_bench_both() {
  local where tag
  for where in "$UP" "$PL"; do
    tag=$([ "$where" = "$UP" ] && echo upfs || echo plain)
    if bench "$where" "$where/db" --benchmarks=$benches >"$OUT/bench.$tag" 2>&1 &&
      ! grep -qiE 'corrupt|error|mismatch|fail' "$OUT/bench.$tag"; then
      pass "db_bench $benches ($tag)"
    else
      fail "db_bench $benches ($tag)"
      sed 's/^/    | /' "$OUT/bench.$tag" | tail -n 40
    fi
  done
  local b
  for b in fillrandom overwrite readrandom; do
    echo "     db_bench $b: upfs $(awk -v b=$b '$1 == b {print $3, $4}' "$OUT/bench.upfs"), plain $(awk -v b=$b '$1 == b {print $3, $4}' "$OUT/bench.plain")"
  done
  check "db_bench readrandom found as many keys as on plain" same \
    "$(grep -o '([0-9]* of [0-9]* found)' "$OUT/bench.upfs")" \
    "$(grep -o '([0-9]* of [0-9]* found)' "$OUT/bench.plain")"
  check "db_bench verifychecksum ran (upfs)" grep -q '^verifychecksum ' "$OUT/bench.upfs"
  check "db_bench verifyfilechecksums ran (upfs)" grep -q '^verifyfilechecksums ' "$OUT/bench.upfs"
}
timed "db_bench $benches" db_bench_both

# sst_dump exits 0 even when it finds a corrupted file: count its verdicts.
sst_verify() {
  local out n ok
  out=$(run sst_dump --file="$1" --command=verify --verify_checksum 2>&1)
  n=$(find "$1" -maxdepth 1 -name '*.sst' | wc -l)
  ok=$(grep -c ' is ok$' <<<"$out")
  echo "$out" | grep -v '^Process \|^Sst file format\|is ok$\|^options.env'
  echo "$ok of $n SST files ok"
  [ "$n" -ge 1 ] && [ "$ok" -eq "$n" ] && ! grep -qi corrupt <<<"$out"
}

# State checks on the DB left by db_bench, after a reopen.
compare_db() {
  local label=$1
  check "ldb checkconsistency ($label)" ldbx "$UP" checkconsistency
  check "sst_dump --command=verify: every SST ok ($label)" sst_verify "$UP/db"
  local a b
  a=$(ldbx "$UP" dump --hex 2>&1 | digest)
  b=$(ldbx "$PL" dump --hex 2>&1 | digest)
  check "ldb dump --hex digest as on plain ($label)" same "$a" "$b"
}
check "db_bench made several SST files" test "$(find "$UP/db" -name '*.sst' | wc -l)" -ge 3
timed "ldb checks after db_bench" compare_db "after db_bench"

# Reads of the existing DB through mmap (read-only snapshot maps of the
# immutable SST files) and with fsync'd writes.
more_bench() {
  local where tag
  for where in "$UP" "$PL"; do
    tag=$([ "$where" = "$UP" ] && echo upfs || echo plain)
    if bench "$where" "$where/db" --use_existing_db=true --mmap_read=true \
      --benchmarks=readrandom,readseq,verifychecksum --reads=$((num / 2)) >"$OUT/mmap.$tag" 2>&1 &&
      ! grep -qiE 'corrupt|error|mismatch|fail' "$OUT/mmap.$tag"; then
      pass "db_bench --mmap_read=true readrandom,readseq,verifychecksum ($tag)"
    else
      fail "db_bench --mmap_read=true readrandom,readseq,verifychecksum ($tag)"
      sed 's/^/    | /' "$OUT/mmap.$tag" | tail -n 40
    fi
  done
  check "mmap readrandom found as many keys as on plain" same \
    "$(grep -o '([0-9]* of [0-9]* found)' "$OUT/mmap.upfs")" \
    "$(grep -o '([0-9]* of [0-9]* found)' "$OUT/mmap.plain")"
  check "db_bench --sync=true --use_fsync=true fillrandom into a second DB" \
    bench "$UP" "$UP/db2" --num=$((num / 10)) --sync=true --use_fsync=true --benchmarks=fillrandom,verifychecksum
  bench "$PL" "$PL/db2" --num=$((num / 10)) --sync=true --use_fsync=true --benchmarks=fillrandom,verifychecksum >/dev/null 2>&1
  check "second DB: dump digest as on plain" same \
    "$(run ldb --db="$UP/db2" dump --hex 2>&1 | digest)" "$(ldb --db="$PL/db2" dump --hex 2>&1 | digest)"
}
timed "db_bench mmap reads / sync writes" more_bench

# Deterministic writes through ldb: load, batchput, put, delete, deleterange,
# then a full manual compaction.
ldb_writes() {
  local n=$((num / 3)) i
  awk -v n=$n 'BEGIN { for (i = 0; i < n; ++i) printf "ldbkey%08d ==> value-%d-%s\n", (i * 7919) % n, i, substr("abcdefghijklmnopqrstuvwxyz0123456789", 1 + i % 36) }' >"$OUT/load.txt"
  local batch=()
  for i in $(seq 0 199); do batch+=("batch$i" "v$((i * i))"); done
  local where
  for where in "$UP" "$PL"; do
    {
      ldbx "$where" load --create_if_missing <"$OUT/load.txt" &&
        ldbx "$where" batchput "${batch[@]}" &&
        ldbx "$where" put extra1 one && ldbx "$where" put extra1 two &&
        ldbx "$where" delete batch7 &&
        ldbx "$where" deleterange ldbkey00000100 ldbkey00001000 &&
        ldbx "$where" compact
    } >"$OUT/ldbw.log" 2>&1
    local rc=$?
    if [ "$where" = "$UP" ]; then
      if [ $rc -eq 0 ]; then pass "ldb load/batchput/put/delete/deleterange/compact (upfs)"; else
        fail "ldb load/batchput/put/delete/deleterange/compact (upfs)"
        sed 's/^/    | /' "$OUT/ldbw.log" | tail -n 30
      fi
    fi
  done
  compare_db "after ldb writes and compact"
  check "ldb get extra1 = two" same "$(ldbx "$UP" get extra1 2>&1)" "two"
  check "ldb scan digest as on plain" same "$(ldbx "$UP" scan 2>&1 | digest)" "$(ldbx "$PL" scan 2>&1 | digest)"
}
timed "ldb writes" ldb_writes

# A checkpoint (hard links and copies) and a backup/restore round trip.
ldb_copies() {
  check "ldb checkpoint" ldbx "$UP" checkpoint --checkpoint_dir="$UP/ckpt"
  check "checkpoint: dump digest as on plain DB" same \
    "$(run ldb --db="$UP/ckpt" dump --hex 2>&1 | digest)" "$(ldbx "$PL" dump --hex 2>&1 | digest)"
  check "ldb backup" ldbx "$UP" backup --backup_dir="$UP/backup"
  check "ldb restore" run ldb --db="$UP/restored" restore --backup_dir="$UP/backup"
  check "restored: checkconsistency" run ldb --db="$UP/restored" checkconsistency
  check "restored: dump digest as on plain DB" same \
    "$(run ldb --db="$UP/restored" dump --hex 2>&1 | digest)" "$(ldbx "$PL" dump --hex 2>&1 | digest)"
}
timed "ldb checkpoint/backup/restore" ldb_copies

# Every non-empty file of the DBs (SST, MANIFEST, WAL, OPTIONS, CURRENT,
# IDENTITY, LOG...) is a upfs file. The checkpoint's SSTs are hard links.
upfs_files "rocksdb files under UPFS_DIR" "$UP" 20
finish
