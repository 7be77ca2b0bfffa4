#!/usr/bin/env python3
"""auto_report.py: the table of jobs/bench_auto.sh (issue #45): for each case,
pipeline.auto's choice and measured step time against the best configuration
of the sweep trained in the same benchmark run, and auto's largest stage
peak against the memory budget.

    tools/auto_report.py runs/bench_auto CASE... --out results/bench_auto.md --plot results/bench_auto.png
    tools/auto_report.py --fastest K runs/bench_auto/CASE   (the K fastest sweep runs within the
                                                             plan's budget: their config numbers)

The sweep trains each configuration once (sweep_I); the fastest few within
the budget then run again, in rounds with auto's runs (sweep_I.r1,
sweep_I.r2, ...; auto.r1, auto.r2, ...). A configuration counts with the
median of its runs' medians, over those confirmation runs alone when it has
them: the sweep run that selected it is left out, since the least of
hundreds of noisy single runs is biased low. The best measured configuration
is the fastest confirmed one (of those within the budget).
"""
import argparse
import functools
import os
import re
import sys

import h5py
import numpy as np

GOAL = 0.05  # auto within 5% of the best measured configuration


def text_attr(f, name):
    v = f.attrs.get(name, "")
    return v.decode() if isinstance(v, bytes) else str(v)


@functools.lru_cache(maxsize=None)  # fastest, report_case and paired_gap read the same runs
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


@functools.lru_cache(maxsize=None)
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


RUN = re.compile(r"^(sweep_(\d+)|auto)(\.r(\d+))?$")


def runs_of(d):
    """{config number (0 = auto): [run dirs]} of a case directory."""
    runs = {}
    for name in sorted(os.listdir(d)):
        m = RUN.match(name)
        if m and os.path.isdir(os.path.join(d, name)):
            runs.setdefault(int(m.group(2)) if m.group(2) else 0, []).append(os.path.join(d, name))
    return runs


def sweep_and_reruns(dirs):
    """A configuration's runs as (its sweep run, if any; its confirmation runs .rN)."""
    reruns = [r for r in dirs if RUN.match(os.path.basename(r)).group(3)]
    return [r for r in dirs if r not in reruns], reruns


def summary(dirs):
    """(median step s over the runs' medians, largest peak, runs, configs chosen) of finished runs."""
    done = [(measured(r), config_of(r)) for r in dirs]
    done = [(m, c) for m, c in done if m]
    if not done:
        return None
    return (float(np.median([m[0] for m, _ in done])), max(m[1] for m, _ in done), len(done),
            [c for _, c in done])


def plan_budget(d):
    """The per-stage budget the plan table names ("memory budget 12.64 GB (...)"), in bytes."""
    with open(os.path.join(d, "plan.txt")) as f:
        m = re.search(r"memory budget ([0-9.eE+]+) GB", f.read())
    return float(m.group(1)) * 1e9 if m else float("inf")


def fastest(d, k):
    budget = plan_budget(d)
    rows = []
    for i, dirs in runs_of(d).items():
        sweep_run, _ = sweep_and_reruns(dirs)
        first = measured(sweep_run[0]) if i > 0 and sweep_run else None
        if first and first[1] <= budget:
            rows.append((first[0], i))
    return [i for _, i in sorted(rows)[:k]]


def report_case(root, case):
    d = os.path.join(root, case)
    runs = runs_of(d)
    sweep = []   # (median s, peak, config, runs, re-run dirs): over the re-runs when there are some
    single = []  # (median s, peak) of each configuration's sweep run
    for i, dirs in runs.items():
        if i > 0:
            sweep_run, reruns = sweep_and_reruns(dirs)
            m = summary(reruns or sweep_run)
            if m:
                sweep.append((m[0], m[1], m[3][0], m[2], reruns))
            s1 = summary(sweep_run or reruns)
            if s1:
                single.append((s1[0], s1[1]))
    auto = summary(runs.get(0, []))
    if not sweep or auto is None:
        sys.exit("auto_report: %s: no finished sweep or auto run in %s" % (case, d))
    logs = sorted(f for f in os.listdir(d) if re.match(r"^auto(\.r\d+)?\.log$", f))
    with open(os.path.join(d, logs[0])) as f:
        log = f.read()
    budget = float(re.search(r"\(budget ([0-9.]+) MiB", log).group(1)) * 2**20
    ranks = re.search(r"pipetrain: (\d+) rank", log)
    choices = auto[3]
    # The choice most auto runs made (the earliest run's among equals).
    chosen = max(choices, key=lambda c: (choices.count(c), -choices.index(c)))
    # The best measured configuration is the fastest confirmed one that stayed
    # within the budget (any, for a benchmark run without confirmation runs).
    within = [s for s in sweep if s[1] <= budget]
    if not within:
        sys.exit("auto_report: %s: no configuration of the sweep stayed within the budget" % case)
    best = min([s for s in within if s[4]] or within)
    fastest_single = min(s for s, peak in single if peak <= budget)
    same = [s for s in sweep if s[2] == chosen]
    paired, spread = paired_gap(runs.get(0, []), best[4])
    return {
        "case": case, "ranks": ranks.group(1) if ranks else "?", "budget": budget, "plans": len(sweep),
        "within": len(within), "auto_runs": auto[2], "auto_choices": len(set(choices)),
        "chosen": chosen, "auto_s": auto[0], "auto_peak": auto[1],
        "chosen_in_sweep_s": same[0][0] if same else float("nan"),
        "best": best[2], "best_s": best[0], "best_runs": best[3], "fastest_single_s": fastest_single,
        "gap": auto[0] / best[0] - 1.0,
        "sweep_gap": (same[0][0] / best[0] - 1.0) if same else float("nan"),
        "fits": auto[1] <= budget,
        "paired_gap": paired, "best_spread": spread,
    }


def round_of(run_dir):
    m = RUN.match(os.path.basename(run_dir))
    return int(m.group(4)) if m and m.group(4) else None


def paired_gap(auto_runs, best_reruns):
    """(median over rounds of auto's run over the best configuration's run of the same round, less 1;
    the best configuration's re-runs' spread, max / min - 1). A round runs them minutes apart, so a
    drift of the host's speed between rounds cancels in the ratio; nan when no round has both."""
    auto = {round_of(r): measured(r) for r in auto_runs}
    best = {round_of(r): measured(r) for r in best_reruns}
    ratios = [auto[k][0] / best[k][0] - 1.0 for k in auto if k is not None and auto[k] and best.get(k)]
    times = [m[0] for m in best.values() if m]
    spread = max(times) / min(times) - 1.0 if len(times) > 1 else float("nan")
    return (float(np.median(ratios)) if ratios else float("nan")), spread


def machine(root, case):
    first = runs_of(os.path.join(root, case))[0][0]
    with h5py.File(os.path.join(first, "metrics.h5"), "r") as f:
        return "CPU %s; BLAS %s (core %s); GEMMs %s" % (
            text_attr(f, "cpu"), text_attr(f, "blas"), text_attr(f, "blas_core"), text_attr(f, "gemm"))


def prediction_errors(d):
    """{D: [measured / predicted - 1]} over every run of a case directory with a start-up prediction
    (the run's own profile and plan line; the median step after the first 2 against it)."""
    errors = {}
    for dirs in runs_of(d).values():
        for run_dir in dirs:
            m = measured(run_dir)
            with h5py.File(os.path.join(run_dir, "metrics.h5"), "r") as f:
                predicted = f.attrs.get("predicted_step_time_s")
            if m is None or predicted is None or not predicted > 0:
                continue
            with open(os.path.join(run_dir, "deck.resolved.toml")) as f:
                text = f.read()
            r = re.search(r"^replicas = (\d+)", text[text.index("[data_parallel]"):], re.M)
            errors.setdefault(int(r.group(1)) if r else 1, []).append(m[0] / float(predicted) - 1.0)
    return errors


def prediction_lines(root, cases):
    """The table of the runs' start-up predictions by replica count D, per case."""
    lines = ["", "## The start-up prediction of every run, by data-parallel replicas D", "",
             "Every run of the sweep and of the confirmation rounds prints the planner's predicted step "
             "from its own start-up profile (docs/planner.md); the error is the measured median step "
             "(after the first 2) over that prediction, less 1 (positive: slower than predicted).", "",
             "| case | D | runs | median error | median of abs error | within 10% |", "|---|---|---|---|---|---|"]
    for case in cases:
        for d, e in sorted(prediction_errors(os.path.join(root, case)).items()):
            e = np.array(e)
            lines.append("| %s | %d | %d | %+.1f%% | %.1f%% | %.0f%% |" % (
                case, d, len(e), 100 * np.median(e), 100 * np.median(np.abs(e)), 100 * np.mean(np.abs(e) <= 0.1)))
    return lines


def mib(b):
    return "%.1f MiB" % (b / 2**20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--plot")
    ap.add_argument("--fastest", type=int, help="print the K fastest sweep configurations of the case dir ROOT")
    a = ap.parse_args()
    if a.fastest is not None:
        print(" ".join(str(i) for i in fastest(a.root, a.fastest)))
        return
    if not a.cases or not a.out:
        ap.error("CASE... and --out are needed for the table")
    rows = [report_case(a.root, c) for c in a.cases]
    lines = ["# pipeline.auto against the best measured configuration (jobs/bench_auto.sh)", "",
             machine(a.root, a.cases[0]) + ".", "",
             "Each case: every distinct plan auto weighs trained once with auto off (the sweep); then "
             "the fastest configurations of the sweep within the budget and `pipeline.auto = true` ran "
             "again several times, in rounds (the runs column: auto's runs, the best configuration's). "
             "Step times are medians after the first 2 steps; a configuration counts with the median of "
             "its runs, a re-run one with its re-runs alone (the sweep run that selected it is left out: "
             "the least of hundreds of noisy single runs is biased low, shown as the sweep's fastest "
             "single run). The best measured configuration is the fastest re-run one whose measured peak "
             "stayed within the budget. Goal: auto within %d%% of the best, never over the budget. "
             "The paired gap is the median over rounds of auto's run against the best configuration's "
             "run of the same round (a drift of the host's speed between rounds cancels); the spread is "
             "the best configuration's own re-runs' (max / min - 1): a gap smaller than it is within the "
             "host's noise." % round(GOAL * 100), "",
             "| case | ranks | budget | plans trained (within budget) | auto's choice | auto (ms) | its plan, auto off (ms) "
             "| best measured | best (ms) | runs | sweep's fastest single run (ms) | auto's gap | auto's peak "
             "| within budget | goal met | paired gap | best's run spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = r["gap"] <= GOAL and r["fits"]
        choice = r["chosen"] + (" (%d different choices over its runs)" % r["auto_choices"]
                                if r["auto_choices"] > 1 else "")
        lines.append("| %s | %s | %s | %d (%d) | %s | %.2f | %.2f | %s | %.2f | %d, %d | %.2f | %+.1f%% | %s | %s | %s "
                     "| %+.1f%% | %.0f%% |" % (
            r["case"], r["ranks"], mib(r["budget"]), r["plans"], r["within"], choice, r["auto_s"] * 1e3,
            r["chosen_in_sweep_s"] * 1e3, r["best"], r["best_s"] * 1e3, r["auto_runs"], r["best_runs"],
            r["fastest_single_s"] * 1e3, 100 * r["gap"], mib(r["auto_peak"]), "yes" if r["fits"] else "no",
            "yes" if met else "no", 100 * r["paired_gap"], 100 * r["best_spread"]))
    lines += prediction_lines(a.root, a.cases)
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
