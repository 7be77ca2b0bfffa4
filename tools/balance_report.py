#!/usr/bin/env python3
"""balance_report.py: partition strategies against every partition (#13).

Reads jobs/bench_balance.sh's run list ("model label DIR" per line). For each
run: the partition, measured throughput (batch / median step time after the
warm-up steps) and, for the traced strategy runs, measured utilisation per
stage (busy / span, tools/trace_report.py); beside them the run's own
prediction from metrics.h5 (predicted step time, per-stage busy time over the
predicted span). Runs repeated under one label (jobs/bench_balance.sh with
REPS > 1) count as one row: the median of their throughputs, predictions and
utilisations, with the spread of the measured throughputs (max / min - 1).
The planner's step-time error (predicted / measured throughput - 1) is
summarised over every row, beside the bounds docs/planner.md publishes, and
over the runs one by one (each predicts its own step): over all of them, and
over the steady ones only, those whose speed probes and step halves stayed
within 10% (the rule by which jobs/bench_planner.sh keeps the runs its
published bounds come from; docs/planner.md "A noisy host").
Prints a Markdown report; with --plot, also a figure per model: mean
utilisation of each strategy (measured, predicted, and the seeds' figure
where --seeds gives one) and the throughput of every contiguous partition
(measured median with its runs' range, predicted), the best one and the one
`balanced` chose marked.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from planner_report import step_time_shift  # noqa: E402

STEADY_LIMIT = 0.10  # probe spread and step shift of a steady run (bench_planner.sh's rule)


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def measured_utilisation(trace, skip):
    out = subprocess.run([sys.executable, os.path.join(HERE, "trace_report.py"), trace,
                          "--skip", str(skip), "--json"], check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    return [1.0 - s["bubble"] for s in r["stages"]]


def read_run(model, label, path, skip):
    with h5py.File(os.path.join(path, "metrics.h5"), "r") as f:
        a = f.attrs
        steps = np.asarray(f["step_time_s"], dtype=np.float64)[skip:]
        batch = float(np.median(np.asarray(f["samples_per_s"])[skip:] * steps))
        span = float(a["predicted_span_s"])
        row = {
            "model": model, "label": label,
            "partition": "[" + ", ".join(str(c) for c in np.atleast_1d(a["partition"])) + "]",
            "throughput": batch / float(np.median(steps)),
            "predicted_throughput": batch / float(a["predicted_step_time_s"]),
            "predicted_util": [b / span for b in np.atleast_1d(a["predicted_stage_busy_s"])],
            "gemm": text(a["gemm"]), "cpu": text(a["cpu"]),
        }
        row["run_error"] = row["predicted_throughput"] / row["throughput"] - 1.0
        spread = float(a["speed_probe_spread"]) if "speed_probe_spread" in a else float("inf")
        row["steady"] = spread <= STEADY_LIMIT and step_time_shift(steps) <= STEADY_LIMIT
    trace = os.path.join(path, "trace.h5")
    row["util"] = measured_utilisation(trace, skip) if os.path.exists(trace) else None
    return row


def median_row(runs):
    """One row of the runs repeated under one label: medians, and the spread."""
    row = dict(runs[0])
    for key in ("throughput", "predicted_throughput"):
        row[key] = float(np.median([r[key] for r in runs]))
    row["predicted_util"] = list(np.median([r["predicted_util"] for r in runs], axis=0))
    traced = [r["util"] for r in runs if r["util"]]
    row["util"] = list(np.median(traced, axis=0)) if traced else None
    measured = [r["throughput"] for r in runs]
    row["throughputs"] = measured
    row["runs"] = len(runs)
    row["run_errors"] = [(r["run_error"], r["steady"]) for r in runs]
    row["spread"] = max(measured) / min(measured) - 1.0
    return row


def grouped(rows):
    """The rows of one model, repeated labels merged (in first-seen order)."""
    labels = dict.fromkeys(r["label"] for r in rows)
    return [median_row([r for r in rows if r["label"] == label]) for label in labels]


def error_line(errors):
    """Median and worst of the errors' sizes."""
    errors = sorted(abs(e) for e in errors)
    return f"median {100 * float(np.median(errors)):.1f}%, worst {100 * errors[-1]:.1f}%"


def error_summary(rows):
    """The planner's step-time error over the rows and over the runs, and the
    measurements' spread."""
    def error(r):
        return r["predicted_throughput"] / r["throughput"] - 1.0
    worst = max(rows, key=lambda r: abs(error(r)))
    line = (f"\nPlanner step-time error (predicted / measured throughput - 1) over these "
            f"{len(rows)} partitions: {error_line([error(r) for r in rows])} ({worst['label']} "
            f"{worst['partition']}); the bounds docs/planner.md publishes: median 1.4%, worst 8.8%.")
    if rows[0]["runs"] > 1:
        spreads = [r["spread"] for r in rows]
        line += (f" Each row is the median of {rows[0]['runs']} runs in rounds; the runs of one "
                 f"partition spread by median {100 * float(np.median(spreads)):.1f}%, at most "
                 f"{100 * max(spreads):.1f}% (max / min throughput - 1).")
    runs = [e for r in rows for e in r["run_errors"]]
    steady = [e for e, ok in runs if ok]
    line += (f"\n\nRun by run (each run's own prediction against its own measurement): "
             f"{error_line([e for e, _ in runs])} over all {len(runs)} runs; ")
    if steady:
        line += f"{error_line(steady)} over the {len(steady)} steady ones"
    else:
        line += "none was steady"
    line += (f" (speed probes and step halves within {100 * STEADY_LIMIT:.0f}% of each other, the "
             "rule jobs/bench_planner.sh keeps the runs of the published bounds by; "
             f"{len(runs) - len(steady)} runs saw the host's speed change by more).")
    return line


def util_text(u):
    return " / ".join(f"{100 * x:.0f}%" for x in u) + f" (mean {100 * sum(u) / len(u):.0f}%)"


def strategies_and_partitions(rows):
    """Grouped rows split: the strategy runs, and the explicit partitions
    (labels k1, k2, ...)."""
    return ([r for r in rows if not r["label"].startswith("k")],
            [r for r in rows if r["label"].startswith("k")])


def report(model, rows):
    p = print
    rows = grouped(rows)
    strategies, every = strategies_and_partitions(rows)
    best = max(every, key=lambda r: r["throughput"])
    p(f"\n## {model}\n")
    p("| strategy | partition | throughput measured (samples/s) | predicted | "
      "utilisation per stage, measured | predicted | vs best of all partitions |")
    p("|---|---|---:|---:|---|---|---:|")
    for r in strategies:
        p(f"| {r['label']} | {r['partition']} | {r['throughput']:.1f} | {r['predicted_throughput']:.1f} | "
          f"{util_text(r['util']) if r['util'] else '-'} | {util_text(r['predicted_util'])} | "
          f"{100 * r['throughput'] / best['throughput']:.1f}% |")
    p("\nEvery contiguous partition (explicit lists):\n")
    p("| partition | throughput measured | predicted |")
    p("|---|---:|---:|")
    for r in every:
        mark = " **best**" if r is best else ""
        p(f"| {r['partition']}{mark} | {r['throughput']:.1f} | {r['predicted_throughput']:.1f} |")
    bal = next(r for r in strategies if r["label"] == "balanced")
    gap = 100 * (1 - bal["throughput"] / best["throughput"])
    # Trying every partition measures noise too: a partition equal to the best
    # one in counts is the best one.
    same = bal["partition"] == best["partition"]
    # A negative gap: the balanced run measured faster than every explicit
    # one, which only the host's noise can do (it is one of those partitions).
    where = f"{gap:.1f}% below it" if gap >= 0 else f"{-gap:.1f}% above it (noise: it is one of them)"
    p(f"\nbalanced {bal['partition']}: {bal['throughput']:.1f} samples/s; best of all partitions "
      f"{best['partition']}: {best['throughput']:.1f} samples/s; balanced is "
      f"{where}{' (the same partition)' if same else ''}; goal <= 5%: "
      f"{'met' if gap <= 5.0 or same else 'missed'}.")
    p(error_summary(rows))


def parse_seeds(text):
    """'uniform=82,time=91' -> {'uniform': 0.82, 'time': 0.91}; exits naming a bad entry."""
    seeds = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        label, _, value = item.partition("=")
        try:
            if not label.strip():
                raise ValueError("no label")
            seeds[label.strip()] = float(value) / 100.0
        except ValueError:
            sys.exit(f"balance_report: --seeds entry {item!r}: expected label=percent, e.g. uniform=82")
    return seeds


def plot(models, path, seeds):
    """One row per model: utilisation per strategy, throughput per partition."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.6 * len(models)), squeeze=False)
    for (model, rows), (left, right) in zip(models.items(), axes):
        strategies, every = strategies_and_partitions(grouped(rows))
        x = np.arange(len(strategies))
        mean = lambda u: sum(u) / len(u) if u else float("nan")  # noqa: E731
        left.bar(x - 0.27, [100 * mean(r["util"]) for r in strategies], 0.27, label="measured")
        left.bar(x, [100 * mean(r["predicted_util"]) for r in strategies], 0.27, label="predicted")
        if seeds:
            left.bar(x + 0.27, [100 * seeds.get(r["label"], float("nan")) for r in strategies], 0.27,
                     label="the seeds' figure")
        left.set_xticks(x, [f"{r['label']}\n{r['partition']}" for r in strategies])
        left.set_ylabel("mean utilisation (%)")
        left.set_ylim(0, 100)
        left.set_title(f"{model}: partition strategies, P = 2")
        left.legend(loc="lower right", fontsize=8)
        k = np.arange(len(every))
        med = np.array([r["throughput"] for r in every])
        lo = med - np.array([min(r["throughputs"]) for r in every])
        hi = np.array([max(r["throughputs"]) for r in every]) - med
        best = int(np.argmax(med))
        colors = ["tab:green" if i == best else "tab:blue" for i in range(len(every))]
        right.bar(k, med, 0.6, yerr=[lo, hi], capsize=3, color=colors, label="measured (runs' range)")
        right.plot(k, [r["predicted_throughput"] for r in every], "o", color="tab:orange", label="predicted")
        balanced = next((r for r in strategies if r["label"] == "balanced"), None)
        for i, r in enumerate(every):
            if balanced and r["partition"] == balanced["partition"]:
                right.annotate("balanced", (i, med[i]), textcoords="offset points", xytext=(0, 14),
                               ha="center", fontsize=8)
        right.set_ylim(0, 1.2 * max(med + hi))
        right.set_xticks(k, [r["partition"] for r in every], rotation=30, fontsize=8)
        right.set_ylabel("samples/s")
        right.set_title("every contiguous partition (best in green)")
        right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--plot", help="also write this PNG (one row per model)")
    ap.add_argument("--seeds", default="", help="reference utilisations, e.g. uniform=82,time=91,memory=78")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    rows = [read_run(*line.split(), args.skip) for line in open(args.runs) if line.strip()]
    print("# Partitions of unbalanced models, P = 2: measured against predicted\n")
    print(f"Command: `jobs/bench_balance.sh`. Machine: {platform.node()}, {rows[0]['cpu']}, "
          f"{os.cpu_count()} cores; {datetime.date.today().isoformat()}. GEMMs: {rows[0]['gemm']}. "
          "1F1B, N = 8, one BLAS thread per rank. Throughput: batch / median step time after "
          f"{args.skip} warm-up steps. Utilisation: busy / span of the step per stage (measured "
          "from trace.h5; predicted: the simulated busy time over the simulated span). The "
          "predictions are each run's own (brief profile at start, docs/planner.md). "
          "`balanced` uses `pipeline.memory_budget_mb = 256`.")
    models = {m: [r for r in rows if r["model"] == m] for m in dict.fromkeys(r["model"] for r in rows)}
    for model, model_rows in models.items():
        report(model, model_rows)
    if args.plot:
        plot(models, args.plot, seeds)


if __name__ == "__main__":
    main()
