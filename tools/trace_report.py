#!/usr/bin/env python3
"""trace_report.py: per-stage busy/idle/wait time, measured bubble and stage
imbalance of a run's trace.h5 (layout in docs/outputs.md).

    tools/.venv/bin/python tools/trace_report.py runs/mlp/trace.h5 [--skip 1] [--json]

Definitions (per step, per rank; the first --skip steps are warm-up and left out):
  pipeline span  from the start of the rank's first action of the step (F, B,
                 WAIT, SEND or RECV) to the end of its last F, B or WAIT
                 (OPTIMIZER, REDUCTION and evaluation are not part of it)
  busy           time in F or B, less the WAIT time nested in them
  wait           time blocked waiting for a peer (WAIT events)
  idle           (step window) - busy - wait, where the step window is the
                 longest pipeline span over the ranks in that step
  bubble         1 - busy / step window; the reported bubble is the mean over
                 ranks and timed steps, shown next to theory (the schedule in
                 unit time: (P-1)/(N+P-1) for 1F1B) and, for traces that carry
                 it, the schedule at the run's own median F, B and W costs
                 (cost_bubble): measured - that is what the runtime added
                 (links, late progress, jitter); that - theory is what uneven
                 actions cost under this schedule
  replayed       (traces with a 'replay' group) the mean over the timed steps
                 of the schedule simulated with every F, B and W taking the
                 time it took in that step, free links: measured - replayed
                 is what messages, progress and the executor's bookkeeping
                 added; replayed - at the median costs is what the spread of
                 action times around their medians added (a slow action
                 delays the stage waiting for it)
  imbalance      max / min over stages of the mean busy time per step
When the imbalance exceeds 1.5 a WARNING proposes a partition
(pipeline.partition) that balances the cost per unit estimated from this run.
"""
import argparse
import json
import sys

import numpy as np

from trace_lib import TraceError, load_or_exit

IMBALANCE_LIMIT = 1.5
PIPELINE_START_KINDS = ("F", "B", "W", "WAIT", "SEND", "RECV")
PIPELINE_END_KINDS = ("F", "B", "W", "WAIT")


# ---- interval arithmetic on (n, 2) arrays of [start, end) -----------------

def merge(intervals):
    """Sorted, disjoint union of intervals."""
    iv = np.asarray(intervals, dtype=np.float64).reshape(-1, 2)
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return np.asarray(out, dtype=np.float64).reshape(-1, 2)


def length(intervals):
    iv = merge(intervals)
    return float((iv[:, 1] - iv[:, 0]).sum())


def clip(intervals, lo, hi):
    iv = np.clip(merge(intervals), lo, hi)
    return iv[iv[:, 1] > iv[:, 0]]


def subtract(a, b):
    """Total length of union(a) minus union(b)."""
    a, b = merge(a), merge(b)
    overlap = 0.0
    for s, e in a:
        cut = np.clip(b, s, e)
        overlap += float((cut[:, 1] - cut[:, 0]).sum())
    return length(a) - overlap


def within(ev, windows):
    """Mask of events lying inside one of the windows (n, 2)."""
    mask = np.zeros(len(ev), dtype=bool)
    for s, e in windows:
        mask |= (ev["start_us"] >= s) & (ev["end_us"] <= e)
    return mask


# ---- per (rank, step) --------------------------------------------------

def of_kinds(trace, ev, names):
    codes = [trace.code(n) for n in names]
    return ev[np.isin(ev["kind"], codes)]


def spans(ev):
    return np.stack([ev["start_us"], ev["end_us"]], axis=1)


def pipeline_events(trace, ev):
    """The step's events without evaluation passes (and what nests in them)."""
    evals = spans(of_kinds(trace, ev, ["EVAL_F"]))
    ev = ev[~within(ev, evals)] if len(evals) else ev
    return ev[ev["kind"] != trace.code("EVAL_F")]


def rank_step(trace, ev):
    """Pipeline span, busy and wait of one rank in one step (None if no F/B)."""
    ev = pipeline_events(trace, ev)
    fb = of_kinds(trace, ev, ["F", "B", "W"])
    if len(fb) == 0:
        return None
    start = float(of_kinds(trace, ev, PIPELINE_START_KINDS)["start_us"].min())
    end = float(of_kinds(trace, ev, PIPELINE_END_KINDS)["end_us"].max())
    waits = clip(spans(of_kinds(trace, ev, ["WAIT"])), start, end)
    return {"span": end - start, "busy": subtract(spans(fb), waits), "wait": length(waits)}


def timed_steps(trace, skip):
    fb_codes = [trace.code("F"), trace.code("B")]
    steps = sorted({int(s) for ev in trace.events for s in ev["step"][np.isin(ev["kind"], fb_codes)]})
    if len(steps) <= skip:
        raise TraceError(f"{trace.path}: {len(steps)} step(s) with F/B events, "
                         f"cannot skip {skip} (use --skip 0)")
    # pipeline.schedule_times = "measured": the steps before the placement ran
    # another schedule than the one the trace stores.
    kept = [s for s in steps[skip:] if s >= trace.schedule_first_step]
    if not kept:
        raise TraceError(f"{trace.path}: no step ran the stored schedule after the {skip} skipped: "
                         f"it was placed from step {trace.schedule_first_step} on")
    return kept


def by_step(ev):
    """{step: that step's events, still sorted by start}."""
    ev = ev[np.argsort(ev["step"], kind="stable")]
    keys, first = np.unique(ev["step"], return_index=True)
    return dict(zip(keys.tolist(), np.split(ev, first[1:])))


def step_table(trace, steps):
    """rows[step][rank] = rank_step(...) or None."""
    grouped = [by_step(ev) for ev in trace.events]
    empty = np.empty(0, dtype=trace.events[0].dtype)
    return {k: [rank_step(trace, g.get(k, empty)) for g in grouped] for k in steps}


# ---- aggregation ---------------------------------------------------------

def stage_totals(trace, rows):
    stats = [{"stage": trace.stage_of_rank(r), "rank": r, "busy_us": 0.0, "wait_us": 0.0,
              "idle_us": 0.0, "window_us": 0.0, "steps": 0, "bubble_sum": 0.0}
             for r in range(trace.num_ranks)]
    for per_rank in rows.values():
        window = max((x["span"] for x in per_rank if x), default=0.0)
        for r, x in enumerate(per_rank):
            if x is None or window <= 0:
                continue
            st = stats[r]
            st["busy_us"] += x["busy"]
            st["wait_us"] += x["wait"]
            st["idle_us"] += window - x["busy"] - x["wait"]
            st["window_us"] += window
            st["steps"] += 1
            st["bubble_sum"] += 1.0 - x["busy"] / window
    return stats


def bubble_of(busy, span):
    """The bubble of one step, as the C++ defines it (schedule/semantics.hpp
    bubble_of, used by the trainer and the simulator): the mean over ranks of
    1 - busy / the longest span, a rank counting 0 when that span is 0."""
    longest = max(span)
    idle = 0.0
    for b in busy:
        idle += 1.0 - b / longest if longest > 0.0 else 0.0
    return idle / len(busy)


def bubble_per_step(rows):
    """{step: bubble_of the ranks with F/B/W in that step}."""
    out = {}
    for k, per_rank in rows.items():
        present = [x for x in per_rank if x]
        if present:
            out[k] = bubble_of([x["busy"] for x in present], [x["span"] for x in present])
    return out


def theory_bubble(p, n):
    return (p - 1) / (n + p - 1) if n + p - 1 > 0 else 0.0


def trace_theory(trace):
    """The trace's schedule's theoretical bubble: recorded by the run (unit-time
    simulation of its schedule, any schedule), else 1F1B's (P-1)/(N+P-1)."""
    if trace.theory_bubble is not None:
        return trace.theory_bubble
    return theory_bubble(trace.num_stages, trace.num_micro_batches)


def imbalance_of(compute):
    lo, hi = min(compute), max(compute)
    return hi / lo if lo > 0 else float("inf")


# ---- partition suggestion -------------------------------------------------

def current_partition(deck, stages):
    """Units per stage from the deck (pipeline.partition or uniform), or None."""
    model = deck.get("model", {})
    explicit = list(deck.get("pipeline", {}).get("partition", []) or [])
    if explicit:
        return explicit if len(explicit) == stages else None
    mtype = model.get("type", "mlp")
    total = model.get("depth", 8) if mtype == "mlp" else model.get("blocks", 4) if mtype == "gpt" else None
    if total is None or total < stages:
        return None
    return [total // stages + (1 if s < total % stages else 0) for s in range(stages)]


def balanced_partition(costs, parts):
    """Contiguous split of costs into `parts` non-empty runs minimising the
    largest run's sum; returns the run lengths."""
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    best = np.full((parts + 1, n + 1), np.inf)
    cut = np.zeros((parts + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for p in range(1, parts + 1):
        for i in range(p, n - (parts - p) + 1):
            j = np.arange(p - 1, i)
            load = np.maximum(best[p - 1, j], prefix[i] - prefix[j])
            k = int(np.argmin(load))
            best[p, i], cut[p, i] = load[k], j[k]
    counts, i = [], n
    for p in range(parts, 0, -1):
        counts.append(int(i - cut[p, i]))
        i = int(cut[p, i])
    return counts[::-1]


def suggest_partition(deck, compute_per_stage):
    """(current, suggested, estimated compute per stage) or None."""
    current = current_partition(deck, len(compute_per_stage))
    if current is None or min(compute_per_stage) <= 0:
        return None
    costs = np.concatenate([np.full(u, c / u) for u, c in zip(current, compute_per_stage)])
    suggested = balanced_partition(costs, len(current))
    bounds = np.cumsum([0] + suggested)
    estimate = [float(costs[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:])]
    return current, suggested, estimate


# ---- the report -----------------------------------------------------------

def analyse(trace, skip):
    """Everything the report prints, as a JSON-ready dict."""
    steps = timed_steps(trace, skip)
    rows = step_table(trace, steps)
    stats = stage_totals(trace, rows)
    per_step = bubble_per_step(rows)
    compute = [st["busy_us"] / st["steps"] if st["steps"] else 0.0 for st in stats]
    result = {
        "trace": trace.path, "schedule_name": trace.schedule_name,
        "num_stages": trace.num_stages, "num_micro_batches": trace.num_micro_batches,
        "skip": skip, "timed_steps": steps,
        "stages": [{k: v for k, v in st.items() if k != "bubble_sum"} | {
            "compute_us_per_step": c, "bubble": st["bubble_sum"] / st["steps"] if st["steps"] else None}
            for st, c in zip(stats, compute)],
        "bubble": float(np.mean(list(per_step.values()))) if per_step else None,
        "bubble_theory": trace_theory(trace),
        "bubble_at_costs": trace.cost_bubble,
        "bubble_replayed": replayed_bubble(trace, steps),
        "action_costs_ms": (None if trace.action_costs_s is None
                            else (1e3 * trace.action_costs_s).round(4).tolist()),
        "bubble_per_step": {str(k): v for k, v in per_step.items()},
        "imbalance": None, "warning": None, "current_partition": None,
        "suggested_partition": None, "suggested_compute_us_per_step": None,
        "clock_error_us": [float(x) for x in trace.clock_error_us],
    }
    add_imbalance(result, trace, compute)
    return result


def replayed_bubble(trace, steps):
    """Mean replay bubble over the timed steps; None when the trace has no
    replay of every one of them."""
    if trace.replay_steps is None:
        return None
    replayed = dict(zip(trace.replay_steps.tolist(), trace.replay_bubble.tolist()))
    if not all(s in replayed for s in steps):
        return None
    return float(np.mean([replayed[s] for s in steps]))


def add_imbalance(result, trace, compute):
    if len(compute) < 2:
        return
    ratio = imbalance_of(compute)
    result["imbalance"] = ratio if np.isfinite(ratio) else None
    if ratio <= IMBALANCE_LIMIT:
        return
    msg = (f"stage imbalance {ratio:.2f} > {IMBALANCE_LIMIT} (compute per step: "
           + ", ".join(f"stage {s} {c / 1e3:.3f} ms" for s, c in enumerate(compute)) + ")")
    suggestion = suggest_partition(trace.deck(), compute)
    if suggestion is None:
        msg += "; no partition suggestion (units per stage unknown from the deck)"
    else:
        current, suggested, estimate = suggestion
        result["current_partition"], result["suggested_partition"] = current, suggested
        result["suggested_compute_us_per_step"] = estimate
        if suggested == current:
            msg += f"; partition {current} is already the best contiguous split of its units"
        else:
            msg += (f"; try pipeline.partition = {suggested} (now {current}; estimated "
                    f"imbalance {imbalance_of(estimate):.2f})")
    result["warning"] = msg


def fmt_pct(x):
    return "n/a" if x is None else f"{100 * x:.1f} %"


def print_text(r):
    steps = r["timed_steps"]
    print(f"trace {r['trace']}: schedule {r['schedule_name'] or '?'}, P = {r['num_stages']} "
          f"stages, N = {r['num_micro_batches']} micro-batches, steps {steps[0]}..{steps[-1]} "
          f"timed ({len(steps)}, skip {r['skip']})")
    if r["clock_error_us"]:
        print(f"clock alignment: max estimated error {max(r['clock_error_us']):.1f} us")
    print(f"{'stage':>5} {'rank':>4} {'busy ms/step':>12} {'wait ms/step':>12} "
          f"{'idle ms/step':>12} {'busy %':>7} {'bubble':>7}")
    for st in r["stages"]:
        n = max(st["steps"], 1)
        busy_pct = 100 * st["busy_us"] / st["window_us"] if st["window_us"] else 0.0
        print(f"{st['stage']:>5} {st['rank']:>4} {st['busy_us'] / n / 1e3:>12.3f} "
              f"{st['wait_us'] / n / 1e3:>12.3f} {st['idle_us'] / n / 1e3:>12.3f} "
              f"{busy_pct:>6.1f}% {fmt_pct(st['bubble']):>7}")
    diff = "" if r["bubble"] is None else f" ({100 * (r['bubble'] - r['bubble_theory']):+.1f} points)"
    print(f"measured bubble {fmt_pct(r['bubble'])}, theory "
          f"{fmt_pct(r['bubble_theory'])}{diff}")
    if r["bubble_at_costs"] is not None:
        added = "" if r["bubble"] is None else \
            f"; the runtime added {100 * (r['bubble'] - r['bubble_at_costs']):+.1f} points"
        print(f"the schedule at this run's median F/B/W costs: bubble "
              f"{fmt_pct(r['bubble_at_costs'])}{added}")
        for s, (f, b, w) in enumerate(r["action_costs_ms"]):
            print(f"  stage {s}: F {f:.3f} ms, B {b:.3f} ms, W {w:.3f} ms")
    if r["bubble_replayed"] is not None and r["bubble"] is not None:
        runtime = f"messages, progress and bookkeeping {100 * (r['bubble'] - r['bubble_replayed']):+.1f} points"
        spread = ("" if r["bubble_at_costs"] is None else
                  f"the spread of action times around their medians "
                  f"{100 * (r['bubble_replayed'] - r['bubble_at_costs']):+.1f} points, ")
        print(f"the schedule replayed at each step's own F/B/W times: bubble "
              f"{fmt_pct(r['bubble_replayed'])}; of what the runtime added: {spread}{runtime}")
    if r["imbalance"] is not None:
        print(f"stage imbalance (max/min compute per step): {r['imbalance']:.2f}")
    if r["warning"]:
        print(f"WARNING: {r['warning']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="path to trace.h5")
    parser.add_argument("--skip", type=int, default=1, help="warm-up steps to leave out (default 1)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    args = parser.parse_args()
    if args.skip < 0:
        parser.error("--skip must be >= 0")
    trace = load_or_exit(args.trace, parser.prog)
    try:
        result = analyse(trace, args.skip)
    except TraceError as err:
        sys.exit(f"{parser.prog}: error: {err}")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_text(result)


if __name__ == "__main__":
    main()
