#!/usr/bin/env python3
"""test_trace_tools.py: tests of tools/trace_report.py, trace_to_chrome.py,
trace_timeline.py, schedules_report.py, planner_report.py,
scaling_report.py and auto_report.py on synthetic trace.h5 and metrics.h5
files written here with h5py (no C++).

    tools/.venv/bin/python tests/tools/test_trace_tools.py

Prints one line per test and a final "N passed, M failed"; exits 1 on failure.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import traceback

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)

import auto_report  # noqa: E402
import balance_report  # noqa: E402
import planner_report  # noqa: E402
import schedules_report  # noqa: E402
import trace_report  # noqa: E402
import trace_to_chrome  # noqa: E402
from trace_lib import EVENT_DTYPE, DEFAULT_KIND_NAMES, load_trace  # noqa: E402

CODE = {name: i for i, name in enumerate(DEFAULT_KIND_NAMES)}
MS = 1000.0  # the synthetic traces count in units of 1 ms = 1000 µs

MLP_DECK = """[model]
type = "mlp"
depth = 8
[pipeline]
micro_batches = 4
partition = []
"""
GPT_DECK = """[model]
type = "gpt"
blocks = 6
[pipeline]
micro_batches = 4
partition = [2, 4]
"""


# ---- writing synthetic traces ---------------------------------------------

def write_trace(path, per_rank, num_micro_batches, schedule_name="gpipe", deck=MLP_DECK):
    """per_rank: list (one per rank) of (step, mb, kind name, start, end) in ms."""
    with h5py.File(path, "w") as f:
        f.attrs["deck"] = deck
        f.attrs["schedule"] = "\n".join(f"{r}F0" for r in range(len(per_rank)))
        f.attrs["schedule_name"] = schedule_name
        f.attrs["num_stages"] = np.int64(len(per_rank))
        f.attrs["num_micro_batches"] = np.int64(num_micro_batches)
        f.attrs["kind_names"] = ",".join(DEFAULT_KIND_NAMES)
        f.attrs["clock_offset_us"] = np.zeros(len(per_rank))
        f.attrs["clock_error_us"] = np.array([0.0] + [1.5] * (len(per_rank) - 1))
        group = f.create_group("events")
        for rank, rows in enumerate(per_rank):
            ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
            for i, (step, mb, kind, start, end) in enumerate(rows):
                ev[i] = (step, rank, mb, CODE[kind], start * MS, end * MS)
            ev = ev[np.argsort(ev["start_us"], kind="stable")]
            group.create_dataset(f"rank_{rank}", data=ev, maxshape=(None,), chunks=(64,))
    return path


def hand_gpipe_step(step, t, b1_rank0=2.0):
    """GPipe, P = 2, N = 2, F = 1 ms, B = 2 ms, starting at t ms.

    rank 0: F0 [0,1] F1 [1,2] | B0 posted at 2, WAITs for stage 1's gradient
            until 5, computes [5,7] | B1 [7,7+b1_rank0] | OPTIMIZER, REDUCTION
    rank 1: F0 posted at 0, WAITs for its input until 1, computes [1,2] |
            F1 [2,3] | B0 [3,5] (RECOMPUTE [3,3.5] nested) | B1 [5,7] |
            standalone WAIT [7,7.2] for its sends | OPTIMIZER, REDUCTION
    SEND/RECV windows overlap the compute and each other.
    """
    e0 = 7.0 + b1_rank0
    r0 = [(step, 0, "F", t + 0, t + 1), (step, 0, "SEND", t + 1, t + 2),
          (step, 1, "F", t + 1, t + 2), (step, 1, "SEND", t + 2, t + 3),
          (step, 0, "RECV", t + 1, t + 5), (step, 0, "B", t + 2, t + 7),
          (step, 0, "WAIT", t + 2, t + 5), (step, 1, "RECV", t + 2, t + 7),
          (step, 1, "B", t + 7, t + e0),
          (step, -1, "OPTIMIZER", t + e0, t + e0 + 0.5),
          (step, -1, "REDUCTION", t + e0 + 0.5, t + e0 + 0.6)]
    r1 = [(step, 0, "RECV", t + 0, t + 1), (step, 0, "F", t + 0, t + 2),
          (step, 0, "WAIT", t + 0, t + 1), (step, 1, "RECV", t + 0, t + 2),
          (step, 1, "F", t + 2, t + 3), (step, 0, "B", t + 3, t + 5),
          (step, 0, "RECOMPUTE", t + 3, t + 3.5), (step, 0, "SEND", t + 5, t + 5.2),
          (step, 1, "B", t + 5, t + 7), (step, 1, "SEND", t + 7, t + 7.2),
          (step, -1, "WAIT", t + 7, t + 7.2),
          (step, -1, "OPTIMIZER", t + 7.2, t + 7.7),
          (step, -1, "REDUCTION", t + e0 + 0.5, t + e0 + 0.6)]
    return r0, r1


def hand_gpipe_trace(path):
    """Step 0 is a slow warm-up (rank 0's B1 takes 5 ms), step 1 the clean layout."""
    a0, a1 = hand_gpipe_step(0, 0.0, b1_rank0=5.0)
    b0, b1 = hand_gpipe_step(1, 20.0)
    return write_trace(path, [a0 + b0, a1 + b1], num_micro_batches=2)


def schedule_order(name, p, n, s):
    """Compute actions (kind, mb) of stage s: gpipe or 1f1b (docs/schedules.md)."""
    if name == "gpipe":
        return [("F", i) for i in range(n)] + [("B", i) for i in range(n)]
    w = min(p - s, n)
    order = [("F", i) for i in range(w)]
    for i in range(n):
        order.append(("B", i))
        if w + i < n:
            order.append(("F", w + i))
    return order


def simulate(name, f, b, n, steps=2, recompute=False, evaluate=False, latency=0.0):
    """Events of a schedule run with per-stage F/B durations f[s], b[s] (ms).

    Each compute action is posted when its rank is free and WAITs (nested)
    until its input arrived; its receive is posted one action earlier; sends
    last from the producer's end until the consumer starts computing. With
    recompute, B holds a nested RECOMPUTE of length f[s] (included in b[s]).
    """
    p = len(f)
    rows = [[] for _ in range(p)]
    t = 0.0
    for step in range(steps):
        done, free = {}, [t] * p
        orders = [schedule_order(name, p, n, s) for s in range(p)]
        pos = [0] * p
        while any(pos[s] < len(orders[s]) for s in range(p)):
            progressed = False
            for s in range(p):
                while pos[s] < len(orders[s]):
                    kind, i = orders[s][pos[s]]
                    src = (s - 1, "F", i) if kind == "F" else (s + 1, "B", i)
                    if kind == "F" and s == 0 or kind == "B" and s == p - 1:
                        ready = free[s]
                    elif src in done:
                        ready = done[src] + latency
                    else:
                        break
                    post, start = free[s], max(free[s], ready)
                    end = start + (f[s] if kind == "F" else b[s])
                    rows[s].append((step, i, kind, post, end))
                    if start > post:
                        rows[s].append((step, i, "WAIT", post, start))
                    if kind == "B" and recompute:
                        rows[s].append((step, i, "RECOMPUTE", start, start + f[s]))
                    if src[0] in range(p) and not (kind == "F" and s == 0):
                        prev = orders[s][pos[s] - 1] if pos[s] else None
                        recv_post = t if prev is None else done[(s, prev[0], prev[1])] - (
                            f[s] if prev[0] == "F" else b[s])
                        rows[s].append((step, i, "RECV", min(recv_post, post), start))
                        rows[src[0]].append((step, i, "SEND", done[src], start))
                    done[(s, kind, i)] = end
                    free[s] = end
                    pos[s] += 1
                    progressed = True
            assert progressed, "schedule deadlocked in the simulator"
        finish = max(free)
        for s in range(p):
            last_send = max([r[4] for r in rows[s] if r[0] == step and r[2] == "SEND"], default=free[s])
            if last_send > free[s]:
                rows[s].append((step, -1, "WAIT", free[s], last_send))
            end = max(free[s], last_send)
            rows[s].append((step, -1, "OPTIMIZER", end, end + 0.3))
            rows[s].append((step, -1, "REDUCTION", finish + 0.3, finish + 0.4))
        t = finish + 0.5
        if evaluate:  # an evaluation forward with a long nested wait, after the step
            for s in range(p):
                rows[s].append((step, 0, "EVAL_F", t, t + 5.0))
                rows[s].append((step, 0, "WAIT", t, t + 4.0))
            t += 5.5
    return rows


def simulated_trace(path, name, f, b, n, deck=MLP_DECK, **kw):
    return write_trace(path, simulate(name, f, b, n, **kw), n, schedule_name=name, deck=deck)


def run_tool(script, *args):
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, script), *args],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


# ---- tests -----------------------------------------------------------------

def test_hand_bubble_gpipe_2x2(tmp):
    # Step 1 (step 0 is warm-up, skipped): each rank's F + B time, less the
    # WAIT nested in them, is 2 x 1 + 2 x 2 = 6 ms. Pipeline spans: rank 0
    # [0, 9] = 9 ms, rank 1 [0, 7.2] = 7.2 ms (its last action is the WAIT
    # for its sends); the step window is the longest, 9 ms. Bubble of each
    # rank = 1 - 6/9 = 1/3, the mean is 1/3, equal to theory (P-1)/(N+P-1)
    # = 1/3 for P = N = 2.
    r = trace_report.analyse(load_trace(hand_gpipe_trace(f"{tmp}/t.h5")), skip=1)
    assert abs(r["bubble"] - 1 / 3) < 1e-12, r["bubble"]
    assert abs(r["bubble_theory"] - 1 / 3) < 1e-12
    s0, s1 = r["stages"]
    # busy / wait / idle in µs: rank 0 waits 3 ms inside B0; rank 1 waits
    # 1 ms inside F0 and 0.2 ms at the end; idle = 9 - busy - wait.
    assert np.allclose([s0["busy_us"], s0["wait_us"], s0["idle_us"]], [6000, 3000, 0])
    assert np.allclose([s1["busy_us"], s1["wait_us"], s1["idle_us"]], [6000, 1200, 1800])
    assert r["imbalance"] == 1.0 and r["warning"] is None


def test_hand_bubble_with_warmup(tmp):
    # --skip 0 adds step 0, where rank 0's B1 takes 5 ms: rank 0 busy 9 in
    # a window of 12 (bubble 1/4), rank 1 busy 6 in 12 (bubble 1/2).
    # Mean over the four (rank, step) values: (1/4 + 1/2 + 1/3 + 1/3) / 4 = 17/48.
    r = trace_report.analyse(load_trace(hand_gpipe_trace(f"{tmp}/t.h5")), skip=0)
    assert abs(r["bubble"] - 17 / 48) < 1e-12, r["bubble"]
    assert abs(r["bubble_per_step"]["0"] - 3 / 8) < 1e-12


# The cases of tests/test_semantics.cpp (BubbleOf.*), the C++ definition:
# the same numbers, so the two definitions cannot drift apart.
BUBBLE_CASES = [
    ([6.0, 6.0], [9.0, 7.2], 1 / 3),
    ([9.0, 6.0], [12.0, 10.0], 3 / 8),
    ([2.0, 1.0, 0.0], [4.0, 2.0, 0.0], (0.5 + 0.75 + 1.0) / 3),
    ([0.0, 0.0], [0.0, 0.0], 0.0),
]


def test_bubble_of_is_the_cpp_definition():
    for busy, span, want in BUBBLE_CASES:
        got = trace_report.bubble_of(busy, span)
        assert abs(got - want) < 1e-15, (busy, span, got, want)


def test_report_cli_json(tmp):
    rc, out, err = run_tool("trace_report.py", hand_gpipe_trace(f"{tmp}/t.h5"), "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert abs(r["bubble"] - 1 / 3) < 1e-12 and r["timed_steps"] == [1]
    rc, out, err = run_tool("trace_report.py", f"{tmp}/t.h5")
    assert rc == 0 and "measured bubble 33.3 %" in out and "WARNING" not in out, out


def test_report_bubble_at_measured_costs(tmp):
    # A trace carrying cost_bubble (the schedule at its own median costs):
    # the report gives it and the points the runtime added beside it.
    path = hand_gpipe_trace(f"{tmp}/t.h5")
    with h5py.File(path, "a") as f:
        f.attrs["cost_bubble"] = 0.25
        f.attrs["action_costs_s"] = np.array([1e-3, 2e-3, 0.0, 1.5e-3, 2.5e-3, 0.5e-3])
    r = trace_report.analyse(load_trace(path), skip=1)
    assert r["bubble_at_costs"] == 0.25
    assert np.allclose(r["action_costs_ms"], [[1, 2, 0], [1.5, 2.5, 0.5]])
    rc, out, err = run_tool("trace_report.py", path)
    assert rc == 0, err
    assert "median F/B/W costs: bubble 25.0 %; the runtime added +8.3 points" in out, out
    assert "stage 1: F 1.500 ms, B 2.500 ms, W 0.500 ms" in out, out
    # Older traces have neither attribute: nothing is printed about it.
    rc, out, _ = run_tool("trace_report.py", hand_gpipe_trace(f"{tmp}/old.h5"))
    assert rc == 0 and "median F/B/W" not in out, out


def test_report_splits_what_the_runtime_added_by_the_replay(tmp):
    # A trace with a replay of each step at its own action times: the
    # report averages it over the timed steps (step 0 is skipped) and splits
    # measured - cost_bubble into the spread of action times (replay - cost)
    # and messages, progress and bookkeeping (measured - replay).
    path = hand_gpipe_trace(f"{tmp}/t.h5")
    with h5py.File(path, "a") as f:
        f.attrs["cost_bubble"] = 0.25
        f.attrs["action_costs_s"] = np.array([1e-3, 2e-3, 0.0, 1.5e-3, 2.5e-3, 0.5e-3])
        f.create_dataset("replay/step", data=np.array([0, 1], dtype=np.int64))
        f.create_dataset("replay/bubble", data=np.array([0.9, 0.3]))
    r = trace_report.analyse(load_trace(path), skip=1)
    assert r["bubble_replayed"] == 0.3
    rc, out, err = run_tool("trace_report.py", path)
    assert rc == 0, err
    assert ("replayed at each step's own F/B/W times: bubble 30.0 %; of what the runtime added: "
            "the spread of action times around their medians +5.0 points, messages, progress "
            "and bookkeeping +3.3 points") in out, out
    # A replay that lacks a timed step is not averaged.
    path = hand_gpipe_trace(f"{tmp}/partial.h5")
    with h5py.File(path, "a") as f:
        f.create_dataset("replay/step", data=np.array([0], dtype=np.int64))
        f.create_dataset("replay/bubble", data=np.array([0.9]))
    assert trace_report.analyse(load_trace(path), skip=1)["bubble_replayed"] is None
    # A malformed replay group is refused, naming the file.
    path = hand_gpipe_trace(f"{tmp}/bad.h5")
    with h5py.File(path, "a") as f:
        f.create_dataset("replay/step", data=np.array([0, 1], dtype=np.int64))
    rc, _, err = run_tool("trace_report.py", path)
    assert rc != 0 and "bad.h5: group 'replay' needs datasets 'step' and 'bubble'" in err, err


def test_simulated_schedules_match_theory(tmp):
    # With equal stages and no latency both schedules finish in (N+P-1)(F+B),
    # so the measured bubble is exactly (P-1)/(N+P-1); an evaluation pass
    # with a long nested WAIT after each step must not change it.
    for name in ("gpipe", "1f1b"):
        for p, n in ((2, 4), (4, 8)):
            path = simulated_trace(f"{tmp}/{name}{p}{n}.h5", name, [1.0] * p, [2.0] * p, n,
                                   steps=3, recompute=True, evaluate=True)
            r = trace_report.analyse(load_trace(path), skip=1)
            want = (p - 1) / (n + p - 1)
            assert abs(r["bubble"] - want) < 1e-9, (name, p, n, r["bubble"], want)


def test_imbalance_warning_mlp(tmp):
    # Stage 1 takes 3x stage 0 (F 1 vs 3, B 2 vs 6): imbalance 3. With 8
    # layers split [4, 4], per-layer cost is 3 on stage 0 and 9 on stage 1:
    # [3,3,3,3,9,9,9,9]; the best contiguous split is [5, 3] (21 vs 27).
    path = simulated_trace(f"{tmp}/imb.h5", "gpipe", [1.0, 3.0], [2.0, 6.0], 4)
    r = trace_report.analyse(load_trace(path), skip=1)
    assert abs(r["imbalance"] - 3.0) < 1e-9, r["imbalance"]
    assert r["current_partition"] == [4, 4] and r["suggested_partition"] == [5, 3], r
    assert np.allclose(r["suggested_compute_us_per_step"], [21 * MS, 27 * MS])
    rc, out, err = run_tool("trace_report.py", path)
    assert rc == 0 and "WARNING" in out and "pipeline.partition = [5, 3]" in out, out


def test_imbalance_warning_gpt_explicit_partition(tmp):
    # Explicit partition [2, 4] of 6 blocks, compute 12 vs 36 ms per step:
    # per-block cost 6 and 9 -> [6,6,9,9,9,9]; best split [3, 3] (21 vs 27).
    path = simulated_trace(f"{tmp}/gpt.h5", "1f1b", [1.0, 3.0], [2.0, 6.0], 4, deck=GPT_DECK)
    r = trace_report.analyse(load_trace(path), skip=1)
    assert r["current_partition"] == [2, 4] and r["suggested_partition"] == [3, 3], r
    assert "pipeline.partition = [3, 3]" in r["warning"]


def test_no_warning_below_limit(tmp):
    path = simulated_trace(f"{tmp}/ok.h5", "1f1b", [1.0, 1.4], [2.0, 2.8], 4)
    r = trace_report.analyse(load_trace(path), skip=1)
    assert abs(r["imbalance"] - 1.4) < 1e-9 and r["warning"] is None, r


def test_balanced_partition_unit():
    assert trace_report.balanced_partition([1, 1, 1, 1], 2) == [2, 2]
    assert trace_report.balanced_partition([5, 1, 1, 1, 1, 1], 2) == [1, 5]
    assert trace_report.balanced_partition([1, 2, 3], 3) == [1, 1, 1]


def test_schedules_report_pairs_repetitions():
    assert schedules_report.repetition_of("runs/bench_schedules_zb_mlp-even_1f1b_p2_n16_r12") == 12
    assert schedules_report.repetition_of("runs/other") == "runs/other"

    def rows(schedule, steps):
        return [{"model": "m", "schedule": schedule, "ranks": 2, "stages": 2, "n": 16, "theory": 0.0,
                 "bubble": 0.0, "at_costs": 0.0, "replayed": 0.0, "predicted_bubble": 0.0,
                 "step_s": t, "predicted_step_s": t, "peak_mib": 1.0, "act_mib": 1.0,
                 "runs": 1, "schedule_texts": [schedule], "steps_by_rep": {rep: t}}
                for rep, t in steps.items()]
    # the host slows down from repetition to repetition; ZB-H1 is 4% faster in each
    base = {1: 1.00, 2: 1.30, 3: 1.10, 4: 1.40}
    merged = schedules_report.merge_repeats(rows("1f1b", base) +
                                            rows("zb-h1", {r: 0.96 * t for r, t in base.items()}))
    by_schedule = {r["schedule"]: r for r in merged}
    gains = schedules_report.paired_gains(by_schedule["1f1b"], by_schedule["zb-h1"])
    assert np.allclose(gains, [0.04] * 4), gains
    # a repetition only one schedule ran in does not pair
    del by_schedule["zb-h1"]["steps_by_rep"][3]
    assert len(schedules_report.paired_gains(by_schedule["1f1b"], by_schedule["zb-h1"])) == 3
    # the table's achieved share is the paired median over the theory's gain
    by_schedule["1f1b"]["theory"], by_schedule["zb-h1"]["theory"] = 0.1, 0.0625
    line = schedules_report.zb_speedup(list(by_schedule.values())).splitlines()[2]
    theory = 1 - 0.9 / 0.9375
    assert f"| {0.04 / theory:.2f} | yes |" in line and "4.0% [+4.0, +4.0] of 3" in line, line


def test_planner_report_rechecks():
    def run(error, n=8, spread=1.0, shift=0.5):
        return {"deck": "gpt", "P": 2, "N": n, "schedule": "gpipe", "recompute": "none",
                "partition": "uniform", "step_error_pct": error, "probe_spread_pct": spread,
                "step_shift_pct": shift}
    # a miss reproduces when most of its reruns miss too, the same way
    assert planner_report.reproduces(run(-15.0), [run(-12.0), run(-11.0), run(-3.0)])
    assert not planner_report.reproduces(run(-15.0), [run(-12.0), run(-3.0), run(2.0)])
    assert not planner_report.reproduces(run(-15.0), [run(-12.0), run(3.0)])
    assert not planner_report.reproduces(run(+13.0), [run(-0.4), run(-10.7), run(-11.0)])
    kept = [run(-11.2), run(-3.0, n=4), run(+14.0, n=16)]
    reruns = [run(-2.0), run(-4.5), run(-12.5), run(+13.0, n=16), run(+12.0, n=16), run(1.0, n=16)]
    section = planner_report.rechecks_section(kept, reruns)
    lines = [line for line in section.splitlines() if line.startswith("| gpt")]
    assert len(lines) == 2, section  # the run within 10% has no reruns
    assert "| -11.2 | -2.0 -4.5 -12.5 |" in lines[0] and lines[0].endswith("| no |"), lines[0]
    assert "| +14.0 | +13.0 +12.0 +1.0 |" in lines[1] and lines[1].endswith("| yes |"), lines[1]
    sentence = planner_report.rechecks_sentence(kept, reruns)
    assert "in 1 of the 2 configurations" in sentence, sentence
    assert planner_report.rechecks_sentence(kept, []) == ""


def check_nesting(events):
    """Every (pid, tid) strictly nested: each event ends inside its parent."""
    lanes = {}
    for e in events:
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, evs in lanes.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 1e-9, (key, e)
            stack.append(end)
    return lanes


def test_chrome_export(tmp):
    path = simulated_trace(f"{tmp}/c.h5", "1f1b", [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 6,
                           recompute=True, evaluate=True, latency=0.4)
    rc, out, err = run_tool("trace_to_chrome.py", path, f"{tmp}/c.json")
    assert rc == 0, err
    with open(f"{tmp}/c.json") as fh:
        doc = json.load(fh)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for e in xs:
        for key in ("name", "ph", "ts", "dur", "pid", "tid"):
            assert key in e, (key, e)
        assert {"step", "mb", "kind"} <= set(e["args"]) and e["dur"] >= 0
    total = sum(len(ev) for ev in load_trace(path).events)
    assert len(xs) == total, (len(xs), total)
    lanes = check_nesting(xs)
    meta = {(e["pid"], e["tid"], e["name"]): e["args"]["name"]
            for e in doc["traceEvents"] if e["ph"] == "M" and "name" in e["args"]}
    # pid = stage + 1, tid 1 = compute, tid 2, 3, ... = communication lanes
    assert meta[(1, 1, "process_name")] == "stage 0 (rank 0)"
    assert meta[(3, 1, "process_name")] == "stage 2 (rank 2)"
    assert meta[(2, 1, "thread_name")] == "compute" and meta[(2, 2, "thread_name")] == "communication"
    assert all(e["pid"] >= 1 and e["tid"] >= 1 for e in doc["traceEvents"])
    comm_tids = {tid for (pid, tid) in lanes if pid == 2 and tid > 1}
    assert len(comm_tids) >= 2, comm_tids  # overlapping transfers need several lanes
    assert meta[(2, 3, "thread_name")] == "communication 2"
    kinds = {e["args"]["kind"] for e in xs if e["tid"] == 1}
    assert {"F", "B", "RECOMPUTE", "WAIT", "OPTIMIZER", "REDUCTION", "EVAL_F"} <= kinds, kinds
    assert {e["args"]["kind"] for e in xs if e["tid"] > 1} == {"SEND", "RECV"}
    assert all(e["args"]["stage"] == e["pid"] - 1 for e in xs)
    # RECOMPUTE and WAIT of a micro-batch sit inside an F or B of the same stage
    parents = [e for e in xs if e["args"]["kind"] in ("F", "B")]
    nested = [e for e in xs if e["args"]["kind"] == "RECOMPUTE" or (
        e["args"]["kind"] == "WAIT" and e["args"]["mb"] >= 0 and not in_eval(e, xs))]
    assert nested
    for e in nested:
        assert any(p["pid"] == e["pid"] and p["tid"] == e["tid"] and p["ts"] <= e["ts"]
                   and e["ts"] + e["dur"] <= p["ts"] + p["dur"] for p in parents), e


def in_eval(e, xs):
    return any(p["pid"] == e["pid"] and p["args"]["kind"] == "EVAL_F" and p["ts"] <= e["ts"]
               and e["ts"] + e["dur"] <= p["ts"] + p["dur"] for p in xs)


def test_chrome_trims_overhang(tmp):
    rows = [[(0, 0, "F", 0, 10), (0, 0, "WAIT", 5, 10.5), (0, 1, "F", 10.5, 12)]]
    doc, trimmed = trace_to_chrome.to_chrome(load_trace(write_trace(f"{tmp}/j.h5", rows, 2)))
    assert trimmed == 1
    check_nesting([e for e in doc["traceEvents"] if e["ph"] == "X"])


def test_timeline_png(tmp):
    path = simulated_trace(f"{tmp}/p.h5", "1f1b", [1.0, 1.2, 1.0, 1.1], [2.0, 2.2, 2.0, 2.1], 8,
                           steps=3, recompute=True, latency=0.1)
    for extra, out in (([], "last.png"), (["--step", "0:1"], "range.png"), (["--step", "1"], "one.png")):
        rc, stdout, err = run_tool("trace_timeline.py", path, f"{tmp}/{out}", *extra)
        assert rc == 0, err
        with open(f"{tmp}/{out}", "rb") as fh:
            data = fh.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, (out, len(data))
    rc, _, err = run_tool("trace_timeline.py", path, f"{tmp}/x.png", "--step", "99")
    assert rc != 0 and "99" in err and path in err, err


def test_errors_missing_and_invalid_files(tmp):
    missing = f"{tmp}/nowhere/trace.h5"
    bogus = f"{tmp}/bogus.h5"
    with open(bogus, "w") as fh:
        fh.write("not hdf5\n")
    empty = f"{tmp}/empty.h5"
    with h5py.File(empty, "w") as f:
        f.attrs["deck"] = ""
    calls = [("trace_report.py", []), ("trace_to_chrome.py", [f"{tmp}/o.json"]),
             ("trace_timeline.py", [f"{tmp}/o.png"])]
    for script, rest in calls:
        for path, words in ((missing, "no such file"), (bogus, "HDF5"), (empty, "events")):
            rc, out, err = run_tool(script, path, *rest)
            assert rc != 0, (script, path)
            assert path in err and words in err and "Traceback" not in err, (script, err)


def test_loader_fixed_length_attributes(tmp):
    # HDF5 C++ writers often store fixed-length strings and 1-element arrays.
    path = hand_gpipe_trace(f"{tmp}/t.h5")
    with h5py.File(path, "a") as f:
        f.attrs["deck"] = np.bytes_(MLP_DECK.encode())
        f.attrs["schedule_name"] = np.bytes_(b"gpipe")
        f.attrs["kind_names"] = np.bytes_(",".join(DEFAULT_KIND_NAMES).encode())
        f.attrs["num_stages"] = np.array([2], dtype=np.int64)
        f.attrs["num_micro_batches"] = np.array([2], dtype=np.int64)
    trace = load_trace(path)
    assert trace.schedule_name == "gpipe" and trace.num_stages == 2 and trace.num_micro_batches == 2
    assert trace.kind_names == DEFAULT_KIND_NAMES and trace.deck()["model"]["depth"] == 8
    assert abs(trace_report.analyse(trace, skip=1)["bubble"] - 1 / 3) < 1e-12


def test_report_skip_too_large(tmp):
    rc, _, err = run_tool("trace_report.py", hand_gpipe_trace(f"{tmp}/t.h5"), "--skip", "5")
    assert rc != 0 and "cannot skip 5" in err and "Traceback" not in err, err


def write_scaling_run(run_dir, step_bubbles, first_step=None, theory=None):
    """A run directory as jobs/scaling_study.sh leaves it: metrics.h5 with
    per-step figures (samples/s = 10 x the step index, so the median names
    the steps counted) and, when theory is given, a trace.h5 carrying it."""
    os.makedirs(run_dir)
    steps = len(step_bubbles)
    with h5py.File(f"{run_dir}/metrics.h5", "w") as f:
        f["samples_per_s"] = 10.0 * np.arange(steps)
        f["bubble"] = np.asarray(step_bubbles, dtype=np.float64)
        f["peak_bytes_activations"] = np.full((steps, 2), 2.0 * 1024 * 1024)
        f["peak_bytes_total"] = np.full((steps, 2), 3.0 * 1024 * 1024)
        if first_step is not None:
            f.attrs["schedule_first_step"] = np.int64(first_step)
    if theory is not None:
        with h5py.File(f"{run_dir}/trace.h5", "w") as f:
            f.attrs["theory_bubble"] = np.float64(theory)


def test_scaling_report_theory_and_placed_steps(tmp):
    # zb-v placed again from step 3: steps 0-2 are left out even with --skip 2;
    # its theory comes from the trace, 1f1b's (untraced) from (P-1)/(N+P-1)
    write_scaling_run(f"{tmp}/zbv", [0.9, 0.9, 0.9, 0.1, 0.2, 0.3], first_step=3, theory=0.04)
    write_scaling_run(f"{tmp}/f1b", [0.9, 0.9, 0.3, 0.3, 0.3, 0.3])
    rc, _, err = run_tool("scaling_report.py", f"{tmp}/out", f"2,4,zb-v,none,{tmp}/zbv",
                          f"2,4,1f1b,none,{tmp}/f1b")
    assert rc == 0, err
    with open(f"{tmp}/out.csv") as fh:
        rows = {r["schedule"]: r for r in csv.DictReader(fh)}
    zbv, f1b = rows["zb-v"], rows["1f1b"]
    assert abs(float(zbv["bubble_measured"]) - 0.2) < 1e-12, zbv
    assert float(zbv["samples_per_s"]) == 40.0 and float(zbv["bubble_theory"]) == 0.04, zbv
    assert float(f1b["samples_per_s"]) == 35.0 and abs(float(f1b["bubble_theory"]) - 0.2) < 1e-12, f1b
    assert float(f1b["peak_total_mib"]) == 3.0
    for plot in ("throughput", "bubble", "memory"):
        assert os.path.getsize(f"{tmp}/out_{plot}.png") > 0


def test_scaling_report_needs_a_trace_for_new_schedules(tmp):
    write_scaling_run(f"{tmp}/zbh1", [0.1] * 4)
    rc, _, err = run_tool("scaling_report.py", f"{tmp}/out", f"2,4,zb-h1,none,{tmp}/zbh1")
    assert rc != 0 and f"{tmp}/zbh1/trace.h5" in err and "theory_bubble" in err, err
    assert "Traceback" not in err, err


def write_auto_run(d, step_ms, schedule, partition):
    """A finished run of jobs/bench_auto.sh: metrics.h5 and deck.resolved.toml."""
    os.makedirs(d)
    with h5py.File(f"{d}/metrics.h5", "w") as f:
        f["step_time_s"] = np.array([1.0, 1.0] + [step_ms / MS] * 4)  # 2 warm-up steps
        f["peak_bytes_total"] = np.array([1e6] * 6)
    with open(f"{d}/deck.resolved.toml", "w") as f:
        f.write(f'[pipeline]\nschedule = "{schedule}"  # s\nmicro_batches = 4  # n\n'
                f'recompute = "none"  # r\npartition = {partition}  # p\nweight_grad = "micro_batch"  # w\n'
                "[data_parallel]\nreplicas = 1  # d\n")


def make_auto_case(tmp):
    """An empty case directory of jobs/bench_auto.sh with its plan table's budget line."""
    case = f"{tmp}/c"
    os.makedirs(case)
    with open(f"{case}/plan.txt", "w") as f:
        f.write("memory budget 1.0 GB (test)\n")
    return case


def write_auto_log(case, r):
    """Round r's auto log, with the rank count and budget report_case reads."""
    with open(f"{case}/auto.r{r}.log", "w") as f:
        f.write("pipetrain: 2 ranks\nauto: chose ... (budget 12.5 MiB)\n")


def test_auto_report_best_from_confirmation_runs(tmp):
    """The best configuration comes from its re-runs alone: config 1's lucky
    sweep run (5 ms) does not count, its re-runs (7, 9, 10 ms: median 9) do,
    so config 2 (8.5 ms re-runs) is the best, where counting the sweep run
    too would make config 1 the best (median 8); the sweep's fastest single
    run is reported beside; auto's gap is against the re-run best."""
    case = make_auto_case(tmp)
    write_auto_run(f"{case}/sweep_1", 5.0, "1f1b", "[4, 4]")
    write_auto_run(f"{case}/sweep_2", 9.0, "gpipe", "[3, 5]")
    write_auto_run(f"{case}/sweep_3", 12.0, "1f1b", "[2, 6]")
    assert auto_report.fastest(case, 2) == [1, 2]
    for r, config_1_ms in ((1, 7.0), (2, 9.0), (3, 10.0)):
        write_auto_run(f"{case}/sweep_1.r{r}", config_1_ms, "1f1b", "[4, 4]")
        write_auto_run(f"{case}/sweep_2.r{r}", 8.5, "gpipe", "[3, 5]")
        write_auto_run(f"{case}/auto.r{r}", 8.6, "gpipe", "[3, 5]")
        write_auto_log(case, r)
    row = auto_report.report_case(tmp, "c")
    assert row["best"] == "gpipe N=4 recompute none, partition [3,5]", row["best"]
    assert abs(row["best_s"] - 8.5e-3) < 1e-12 and row["best_runs"] == 3, row
    assert abs(row["fastest_single_s"] - 5e-3) < 1e-12, row
    assert abs(row["gap"] - (8.6 / 8.5 - 1.0)) < 1e-9, row
    assert abs(row["chosen_in_sweep_s"] - 8.5e-3) < 1e-12, row
    assert row["auto_runs"] == 3 and row["fits"] and row["plans"] == 3, row


def test_auto_report_paired_gap_and_spread(tmp):
    """The paired gap compares auto with the best configuration round by
    round: re-runs 8, 12, 10 ms against auto's 8.4, 12.6, 9.0 give +5%, +5%,
    -10%, median +5%, where the medians (9.0 against 10) give -10%; the
    spread is the best configuration's 12 / 8 - 1."""
    case = make_auto_case(tmp)
    write_auto_run(f"{case}/sweep_1", 9.0, "gpipe", "[3, 5]")
    write_auto_run(f"{case}/sweep_2", 19.0, "1f1b", "[4, 4]")
    for r, best_ms, auto_ms in ((1, 8.0, 8.4), (2, 12.0, 12.6), (3, 10.0, 9.0)):
        write_auto_run(f"{case}/sweep_1.r{r}", best_ms, "gpipe", "[3, 5]")
        write_auto_run(f"{case}/sweep_2.r{r}", 20.0, "1f1b", "[4, 4]")
        write_auto_run(f"{case}/auto.r{r}", auto_ms, "gpipe", "[3, 5]")
        write_auto_log(case, r)
    row = auto_report.report_case(tmp, "c")
    assert row["best"] == "gpipe N=4 recompute none, partition [3,5]", row["best"]
    assert abs(row["gap"] - (9.0 / 10.0 - 1.0)) < 1e-9, row
    assert abs(row["paired_gap"] - 0.05) < 1e-9, row
    assert abs(row["best_spread"] - 0.5) < 1e-9, row


def test_balance_report_errors_run_by_run():
    """Each run's own error, over all runs and over the steady ones apart:
    errors +4%, -30% (unsteady), +2%, -8% give all: median 6%, worst 30%;
    steady: median 4%, worst 8%. The rows' line still uses the medians."""
    def row(label, errors):
        return {"label": label, "partition": "[1, 2]", "throughput": 100.0,
                "predicted_throughput": 100.0 * (1.0 + float(np.median([e for e, _ in errors]))),
                "runs": 2, "spread": 0.1, "run_errors": errors}
    rows = [row("k1", [(0.04, True), (-0.30, False)]), row("k2", [(0.02, True), (-0.08, True)])]
    line = balance_report.error_summary(rows)
    assert "median 6.0%, worst 30.0% over all 4 runs" in line, line
    assert "median 4.0%, worst 8.0% over the 3 steady ones" in line, line
    assert "1 runs saw the host's speed change by more" in line, line
    unsteady = [row("k1", [(0.04, False), (0.30, False)])]
    assert "none was steady" in balance_report.error_summary(unsteady)


def test_balance_report_plot_and_seeds(tmp):
    """--seeds reads label=percent and names a bad entry; --plot writes a PNG
    from the grouped rows (strategies and every partition, runs' ranges)."""
    assert balance_report.parse_seeds("uniform=82, time=91") == {"uniform": 0.82, "time": 0.91}
    try:
        balance_report.parse_seeds("uniform=82,time")
        raise AssertionError("a seed without a value was accepted")
    except SystemExit as e:
        assert "--seeds entry 'time': expected label=percent" in str(e), e
    try:
        balance_report.parse_seeds("=82")
        raise AssertionError("a seed without a label was accepted")
    except SystemExit as e:
        assert "--seeds entry '=82': expected label=percent" in str(e), e

    def run(label, partition, throughput, util):
        return {"model": "m", "label": label, "partition": partition, "throughput": throughput,
                "predicted_throughput": throughput * 1.01, "predicted_util": [0.8, 0.7],
                "util": util, "run_error": 0.01, "steady": True}
    rows = [run("uniform", "[1, 2]", 90.0, [0.9, 0.5]), run("balanced", "[2, 1]", 100.0, [0.8, 0.8]),
            run("k1", "[1, 2]", 91.0, None), run("k1", "[1, 2]", 89.0, None),
            run("k2", "[2, 1]", 101.0, None), run("k2", "[2, 1]", 99.0, None)]
    path = os.path.join(tmp, "plot.png")
    balance_report.plot({"m": rows}, path, {"uniform": 0.82})
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    passed = failed = 0
    for name, fn in tests:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                fn(tmp) if fn.__code__.co_argcount else fn()
                passed += 1
                print(f"ok   {name}")
            except Exception:  # noqa: BLE001 - report every failure and go on
                failed += 1
                print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
