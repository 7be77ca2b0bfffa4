#!/usr/bin/env python3
"""scaling_report.py: CSV, table and plots of a scaling study.

    tools/.venv/bin/python tools/scaling_report.py OUT_PREFIX P,N,SCHEDULE,RECOMPUTE,RUN_DIR ... [--skip 2]

For each run it reads RUN_DIR/metrics.h5 (docs/outputs.md) and takes, over
the steps after --skip warm-up steps: median samples/s, mean measured bubble
(the `bubble` dataset), the theoretical bubble (P-1)/(N+P-1) and the largest
stage's peak activation and total memory. Writes OUT_PREFIX.csv,
OUT_PREFIX.md and the plots OUT_PREFIX_throughput.png,
OUT_PREFIX_bubble.png and OUT_PREFIX_memory.png.
"""
import argparse
import csv

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MIB = 1024.0 * 1024.0
FIELDS = ["P", "N", "schedule", "recompute", "samples_per_s", "bubble_measured",
          "bubble_theory", "peak_activation_mib", "peak_total_mib", "run_dir"]


def measure(spec, skip):
    p, n, schedule, recompute, run_dir = spec.split(",", 4)
    p, n = int(p), int(n)
    with h5py.File(f"{run_dir}/metrics.h5", "r") as f:
        rate = np.asarray(f["samples_per_s"])[skip:]
        bubble = np.asarray(f["bubble"])[skip:]
        act = np.asarray(f["peak_bytes_activations"])[skip:]
        total = np.asarray(f["peak_bytes_total"])[skip:]
    return {"P": p, "N": n, "schedule": schedule, "recompute": recompute,
            "samples_per_s": float(np.median(rate)), "bubble_measured": float(bubble.mean()),
            "bubble_theory": (p - 1) / (n + p - 1),
            "peak_activation_mib": float(act.max()) / MIB, "peak_total_mib": float(total.max()) / MIB,
            "run_dir": run_dir}


def plot_lines(rows, y, ylabel, path, theory=False):
    fig, ax = plt.subplots(figsize=(7, 4))
    for sched in sorted({r["schedule"] for r in rows}):
        for p in sorted({r["P"] for r in rows}):
            pts = sorted((r["N"], r[y]) for r in rows
                         if r["P"] == p and r["schedule"] == sched and r["recompute"] == "none")
            if not pts:
                continue
            xs, ys = zip(*pts)
            line, = ax.plot(xs, ys, marker="o", label=f"P={p} {sched}")
            if theory:
                th = sorted((r["N"], r["bubble_theory"]) for r in rows
                            if r["P"] == p and r["schedule"] == sched and r["recompute"] == "none")
                ax.plot([t[0] for t in th], [t[1] for t in th], "--", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches N")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    if theory:
        ax.set_title("measured (solid) vs (P-1)/(N+P-1) (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--skip", type=int, default=2)
    args = parser.parse_args()
    rows = [measure(spec, args.skip) for spec in args.runs]
    with open(f"{args.prefix}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    with open(f"{args.prefix}.md", "w") as f:
        f.write("| P | N | schedule | recompute | samples/s | bubble measured | bubble theory | "
                "peak act (MiB) | peak total (MiB) |\n|---:|---:|---|---|---:|---:|---:|---:|---:|\n")
        for r in rows:
            f.write(f"| {r['P']} | {r['N']} | {r['schedule']} | {r['recompute']} | "
                    f"{r['samples_per_s']:.1f} | {100 * r['bubble_measured']:.1f}% | "
                    f"{100 * r['bubble_theory']:.1f}% | {r['peak_activation_mib']:.2f} | "
                    f"{r['peak_total_mib']:.2f} |\n")
    plot_lines(rows, "samples_per_s", "samples/s", f"{args.prefix}_throughput.png")
    plot_lines(rows, "bubble_measured", "bubble fraction", f"{args.prefix}_bubble.png", theory=True)
    plot_lines(rows, "peak_activation_mib", "largest stage's peak activations (MiB)",
               f"{args.prefix}_memory.png")


if __name__ == "__main__":
    main()
