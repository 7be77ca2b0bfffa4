#!/usr/bin/env python3
"""schedules_report.py: the table of jobs/bench_schedules.sh from its runs.

    tools/.venv/bin/python tools/schedules_report.py --skip 2 [LABEL=]RUN_DIR...

For every run directory (a `pipetrain train` with output.trace = true and
pipeline.predict on) one markdown row: model, schedule, P, N, the theoretical
bubble (the run's schedule simulated in unit time, trace attribute
theory_bubble), the measured bubble (trace_report.py's definition, steps after
--skip), the planner's predicted bubble and step time (metrics.h5 attributes
predicted_bubble, predicted_step_time_s), the measured median step time and
the largest per-rank peak memory (peak_bytes_total). Beside the unit-time
theory, the schedule simulated at the run's own median F, B and W costs
(trace attribute cost_bubble): measured - that is what the runtime added,
that - theory what the model's uneven actions cost under the schedule. The
runtime's part is split by the replay of every step at its own action times
(trace group replay): replayed - at the costs is the spread of action times
around their medians, measured - replayed the messages, progress and
bookkeeping between actions. Then, per model and N,
ZB-H1's speedup over 1F1B against the speedup theory predicts. A LABEL names
the model in the table (default: gpt or mlp, from the run's deck). Repeated
runs of one (label, schedule, P, N) are merged into one row: the medians of
their measured and predicted figures, with the count in the "runs" column.
"""
import argparse
import json
import re
import sys

import h5py
import numpy as np

import trace_report
from trace_lib import TraceError, load_trace


def run_row(arg, skip):
    label, _, run_dir = arg.rpartition("=")
    trace = load_trace(f"{run_dir}/trace.h5")
    r = trace_report.analyse(trace, skip)
    with h5py.File(f"{run_dir}/metrics.h5", "r") as f:
        a = f.attrs
        # steps before a measured placement ran another placement of the schedule
        step = np.asarray(f["step_time_s"], dtype=np.float64)[max(skip, trace.schedule_first_step):]
        peak = np.asarray(f["peak_bytes_total"], dtype=np.float64)
        act = np.asarray(f["peak_bytes_activations"], dtype=np.float64)
        predicted_step = float(a["predicted_step_time_s"]) if "predicted_step_time_s" in a else float("nan")
        predicted_bubble = float(a["predicted_bubble"]) if "predicted_bubble" in a else float("nan")
    step_s = float(np.median(step))
    deck = trace.deck_text
    model = label or ("gpt" if 'type = "gpt"' in deck else "mlp")
    return {
        "dir": run_dir, "model": model,
        "schedule": trace.schedule_name + ("-measured" if trace.schedule_first_step > 0 else "")
                    + ("-wstep" if "weight_grad: step" in trace.schedule else ""),
        "ranks": trace.num_ranks, "stages": trace.num_stages, "n": trace.num_micro_batches,
        "theory": r["bubble_theory"], "bubble": r["bubble"], "predicted_bubble": predicted_bubble,
        "at_costs": float("nan") if r["bubble_at_costs"] is None else r["bubble_at_costs"],
        "replayed": float("nan") if r["bubble_replayed"] is None else r["bubble_replayed"],
        "step_s": step_s, "predicted_step_s": predicted_step,
        "peak_mib": float(peak.max()) / 1048576.0, "act_mib": float(act.max()) / 1048576.0,
        "runs": 1, "schedule_texts": [trace.schedule],
        # the repetition (jobs/bench_schedules.sh names runs ..._r<rep>): runs of one
        # repetition ran one after another, so they pair up against the host's drift
        "steps_by_rep": {repetition_of(run_dir): step_s},
    }


def repetition_of(run_dir):
    """The repetition number at the end of a run directory's name (_r<rep>), or
    the directory itself when it has none (then nothing pairs with it)."""
    match = re.search(r"_r(\d+)/?$", run_dir)
    return int(match.group(1)) if match else run_dir


def merge_repeats(rows):
    """One row per (model, schedule, ranks, stages, n): medians of the repeats."""
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["schedule"], r["ranks"], r["stages"], r["n"]), []).append(r)
    merged = []
    for group in groups.values():
        row = dict(group[0])
        for k in ["bubble", "at_costs", "replayed", "predicted_bubble", "step_s", "predicted_step_s", "peak_mib",
                  "act_mib"]:
            values = [g[k] for g in group]
            # a repeat without the figure (older trace) does not void the others
            row[k] = float(np.nanmedian(values)) if not np.all(np.isnan(values)) else float("nan")
        row["runs"] = len(group)
        row["schedule_texts"] = [t for g in group for t in g["schedule_texts"]]
        row["steps_by_rep"] = {rep: t for g in group for rep, t in g["steps_by_rep"].items()}
        merged.append(row)
    return merged


def pct(x):
    return "n/a" if x is None or np.isnan(x) else f"{100 * x:.1f}%"


def points(x):
    return "n/a" if np.isnan(x) else f"{100 * x:+.1f}"


def table(rows):
    out = ["| model | schedule | P | stages | N | runs | theory | measured | diff (points) | within 3 | "
           "at the run's costs | runtime added (points) | replayed | of it: spread of action times | "
           "of it: messages and progress | "
           "predicted bubble | step (ms) | predicted step (ms) | step error | peak MiB |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        diff = 100 * (r["bubble"] - r["theory"])
        err = 100 * (r["predicted_step_s"] - r["step_s"]) / r["step_s"]
        out.append(f"| {r['model']} | {r['schedule']} | {r['ranks']} | {r['stages']} | {r['n']} | "
                   f"{r['runs']} | {pct(r['theory'])} | {pct(r['bubble'])} | {diff:+.1f} | "
                   f"{'yes' if abs(diff) <= 3 else 'no'} | {pct(r['at_costs'])} | "
                   f"{points(r['bubble'] - r['at_costs'])} | {pct(r['replayed'])} | "
                   f"{points(r['replayed'] - r['at_costs'])} | {points(r['bubble'] - r['replayed'])} | "
                   f"{pct(r['predicted_bubble'])} | "
                   f"{1e3 * r['step_s']:.1f} | {1e3 * r['predicted_step_s']:.1f} | {err:+.0f}% | "
                   f"{r['peak_mib']:.1f} |")
    return "\n".join(out)


def runtime_summary(rows):
    """One line per part of what running added over the schedule at the
    run's median costs: its range and median over the rows that have it."""
    parts = [("runtime added (measured - at the run's costs)", lambda r: r["bubble"] - r["at_costs"]),
             ("of it, the spread of action times (replayed - at the run's costs)",
              lambda r: r["replayed"] - r["at_costs"]),
             ("of it, messages, progress and bookkeeping (measured - replayed)",
              lambda r: r["bubble"] - r["replayed"])]
    out = []
    for name, part in parts:
        values = np.array([100 * part(r) for r in rows])
        values = values[~np.isnan(values)]
        if len(values):
            out.append(f"- {name}: {values.min():+.1f} to {values.max():+.1f} points, median "
                       f"{np.median(values):+.1f}, over {len(values)} rows")
    return "\n".join(out)


def paired_gains(base, other):
    """1 - other / base step time, per repetition both ran in (sorted by
    repetition): the two ran back to back, so a slow spell of the host that
    lasts a repetition slows both and cancels in the ratio."""
    reps = sorted(set(base["steps_by_rep"]) & set(other["steps_by_rep"]), key=str)
    return [1 - other["steps_by_rep"][r] / base["steps_by_rep"][r] for r in reps]


def zb_speedup(rows):
    """ZB-H1 against 1F1B: measured step-time gain vs the theory's (unit-time
    spans 3N / (1 - bubble)), and the share of it achieved (goal >= 2/3).
    The measured gain is the median over repetitions of each repetition's
    paired gain (its ZB-H1 run against its 1F1B run, run one after the other),
    with their range; beside it the gain between the medians of the two
    schedules' runs, which a drift of the host between repetitions moves.
    Then the largest rank's peak of all memory and of activations (the stash
    ZB-H1 bounds like 1F1B: P micro-batches on the first stage; its later
    stages hold up to P too, which shows in their total)."""
    out = ["| model | N | ZB-H1 placement | 1F1B step (ms) | ZB-H1 step (ms) | measured gain: paired median [range] | "
           "gain of the medians | theory gain | achieved (paired) | goal 2/3 | "
           "peak MiB 1F1B / ZB-H1 | activations MiB 1F1B / ZB-H1 |",
           "|---|---:|---|---:|---:|---|---:|---:|---:|---|---|---|"]
    key = {(r["model"], r["schedule"], r["n"]): r for r in rows}
    for (model, schedule, n), base in sorted(key.items()):
        for label, placement in (("zb-h1", "papers'"), ("zb-h1-measured", "measured times")):
            zb = key.get((model, label, n))
            if schedule == "1f1b" and zb is not None:
                out.append(zb_speedup_line(model, n, placement, base, zb))
    return "\n".join(out)


def zb_speedup_line(model, n, placement, base, zb):
    """One row of zb_speedup: ZB-H1 run `zb` (placed as `placement` says)
    against 1F1B run `base` of the same model and N."""
    pairs = paired_gains(base, zb)
    paired = float(np.median(pairs)) if pairs else float("nan")
    spread = f" [{100 * min(pairs):+.1f}, {100 * max(pairs):+.1f}] of {len(pairs)}" if pairs else ""
    of_medians = 1 - zb["step_s"] / base["step_s"]
    theory = 1 - (1 - base["theory"]) / (1 - zb["theory"])
    achieved = paired / theory if theory > 0 else float("nan")
    return (f"| {model} | {n} | {placement} | {1e3 * base['step_s']:.1f} | {1e3 * zb['step_s']:.1f} | "
            f"{100 * paired:.1f}%{spread} | {100 * of_medians:.1f}% | {100 * theory:.1f}% | "
            f"{achieved:.2f} | {'yes' if achieved >= 2 / 3 else 'no'} | "
            f"{base['peak_mib']:.1f} / {zb['peak_mib']:.1f} | "
            f"{base['act_mib']:.1f} / {zb['act_mib']:.1f} |")


def placement_gain(rows):
    """The placement at measured times (pipeline.schedule_times = "measured",
    rows "<schedule>-measured") against the papers' placement of the same
    schedule: bubble at the run's costs, measured bubble and step time.
    Empty when no run placed at measured times."""
    key = {(r["model"], r["schedule"], r["n"]): r for r in rows}
    out = []
    for (model, schedule, n), placed in sorted(key.items()):
        unit = key.get((model, schedule[:-len("-measured")], n)) if schedule.endswith("-measured") else None
        if unit is None:
            continue
        pairs = paired_gains(unit, placed)
        gain = float(np.median(pairs)) if pairs else 1 - placed["step_s"] / unit["step_s"]
        papers = set(unit["schedule_texts"])
        timed = sum(t not in papers for t in placed["schedule_texts"])
        out.append(f"| {model} | {unit['schedule']} | {n} | {timed} of {len(placed['schedule_texts'])} | "
                   f"{pct(unit['at_costs'])} / {pct(placed['at_costs'])} | "
                   f"{pct(unit['bubble'])} / {pct(placed['bubble'])} | "
                   f"{1e3 * unit['step_s']:.1f} / {1e3 * placed['step_s']:.1f} | {100 * gain:+.1f}% |")
    if not out:
        return ""
    head = ["Placement at measured times against the papers' placement of the same schedule "
            "(medians of the repeats; step gain: the median over repetitions of 1 - measured / papers' "
            "step time of the repetition's two runs). Runs placed: in how many "
            "runs the placement at measured times differs from the papers' (in the others it was "
            "kept, and the two rows differ only by the host's run-to-run noise):", "",
            "| model | schedule | N | runs placed | bubble at the run's costs: papers' / measured placement | "
            "measured bubble: papers' / measured | step (ms): papers' / measured | step gain |",
            "|---|---|---:|---:|---|---|---|---:|"]
    return "\n".join(head + out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories, each optionally LABEL=DIR")
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps not counted")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    try:
        rows = merge_repeats([run_row(d, args.skip) for d in args.runs])
    except (TraceError, OSError, KeyError) as err:
        sys.exit(f"{parser.prog}: error: {err}")
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(table(rows))
    print()
    summary = runtime_summary(rows)
    if summary:
        print(summary)
        print()
    print(zb_speedup(rows))
    gains = placement_gain(rows)
    if gains:
        print()
        print(gains)


if __name__ == "__main__":
    main()
