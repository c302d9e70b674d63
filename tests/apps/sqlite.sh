#!/usr/bin/env bash
# SQLite on upfs: the sqlite3 CLI, Python's sqlite3 module and speedtest1
# (built from Debian's sqlite3 source by scripts/build-speedtest1.sh), each
# compared with the same run on a plain /dev/shm directory.
# Usage: sqlite.sh PATH/TO/upfs BUILD_DIR     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
BUILD=$(realpath -m "${2:?usage: sqlite.sh PATH/TO/upfs BUILD_DIR}")
apps_init sqlite "${1:-}"
PY=/usr/bin/python3
need sqlite3 "$PY"

# ------------------------------------------------------------ sqlite3 CLI
rows=50000
[ "$LONG" = 1 ] && rows=200000
body="CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL, d BLOB);
CREATE INDEX tb ON t(b);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<$rows)
  INSERT INTO t SELECT i, printf('row%07d', i), i*1.5, zeroblob(i%700) FROM n;
COMMIT;
UPDATE t SET b=b||'x', d=x'' WHERE a%7=0;
DELETE FROM t WHERE a%13=0;
BEGIN; DELETE FROM t WHERE a%2=0; ROLLBACK;
CREATE TABLE u AS SELECT a, b FROM t WHERE a%3=0;
DROP INDEX tb;
CREATE INDEX tb2 ON t(c, b);
VACUUM;
PRAGMA integrity_check;
SELECT count(*), sum(a), sum(c), max(b), sum(length(d)) FROM t;
SELECT count(*), sum(a) FROM u;"
modes=("delete" "truncate" "persist" "wal")
cli_one() {
  local m=$1 pre="PRAGMA journal_mode=$m;"
  [ "$m" = wal ] && pre="PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL;"
  local got want
  got=$(echo "$pre $body" | run sqlite3 "$UP/cli-$m.db" 2>&1)
  want=$(echo "$pre $body" | sqlite3 "$PL/cli-$m.db" 2>&1)
  check "sqlite3 CLI journal_mode=$m: output as on plain" same "$got" "$want"
  check "sqlite3 CLI journal_mode=$m: integrity_check ok" grep -qx ok <<<"$got"
  # Reopen in a new process; compare a full dump.
  local q="PRAGMA integrity_check;"
  [ "$m" = wal ] && q="PRAGMA locking_mode=EXCLUSIVE; $q"
  got=$(run sqlite3 "$UP/cli-$m.db" "$q" .dump 2>&1 | digest)
  want=$(sqlite3 "$PL/cli-$m.db" "$q" .dump 2>&1 | digest)
  check "sqlite3 CLI journal_mode=$m: reopened, .dump as on plain" same "$got" "$want"
}
cli_all() { for m in "${modes[@]}"; do cli_one "$m"; done; }
timed "sqlite3 CLI (4 journal modes)" cli_all

# .backup, VACUUM INTO and .import/.output through the CLI
cli_misc() {
  run sqlite3 "$UP/cli-delete.db" ".backup '$UP/backup.db'" "VACUUM INTO '$UP/vacuum-into.db'" \
    ".mode csv" ".output '$UP/t.csv'" "SELECT a, b, c FROM t ORDER BY a;" ".output stdout" >/dev/null 2>&1
  sqlite3 "$PL/cli-delete.db" ".backup '$PL/backup.db'" "VACUUM INTO '$PL/vacuum-into.db'" \
    ".mode csv" ".output '$PL/t.csv'" "SELECT a, b, c FROM t ORDER BY a;" ".output stdout" >/dev/null 2>&1
  check "sqlite3 .output csv identical" same "$(run cat "$UP/t.csv" | digest)" "$(digest <"$PL/t.csv")"
  local f
  for f in backup vacuum-into; do
    check "sqlite3 $f: integrity and .dump as on plain" same \
      "$(run sqlite3 "$UP/$f.db" 'PRAGMA integrity_check' .dump | digest)" \
      "$(sqlite3 "$PL/$f.db" 'PRAGMA integrity_check' .dump | digest)"
  done
  run sqlite3 "$UP/import.db" "CREATE TABLE v(a INTEGER, b TEXT, c REAL)" ".mode csv" ".import '$UP/t.csv' v" >/dev/null 2>&1
  sqlite3 "$PL/import.db" "CREATE TABLE v(a INTEGER, b TEXT, c REAL)" ".mode csv" ".import '$PL/t.csv' v" >/dev/null 2>&1
  check "sqlite3 .import of a upfs csv" same \
    "$(run sqlite3 "$UP/import.db" 'SELECT count(*), sum(a), sum(c) FROM v' 2>&1)" \
    "$(sqlite3 "$PL/import.db" 'SELECT count(*), sum(a), sum(c) FROM v' 2>&1)"
}
timed "sqlite3 backup/vacuum into/csv" cli_misc

# ------------------------------------------------- Python's sqlite3 module
pyrows=50000
[ "$LONG" = 1 ] && pyrows=300000
cat >"$OUT/py_sqlite.py" <<'PY'
import hashlib, random, sqlite3, sys
path, n, jm = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(4242)
con = sqlite3.connect(path, isolation_level=None)
if jm == "wal":
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
print(con.execute("PRAGMA journal_mode=%s" % jm).fetchone()[0])
con.execute("PRAGMA synchronous=FULL")
con.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB, s TEXT)")
con.execute("CREATE INDEX kv_s ON kv(s)")
for lo in range(0, n, 5000):
    con.execute("BEGIN")
    con.executemany("INSERT OR REPLACE INTO kv VALUES (?,?,?)",
                    ((rng.randrange(n * 2), rng.randbytes(rng.randrange(1, 600)),
                      "s%08d" % rng.randrange(10**8)) for _ in range(5000)))
    con.execute("COMMIT")
con.execute("BEGIN")
con.execute("DELETE FROM kv WHERE k % 5 = 1")
con.execute("ROLLBACK")
con.execute("DELETE FROM kv WHERE k % 11 = 3")
con.execute("UPDATE kv SET v = zeroblob(3000) WHERE k % 17 = 0")
with con:
    pass
con.execute("SAVEPOINT a")
con.execute("INSERT INTO kv VALUES (-1, x'00', 'gone')")
con.execute("ROLLBACK TO a")
con.execute("RELEASE a")
print(con.execute("PRAGMA integrity_check").fetchone()[0])
con.close()
# Reopen, then digest every row in key order.
con = sqlite3.connect(path)
if jm == "wal":
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
print(con.execute("PRAGMA integrity_check").fetchone()[0])
h = hashlib.sha256()
cnt = 0
for k, v, s in con.execute("SELECT k, v, s FROM kv ORDER BY k"):
    h.update(b"%d|%s|" % (k, s.encode()) + v)
    cnt += 1
print(cnt, h.hexdigest())
h = hashlib.sha256()
for line in con.iterdump():
    h.update(line.encode())
print("dump", h.hexdigest())
con.close()
PY
py_all() {
  local jm got want
  for jm in delete wal; do
    got=$(run "$PY" "$OUT/py_sqlite.py" "$UP/py-$jm.db" "$pyrows" "$jm" 2>&1)
    want=$("$PY" "$OUT/py_sqlite.py" "$PL/py-$jm.db" "$pyrows" "$jm" 2>&1)
    check "python sqlite3 ($jm): output and digests as on plain" same "$got" "$want"
    check "python sqlite3 ($jm): integrity_check ok twice" test "$(grep -cx ok <<<"$got")" = 2
  done
}
timed "python sqlite3" py_all

# ---------------------- several processes on one database (rollback journal)
# Three writers interleave short transactions (BEGIN IMMEDIATE: SQLite's
# POSIX record locks on the host file); each checks it sees its own rows.
cat >"$OUT/py_multi.py" <<'PY'
import sqlite3, sys
path, who, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
con = sqlite3.connect(path, timeout=120, isolation_level=None)
con.execute("PRAGMA journal_mode=%s" % sys.argv[4])
for i in range(n):
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO t VALUES (?, ?, randomblob(100))", (who, i))
    c = con.execute("SELECT count(*) FROM t WHERE w=?", (who,)).fetchone()[0]
    if c != i + 1:
        print("worker %d sees %d of its rows, expected %d" % (who, c, i + 1))
        sys.exit(1)
    con.execute("COMMIT")
PY
multi() {
  local jm=$1 per=500 w pids=() rc=0
  [ "$LONG" = 1 ] && per=3000
  run sqlite3 "$UP/multi-$jm.db" "PRAGMA journal_mode=$jm; CREATE TABLE t(w INTEGER, i INTEGER, b BLOB, PRIMARY KEY(w, i));" >/dev/null
  for w in 1 2 3; do
    run "$PY" "$OUT/py_multi.py" "$UP/multi-$jm.db" $w $per $jm >"$OUT/multi.$w" 2>&1 &
    pids+=($!)
  done
  for w in "${pids[@]}"; do wait "$w" || rc=1; done
  if [ $rc -eq 0 ]; then pass "3 processes x $per transactions (journal_mode=$jm)"; else
    fail "3 processes x $per transactions (journal_mode=$jm)"
    cat "$OUT"/multi.[123] | sed 's/^/    | /' | tail -n 20
  fi
  check "multi-process db ($jm): integrity_check ok, every row there" same \
    "$(run sqlite3 "$UP/multi-$jm.db" 'PRAGMA integrity_check; SELECT w, count(*), sum(i) FROM t GROUP BY w;' 2>&1)" \
    "$(printf 'ok\n1|%d|%d\n2|%d|%d\n3|%d|%d' $per $((per * (per - 1) / 2)) $per $((per * (per - 1) / 2)) $per $((per * (per - 1) / 2)))"
}
timed "sqlite3 3 writer processes (delete)" multi delete
timed "sqlite3 3 writer processes (truncate)" multi truncate

# ---------------------------------------------------------------- speedtest1
ST=$BUILD/speedtest1
if ! "$HERE/../../scripts/build-speedtest1.sh" "$BUILD" >"$OUT/build.log" 2>&1 || [ ! -x "$ST" ]; then
  cat "$OUT/build.log"
  die "cannot build speedtest1 (scripts/build-speedtest1.sh $BUILD)"
fi
size=50
[ "$LONG" = 1 ] && size=100
st_one() {
  local name=$1
  shift
  local got want hu hp
  run "$ST" --verify --size "$size" "$@" "$UP/st-$name.db" >"$OUT/st-$name.up" 2>&1
  local rcu=$?
  "$ST" --verify --size "$size" "$@" "$PL/st-$name.db" >"$OUT/st-$name.pl" 2>&1
  local rcp=$?
  hu=$(grep '^Verification Hash:' "$OUT/st-$name.up")
  hp=$(grep '^Verification Hash:' "$OUT/st-$name.pl")
  if [ "$rcu" -eq 0 ] && [ "$rcp" -eq 0 ] && [ -n "$hp" ] && [ "$hu" = "$hp" ]; then
    pass "speedtest1 --size $size $*: exit 0, $hu"
  else
    fail "speedtest1 --size $size $*: upfs exit $rcu '$hu', plain exit $rcp '$hp'"
    sed 's/^/    | up | /' "$OUT/st-$name.up" | tail -n 30
  fi
  echo "     speedtest1 TOTAL: upfs $(awk '/TOTAL/ {print $NF}' "$OUT/st-$name.up"), plain $(awk '/TOTAL/ {print $NF}' "$OUT/st-$name.pl")"
  local pre=""
  [ "$name" = wal ] && pre="PRAGMA locking_mode=EXCLUSIVE;"
  check "speedtest1 $name db: integrity_check ok (reopened)" same \
    "$(run sqlite3 "$UP/st-$name.db" "$pre PRAGMA integrity_check;" 2>&1 | tail -n 1)" "ok"
}
timed "speedtest1 --journal delete" st_one delete --journal delete
timed "speedtest1 --journal wal --exclusive" st_one wal --journal wal --exclusive

# ------------------------------------------------ the files are upfs files
upfs_files "sqlite files under UPFS_DIR" "$UP" 12
finish
