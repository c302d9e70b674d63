#!/usr/bin/python3
"""Application benchmark: real programs on upfs against the kernel file system.

Runs the same workloads of unmodified applications twice per round, once
under `upfs run --dir D` (their files are upfs files) and once on a plain
directory of the same medium (default /dev/shm), interleaved: upfs, kernel,
upfs, kernel, ... with fresh directories every time. Reports per workload the
median throughput of each side, the ratio of the medians (upfs / kernel), the
range of the per-round ratios and the target.

    /usr/bin/python3 bench/apps.py                       # full run, about 5-6 min
    /usr/bin/python3 bench/apps.py --quick               # smoke run, about 1 min
    /usr/bin/python3 bench/apps.py --only rocksdb,fio-randwrite --rounds 9 --json out.json

Timing never fails the run: the exit status is 0 when every selected workload
ran and its output checked out, 1 when one failed (could not run, wrong
output, or its upfs files were not upfs files), 2 on bad usage, 130 when
interrupted. See bench/README.md, "Application benchmark".

Python 3 standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAGIC = b"UPFS"
SIDES = ("upfs", "kernel")


class Failure(Exception):
    """A workload could not run or produced wrong output (not a timing issue)."""


def fmt_num(v):
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:,.2f}"
    return f"{v:.4f}"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def has_magic(path):
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def regular_files(top):
    out = []
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return sorted(out)


def tail(text, n=15):
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join("    " + l[:200] for l in lines[-n:])


# --------------------------------------------------------------------- context


class Ctx:
    """Process management, directories and side-specific command lines."""

    def __init__(self, args):
        self.args = args
        self.upfs = args.upfs
        self.mode = args.mode
        self.procs = []  # live Popen objects, killed (by process group) on exit
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("LD_PRELOAD", "UPFS_DIR", "UPFS_MODE")}
        self.root = tempfile.mkdtemp(prefix="upfs-apps.", dir=args.dir)
        self.tty = sys.stderr.isatty()
        self.shown = False

    # -- status line (like `upfs bench`: one overwritten line on a terminal)
    def status(self, s):
        if self.tty:
            sys.stderr.write("\r" + s + "\033[K")
            self.shown = True
        sys.stderr.flush()

    def clear(self):
        if self.tty and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False

    # -- directories
    def fresh_dir(self, name):
        d = os.path.join(self.root, name)
        self.remove_tree(d)
        os.makedirs(d)
        return d

    def remove_tree(self, d):
        """upfs rm for upfs files (removes their /dev/shm state), then rm -rf."""
        if not os.path.exists(d):
            return
        files = [p for p in regular_files(d) if has_magic(p)]
        for i in range(0, len(files), 256):
            subprocess.run([self.upfs, "rm", "--force"] + files[i:i + 256], env=self.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)

    # -- processes
    def wrap(self, side, datadir, cmd):
        if side == "upfs":
            return [self.upfs, "run", "--dir", datadir, "--mode", self.mode, "--"] + cmd
        return list(cmd)

    def spawn(self, cmd, log_base, env=None):
        out = open(log_base + ".out", "wb")
        err = open(log_base + ".err", "wb")
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                 env=dict(self.env, **(env or {})), start_new_session=True)
        except OSError as e:
            raise Failure(f"cannot run {cmd[0]}: {e}")
        finally:
            out.close()
            err.close()
        p.log_base = log_base
        self.procs.append(p)
        return p

    def kill(self, p, grace=5.0):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def wait(self, p, timeout):
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            raise Failure(f"{os.path.basename(p.args[0])} timed out after {timeout:.0f} s\n"
                          + tail(read_text(p.log_base + ".err")))
        if p in self.procs:
            self.procs.remove(p)
        return rc

    def run(self, cmd, log_base, timeout, env=None):
        """Runs cmd to completion; returns (exit status, stdout, stderr)."""
        p = self.spawn(cmd, log_base, env)
        rc = self.wait(p, timeout)
        return rc, read_text(log_base + ".out"), read_text(log_base + ".err")

    def kill_all(self):
        for p in list(self.procs):
            self.kill(p, grace=2.0)

    # -- the check that makes a run meaningful
    def check_files(self, side, datadir, required):
        """upfs side: every regular file under datadir is a upfs file, and each
        regex in `required` matches at least one file name. Kernel side: no
        file is a upfs file."""
        files = regular_files(datadir)
        if side == "upfs":
            plain = [os.path.relpath(p, datadir) for p in files if not has_magic(p)]
            if plain:
                raise Failure("files under the upfs directory are not upfs files "
                              "(the preload did not intercept their creation): "
                              + ", ".join(plain[:8]))
            for rx in required:
                if not any(re.search(rx, os.path.basename(p)) for p in files):
                    raise Failure(f"no file matching {rx} under {datadir} "
                                  f"(found: {', '.join(os.path.basename(p) for p in files[:8])})")
        else:
            magic = [os.path.relpath(p, datadir) for p in files if has_magic(p)]
            if magic:
                raise Failure("kernel side produced upfs files: " + ", ".join(magic[:8]))
        return files

    def upfs_size(self, path):
        """Logical size of a upfs file, from `upfs info`."""
        r = subprocess.run([self.upfs, "info", path], env=self.env, capture_output=True, text=True)
        m = re.search(r"^size:\s+([\d,]+) bytes", r.stdout, re.M)
        if r.returncode != 0 or not m:
            raise Failure(f"upfs info {path} failed:\n{tail(r.stdout + r.stderr)}")
        return int(m.group(1).replace(",", ""))


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def which(name):
    p = shutil.which(name)
    if not p:
        raise Failure(f"{name} not found (see scripts/install-deps.sh)")
    return p


# ------------------------------------------------------------------- workloads
#
# A workload runs one or more application processes per round and side and
# yields one figure per metric. run() returns ({metric: value}, signature);
# the signature (deterministic output such as a result hash) must be the same
# in every round on both sides.


class Workload:
    group = ""
    metrics = []  # (name, unit, target)
    settings = ""

    def prepare(self, ctx):
        pass

    def run(self, ctx, side, work, data):
        raise NotImplementedError


class RocksDB(Workload):
    group = "rocksdb"
    metrics = [("rocksdb-fillrandom", "ops/s", 1.2), ("rocksdb-overwrite", "ops/s", 1.2),
               ("rocksdb-readrandom", "ops/s", 1.1)]

    def __init__(self, quick):
        self.num = 40000 if quick else 200000
        self.flags = [
            f"--num={self.num}", "--value_size=100", "--key_size=16", "--threads=1",
            "--sync=1", "--compression_type=none",
            # Small memtables and files: the DB is flushed and compacted into
            # SST files during the fills, and readrandom reads them (1 MiB
            # block cache) instead of answering from the memtable.
            "--write_buffer_size=1048576" if quick else "--write_buffer_size=4194304",
            "--target_file_size_base=4194304", "--max_bytes_for_level_base=16777216",
            "--cache_size=1048576", "--seed=1", "--progress_reports=0", "--histogram=0",
            "--statistics=0",
        ]
        self.settings = ("db_bench fillrandom,overwrite,readrandom in one process, "
                         + " ".join(self.flags) + "; --sync=1 on both sides: every "
                         "WAL write is followed by fdatasync, as durable as a upfs write "
                         "is on return")

    def prepare(self, ctx):
        self.bin = which("db_bench")

    def run(self, ctx, side, work, data):
        cmd = [self.bin, "--benchmarks=fillrandom,overwrite,readrandom",
               f"--db={os.path.join(data, 'db')}"] + self.flags
        rc, out, err = ctx.run(ctx.wrap(side, data, cmd), os.path.join(work, "db_bench"),
                               timeout=600)
        text = out + err
        if rc != 0:
            raise Failure(f"db_bench exited with {rc}:\n{tail(text)}")
        bad = re.search(r"^.*(corruption|io error|invalid argument).*$", text, re.I | re.M)
        if bad:
            raise Failure(f"db_bench reported: {bad.group(0).strip()}")
        vals = {}
        for m in re.finditer(r"^(fillrandom|overwrite|readrandom)\s*:\s*[\d.]+ micros/op\s+"
                             r"(\d+) ops/sec", out, re.M):
            vals["rocksdb-" + m.group(1)] = float(m.group(2))
        if len(vals) != 3:
            raise Failure(f"cannot parse db_bench output:\n{tail(out)}")
        found = re.search(r"\((\d+) of (\d+) found\)", out)
        if not found or int(found.group(1)) == 0:
            raise Failure("readrandom found no keys")
        ctx.check_files(side, data, [r"\.sst$", r"\.log$", r"^MANIFEST-"])
        # With --seed=1 the keys are the same on both sides: so is what is found.
        return vals, f"readrandom found {found.group(1)} of {found.group(2)}"


class Speedtest1(Workload):

    def __init__(self, journal, quick, path):
        self.journal = journal
        self.group = f"speedtest1-{journal}"
        self.metrics = [(self.group, "runs/s", 1.2)]
        self.size = 15 if quick else 80
        self.path = path
        self.jflags = ["--journal", "wal", "--exclusive"] if journal == "wal" else \
            ["--journal", "delete"]
        self.settings = (f"speedtest1 {' '.join(self.jflags)} --size {self.size} --verify, "
                         "default synchronous=FULL, SQLITE_TMPDIR outside the upfs "
                         "directory (temp files plain on both sides); throughput = 1 / TOTAL "
                         "time"
                         + (" (--exclusive: upfs refuses shared writable maps of the -shm "
                            "file)" if journal == "wal" else
                            " (a -journal file created and deleted per transaction)"))

    def prepare(self, ctx):
        if not (os.path.isfile(self.path) and os.access(self.path, os.X_OK)):
            script = os.path.join(REPO, "scripts", "build-speedtest1.sh")
            if not os.path.isfile(script):
                raise Failure(f"{self.path} missing and {script} does not exist")
            ctx.status(f"building {self.path} ...")
            r = subprocess.run(["bash", script, os.path.dirname(self.path)], env=ctx.env,
                               capture_output=True, text=True)
            ctx.clear()
            if r.returncode != 0 or not os.path.isfile(self.path):
                raise Failure(f"{script} failed:\n{tail(r.stdout + r.stderr)}")
        self.sqlite3 = shutil.which("sqlite3")  # optional: integrity_check afterwards

    def run(self, ctx, side, work, data):
        db = os.path.join(data, "speedtest1.db")
        tmp = os.path.join(work, "tmp")  # SQLite's sort/temp files: plain, on both sides
        os.makedirs(tmp)
        cmd = [self.path] + self.jflags + ["--size", str(self.size), "--verify", db]
        rc, out, err = ctx.run(ctx.wrap(side, data, cmd), os.path.join(work, "speedtest1"),
                               timeout=600, env={"SQLITE_TMPDIR": tmp})
        if rc != 0:
            raise Failure(f"speedtest1 exited with {rc}:\n{tail(out + err)}")
        m = re.search(r"TOTAL\.*\s+(\d+)\.(\d+)s", out)
        h = re.search(r"^Verification Hash:\s*(.+)$", out, re.M)
        if not m or not h:
            raise Failure(f"cannot parse speedtest1 output:\n{tail(out + err)}")
        secs = int(m.group(1)) + int(m.group(2)) / 1000.0
        if secs <= 0:
            raise Failure("speedtest1 TOTAL is 0 s: use a larger --size")
        if self.sqlite3:
            # EXCLUSIVE: a WAL database on upfs cannot use a shared -shm map.
            rc2, out2, err2 = ctx.run(
                ctx.wrap(side, data, [self.sqlite3, db, "PRAGMA locking_mode=EXCLUSIVE;",
                                      "PRAGMA integrity_check;"]),
                os.path.join(work, "integrity"), timeout=120)
            if rc2 != 0 or out2.split()[-1:] != ["ok"]:
                raise Failure(f"PRAGMA integrity_check: {tail(out2 + err2)}")
        ctx.check_files(side, data, [r"^speedtest1\.db$"])
        return {self.group: 1.0 / secs}, "verification hash " + h.group(1).strip()


class Redis(Workload):
    group = "redis"
    metrics = [("redis-set", "req/s", 1.2)]

    def __init__(self, quick):
        self.n = 40000 if quick else 200000
        self.keys = self.n // 20  # every key is written with near certainty
        self.bench_flags = ["-t", "set", "-n", str(self.n), "-r", str(self.keys), "-d", "100",
                            "-c", "50", "--csv"]
        self.settings = ("redis-server --appendonly yes --appendfsync always (AOF fsynced "
                         "before replies, on both sides), redis-benchmark "
                         + " ".join(self.bench_flags[:-1]) + " over a unix socket; "
                         "after the run: DBSIZE, SHUTDOWN, restart from the AOF, DBSIZE again")

    def prepare(self, ctx):
        self.server = which("redis-server")
        self.bench = which("redis-benchmark")

    @staticmethod
    def command(sock, *args, timeout=10.0):
        """One RESP request over a unix socket; returns the decoded reply
        (None when the server closed the connection, e.g. after SHUTDOWN)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(sock)
            req = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
            s.sendall(req.encode())
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                buf += chunk
            line, rest = buf.split(b"\r\n", 1)
            kind, body = line[:1], line[1:].decode()
            if kind == b"+":
                return body
            if kind == b"-":
                raise Failure("redis error: " + body)
            if kind == b":":
                return int(body)
            if kind == b"$":
                n = int(body)
                if n < 0:
                    return None
                while len(rest) < n + 2:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                return rest[:n].decode("utf-8", "replace")
            raise Failure(f"unexpected redis reply {line!r}")
        finally:
            s.close()

    def start(self, ctx, side, work, data, sock, tag):
        cmd = [self.server, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
               "--dir", data, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
               "--daemonize", "no", "--logfile", os.path.join(work, f"redis-{tag}.log")]
        p = ctx.spawn(ctx.wrap(side, data, cmd), os.path.join(work, f"redis-server-{tag}"))
        deadline = time.monotonic() + 30
        while True:
            if p.poll() is not None:
                raise Failure(f"redis-server exited with {p.returncode}:\n"
                              + tail(read_text(os.path.join(work, f"redis-{tag}.log"))))
            try:
                if self.command(sock, "PING", timeout=2) == "PONG":
                    return p
            except (OSError, Failure):  # not listening yet, or -LOADING
                pass
            if time.monotonic() > deadline:
                ctx.kill(p)
                raise Failure("redis-server did not answer PING within 30 s")
            time.sleep(0.02)

    def stop(self, ctx, p, sock, tag, work):
        try:
            self.command(sock, "SHUTDOWN", timeout=30)
        except (OSError, Failure):
            pass
        try:
            rc = ctx.wait(p, 60)
        finally:
            ctx.kill(p)
        if rc != 0:
            raise Failure(f"redis-server ({tag}) exited with {rc}:\n"
                          + tail(read_text(os.path.join(work, f"redis-{tag}.log"))))

    def run(self, ctx, side, work, data):
        sock = os.path.join(work, "redis.sock")
        p = self.start(ctx, side, work, data, sock, "run")
        try:
            rc, out, err = ctx.run([self.bench, "-s", sock] + self.bench_flags,
                                   os.path.join(work, "redis-benchmark"), timeout=600)
            if rc != 0:
                raise Failure(f"redis-benchmark exited with {rc}:\n{tail(out + err)}")
            m = re.search(r'^"SET","([\d.]+)"', out, re.M)
            if not m:
                raise Failure(f"cannot parse redis-benchmark output:\n{tail(out + err)}")
            rps = float(m.group(1))
            size = self.command(sock, "DBSIZE")
            info = self.command(sock, "INFO", "persistence") or ""
            if "aof_enabled:1" not in info or "aof_last_write_status:ok" not in info:
                raise Failure("AOF not enabled or last AOF write failed:\n" + tail(info))
        finally:
            self.stop(ctx, p, sock, "run", work)
        if size != self.keys:
            raise Failure(f"DBSIZE {size} after the run, expected {self.keys}")
        ctx.check_files(side, data, [r"\.incr\.aof$", r"\.manifest$"])
        # The AOF (read back through upfs on the upfs side) must restore the data.
        p = self.start(ctx, side, work, data, sock, "reload")
        try:
            size2 = self.command(sock, "DBSIZE")
        finally:
            self.stop(ctx, p, sock, "reload", work)
        if size2 != self.keys:
            raise Failure(f"DBSIZE {size2} after reloading the AOF, expected {self.keys}")
        return {"redis-set": rps}, f"dbsize {self.keys}"


class Fio(Workload):
    group = "fio"
    metrics = [("fio-randwrite", "IOPS", 1.5), ("fio-randread", "IOPS", 1.1)]

    def __init__(self, quick):
        self.size = (64 if quick else 256) << 20
        self.runtime = "1s" if quick else "3s"
        self.common = ["--ioengine=psync", "--bs=4k", f"--size={self.size}",
                       f"--runtime={self.runtime}", "--time_based", "--randrepeat=1",
                       "--norandommap", "--output-format=json"]
        self.settings = ("fio " + " ".join(self.common[:-1]) + ", one file laid out by fio, "
                         "job randwrite with --sync=1 (O_SYNC: each pwrite durable on return, "
                         "exactly a upfs pwrite's guarantee, and cheaper for the kernel than "
                         "--fsync=1), then job randread on the same file")

    def prepare(self, ctx):
        self.bin = which("fio")

    def run(self, ctx, side, work, data):
        f = os.path.join(data, "fio.dat")
        cmd = [self.bin] + self.common + [f"--filename={f}",
                                          "--name=randwrite", "--rw=randwrite", "--sync=1",
                                          "--name=randread", "--rw=randread", "--stonewall"]
        rc, out, err = ctx.run(ctx.wrap(side, data, cmd), os.path.join(work, "fio"), timeout=600)
        if rc != 0:
            raise Failure(f"fio exited with {rc}:\n{tail(out + err)}")
        try:
            res = json.loads(out[out.index("{"):])
            jobs = {j["jobname"]: j for j in res["jobs"]}
            w, r = jobs["randwrite"], jobs["randread"]
        except (ValueError, KeyError) as e:
            raise Failure(f"cannot parse fio output ({e}):\n{tail(out + err)}")
        for j in (w, r):
            if j.get("error", 0) != 0:
                raise Failure(f"fio job {j['jobname']}: error {j['error']}")
        if w["write"]["io_bytes"] <= 0 or r["read"]["io_bytes"] <= 0:
            raise Failure("fio did no I/O")
        ctx.check_files(side, data, [r"^fio\.dat$"])
        size = ctx.upfs_size(f) if side == "upfs" else os.stat(f).st_size
        if size != self.size:
            raise Failure(f"fio.dat is {size} bytes, expected {self.size}")
        return {"fio-randwrite": w["write"]["iops"], "fio-randread": r["read"]["iops"]}, None


# ---------------------------------------------------------------------- driver


def median(v):
    return statistics.median(v) if v else 0.0


def select(workloads, only):
    if not only:
        return workloads, {m[0] for w in workloads for m in w.metrics}
    tokens = [t for t in only.split(",") if t]
    groups = {w.group for w in workloads}
    metrics = {m[0] for w in workloads for m in w.metrics}
    unknown = [t for t in tokens if t not in groups and t not in metrics]
    if unknown or not tokens:
        raise SystemExit(f"apps.py: --only: unknown workload {', '.join(unknown) or '(empty)'}; "
                         f"choose from {', '.join(sorted(groups | metrics))}")
    chosen_metrics = set()
    for w in workloads:
        for m in w.metrics:
            if w.group in tokens or m[0] in tokens:
                chosen_metrics.add(m[0])
    return [w for w in workloads if any(m[0] in chosen_metrics for m in w.metrics)], \
        chosen_metrics


def run_workload(ctx, w, rounds, warmup):
    """Interleaved rounds. Returns {metric: {"upfs": [...], "kernel": [...]}}."""
    vals = {m[0]: {s: [] for s in SIDES} for m in w.metrics}
    signature = None
    for rnd in range(-warmup, rounds):
        for side in SIDES:
            label = f"warm-up {rnd + warmup + 1}/{warmup}" if rnd < 0 else \
                f"round {rnd + 1}/{rounds}"
            ctx.status(f"{w.group}: {label} {side}  (load {loadavg()})")
            name = f"{w.group}-{'w%d' % (rnd + warmup) if rnd < 0 else 'r%d' % rnd}-{side}"
            work = ctx.fresh_dir(name)
            data = os.path.join(work, "data")
            os.makedirs(data)
            try:
                got, sig = w.run(ctx, side, work, data)
            except Failure as e:
                raise Failure(f"{label}, {side} side: {e}")
            finally:
                ctx.kill_all()
                ctx.remove_tree(work)
            if sig is not None:
                if signature is None:
                    signature = sig
                elif sig != signature:
                    raise Failure(f"{label}, {side} side: output differs: '{sig}', "
                                  f"earlier runs gave '{signature}'")
            if ctx.args.verbose and rnd >= 0:
                ctx.clear()
                sys.stderr.write(f"{w.group:<20} {label:<12} {side:<6} "
                                 + "  ".join(f"{k}={fmt_num(v)}" for k, v in got.items())
                                 + f"  load {loadavg()}\n")
            if rnd >= 0:
                for k, v in got.items():
                    vals[k][side].append(v)
    return vals, signature


def main():
    ap = argparse.ArgumentParser(
        prog="apps.py",
        description="Runs real applications on upfs (under `upfs run`) and on a plain "
                    "directory of the same medium, interleaved, and compares throughput.")
    ap.add_argument("--upfs", default=os.path.join(REPO, "build", "bin", "upfs"),
                    help="the upfs command-line tool (default: build/bin/upfs of this repo)")
    ap.add_argument("--rounds", type=int, help="recorded rounds per side (default 5, quick 3)")
    ap.add_argument("--warmup", type=int,
                    help="unrecorded warm-up rounds per side (default 1, quick 0)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run (~1 min)")
    ap.add_argument("--only", help="comma-separated workload groups or metrics "
                    "(rocksdb, speedtest1-wal, speedtest1-delete, redis, fio, or e.g. "
                    "fio-randread)")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--mode", choices=("strict", "sync"), default="strict",
                    help="consistency mode of the upfs files (default strict)")
    ap.add_argument("--dir", default="/dev/shm",
                    help="medium for both sides (default /dev/shm)")
    ap.add_argument("--speedtest1",
                    help="speedtest1 binary (default: apps/speedtest1 in the build "
                         "directory of --upfs, built by scripts/build-speedtest1.sh if missing)")
    ap.add_argument("--verbose", action="store_true", help="every round's figures on stderr")
    args = ap.parse_args()
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 1)
    if rounds < 1 or warmup < 0:
        ap.error("--rounds must be >= 1 and --warmup >= 0")
    args.upfs = os.path.abspath(args.upfs)
    if not (os.path.isfile(args.upfs) and os.access(args.upfs, os.X_OK)):
        ap.error(f"--upfs: {args.upfs} is not an executable (build it, or pass --upfs)")
    if not os.path.isdir(args.dir):
        ap.error(f"--dir: {args.dir} is not a directory")
    st1 = args.speedtest1 or os.path.join(os.path.dirname(os.path.dirname(args.upfs)),
                                          "apps", "speedtest1")

    workloads = [RocksDB(args.quick), Speedtest1("wal", args.quick, os.path.abspath(st1)),
                 Speedtest1("delete", args.quick, os.path.abspath(st1)), Redis(args.quick),
                 Fio(args.quick)]
    workloads, chosen = select(workloads, args.only)

    ctx = Ctx(args)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)

    results, failures = [], []
    load_start = loadavg()
    t_start = time.monotonic()
    print(f"upfs apps: {args.dir}, {args.mode} mode, {rounds} rounds per side "
          f"(+{warmup} warm-up), upfs and kernel interleaved, fresh directories every run"
          f"{', quick sizes' if args.quick else ''}")
    print(f"upfs: {args.upfs}")
    print(f"load average at start: {load_start} ({os.cpu_count()} CPUs)\n")
    sys.stdout.flush()
    try:
        for w in workloads:
            if not ctx.tty:
                print(f"apps.py: {w.group} ...", file=sys.stderr, flush=True)
            try:
                w.prepare(ctx)
                l0 = loadavg()
                vals, sig = run_workload(ctx, w, rounds, warmup)
                l1 = loadavg()
            except Failure as e:
                ctx.clear()
                failures.append((w.group, str(e)))
                print(f"{w.group}: FAILED: {e}\n", file=sys.stderr)
                continue
            for name, unit, target in w.metrics:
                if name not in chosen:
                    continue
                u, k = vals[name]["upfs"], vals[name]["kernel"]
                per = [a / b for a, b in zip(u, k) if b > 0]
                mu, mk = median(u), median(k)
                ratio = mu / mk if mk > 0 else 0.0
                results.append({
                    "name": name, "unit": unit, "upfs_ops": mu, "kernel_ops": mk,
                    "ratio": ratio, "ratio_min": min(per) if per else 0.0,
                    "ratio_max": max(per) if per else 0.0, "target": target,
                    "pass": ratio >= target, "upfs_rounds": u, "kernel_rounds": k,
                    "check": sig, "settings": w.settings, "loadavg": [l0, l1],
                })
    except KeyboardInterrupt:
        ctx.clear()
        ctx.kill_all()
        ctx.remove_tree(ctx.root)
        print("apps.py: interrupted; servers stopped, files removed", file=sys.stderr)
        return 130
    finally:
        ctx.kill_all()
        ctx.remove_tree(ctx.root)
    ctx.clear()

    if results:
        print(f"{'workload':<20} {'unit':<7} {'upfs':>12} {'kernel':>12} {'upfs/kernel':>12} "
              f"{'round ratios':>15} {'target':>8}")
        for r in results:
            spread = f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}x"
            print(f"{r['name']:<20} {r['unit']:<7} {fmt_num(r['upfs_ops']):>12} "
                  f"{fmt_num(r['kernel_ops']):>12} {r['ratio']:>11.2f}x {spread:>15} "
                  f"{'>=%.1fx' % r['target']:>8} {'pass' if r['pass'] else 'MISS'}")
        print(f"\nupfs, kernel: median over {rounds} rounds per side; upfs/kernel: ratio of "
              "the medians; round ratios: lowest and highest\nupfs/kernel of single rounds "
              "(round r of upfs against round r of the kernel). Timing never fails the run.")
        print("\nsettings (the same command line on both sides; upfs writes are durable on "
              "return):")
        seen = set()
        for w in workloads:
            if w.group not in seen and any(r["name"].startswith(w.group) for r in results):
                seen.add(w.group)
                print(f"  {w.group}: {w.settings}")
        checks = [(w.group, next((r["check"] for r in results
                                  if r["name"].startswith(w.group) and r["check"]), None))
                  for w in workloads if w.group in seen]
        print("\nchecked: exit status and error output of every run; upfs side: every file "
              "it created is a upfs file (magic),\nkernel side: none is; "
              + "; ".join(f"{g}: {c} (same every run)" for g, c in checks if c))
    load_end = loadavg()
    print(f"\nload average: {load_start} at start, {load_end} at the end; "
          f"{time.monotonic() - t_start:.0f} s")
    if failures:
        print("\nFAILED: " + ", ".join(g for g, _ in failures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
