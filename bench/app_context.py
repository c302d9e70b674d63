"""The application benchmark's context (bench/apps.py): processes, directories,
side-specific command lines and the check that the upfs side made upfs files.

Python 3 standard library only.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAGIC = b"UPFS"


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
