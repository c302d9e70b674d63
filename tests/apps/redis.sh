#!/usr/bin/env bash
# Redis on upfs: appendonly yes, appendfsync always, its dir under UPFS_DIR,
# listening on a unix socket only. Deterministic writes through redis-cli;
# DEBUG DIGEST must be identical (and equal to the plain run's) after a
# restart that reloads the AOF, and after a BGREWRITEAOF (done by a forked
# child), more writes and another restart. The servers are always killed
# on exit.
# Usage: redis.sh PATH/TO/upfs     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
apps_init redis "${1:-}"
PY=/usr/bin/python3
need redis-server redis-cli redis-check-aof redis-check-rdb timeout "$PY"

n=200000
life=600 # seconds a server may live at most
[ "$LONG" = 1 ] && n=1000000 && life=3600

# Deterministic commands in RESP (for redis-cli --pipe): phase 1, 2, 3.
cat >"$OUT/gen.py" <<'PY'
import random, sys
n, phase = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(1000 + phase)
out = sys.stdout.buffer
def cmd(*a):
    a = [x if isinstance(x, bytes) else str(x).encode() for x in a]
    out.write(b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a))
for i in range(n):
    k = rng.randrange(n // 2)
    r = rng.random()
    if r < 0.30:
        cmd("SET", "s:%d" % k, rng.randbytes(rng.randrange(1, 300)))
    elif r < 0.40:
        cmd("INCRBY", "c:%d" % (k % 500), rng.randrange(-1000, 1000))
    elif r < 0.50:
        cmd("RPUSH", "l:%d" % (k % 300), "v%d-%d" % (phase, i))
    elif r < 0.55:
        cmd("LPOP", "l:%d" % (k % 300))
    elif r < 0.65:
        cmd("HSET", "h:%d" % (k % 400), "f%d" % (i % 50), rng.randbytes(20))
    elif r < 0.72:
        cmd("SADD", "set:%d" % (k % 200), "m%d" % rng.randrange(5000))
    elif r < 0.80:
        cmd("ZADD", "z:%d" % (k % 100), rng.randrange(10**6), "m%d" % rng.randrange(5000))
    elif r < 0.85:
        cmd("APPEND", "s:%d" % k, "+%d" % i)
    elif r < 0.88:
        cmd("SETRANGE", "s:%d" % k, rng.randrange(64), "xyz")
    elif r < 0.95:
        cmd("DEL", "s:%d" % rng.randrange(n // 2))
    elif r < 0.97:
        cmd("XADD", "x:%d" % (k % 20), "%d-%d" % (phase * 10**7 + i, 1), "f", i)
    else:
        cmd("MSET", "m:%d" % k, i, "m:%d" % (k + 1), b"\x00\xff" * 40)
# A few big values (multi-block writes of the AOF).
for j in range(5):
    cmd("SET", "big:%d:%d" % (phase, j), rng.randbytes(200000 + j * 12345))
PY
for p in 1 2 3; do "$PY" "$OUT/gen.py" $n $p >"$OUT/cmds.$p" || die "cannot generate the commands"; done

declare -A PID
# start TAG: starts the server of TAG (upfs or plain) in the background.
# Further ARGS override the defaults.
start() {
  local tag=$1 base sock
  shift
  base=$([ "$tag" = upfs ] && echo "$UP" || echo "$PL")
  sock=$OUT/$tag.sock
  local args=(--port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$base/data"
    --appendonly yes --appendfsync always --save "" --enable-debug-command yes
    --daemonize no --logfile "$base/redis.log" --loglevel verbose
    --aof-use-rdb-preamble yes --auto-aof-rewrite-percentage 0 "$@")
  mkdir -p "$base/data"
  # Under timeout(1), in a process group of its own (led by timeout): even
  # if this script is SIGKILLed (a ctest time-out), the server goes at the
  # latest when the limit is reached.
  if [ "$tag" = upfs ]; then
    timeout -k 5 "$life" "$UPFS" run --dir "$UP" -- redis-server "${args[@]}" &
  else
    timeout -k 5 "$life" redis-server "${args[@]}" &
  fi
  PID[$tag]=$!
  # Wait until it answers PONG (not LOADING): at most 60 s.
  local i
  for i in $(seq 1 600); do
    if [ "$(redis-cli -s "$sock" PING 2>/dev/null)" = PONG ]; then return 0; fi
    kill -0 "${PID[$tag]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "redis-server ($tag) did not come up; its log:"
  show_log "$tag"
  return 1
}
show_log() {
  local base
  base=$([ "$1" = upfs ] && echo "$UP" || echo "$PL")
  run cat "$base/redis.log" 2>/dev/null | tail -n 40 | sed 's/^/    | /'
}
cli() { local tag=$1; shift; redis-cli -s "$OUT/$tag.sock" "$@"; }
stop() {
  local tag=$1
  cli "$tag" SHUTDOWN >/dev/null 2>&1
  local i
  for i in $(seq 1 300); do
    kill -0 "${PID[$tag]}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${PID[$tag]}" 2>/dev/null; then
    echo "redis-server ($tag) did not stop on SHUTDOWN; killing it"
    kill -KILL -- "-${PID[$tag]}" 2>/dev/null
    kill -KILL "${PID[$tag]}" 2>/dev/null
  fi
  wait "${PID[$tag]}" 2>/dev/null
  local rc=$?
  PID[$tag]=
  return $rc
}
# Kills the servers still running: TERM to timeout(1), which passes it on,
# then KILL to its whole process group.
kill_all() {
  local t
  for t in "${!PID[@]}"; do
    [ -n "${PID[$t]}" ] || continue
    kill -TERM "${PID[$t]}" 2>/dev/null && sleep 0.5
    kill -KILL -- "-${PID[$t]}" 2>/dev/null
    kill -KILL "${PID[$t]}" 2>/dev/null
  done
}
on_exit kill_all

feed() {
  local tag=$1 phase=$2 out
  out=$(cli "$tag" --pipe <"$OUT/cmds.$phase" 2>&1)
  echo "$out"
  grep -q 'errors: 0, replies: ' <<<"$out"
}
digest_of() { echo "$(cli "$1" DEBUG DIGEST) $(cli "$1" DBSIZE)"; }
wait_rewrite() {
  local tag=$1 i info
  for i in $(seq 1 600); do
    info=$(cli "$tag" INFO persistence | tr -d '\r')
    if grep -q '^aof_rewrite_in_progress:0' <<<"$info" && grep -q '^aof_rewrite_scheduled:0' <<<"$info"; then
      grep '^aof_last_bgrewrite_status:' <<<"$info"
      grep -q '^aof_last_bgrewrite_status:ok' <<<"$info"
      return
    fi
    sleep 0.1
  done
  echo "BGREWRITEAOF did not finish"
  return 1
}
wait_bgsave() {
  local tag=$1 i info
  for i in $(seq 1 600); do
    info=$(cli "$tag" INFO persistence | tr -d '\r')
    if grep -q '^rdb_bgsave_in_progress:0' <<<"$info"; then
      grep '^rdb_last_bgsave_status:' <<<"$info"
      grep -q '^rdb_last_bgsave_status:ok' <<<"$info"
      return
    fi
    sleep 0.1
  done
  echo "BGSAVE did not finish"
  return 1
}

declare -A D1 D2 D3 D4 D5
scenario() {
  local tag=$1
  step "redis ($tag): server starts" start "$tag" || return 1
  step "redis ($tag): phase 1 writes" feed "$tag" 1 || { show_log "$tag"; return 1; }
  D1[$tag]=$(digest_of "$tag")
  step "redis ($tag): shutdown" stop "$tag"
  step "redis ($tag): restart (reload of the AOF)" start "$tag" || return 1
  D2[$tag]=$(digest_of "$tag")
  step "redis ($tag): phase 2 writes" feed "$tag" 2 || show_log "$tag"
  check "redis ($tag): BGREWRITEAOF starts" cli "$tag" BGREWRITEAOF
  step "redis ($tag): BGREWRITEAOF (forked child) finishes ok" wait_rewrite "$tag" || show_log "$tag"
  step "redis ($tag): phase 3 writes (new incr AOF)" feed "$tag" 3 || show_log "$tag"
  D3[$tag]=$(digest_of "$tag")
  step "redis ($tag): shutdown" stop "$tag"
  step "redis ($tag): restart (reload of the rewritten AOF)" start "$tag" || return 1
  D4[$tag]=$(digest_of "$tag")
  # An RDB snapshot by a forked child (temp-PID.rdb renamed to dump.rdb),
  # then a server that loads only that snapshot.
  check "redis ($tag): BGSAVE starts" cli "$tag" BGSAVE
  step "redis ($tag): BGSAVE (forked child) finishes ok" wait_bgsave "$tag" || show_log "$tag"
  step "redis ($tag): shutdown" stop "$tag"
  step "redis ($tag): start from dump.rdb only (appendonly no)" start "$tag" --appendonly no || return 1
  D5[$tag]=$(digest_of "$tag")
  step "redis ($tag): final shutdown" stop "$tag"
}
timed "redis on upfs" scenario upfs
timed "redis on plain" scenario plain

check "redis: digest after phase 1 as on plain" same "${D1[upfs]:-}" "${D1[plain]:-}"
check "redis: digest unchanged by restart (AOF reload)" same "${D2[upfs]:-}" "${D1[upfs]:-}"
check "redis: digest after BGREWRITEAOF and phase 3 as on plain" same "${D3[upfs]:-}" "${D3[plain]:-}"
check "redis: digest unchanged by restart (rewritten AOF)" same "${D4[upfs]:-}" "${D3[upfs]:-}"
check "redis: dump.rdb (BGSAVE) holds the same data" same "${D5[upfs]:-}" "${D4[upfs]:-}"
check "redis-check-rdb of the upfs dump.rdb" run redis-check-rdb "$UP/data/dump.rdb"
check "redis: plain run is consistent too" same "${D4[plain]:-}" "${D3[plain]:-}"
check "redis: digests are not empty" test "${D1[plain]:-0} " != "0000000000000000000000000000000000000000 0 "
man=appendonlydir/appendonly.aof.manifest
check "redis: AOF manifest as on plain" same "$(run cat "$UP/data/$man" 2>&1)" "$(cat "$PL/data/$man" 2>&1)"
check "redis-check-aof of the upfs AOF" run redis-check-aof "$UP/data/$man"
check "redis: no temp-rewriteaof files left" test -z "$(find "$UP/data" -name 'temp-*')"

# The AOF base and incr files, the manifest and the log are upfs files.
upfs_files "redis files under UPFS_DIR" "$UP" 5
finish
