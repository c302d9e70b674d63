"""The application benchmark's workloads (bench/apps.py): RocksDB's db_bench,
SQLite's speedtest1, Redis with redis-benchmark, and fio.

Python 3 standard library only.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time

from app_context import REPO, Failure, read_text, tail, which

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
