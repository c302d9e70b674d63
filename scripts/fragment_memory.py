#!/usr/bin/env python3
"""Runs a command while the machine's free memory is fragmented.

usage: python3 scripts/fragment_memory.py [--leave MIB] [--dir D] -- CMD [ARGS...]

A machine that has run for a while has its free memory in small pieces: a
2 MiB huge page then needs compaction (migrating pages) first, and page
allocation is slower. A freshly booted one does not, which is why a
benchmark can look good on one and bad on the other. This reproduces the
first kind: it fills all available memory but --leave MiB (default 512)
with a tmpfs file in D (default /dev/shm) in 4 KiB pages, then punches out
every other page, so that half of that memory is free again but no 2 MiB
of it is contiguous; runs CMD; and removes the file (also on Ctrl-C).
Prints how long the fill and the punching took and the free memory before
CMD runs. Exit status: CMD's.
"""
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import tempfile
import time

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
PAGE = 4096
CHUNK = 1 << 20


def meminfo(field):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit(f"fragment_memory: no {field} in /proc/meminfo")


def main(argv):
    leave = 512 << 20
    directory = "/dev/shm"
    args = list(argv)
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--leave" and args:
            leave = int(args.pop(0)) << 20
        elif opt == "--dir" and args:
            directory = args.pop(0)
        elif opt in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"fragment_memory: unexpected argument '{opt}' (see --help)", file=sys.stderr)
            return 2
    if not args or args[0] != "--" or len(args) < 2:
        print("fragment_memory: give the command after --", file=sys.stderr)
        return 2
    cmd = args[1:]

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fill = (meminfo("MemAvailable") - leave) // CHUNK * CHUNK
    if fill <= 0:
        print("fragment_memory: less available memory than --leave", file=sys.stderr)
        return 2
    fd, path = tempfile.mkstemp(prefix="upfs-fragment-", dir=directory)
    stop = {"now": False}

    def interrupted(signum, frame):
        stop["now"] = True

    old_int = signal.signal(signal.SIGINT, interrupted)
    old_term = signal.signal(signal.SIGTERM, interrupted)
    try:
        t0 = time.monotonic()
        buf = b"\x5a" * CHUNK
        written = 0
        while written < fill and not stop["now"]:
            written += os.write(fd, buf)
        t1 = time.monotonic()
        for off in range(0, written, 2 * PAGE):
            if stop["now"]:
                break
            if libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, PAGE) != 0:
                err = ctypes.get_errno()
                print(f"fragment_memory: punch hole: {os.strerror(err)}", file=sys.stderr)
                return 1
        t2 = time.monotonic()
        if stop["now"]:
            return 130
        print(f"fragment_memory: filled {written >> 20} MiB in {t1 - t0:.1f} s, freed every "
              f"other page in {t2 - t1:.1f} s; MemFree now {meminfo('MemFree') >> 20} MiB",
              flush=True)
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        return subprocess.call(cmd)
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
