#!/usr/bin/env python3
"""trace_timeline.py: draw a run's trace.h5 (docs/outputs.md) as a pipeline
timeline PNG in the manner of the GPipe paper's figure.

    tools/.venv/bin/python tools/trace_timeline.py runs/mlp/trace.h5 timeline.png [--step K | --step A:B]

One row per stage (stage 0 on top), time to the right from the first event
drawn. Boxes: F, B, W (weight gradients of a split backward), recompute
(inside its B), communication wait (blocked on
a peer, inside the F/B that waits or at the end of the step), optimizer,
reduction and evaluation; idle time is blank. F and B boxes carry their
micro-batch number where it fits. A thin strip under each row shows the
transfers in flight (SEND/RECV windows). Default: the last step; --step K
draws step K, --step A:B steps A to B inclusive. The title gives the
measured bubble of the steps drawn (as trace_report.py defines it).
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

import trace_report  # noqa: E402
from trace_lib import TraceError, load_or_exit, parse_step_range  # noqa: E402

STYLE = {  # kind: (colour, legend label, hatch)
    "F": ("#4C72B0", "forward (F)", None),
    "B": ("#55A868", "backward (B)", None),
    "W": ("#A6D854", "weight gradients (W)", None),
    "RECOMPUTE": ("#DD8452", "recompute", None),
    "WAIT": ("#E6B0B0", "communication wait", "///"),
    "OPTIMIZER": ("#8172B3", "optimizer", None),
    "REDUCTION": ("#937860", "reduction", None),
    "EVAL_F": ("#8CC5D8", "evaluation forward", None),
}
DRAW_ORDER = ["F", "B", "W", "EVAL_F", "OPTIMIZER", "REDUCTION", "RECOMPUTE", "WAIT"]
TRANSFER_COLOUR = "#777777"
BOX_H, STRIP_H = 0.72, 0.12


def select(trace, steps):
    """Per rank, the events of the chosen steps."""
    return [ev[np.isin(ev["step"], steps)] for ev in trace.events]


def time_scale(t0, t1):
    """(divisor, unit) for the x axis."""
    return (1.0, "µs") if t1 - t0 < 2000.0 else (1e3, "ms")


def draw_kind(ax, trace, ev, kind, y, t0, div):
    rows = ev[ev["kind"] == trace.code(kind)]
    if len(rows) == 0:
        return
    colour, _, hatch = STYLE[kind]
    bars = [((s - t0) / div, (e - s) / div) for s, e in zip(rows["start_us"], rows["end_us"])]
    ax.broken_barh(bars, (y - BOX_H / 2, BOX_H), facecolors=colour, edgecolor="white",
                   linewidth=0.4, hatch=hatch)


def draw_transfers(ax, trace, ev, y, t0, div):
    rows = ev[np.isin(ev["kind"], [trace.code("SEND"), trace.code("RECV")])]
    bars = [((s - t0) / div, (e - s) / div) for s, e in zip(rows["start_us"], rows["end_us"])]
    if bars:
        ax.broken_barh(bars, (y + BOX_H / 2, STRIP_H), facecolors=TRANSFER_COLOUR, alpha=0.35)


def label_start(waits, e):
    """Where the compute of F/B event e starts: after the WAITs nested in it."""
    inside = waits[(waits["start_us"] >= e["start_us"]) & (waits["end_us"] <= e["end_us"])]
    return max(float(e["start_us"]), float(inside["end_us"].max())) if len(inside) else float(e["start_us"])


def draw_labels(ax, trace, ev, y, t0, div, pts_per_unit):
    waits = ev[ev["kind"] == trace.code("WAIT")]
    boxes = ev[np.isin(ev["kind"], [trace.code(k) for k in ("F", "B", "W", "EVAL_F")])]
    for e in boxes:
        if e["mb"] < 0:
            continue
        a, b = label_start(waits, e), float(e["end_us"])
        # With several stages per rank the box names its stage: "s3:5".
        many = len(np.unique(ev["stage"])) > 1
        text = (f"{int(e['stage'])}:" if many else "") + str(int(e["mb"]))
        width_pts = (b - a) / div * pts_per_unit
        size = min(9.0, width_pts / (0.65 * len(text) + 0.4))
        if size >= 4.0:
            ax.text(((a + b) / 2 - t0) / div, y, text, ha="center", va="center",
                    fontsize=size, color="white")


def step_marks(ax, per_rank, steps, t0, div):
    """Dashed line and label at the first event of each step drawn."""
    if len(steps) < 2:
        return
    for k in steps:
        starts = [ev["start_us"][ev["step"] == k] for ev in per_rank]
        starts = np.concatenate(starts)
        if len(starts):
            x = (starts.min() - t0) / div
            ax.axvline(x, color="black", linestyle=":", linewidth=0.8)
            ax.text(x, -0.42, f" step {k}", fontsize=8, va="bottom")


def title(trace, steps):
    rows = trace_report.step_table(trace, steps)
    per_step = trace_report.bubble_per_step(rows)
    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}..{steps[-1]}"
    shape = (f"P = {trace.num_stages}" if trace.num_ranks == trace.num_stages
             else f"{trace.num_ranks} ranks, {trace.num_stages} stages")
    name = (trace.schedule_name or "schedule ?") + (
        " with weight gradients once per step" if "weight_grad: step" in (trace.schedule or "") else "")
    text = f"{name}: {shape}, N = {trace.num_micro_batches}, {which}"
    if per_step:
        theory = trace_report.trace_theory(trace)
        text += (f" — measured bubble {100 * np.mean(list(per_step.values())):.1f} %"
                 f" (theory {100 * theory:.1f} %)")
    return text


def legend_handles(trace, per_rank):
    present = {trace.kind_name(int(k)) for ev in per_rank for k in np.unique(ev["kind"])}
    handles = [Patch(facecolor=STYLE[k][0], hatch=STYLE[k][2], label=STYLE[k][1])
               for k in DRAW_ORDER if k in present or k in ("F", "B")]
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle"))
    if present & {"SEND", "RECV"}:
        handles.append(Patch(facecolor=TRANSFER_COLOUR, alpha=0.35, label="transfer in flight"))
    return handles


def row_label(trace, rank):
    """'stage 2', or 'rank 0 (stages 0, 3)' when the rank owns several."""
    stages = sorted({int(s) for s in trace.events[rank]["stage"]})
    if len(stages) <= 1:
        return f"stage {trace.stage_of_rank(rank)}"
    return f"rank {rank} (stages {', '.join(map(str, stages))})"


def draw(trace, steps, out):
    per_rank = select(trace, steps)
    spans = np.concatenate([np.r_[ev["start_us"], ev["end_us"]] for ev in per_rank])
    t0, t1 = float(spans.min()), float(spans.max())
    div, unit = time_scale(t0, t1)
    ranks = trace.num_ranks
    fig, ax = plt.subplots(figsize=(14, 1.6 + 0.6 * ranks), layout="constrained")
    ax.set_xlim(0, max((t1 - t0) / div, 1e-9))
    ax.set_ylim(ranks - 0.4, -0.75)
    pts_per_unit = ax.get_position().width * fig.get_figwidth() * 72 / ((t1 - t0) / div or 1.0)
    for r, ev in enumerate(per_rank):
        for kind in DRAW_ORDER:
            draw_kind(ax, trace, ev, kind, r, t0, div)
        draw_transfers(ax, trace, ev, r, t0, div)
        draw_labels(ax, trace, ev, r, t0, div, pts_per_unit)
    step_marks(ax, per_rank, steps, t0, div)
    ax.set_yticks(range(ranks), [row_label(trace, r) for r in range(ranks)])
    ax.set_xlabel(f"time ({unit}) from the first event drawn")
    ax.set_title(title(trace, steps), fontsize=10)
    handles = legend_handles(trace, per_rank)
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.savefig(out, dpi=150)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="path to trace.h5")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--step", help="step K or range A:B (default: the last step)")
    args = parser.parse_args()
    trace = load_or_exit(args.trace, parser.prog)
    try:
        steps = parse_step_range(args.step, trace.steps(), args.trace)
    except TraceError as err:
        sys.exit(f"{parser.prog}: error: {err}")
    try:
        draw(trace, steps, args.out)
    except OSError as err:
        sys.exit(f"{parser.prog}: error: {args.out}: cannot write ({err.strerror or err})")
    print(f"wrote {args.out}: step(s) {steps[0]}..{steps[-1]}, {trace.num_ranks} stage(s)")


if __name__ == "__main__":
    main()
