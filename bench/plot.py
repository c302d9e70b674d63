#!/usr/bin/env python3
"""Turns `upfs bench --json FILE` output into a bar chart PNG.

usage: python3 bench/plot.py results.json [out.png]

Left panel: median ops/s of upfs and the kernel per workload (log scale).
Right panel: the ratio upfs/kernel, with a line at 1 (parity).
Needs matplotlib (apt-get install python3-matplotlib); without it the script
says so and exits 0, so scripts can call it unconditionally.
"""
import json
import sys


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    src = argv[1]
    out = argv[2] if len(argv) > 2 else src.rsplit(".", 1)[0] + ".png"
    with open(src) as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not rows:
        print(f"plot.py: {src}: expected a non-empty JSON array", file=sys.stderr)
        return 1
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; skipping the chart "
              "(apt-get install python3-matplotlib)")
        return 0

    names = [r["name"] for r in rows]
    upfs = [r["upfs_ops"] for r in rows]
    kernel = [r["kernel_ops"] for r in rows]
    ratio = [r["ratio"] for r in rows]
    x = range(len(names))
    w = 0.4

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    ax1.bar([i - w / 2 for i in x], upfs, w, label="upfs")
    ax1.bar([i + w / 2 for i in x], kernel, w, label="kernel (+fsync per write)")
    ax1.set_yscale("log")
    ax1.set_ylabel("ops/s (median)")
    ax1.set_xticks(list(x))
    ax1.set_xticklabels(names, rotation=40, ha="right")
    ax1.legend()
    ax1.set_title("throughput")

    colors = ["tab:green" if r >= 1 else "tab:red" for r in ratio]
    ax2.bar(list(x), ratio, color=colors)
    ax2.axhline(1.0, color="black", linewidth=1)
    for i, r in enumerate(ratio):
        ax2.text(i, r, f"{r:.2f}x", ha="center", va="bottom", fontsize=8)
    ax2.set_ylabel("upfs / kernel")
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(names, rotation=40, ha="right")
    ax2.set_title("speed-up over the kernel")

    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
