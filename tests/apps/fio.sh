#!/usr/bin/env bash
# fio on upfs: --verify=crc32c --verify_fatal=1 under the psync, sync,
# vsync, pvsync and pvsync2 ioengines, two jobs (forked processes, and
# threads of one process) writing one file, each job on its own region
# (--offset_increment), then verifying every block it wrote. Checked from
# fio's JSON report: no error, every job wrote and read back its whole
# region. Then a fresh fio process re-verifies the file (--verify_only),
# and, as a negative control, must fail once a block has been corrupted.
# The same runs on a plain /dev/shm directory must give the same results.
# Usage: fio.sh PATH/TO/upfs     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
apps_init fio "${1:-}"
PY=/usr/bin/python3
need fio numfmt dd "$PY"

size=32M
[ "$LONG" = 1 ] && size=256M
engines=(psync sync vsync pvsync pvsync2)
declare -A BS=([psync]=4k [sync]=512 [vsync]=16k [pvsync]=64k [pvsync2]=4k-64k)

# summary < fio JSON: one line per job (error, bytes written, bytes read,
# whether the verify reads covered the writes), or an error message.
cat >"$OUT/summary.py" <<'PY'
import json, sys
raw = sys.stdin.read()
try:
    doc = json.loads(raw[raw.index("{"):])
except Exception as e:
    print("no JSON report:", e); sys.exit(1)
ok = True
for j in doc["jobs"]:
    w, r = j["write"]["io_bytes"], j["read"]["io_bytes"]
    good = j["error"] == 0 and w > 0 and r == w
    ok &= good
    print("job %s: error=%d wrote=%d verified=%d %s" % (j["jobname"], j["error"], w, r, "ok" if good else "BAD"))
print("jobs", len(doc["jobs"]))
sys.exit(0 if ok and len(doc["jobs"]) == 2 else 1)
PY

# fio_args ENGINE FILE
fio_args() {
  local e=$1 f=$2 bs=${BS[$1]}
  local a=(--name="$e" --filename="$f" --ioengine="$e" --rw=randwrite --size=$size
    --numjobs=2 --offset_increment=$size --verify=crc32c --verify_fatal=1 --do_verify=1
    --fsync=32 --randseed=4242 --allow_file_create=1 --verify_state_save=0)
  if [[ $bs == *-* ]]; then a+=(--bsrange="$bs"); else a+=(--bs="$bs"); fi
  [ "$e" = pvsync2 ] && a+=(--hipri=0)
  printf '%s\n' "${a[@]}"
}

# one ENGINE TAG [EXTRA...]: the write+verify run, a re-verification by a
# new process, and the corruption control, on upfs; the same on plain.
one() {
  local e=$1 tag=$2
  shift 2
  local args up_sum pl_sum
  mapfile -t args < <(fio_args "$e" "$UP/fio-$tag.dat")
  run fio "${args[@]}" "$@" --output-format=json >"$OUT/$tag.up.json" 2>"$OUT/$tag.up.err"
  local rc=$?
  up_sum=$("$PY" "$OUT/summary.py" <"$OUT/$tag.up.json")
  local src=$?
  if [ $rc -eq 0 ] && [ $src -eq 0 ]; then
    pass "fio $tag on upfs: write + crc32c verify of both jobs"
  else
    fail "fio $tag on upfs: fio exit $rc"
    { echo "$up_sum"; cat "$OUT/$tag.up.err"; } | sed 's/^/    | /' | tail -n 30
  fi
  mapfile -t args < <(fio_args "$e" "$PL/fio-$tag.dat")
  fio "${args[@]}" "$@" --output-format=json >"$OUT/$tag.pl.json" 2>"$OUT/$tag.pl.err"
  pl_sum=$("$PY" "$OUT/summary.py" <"$OUT/$tag.pl.json")
  check "fio $tag: job results as on plain" same "$up_sum" "$pl_sum"

  # A new process reads every block back and checks it.
  mapfile -t args < <(fio_args "$e" "$UP/fio-$tag.dat")
  check "fio $tag: --verify_only by a new process" run fio "${args[@]}" "$@" --verify_only=1
  check "fio $tag: file is a upfs file, fsck clean" fsck_clean "$UP/fio-$tag.dat"
  # Corrupt one byte in the middle of job 1's region: verification must fail.
  local off=$(($(numfmt --from=iec $size) + $(numfmt --from=iec $size) / 2 + 100))
  printf 'X' | run dd of="$UP/fio-$tag.dat" bs=1 seek=$off conv=notrunc status=none
  if run fio "${args[@]}" "$@" --verify_only=1 >"$OUT/neg.log" 2>&1; then
    fail "fio $tag: --verify_only passed on a corrupted file (the check is not real)"
  elif grep -qi 'verify.*bad\|crc32c: verify failed\|bad magic' "$OUT/neg.log"; then
    pass "fio $tag: corruption detected by --verify_only"
  else
    fail "fio $tag: --verify_only failed, but not with a verify error"
    sed 's/^/    | /' "$OUT/neg.log" | tail -n 20
  fi
}

for e in "${engines[@]}"; do timed "fio $e (2 processes)" one "$e" "$e"; done
timed "fio psync (2 threads)" one psync psync-threads --thread
if [ "$LONG" = 1 ]; then
  for e in sync vsync pvsync pvsync2; do timed "fio $e (2 threads)" one "$e" "$e-threads" --thread; done
fi

upfs_files "fio files under UPFS_DIR" "$UP" $((${#engines[@]} + 1))
finish
