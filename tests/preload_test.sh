#!/usr/bin/env bash
# Runs real Debian tools under `upfs run` (the LD_PRELOAD layer) in a temp
# dir under /dev/shm and compares every result with the same run on a plain
# directory. Usage: preload_test.sh PATH/TO/upfs   (ctest label "preload")
set -uo pipefail
UPFS=${1:?usage: preload_test.sh PATH/TO/upfs}
T=$(mktemp -d /dev/shm/upfs-preload-test.XXXXXX)
UP=$T/up        # UPFS_DIR of every run
PL=$T/plain     # the same work without the library
OUT=$T/outside  # outside UPFS_DIR
mkdir -p "$UP" "$PL" "$OUT"
fails=0
cleanup() {
  for f in $(find "$T" -type f 2>/dev/null); do "$UPFS" rm "$f" >/dev/null 2>&1; done
  rm -rf "$T"
}
trap cleanup EXIT
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
run() { "$UPFS" run --dir "$UP" -- "$@"; }
is_upfs() { [ "$(head -c 4 "$1" 2>/dev/null)" = "UPFS" ]; }
fsck_clean() { "$UPFS" fsck "$1" >/dev/null 2>&1; }
same() { [ "$1" = "$2" ] || { echo "  got:      $1"; echo "  expected: $2"; return 1; }; }

head -c 3000001 /dev/urandom > "$OUT/src.bin"
SRC=$OUT/src.bin
SUM=$(md5sum < "$SRC")

# --- plain files already under DIR stay plain; files outside stay plain
printf 'pre-existing\n' > "$UP/pre.txt"
run sh -c "printf 'more\n' >> '$UP/pre.txt'; printf 'out\n' > '$OUT/made.txt'"
check "pre-existing file in DIR stays plain" bash -c "! head -c4 '$UP/pre.txt' | grep -q UPFS"
check "pre-existing file appended" same "$(cat "$UP/pre.txt")" "$(printf 'pre-existing\nmore')"
check "file created outside DIR stays plain" same "$(cat "$OUT/made.txt")" "out"

# --- cp, cat, cmp
run cp "$SRC" "$UP/cp.bin"
check "cp into DIR makes a upfs file" is_upfs "$UP/cp.bin"
check "fsck of cp result" fsck_clean "$UP/cp.bin"
check "cmp under upfs run" run cmp "$SRC" "$UP/cp.bin"
check "cat under upfs run" same "$(run cat "$UP/cp.bin" | md5sum)" "$SUM"
check "stat reports the upfs size" same "$(run stat -c %s "$UP/cp.bin")" "3000001"
check "wc -c (fstat/lseek)" same "$(run wc -c < /dev/null; run wc -c "$UP/cp.bin" | cut -d' ' -f1)" "0
3000001"
run cp "$UP/cp.bin" "$OUT/back.bin"
check "cp out of DIR is plain and equal" cmp "$SRC" "$OUT/back.bin"

# --- dd with various block sizes, compared with the plain run
for bs in 1 512 4096 7777 65536 1M; do
  cnt=100000; [ "$bs" = 1 ] && cnt=20000
  run dd if="$SRC" of="$UP/dd.$bs" bs=$bs count=$cnt status=none
  dd if="$SRC" of="$PL/dd.$bs" bs=$bs count=$cnt status=none
  check "dd bs=$bs" same "$(run dd if="$UP/dd.$bs" bs=4096 status=none | md5sum)" "$(md5sum < "$PL/dd.$bs")"
done
run dd if="$SRC" of="$UP/dd.4096" bs=4096 seek=3 count=5 conv=notrunc status=none
dd if="$SRC" of="$PL/dd.4096" bs=4096 seek=3 count=5 conv=notrunc status=none
check "dd conv=notrunc overwrite" same "$(run md5sum < "$UP/dd.4096")" "$(md5sum < "$PL/dd.4096")"
check "inherited upfs stdin" same "$(run md5sum "$UP/dd.4096" | cut -d' ' -f1)" "$(md5sum "$PL/dd.4096" | cut -d' ' -f1)"
check "fsck of dd result" fsck_clean "$UP/dd.7777"

# --- tar c/x
SRCDIR=$(cd "$(dirname "$0")/.." && pwd)/src
run tar cf "$UP/x.tar" -C "$SRCDIR" .
tar cf "$PL/x.tar" -C "$SRCDIR" .
mkdir -p "$UP/ex" "$PL/ex"
run tar xf "$UP/x.tar" -C "$UP/ex"
tar xf "$PL/x.tar" -C "$PL/ex"
check "tar listing equal" same "$(run tar tvf "$UP/x.tar" | md5sum)" "$(tar tvf "$PL/x.tar" | md5sum)"
check "extracted files are upfs" is_upfs "$UP/ex/preload/preload.c"
check "fsck of extracted file" fsck_clean "$UP/ex/preload/preload.c"
check "diff -r inside upfs run" run diff -r "$SRCDIR" "$UP/ex"

# --- shell redirection (open + dup2 + close), appends, truncation
run sh -c "echo one > '$UP/sh.txt'; echo two >> '$UP/sh.txt'; (echo three; echo four) >> '$UP/sh.txt'"
check "shell redirection and >>" same "$(run cat "$UP/sh.txt")" "$(printf 'one\ntwo\nthree\nfour')"
check "shell-made file is upfs" is_upfs "$UP/sh.txt"
run sh -c "echo short > '$UP/sh.txt'"
check "O_TRUNC of a upfs file" same "$(run cat "$UP/sh.txt")" "short"
check "truncate(1)" same "$(run truncate -s 100 "$UP/sh.txt"; run stat -c %s "$UP/sh.txt")" "100"

# --- an existing upfs file is recognised outside DIR
mv "$UP/cp.bin" "$OUT/moved.bin"
check "upfs file opened outside DIR" same "$("$UPFS" run --dir "$T/none" -- md5sum < /dev/null >/dev/null; "$UPFS" run --dir "$T/none" -- cat "$OUT/moved.bin" | md5sum)" "$SUM"

# --- rm removes the shared state
run sh -c "echo x > '$UP/gone'"
id=$("$UPFS" info "$UP/gone" 2>/dev/null | awk '/^file id:/ {print $3}')
run rm "$UP/gone"
check "rm of a upfs file removes its shared state" bash -c "[ ! -e '$UP/gone' ] && ! ls /dev/shm | grep -q '$id'"

# --- sqlite3
if command -v sqlite3 >/dev/null 2>&1; then
  body="CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<10000)
  INSERT INTO t SELECT i, printf('row%05d', i), i*1.5 FROM n;
COMMIT;
UPDATE t SET b=b||'x' WHERE a%7=0;
DELETE FROM t WHERE a%13=0;
PRAGMA integrity_check;
SELECT count(*), sum(a), sum(c), max(b), group_concat(b) FROM t WHERE a%97=0;"
  for j in "PRAGMA journal_mode=delete;" "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL;"; do
    name=$(echo "$j" | tr -dc 'a-zA-Z')
    got=$(echo "$j $body" | run sqlite3 "$UP/$name.db" 2>&1)
    want=$(echo "$j $body" | sqlite3 "$PL/$name.db" 2>&1)
    check "sqlite3 $j" same "$got" "$want"
    check "sqlite3 integrity_check ok ($j)" bash -c "echo '$got' | grep -qx ok"
    check "sqlite3 db is upfs ($j)" is_upfs "$UP/$name.db"
    check "sqlite3 db fsck ($j)" fsck_clean "$UP/$name.db"
  done
  check "sqlite3 reopen" same "$(run sqlite3 "$UP/PRAGMAjournalmodedelete.db" 'PRAGMA integrity_check; SELECT count(*) FROM t;')" "ok
9231"
  # WAL without EXCLUSIVE: the -shm index is a shared writable map, fine in
  # one process; a second process gets a clear I/O error, not a stale index.
  check "sqlite3 WAL (shared -shm map, one process)" same \
    "$(run sqlite3 "$UP/wal.db" 'PRAGMA journal_mode=WAL; CREATE TABLE t(a); INSERT INTO t VALUES(1),(2); SELECT count(*) FROM t; PRAGMA integrity_check;')" "wal
2
ok"
  run /usr/bin/python3 -c "
import sqlite3, sys, time
c = sqlite3.connect('$UP/wal.db'); c.execute('select count(*) from t').fetchone()
open('$T/wal-held', 'w').close(); time.sleep(3)" &
  holder=$!
  for _ in $(seq 100); do [ -e "$T/wal-held" ] && break; sleep 0.05; done
  second=$(run /usr/bin/python3 -c "
import sqlite3
try:
    c = sqlite3.connect('$UP/wal.db'); c.execute('insert into t values(3)'); c.commit(); print('no error')
except sqlite3.OperationalError as e:
    print(e)" 2>&1)
  wait $holder
  check "sqlite3 WAL from a second process fails cleanly" same "$second" "disk I/O error"
  check "sqlite3 WAL db intact" same "$(run sqlite3 "$UP/wal.db" 'PRAGMA integrity_check; SELECT count(*) FROM t;')" "ok
2"
else
  echo "FAIL sqlite3 not installed (scripts/install-deps.sh installs it)"
  fails=$((fails + 1))
fi

# --- startup cost (reported, not asserted)
python3 - "$UPFS" "$UP" <<'PY' || true
import subprocess, sys, time
upfs, d = sys.argv[1], sys.argv[2]
def med(cmd, n=100):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); subprocess.run(cmd); ts.append(time.perf_counter() - s)
    ts.sort(); return ts[n // 2] * 1e3
a, b = [], []
for _ in range(3):
    a.append(med(["/bin/true"])); b.append(med([upfs, "run", "--dir", d, "--", "/bin/true"]))
print("startup: /bin/true %.2f ms, upfs run -- /bin/true %.2f ms, overhead %.2f ms (median of 100, best of 3)"
      % (min(a), min(b), min(b) - min(a)))
PY

if [ "$fails" -ne 0 ]; then
  echo "preload_test: $fails failure(s)"
  exit 1
fi
echo "preload_test: all passed"
