#!/usr/bin/env python3
"""recompute_report.py: table and plot of the recomputation benchmark.

    tools/.venv/bin/python tools/recompute_report.py OUT_PREFIX POLICY=RUN_DIR ... [--skip 2]

Reads each run's metrics.h5 (docs/outputs.md), takes the peak stashed
activation bytes per stage (max over the timed steps) and the median step
time after --skip warm-up steps, and writes OUT_PREFIX.md (Markdown table,
ratios to the first policy), OUT_PREFIX.csv and OUT_PREFIX.png (bar charts).
"""
import argparse
import csv

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MIB = 1024.0 * 1024.0


def load(run_dir, skip):
    with h5py.File(f"{run_dir}/metrics.h5", "r") as f:
        act = np.asarray(f["peak_bytes_activations"])[skip:]   # (steps, stages)
        total = np.asarray(f["peak_bytes_total"])[skip:]
        step_time = np.asarray(f["step_time_s"])[skip:]
    return {"act": act.max(axis=0), "total": total.max(axis=0),
            "step_time": float(np.median(step_time))}


def write_table(prefix, policies, runs):
    base = runs[policies[0]]
    stages = len(base["act"])
    head = ["policy"] + [f"stage {s} act (MiB)" for s in range(stages)] + [
        "max stage total (MiB)", "step time (ms)", f"act vs {policies[0]}", "step time vs " + policies[0]]
    rows = []
    for p in policies:
        r = runs[p]
        rows.append([p] + [f"{a / MIB:.2f}" for a in r["act"]] + [
            f"{r['total'].max() / MIB:.2f}", f"{r['step_time'] * 1e3:.1f}",
            f"{base['act'].max() / r['act'].max():.2f}x less",
            f"{100 * (r['step_time'] / base['step_time'] - 1):+.1f}%"])
    with open(f"{prefix}.md", "w") as f:
        f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        for row in rows:
            f.write("| " + " | ".join(row) + " |\n")
    with open(f"{prefix}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "stage", "peak_activation_bytes", "peak_total_bytes", "median_step_time_s"])
        for p in policies:
            for s, (a, t) in enumerate(zip(runs[p]["act"], runs[p]["total"])):
                w.writerow([p, s, int(a), int(t), runs[p]["step_time"]])


def plot(prefix, policies, runs):
    stages = len(runs[policies[0]]["act"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(policies)
    for i, p in enumerate(policies):
        ax1.bar(np.arange(stages) + i * width, runs[p]["act"] / MIB, width, label=p)
    ax1.set_xticks(np.arange(stages) + 0.4 - width / 2, [f"stage {s}" for s in range(stages)])
    ax1.set_ylabel("peak stashed activations (MiB)")
    ax1.legend()
    ax1.set_title("Activation memory per stage")
    ax2.bar(policies, [runs[p]["step_time"] * 1e3 for p in policies], color="gray")
    ax2.set_ylabel("median step time (ms)")
    ax2.set_title("Step time")
    fig.tight_layout()
    fig.savefig(f"{prefix}.png", dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("runs", nargs="+", help="POLICY=RUN_DIR")
    parser.add_argument("--skip", type=int, default=2)
    args = parser.parse_args()
    policies, runs = [], {}
    for item in args.runs:
        policy, run_dir = item.split("=", 1)
        policies.append(policy)
        runs[policy] = load(run_dir, args.skip)
    write_table(args.prefix, policies, runs)
    plot(args.prefix, policies, runs)


if __name__ == "__main__":
    main()
