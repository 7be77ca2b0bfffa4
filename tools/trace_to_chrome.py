#!/usr/bin/env python3
"""trace_to_chrome.py: convert a run's trace.h5 (docs/outputs.md) to Chrome
Trace Event JSON, for https://ui.perfetto.dev or chrome://tracing.

    tools/.venv/bin/python tools/trace_to_chrome.py runs/mlp/trace.h5 runs/mlp/trace.json

One process per stage, named "stage S (rank R)", with pid = S + 1 and, inside
it, tid 1 = "compute" and tid 2, 3, ... = communication lanes (Perfetto treats
pid 0 and tid 0 as the kernel's idle task, so neither is used). The thread
"compute" holds F, B,
OPTIMIZER, REDUCTION and EVAL_F, with RECOMPUTE and WAIT nested inside the F
or B they belong to. Transfers (SEND, RECV) overlap one another, so they are
laid out on as many threads "communication", "communication 2", ... as
needed for no two events of a thread to overlap. Every thread's events are
strictly nested; an event of the compute thread that overhangs its parent
(clock jitter) is trimmed to the parent's end, and the count is reported.
Events are complete ("X") events with ts and dur in microseconds; args carry
step, mb (-1: not about one micro-batch) and kind.
"""
import argparse
import json
import sys

from trace_lib import load_or_exit

COMPUTE_TID = 1
COMM_KINDS = ("SEND", "RECV")
NESTED_KINDS = ("RECOMPUTE", "WAIT")


def event_name(kind, mb):
    if kind in ("F", "B", "EVAL_F"):
        return f"{kind}{mb}" if mb >= 0 else kind
    return f"{kind} {mb}" if mb >= 0 else kind


def x_event(pid, tid, kind, e, start, end):
    mb = int(e["mb"])
    return {"name": event_name(kind, mb), "cat": kind, "ph": "X", "ts": start,
            "dur": max(end - start, 0.0), "pid": pid, "tid": tid,
            "args": {"step": int(e["step"]), "mb": mb, "kind": kind, "stage": pid - 1}}


def nest_compute(pid, items):
    """items: (start, end, kind, event) sorted by start, longest first.
    Returns X events strictly nested, trimming overhangs; and the trim count."""
    out, stack, trimmed = [], [], 0
    for start, end, kind, e in items:
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            end, trimmed = stack[-1], trimmed + 1
        stack.append(end)
        out.append(x_event(pid, COMPUTE_TID, kind, e, start, end))
    return out, trimmed


def comm_lanes(pid, items):
    """items sorted by start: each goes on the first lane free at its start."""
    lane_end, out = [], []
    for start, end, kind, e in items:
        lane = next((i for i, t in enumerate(lane_end) if t <= start), len(lane_end))
        if lane == len(lane_end):
            lane_end.append(end)
        lane_end[lane] = end
        out.append(x_event(pid, COMPUTE_TID + 1 + lane, kind, e, start, end))
    return out, len(lane_end)


def metadata(pid, rank, lanes):
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": COMPUTE_TID,
             "args": {"name": f"stage {pid - 1} (rank {rank})"}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": COMPUTE_TID,
             "args": {"sort_index": pid}}]
    names = ["compute"] + ["communication" if i == 0 else f"communication {i + 1}" for i in range(lanes)]
    for tid, name in enumerate(names, start=COMPUTE_TID):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})
    return meta


def rank_events(trace, rank):
    """Chrome events of one rank: metadata, compute thread, communication lanes."""
    pid = trace.stage_of_rank(rank) + 1
    items = [(float(e["start_us"]), float(e["end_us"]), trace.kind_name(int(e["kind"])), e)
             for e in trace.events[rank]]
    # Parents first: earlier start, then top-level kinds, then longer.
    items.sort(key=lambda it: (it[0], it[2] in NESTED_KINDS, -(it[1] - it[0])))
    compute, trimmed = nest_compute(pid, [it for it in items if it[2] not in COMM_KINDS])
    comm, lanes = comm_lanes(pid, [it for it in items if it[2] in COMM_KINDS])
    return metadata(pid, rank, max(lanes, 1)) + compute + comm, trimmed


def to_chrome(trace):
    events, trimmed = [], 0
    for rank in range(trace.num_ranks):
        ev, t = rank_events(trace, rank)
        events += ev
        trimmed += t
    doc = {"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {"source": trace.path, "schedule_name": trace.schedule_name,
                         "num_stages": trace.num_stages,
                         "num_micro_batches": trace.num_micro_batches,
                         "clock_error_us": [float(x) for x in trace.clock_error_us]}}
    return doc, trimmed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="path to trace.h5")
    parser.add_argument("out", help="JSON file to write")
    args = parser.parse_args()
    trace = load_or_exit(args.trace, parser.prog)
    doc, trimmed = to_chrome(trace)
    try:
        with open(args.out, "w") as f:
            json.dump(doc, f)
    except OSError as err:
        sys.exit(f"{parser.prog}: error: {args.out}: cannot write ({err.strerror})")
    if trimmed:
        print(f"{parser.prog}: trimmed {trimmed} compute event(s) overhanging their parent",
              file=sys.stderr)
    n = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.out}: {n} events, {trace.num_ranks} stage(s)")


if __name__ == "__main__":
    main()
