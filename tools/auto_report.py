#!/usr/bin/env python3
"""auto_report.py: the table of jobs/bench_auto.sh (issue #45): for each case,
pipeline.auto's choice and measured step time against the best configuration
of the sweep trained in the same benchmark run, and auto's largest stage
peak against the memory budget.

    tools/auto_report.py runs/bench_auto CASE... --out results/bench_auto.md --plot results/bench_auto.png
"""
import argparse
import os
import re
import sys

import h5py
import numpy as np

GOAL = 0.05  # auto within 5% of the best measured configuration


def text_attr(f, name):
    v = f.attrs.get(name, "")
    return v.decode() if isinstance(v, bytes) else str(v)


def measured(run_dir):
    """(median step s over the steps after the first 2, largest stage peak bytes) of a run."""
    path = os.path.join(run_dir, "metrics.h5")
    if not os.path.exists(path):
        return None
    with h5py.File(path, "r") as f:
        steps = f["step_time_s"][2:]
        if len(steps) == 0:
            return None
        return float(np.median(steps)), float(np.max(f["peak_bytes_total"][:]))


def config_of(run_dir):
    """schedule N recompute units (and D when > 1), as the run's resolved deck gives them."""
    with open(os.path.join(run_dir, "deck.resolved.toml")) as f:
        text = f.read()
    pipeline = text[text.index("[pipeline]"):]
    def pick(key):  # None: the resolved deck leaves the key out (weight_grad under zb-h1, zb-v)
        m = re.search(r"^%s = (.*?)\s+#" % key, pipeline, re.M)
        return m.group(1).strip('"') if m else None
    step = pick("weight_grad") == "step" and pick("schedule") in ("gpipe", "1f1b", "interleaved")
    m = re.search(r"^replicas = (\d+)", text[text.index("[data_parallel]"):], re.M)
    replicas = int(m.group(1)) if m else 1
    return "%s N=%s recompute %s%s, partition %s%s" % (
        pick("schedule"), pick("micro_batches"), pick("recompute"), " weight_grad step" if step else "",
        pick("partition").replace(" ", ""), " x %d replicas" % replicas if replicas > 1 else "")


def report_case(root, case):
    d = os.path.join(root, case)
    sweep = []
    for name in sorted(os.listdir(d)):
        if name.startswith("sweep_") and os.path.isdir(os.path.join(d, name)):
            m = measured(os.path.join(d, name))
            if m:
                sweep.append((m[0], m[1], config_of(os.path.join(d, name))))
    auto = measured(os.path.join(d, "auto"))
    if not sweep or auto is None:
        sys.exit("auto_report: %s: no finished sweep or auto run in %s" % (case, d))
    with open(os.path.join(d, "auto.log")) as f:
        log = f.read()
    budget = float(re.search(r"\(budget ([0-9.]+) MiB", log).group(1)) * 2**20
    ranks = re.search(r"pipetrain: (\d+) rank", log)
    chosen = config_of(os.path.join(d, "auto"))
    # The best measured configuration is the fastest that stayed within the budget.
    within = [s for s in sweep if s[1] <= budget]
    if not within:
        sys.exit("auto_report: %s: no configuration of the sweep stayed within the budget" % case)
    best = min(within)
    same = [s for s in sweep if s[2] == chosen]
    return {
        "case": case, "ranks": ranks.group(1) if ranks else "?", "budget": budget, "plans": len(sweep),
        "within": len(within),
        "chosen": chosen, "auto_s": auto[0], "auto_peak": auto[1],
        "chosen_in_sweep_s": same[0][0] if same else float("nan"),
        "best": best[2], "best_s": best[0],
        "gap": auto[0] / best[0] - 1.0,
        "sweep_gap": (same[0][0] / best[0] - 1.0) if same else float("nan"),
        "fits": auto[1] <= budget,
    }


def machine(root, case):
    with h5py.File(os.path.join(root, case, "auto", "metrics.h5"), "r") as f:
        return "CPU %s; BLAS %s (core %s); GEMMs %s" % (
            text_attr(f, "cpu"), text_attr(f, "blas"), text_attr(f, "blas_core"), text_attr(f, "gemm"))


def mib(b):
    return "%.1f MiB" % (b / 2**20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot")
    a = ap.parse_args()
    rows = [report_case(a.root, c) for c in a.cases]
    lines = ["# pipeline.auto against the best measured configuration (jobs/bench_auto.sh)", "",
             machine(a.root, a.cases[0]) + ".", "",
             "Each case: every distinct plan auto weighs trained with auto off (the sweep), then a run "
             "with `pipeline.auto = true`; step times are medians after the first 2 steps; the best "
             "measured configuration is the fastest whose measured peak stayed within the budget. "
             "Goal: auto within %d%% of the best, never over the budget." % round(GOAL * 100), "",
             "| case | ranks | budget | plans trained (within budget) | auto's choice | auto (ms) | its plan in the sweep (ms) "
             "| best measured | best (ms) | auto's gap | auto's peak | within budget | goal met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = r["gap"] <= GOAL and r["fits"]
        lines.append("| %s | %s | %s | %d (%d) | %s | %.2f | %.2f | %s | %.2f | %+.1f%% | %s | %s | %s |" % (
            r["case"], r["ranks"], mib(r["budget"]), r["plans"], r["within"], r["chosen"], r["auto_s"] * 1e3,
            r["chosen_in_sweep_s"] * 1e3, r["best"], r["best_s"] * 1e3, 100 * r["gap"], mib(r["auto_peak"]),
            "yes" if r["fits"] else "no", "yes" if met else "no"))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 3.5))
        x = np.arange(len(rows))
        ax.bar(x, [100 * r["gap"] for r in rows], color=["tab:green" if r["gap"] <= GOAL else "tab:red" for r in rows])
        ax.axhline(100 * GOAL, color="k", ls="--", lw=1, label="goal: +%d%%" % round(GOAL * 100))
        ax.set_xticks(x, [r["case"] for r in rows], rotation=20)
        ax.set_ylabel("auto's step time over the best (%)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
