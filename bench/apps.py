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
import signal
import statistics
import sys
import time

from app_context import REPO, Ctx, Failure, fmt_num, loadavg
from app_workloads import Fio, Redis, RocksDB, Speedtest1

SIDES = ("upfs", "kernel")


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
