#!/usr/bin/env python3
"""rebalance_report.py: dynamic rebalancing against the best static partition (#14).

Reads jobs/bench_rebalance.sh's run list ("model label DIR" per line): per
model two rebalancing runs ("dynamic.<pass>": rank 1 slowed from step S) and
two runs per contiguous partition ("k<k>.<pass>": slowed from step 0, no
rebalancing; the faster of the two counts). Of the rebalancing runs, the one
faster before the slowdown (the less disturbed by other processes) is
detailed: throughput (median samples/s of rank 0's steps) before the
slowdown, just after it (until the first move), after the last move, the
moves and how many checks after the slowdown the run's throughput was within
10% of the best static partition's. Prints a Markdown report; --plot draws
throughput over steps beside the best static partition.
"""
import argparse
import datetime
import os
import platform
import tomllib

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def counts(row):
    return "[" + ", ".join(str(int(c)) for c in row) + "]"


def read(path):
    with h5py.File(os.path.join(path, "metrics.h5"), "r") as f:
        deck = tomllib.loads(text(f.attrs["deck"]))
        return {
            "deck": deck,
            "step": np.asarray(f["step"]),
            "rate": np.asarray(f["samples_per_s"], dtype=np.float64),
            "partition": np.asarray(f["partition"]),
            "predicted_ratio": np.asarray(f["rebalance_predicted_ratio"]),
            "ratio": np.asarray(f["rebalance_ratio"]),
            "stage_compute": np.asarray(f["stage_compute_s"]),
            "cpu": text(f.attrs["cpu"]), "gemm": text(f.attrs["gemm"]),
        }


def deck_key(deck, section, key, old_key):
    """deck[section][key]; a metrics.h5 written before [rebalance] and
    [slowdown] left [pipeline] (#41) has it as pipeline.<old_key>."""
    value = deck.get(section, {}).get(key)
    return value if value is not None else deck["pipeline"][old_key]


def median(values):
    return float(np.median(values)) if len(values) else float("nan")


def static_rows(runs, skip):
    """One row per partition: the faster of its runs (passes)."""
    best = {}
    for label, path in runs:
        r = read(path)
        key, rate = counts(r["partition"][0]), median(r["rate"][skip:])
        best[key] = max(best.get(key, 0.0), rate)
    order = sorted(best, key=lambda k: [int(c) for c in k.strip("[]").split(", ")])
    return [{"partition": k, "rate": best[k]} for k in order]


def phase_rates(r, moves):
    """Median throughput from each move (its first step left out) to the next one or the end."""
    ends = moves[1:] + [len(r["step"]) - 1]
    return [median(r["rate"][m + 2:e + 1]) for m, e in zip(moves, ends)]


def dynamic_summary(r, skip):
    deck = r["deck"]
    slow = int(deck_key(deck, "slowdown", "from_step", "slowdown_from_step"))
    every = int(deck_key(deck, "rebalance", "every", "rebalance_every"))
    moves = [int(i) for i in np.flatnonzero(np.isfinite(r["predicted_ratio"]))]
    first = moves[0] if moves else len(r["step"]) - 1
    after_from = moves[-1] + 2 if moves else len(r["step"])
    return {
        "slow": slow, "every": every, "moves": moves,
        "before": median(r["rate"][skip:slow]),
        "just_after": median(r["rate"][slow:first + 1]),
        "after": median(r["rate"][after_from:]),
        "final": counts(r["partition"][-1]),
    }


def report(model, dyn_paths, statics, factor, skip):
    passes = [(read(path), path) for path in dyn_paths]
    summaries = [dynamic_summary(r, skip) for r, _ in passes]
    # The pass least disturbed by other processes: the faster before the slowdown.
    chosen = max(range(len(passes)), key=lambda i: summaries[i]["before"])
    r, d = passes[chosen][0], summaries[chosen]
    best = max(statics, key=lambda s: s["rate"])
    by_partition = {s["partition"]: s["rate"] for s in statics}
    p = print
    p(f"\n## {model}\n")
    p(f"Rank 1 slowed {factor:g}x from step {d['slow']}; a check every {d['every']} steps "
      f"(threshold {deck_key(r['deck'], 'rebalance', 'threshold', 'rebalance_threshold')}, margin "
      f"{100 * deck_key(r['deck'], 'rebalance', 'margin', 'rebalance_margin'):.0f}%).\n")
    p("| phase | partition | throughput (samples/s) | vs best static |")
    p("|---|---|---:|---:|")
    start = counts(r["partition"][0])
    p(f"| before the slowdown | {start} | {d['before']:.1f} | - |")
    p(f"| just after the slowdown | {start} | {d['just_after']:.1f} | "
      f"{100 * d['just_after'] / best['rate']:.1f}% |")
    p(f"| after the rebalance | {d['final']} | {d['after']:.1f} | "
      f"{100 * d['after'] / best['rate']:.1f}% |")
    p(f"| best static partition (slowed from step 0) | {best['partition']} | {best['rate']:.1f} | 100.0% |")
    p(f"\nRebalancing runs (the table above and below details run {chosen + 1}, the faster before "
      "the slowdown, i.e. the less disturbed by other processes):\n")
    p("| run | before | just after the slowdown | after the rebalance | final partition | moves after steps |")
    p("|---:|---:|---:|---:|---|---|")
    for i, s in enumerate(summaries):
        p(f"| {i + 1} | {s['before']:.1f} | {s['just_after']:.1f} | {s['after']:.1f} | {s['final']} | "
          f"{', '.join(str(m + 1) for m in s['moves']) or '-'} |")
    p("\nMoves:\n")
    p("| after step | partition | measured ratio before | predicted ratio after | checks since the slowdown | throughput until the next move or the end | static throughput of the new partition |")
    p("|---:|---|---:|---:|---:|---:|---:|")
    reached = None
    for i, rate in zip(d["moves"], phase_rates(r, d["moves"])):
        checks = int(np.ceil((i + 1 - d["slow"]) / d["every"]))
        new = counts(r["partition"][i + 1]) if i + 1 < len(r["partition"]) else d["final"]
        if reached is None and i + 1 > d["slow"] and rate >= 0.9 * best["rate"]:
            reached = checks
        p(f"| {i + 1} | {counts(r['partition'][i])} -> {new} | {r['ratio'][i]:.2f} | "
          f"{r['predicted_ratio'][i]:.2f} | {checks} | {rate:.1f} | "
          f"{by_partition.get(new, float('nan')):.1f} |")
    if not d["moves"]:
        p("| - | no move | - | - | - | - | - |")
    p("\nEvery contiguous partition, rank 1 slowed from step 0, no rebalancing (the faster of two runs):\n")
    p("| partition | throughput (samples/s) |")
    p("|---|---:|")
    for s in statics:
        p(f"| {s['partition']}{' **best**' if s is best else ''} | {s['rate']:.1f} |")
    gap = 100 * (1 - d["after"] / best["rate"])
    met = gap <= 10.0 and reached is not None
    side = f"{gap:.1f}% below" if gap >= 0 else f"{-gap:.1f}% above"
    p(f"\nAfter the rebalance {d['after']:.1f} samples/s, {side} the best static "
      f"partition {best['partition']} ({best['rate']:.1f}); within 10% "
      f"{'after ' + str(reached) + ' check(s) since the slowdown' if reached else 'not reached'}; "
      f"goal (within 10%, within a few checks): {'met' if met else 'missed'}.")
    return r, d, best


def plot(path, results, factor):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(results), 1, figsize=(9, 3.6 * len(results)), squeeze=False)
    for ax, (model, r, d, best) in zip(axes[:, 0], results):
        ax.plot(r["step"] + 1, r["rate"], lw=1, color="#4C72B0", label="rebalancing run")
        ax.axhline(best["rate"], ls="--", color="#55A868", label=f"best static {best['partition']} (slowed)")
        ax.axvline(d["slow"] + 0.5, color="#C44E52", lw=1, label=f"rank 1 slowed {factor:g}x")
        for i, m in enumerate(d["moves"]):
            ax.axvline(m + 1.5, color="#8172B3", lw=1, ls=":", label="move" if i == 0 else None)
        ax.set_title(f"{model}: {counts(r['partition'][0])} -> {d['final']}")
        ax.set_xlabel("step")
        ax.set_ylabel("samples/s")
        top = np.nanpercentile(r["rate"], 99)
        ax.set_ylim(0, 1.15 * max(top, best["rate"]))
        ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out of every median")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--plot", default="")
    args = ap.parse_args()
    runs = [line.split() for line in open(args.runs) if line.strip()]
    models = list(dict.fromkeys(m for m, _, _ in runs))
    first = read(runs[0][2])
    print("# Dynamic rebalancing, P = 2: one rank slowed down\n")
    print(f"Command: `jobs/bench_rebalance.sh`. Machine: {platform.node()}, {first['cpu']}, "
          f"{os.cpu_count()} cores; {datetime.date.today().isoformat()}. GEMMs: {first['gemm']}. "
          "1F1B, N = 8, one BLAS thread per rank, 2 ranks. Throughput: batch / step time of rank 0, "
          f"median over the steps of each phase ({args.skip} warm-up steps and the first step after "
          "a move left out). The slowdown is fault injection (`[slowdown]`, rank 1 sleeps "
          "(factor - 1) x the time of each F and B). Plot: `results/bench_rebalance.png`.")
    load = [os.path.join(os.path.dirname(args.runs), f"load_{w}") for w in ("start", "end")]
    if all(os.path.exists(f) for f in load):
        start, end = (open(f).read().strip() for f in load)
        print(f"\nLoad average (1, 5, 15 min) of the machine at the start: {start}; at the end: {end} "
              "(other processes share the 2 cores: a phase measured while they ran is slower; "
              "the static partitions and the rebalancing run are measured at different times).")
    results = []
    for model in models:
        dyn = [path for m, label, path in runs if m == model and label.startswith("dynamic")]
        statics = static_rows([(l, p) for m, l, p in runs if m == model and l.startswith("k")], args.skip)
        r, d, best = report(model, dyn, statics, args.factor, args.skip)
        results.append((model, r, d, best))
    if args.plot:
        plot(args.plot, results, args.factor)


if __name__ == "__main__":
    main()
