#!/usr/bin/env bash
# LevelDB on upfs through Python's plyvel (Debian's python3-plyvel, run with
# /usr/bin/python3): the deterministic workload of leveldb_check.py, which
# checks itself against an in-memory model, compared with the same run on a
# plain /dev/shm directory (same pair count and digest).
# Usage: leveldb.sh PATH/TO/upfs     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
apps_init leveldb "${1:-}"
PY=/usr/bin/python3
need "$PY"
"$PY" -c 'import plyvel' 2>/dev/null || die "python3-plyvel is not installed for $PY (scripts/install-deps.sh)"

n=250000
[ "$LONG" = 1 ] && n=1500000

# The reopen step: a new process digests every pair (key order) and lists
# key, value length and value hash, for a diff on a mismatch.
cat >"$OUT/digest.py" <<'PY'
import hashlib, sys, plyvel
db = plyvel.DB(sys.argv[1], paranoid_checks=True)
h, n = hashlib.sha256(), 0
with open(sys.argv[2], "w") as listing:
    for k, v in db.iterator(verify_checksums=True, fill_cache=False):
        h.update(b"%d:" % len(k) + k + b"%d:" % len(v) + v)
        n += 1
        listing.write("%s %d %s\n" % (k.decode(), len(v), hashlib.sha1(v).hexdigest()))
db.close()
print(n, h.hexdigest())
PY

# one_try PREFIX DIR LIST: the workload (under upfs if PREFIX is run), then
# the reopen in a new process, which must find the workload's final state.
one_try() {
  local prefix=$1 dir=$2 list=$3 out wl re
  out=$($prefix "$PY" "$HERE/leveldb_check.py" "$dir" $n 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  wl=$(grep '^pairs ' <<<"$out" | awk '{print $2, $4}')
  re=$($prefix "$PY" "$OUT/digest.py" "$dir" "$list" 2>&1)
  echo "reopened in a new process: $re"
  [ -n "$wl" ] && [ "$re" = "$wl" ] || { echo "the workload ended with: $wl"; return 1; }
  echo "final $wl"
}

# LevelDB 1.23 itself now and then finds a deleted key again after a
# reopen (model check: "MISMATCH: reopened: ... model None"; reopen: one
# pair more than the workload ended with): seen on the kernel's tmpfs alone,
# without upfs, in 1 workload of 13 (2026-11-30) and once in a CI run's
# reopen on the plain side; LevelDB has had such bugs (its issues #184,
# #320). A side whose workload or reopen fails is made once more from
# scratch, saying so; a second failure counts (a upfs bug that shows in
# most runs still fails the test, a rare one may not).
side() {  # side PREFIX DIR LIST
  one_try "$@" && return 0
  echo "failed once (LevelDB's own deleted-key bug?); again from scratch:"
  $1 rm -rf "$2" && one_try "$@"
}
same_listing() {  # same_listing GOT EXPECTED: on a mismatch, the first differing keys
  same "$1" "$2" || { diff "$OUT/list.up" "$OUT/list.pl" | head -n 20; return 1; }
}
workload() {
  local up
  step "leveldb on upfs: workload (n=$n, paranoid_checks, verify_checksums), reopen in a new process" \
    side run "$UP/db" "$OUT/list.up"
  up=$(grep '^final ' "$OUT/last.log" | tail -n 1)
  step "leveldb on plain: workload (n=$n), reopen in a new process" side "" "$PL/db" "$OUT/list.pl"
  check "leveldb: pairs and digest as on plain, after the workload and after the reopen" \
    same_listing "$up" "$(grep '^final ' "$OUT/last.log" | tail -n 1)"
}
timed "leveldb workload" workload
check "leveldb: table files were made" test "$(find "$UP/db" -name '*.ldb' | wc -l)" -ge 5

# Table files (*.ldb), MANIFEST, CURRENT, the log and LOG are upfs files.
upfs_files "leveldb files under UPFS_DIR" "$UP" 8
finish
