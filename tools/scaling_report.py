#!/usr/bin/env python3
"""scaling_report.py: CSV, table and plots of a scaling study.

    tools/.venv/bin/python tools/scaling_report.py OUT_PREFIX P,N,SCHEDULE,RECOMPUTE,RUN_DIR ... [--skip 2]

For each run it reads RUN_DIR/metrics.h5 (docs/outputs.md) and takes, over
the steps after --skip warm-up steps (and, for a schedule placed again at
measured times, from its `schedule_first_step` on): median samples/s, mean
measured bubble (the `bubble` dataset) and the largest stage's peak
activation and total memory. The theoretical bubble is the schedule's
unit-time bubble from RUN_DIR/trace.h5 (attribute `theory_bubble`); a run
without a trace falls back to (P-1)/(N+P-1), which holds for gpipe and 1f1b
only. Writes OUT_PREFIX.csv, OUT_PREFIX.md and the plots
OUT_PREFIX_throughput.png, OUT_PREFIX_bubble.png and OUT_PREFIX_memory.png
(one panel per P).
"""
import argparse
import csv
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from trace_report import theory_bubble as one_f_one_b_bubble  # noqa: E402

MIB = 1024.0 * 1024.0
FIELDS = ["P", "N", "schedule", "recompute", "samples_per_s", "bubble_measured",
          "bubble_theory", "peak_activation_mib", "peak_total_mib", "run_dir"]


def theory_bubble(run_dir, p, n, schedule):
    """The schedule's unit-time bubble, from the run's trace.h5 (untraced
    gpipe and 1f1b: trace_report's (P-1)/(N+P-1))."""
    path = f"{run_dir}/trace.h5"
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            if "theory_bubble" in f.attrs:
                return float(np.ravel(f.attrs["theory_bubble"])[0])
    if schedule in ("gpipe", "1f1b"):
        return one_f_one_b_bubble(p, n)
    sys.exit(f"scaling_report.py: {path}: no theory_bubble attribute; schedule '{schedule}' "
             "needs a traced run (output.trace = true) for its theoretical bubble")


def measure(spec, skip):
    p, n, schedule, recompute, run_dir = spec.split(",", 4)
    p, n = int(p), int(n)
    with h5py.File(f"{run_dir}/metrics.h5", "r") as f:
        # steps before a placement at measured times ran the papers' placement
        first = max(skip, int(np.ravel(f.attrs.get("schedule_first_step", [0]))[0]))
        rate = np.asarray(f["samples_per_s"])[first:]
        bubble = np.asarray(f["bubble"])[first:]
        act = np.asarray(f["peak_bytes_activations"])[first:]
        total = np.asarray(f["peak_bytes_total"])[first:]
    if len(rate) == 0:
        sys.exit(f"scaling_report.py: {run_dir}/metrics.h5: no step after step {first - 1} to measure")
    return {"P": p, "N": n, "schedule": schedule, "recompute": recompute,
            "samples_per_s": float(np.median(rate)), "bubble_measured": float(np.nanmean(bubble)),
            "bubble_theory": theory_bubble(run_dir, p, n, schedule),
            "peak_activation_mib": float(np.nanmax(act)) / MIB,
            "peak_total_mib": float(np.nanmax(total)) / MIB,
            "run_dir": run_dir}


def plot_lines(rows, y, ylabel, path, theory=False):
    """One panel per P (for the bubble, P > 1 only); a line per schedule
    (recompute none), theory dashed."""
    ps = sorted({r["P"] for r in rows if r["recompute"] == "none" and (r["P"] > 1 or not theory)})
    fig, axes = plt.subplots(1, len(ps), figsize=(4.2 * len(ps), 4), squeeze=False)
    for ax, p in zip(axes[0], ps):
        for sched in sorted({r["schedule"] for r in rows if r["P"] == p}):
            mine = sorted((r for r in rows
                           if r["P"] == p and r["schedule"] == sched and r["recompute"] == "none"),
                          key=lambda r: r["N"])
            if not mine:
                continue
            line, = ax.plot([r["N"] for r in mine], [r[y] for r in mine], marker="o", label=sched)
            if theory:
                ax.plot([r["N"] for r in mine], [r["bubble_theory"] for r in mine], "--",
                        color=line.get_color(), alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batches N")
        crowded = " (oversubscribed)" if p > (os.cpu_count() or p) else ""
        ax.set_title(f"P = {p}{crowded}" + (": measured solid, theory dashed" if theory else ""),
                     fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
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
