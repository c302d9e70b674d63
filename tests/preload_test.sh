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

# --- attributes as the kernel's (chmod, chown, utimensat/futimens through
# touch and cp -p): the same as on a plain file made outside upfs; times
# compared to the nanosecond, ctime checked to advance
ns() { local t=${1/./}; echo $((10#$t)); }  # "S.NNNNNNNNN" as one integer
later() { [ "$(ns "$2")" -gt "$(ns "$1")" ] || { echo "  not later: $2 <= $1"; return 1; }; }
near_now() {  # $2 within [$1 - 0.1 s, now]: the kernel's coarse clock lags a little
  local now; now=$(date +%s.%N)
  [ "$(ns "$2")" -ge $(($(ns "$1") - 100000000)) ] && [ "$(ns "$2")" -le "$(ns "$now")" ] ||
    { echo "  not between $1 and $now: $2"; return 1; }
}
ustat() { run stat -c "$1" "$UP/attr"; }
pstat() { stat -c "$1" "$PL/attr"; }
run sh -c "echo attr > '$UP/attr'"
echo attr > "$PL/attr"
check "attr: file is upfs" is_upfs "$UP/attr"
c0=$(ustat %.9Z); sleep 0.05
run chmod 640 "$UP/attr"; chmod 640 "$PL/attr"
check "chmod 640: mode as the plain file's" same "$(ustat '%a %A')" "$(pstat '%a %A')"
check "chmod through upfs keeps the host file's marker (S_ISVTX)" same "$(stat -c %a "$UP/attr")" "1640"
c1=$(ustat %.9Z)
check "chmod advances ctime" later "$c0" "$c1"
D1='2001-02-03 04:05:06.123456789' D2='2003-04-05 06:07:08.987654321'
sleep 0.05
run touch -d "$D1" "$UP/attr"; touch -d "$D1" "$PL/attr"
check "touch -d: mode, atime, mtime as the plain file's" same "$(ustat '%a %.9X %.9Y')" "$(pstat '%a %.9X %.9Y')"
c2=$(ustat %.9Z)
check "touch -d advances ctime" later "$c1" "$c2"
sleep 0.05
run touch -m -d "$D2" "$UP/attr"; touch -m -d "$D2" "$PL/attr"
check "touch -m -d: atime kept, mtime set, as the plain file's" same "$(ustat '%a %.9X %.9Y')" "$(pstat '%a %.9X %.9Y')"
check "touch -m -d advances ctime" later "$c2" "$(ustat %.9Z)"
check "stat in whole seconds (%a %X %Y) as the plain file's" same "$(ustat '%a %X %Y')" "$(pstat '%a %X %Y')"
want=$(pstat '%a %.9X %.9Y')
run cat "$UP/attr" >/dev/null
check "times kept across reopen and read" same "$(ustat '%a %.9X %.9Y')" "$want"
check "contents intact after chmod and touch" same "$(run cat "$UP/attr")" "attr"
if [ "$(id -u)" = 0 ]; then owner=12345:23456; else owner=$(id -u):$(id -g); fi
c3=$(ustat %.9Z); sleep 0.05
run chown "$owner" "$UP/attr"; chown "$owner" "$PL/attr"
check "chown: owner and group as the plain file's" same "$(ustat '%u %g %a')" "$(pstat '%u %g %a')"
check "chown advances ctime" later "$c3" "$(ustat %.9Z)"
t0=$(date +%s.%N)
run touch "$UP/attr"
check "touch (now): atime and mtime now" bash -c "$(declare -f ns near_now); near_now $t0 $(ustat %.9X) && near_now $t0 $(ustat %.9Y)"
run touch -d "$D1" "$UP/attr"
t0=$(date +%s.%N)
run sh -c "echo more >> '$UP/attr'"
check "a write sets mtime and ctime to now" bash -c "$(declare -f ns near_now); near_now $t0 $(ustat %.9Y) && near_now $t0 $(ustat %.9Z)"
check "a write keeps atime" same "$(ustat %.9X)" "$(date -d "$D1" +%s.%N)"
check "fsck after chmod, chown, touch" fsck_clean "$UP/attr"
want=$(pstat '%a %.9X %.9Y')  # before cp reads the source (its atime moves)
run cp -p "$PL/attr" "$UP/cp-p"
check "cp -p: the source's mode and times (fchmod, futimens on a upfs descriptor)" \
  same "$(run stat -c '%a %.9X %.9Y' "$UP/cp-p")" "$want"
check "cp -p makes a upfs file" is_upfs "$UP/cp-p"  # (reads the host file: after the times)
check "fsck after cp -p" fsck_clean "$UP/cp-p"
check "tar x: extracted upfs file has the archived mode and mtime" \
  same "$(run stat -c '%a %.9Y' "$UP/ex/preload/preload.c")" "$(stat -c '%a %.9Y' "$PL/ex/preload/preload.c")"

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

# --- the issue's write-only case: a program whose user may write a upfs
# file but not read it is refused; the file is never written as plain bytes
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  run sh -c "printf 'upfs data\n' > '$UP/wo.txt'"
  chmod 0755 "$T"
  chown 61001:61001 "$UP/wo.txt" "$UP"
  run chmod 0277 "$UP/wo.txt"
  as_owner() { setpriv --reuid=61001 --regid=61001 --clear-groups "$@"; }
  check "write-only caller: plain writes would be allowed (the kernel's view)" \
    as_owner sh -c "test -w '$UP/wo.txt' && ! test -r '$UP/wo.txt'"
  check "write-only caller: the write through upfs is refused" \
    bash -c "! printf XYZS | setpriv --reuid=61001 --regid=61001 --clear-groups '$UPFS' run --dir '$UP' -- dd of='$UP/wo.txt' conv=notrunc status=none 2>/dev/null"
  check "write-only caller: the file is still a upfs file" fsck_clean "$UP/wo.txt"
  check "write-only caller: content intact" same "$(run cat "$UP/wo.txt")" "upfs data"
  # Read-only access: a read-only mapping, nothing written, nothing left.
  run chmod 0644 "$UP/wo.txt"
  shm_before=$(ls /dev/shm | grep -c '^upfs-[0-9a-f]*-[0-9a-f]*$' || true)
  check "read-only caller reads through upfs" same \
    "$(setpriv --reuid=61003 --regid=61003 --clear-groups "$UPFS" run --dir "$UP" -- cat "$UP/wo.txt")" "upfs data"
  check "read-only caller left no shared state" same \
    "$(ls /dev/shm | grep -c '^upfs-[0-9a-f]*-[0-9a-f]*$' || true)" "$shm_before"
  chown 0:0 "$UP"
  chmod 0700 "$T"
else
  echo "skip write-only and read-only callers (needs root and setpriv)"
fi

# --- a program that exits (without closing) with an unlinked upfs file open,
# and one that closed its files just before exiting, leave no shared state
shm_count() { ls /dev/shm | grep -c '^upfs-[0-9a-f]*-[0-9a-f]*$' || true; }
shm_before=$(shm_count)
run python3 -c "
import os, sys
fd = os.open('$UP/exit-unlinked', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'data')
os.unlink('$UP/exit-unlinked')
g = os.open('$UP/exit-closed', os.O_CREAT | os.O_RDWR, 0o644)
os.write(g, b'data')
os.close(g)
sys.exit(0)"
check "exit with an unlinked file open, and with a closed one: no shared state left" same "$(shm_count)" "$shm_before"
# dash leaves through _exit, which skips atexit: the library's _exit does
# what exit would (a loop of redirections used to leave one object per
# parked file).
run sh -c "for i in \$(seq 1 40); do echo line\$i > '$UP/loop'\$i; done"
check "a shell that made 40 files and left by _exit: no shared state left" same "$(shm_count)" "$shm_before"
check "the shell's files are upfs files with their lines" same "$(run cat "$UP/loop7" "$UP/loop40")" "$(printf 'line7\nline40')"

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
