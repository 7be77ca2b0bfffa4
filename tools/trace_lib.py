"""trace_lib.py: loading a pipetrain trace.h5 (layout in docs/outputs.md).

Shared by trace_to_chrome.py, trace_timeline.py and trace_report.py:

    from trace_lib import load_trace, TraceError
    trace = load_trace("runs/mlp/trace.h5")
    for rank, ev in enumerate(trace.events):      # numpy structured arrays
        print(rank, ev["kind"], ev["start_us"], ev["end_us"])

Every problem with the file (missing, not HDF5, not a trace) raises
TraceError whose message names the file; scripts turn it into an error exit.
"""
import os
import sys
import tomllib
from dataclasses import dataclass, field

import h5py
import numpy as np

DEFAULT_KIND_NAMES = ["F", "B", "RECOMPUTE", "WAIT", "SEND", "RECV",
                      "OPTIMIZER", "REDUCTION", "EVAL_F", "REBALANCE", "W",
                      "CKPT_STAGE", "CKPT_WAIT", "REPLAN"]
EVENT_FIELDS = ["step", "stage", "mb", "kind", "start_us", "end_us"]
EVENT_DTYPE = np.dtype([("step", "<i8"), ("stage", "<i4"), ("mb", "<i4"),
                        ("kind", "<i4"), ("start_us", "<f8"), ("end_us", "<f8")])


class TraceError(Exception):
    """A trace file that cannot be used; the message names the file."""


@dataclass
class Trace:
    path: str
    events: list                 # per rank: structured array with EVENT_FIELDS
    kind_names: list             # kind code -> name
    num_stages: int
    num_micro_batches: int
    schedule_name: str = ""
    schedule: str = ""
    deck_text: str = ""
    clock_offset_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    clock_error_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    theory_bubble: float = None  # the schedule's unit-time bubble (newer traces)
    cost_bubble: float = None    # the schedule at this run's median action costs (newer traces)
    action_costs_s: np.ndarray = None  # (stages, 3): median F, B, W seconds behind cost_bubble
    schedule_first_step: int = 0  # the schedule ran from this step on (pipeline.schedule_times = "measured")
    replay_steps: np.ndarray = None   # (k,) steps replayed at their own action times (newer traces)
    replay_bubble: np.ndarray = None  # (k,) the schedule's bubble in each of those steps' replay

    @property
    def num_ranks(self):
        return len(self.events)

    def code(self, name):
        """Kind code of a kind name, or -1 when the trace has no such kind."""
        return self.kind_names.index(name) if name in self.kind_names else -1

    def kind_name(self, code):
        return self.kind_names[code] if 0 <= code < len(self.kind_names) else f"KIND{code}"

    def steps(self):
        """Sorted distinct step numbers over all ranks."""
        all_steps = [ev["step"] for ev in self.events if len(ev)]
        return sorted(set(np.concatenate(all_steps).tolist())) if all_steps else []

    def stage_of_rank(self, rank):
        ev = self.events[rank]
        return int(ev["stage"][0]) if len(ev) else rank

    def deck(self):
        """The resolved deck as a dict ({} when absent or unparsable)."""
        try:
            return tomllib.loads(self.deck_text) if self.deck_text else {}
        except tomllib.TOMLDecodeError:
            return {}


def _text(value):
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.shape == (1,):
        return _text(value[0])
    return str(value)


def _scalar_int(attrs, key, fallback):
    if key not in attrs:
        return fallback
    return int(np.asarray(attrs[key]).reshape(-1)[0])


def _float_array(attrs, key, n):
    if key not in attrs:
        return np.zeros(n)
    return np.asarray(attrs[key], dtype=np.float64).reshape(-1)


def _rank_datasets(path, group):
    names = [k for k in group.keys() if k.startswith("rank_") and k[5:].isdigit()]
    if not names:
        raise TraceError(f"{path}: group 'events' has no rank_<N> datasets")
    ranks = sorted(int(k[5:]) for k in names)
    if ranks != list(range(len(ranks))):
        raise TraceError(f"{path}: events/rank_<N> datasets are not numbered 0..{len(ranks) - 1}: {ranks}")
    return [group[f"rank_{r}"] for r in ranks]


def _read_events(path, ds):
    names = ds.dtype.names or ()
    missing = [f for f in EVENT_FIELDS if f not in names]
    if missing:
        raise TraceError(f"{path}: {ds.name} lacks field(s) {', '.join(missing)}")
    raw = ds[()]
    ev = np.empty(len(raw), dtype=EVENT_DTYPE)
    for f in EVENT_FIELDS:
        ev[f] = raw[f]
    return ev[np.argsort(ev["start_us"], kind="stable")]


def _read_replay(path, f):
    """(steps, bubbles) of the 'replay' group, or (None, None) without one."""
    if "replay" not in f:
        return None, None
    g = f["replay"]
    if not isinstance(g, h5py.Group) or "step" not in g or "bubble" not in g:
        raise TraceError(f"{path}: group 'replay' needs datasets 'step' and 'bubble'")
    steps = np.asarray(g["step"][()], dtype=np.int64).reshape(-1)
    bubbles = np.asarray(g["bubble"][()], dtype=np.float64).reshape(-1)
    if len(steps) != len(bubbles):
        raise TraceError(f"{path}: replay/step has {len(steps)} entries, replay/bubble {len(bubbles)}")
    return steps, bubbles


def load_trace(path):
    """Reads a whole trace.h5 into a Trace; raises TraceError naming the file."""
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise TraceError(f"{path}: not a regular file")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise TraceError(f"{path}: not a readable HDF5 file ({err})") from None
    with f:
        if "events" not in f or not isinstance(f["events"], h5py.Group):
            raise TraceError(f"{path}: no 'events' group (not a pipetrain trace.h5?)")
        events = [_read_events(path, ds) for ds in _rank_datasets(path, f["events"])]
        a = f.attrs
        kinds = _text(a["kind_names"]).split(",") if "kind_names" in a else DEFAULT_KIND_NAMES
        max_mb = max((int(ev["mb"].max()) for ev in events if len(ev)), default=-1)
        replay_steps, replay_bubble = _read_replay(path, f)
        return Trace(
            path=path, events=events, kind_names=[k.strip() for k in kinds],
            num_stages=_scalar_int(a, "num_stages", len(events)),
            num_micro_batches=_scalar_int(a, "num_micro_batches", max_mb + 1),
            schedule_name=_text(a["schedule_name"]) if "schedule_name" in a else "",
            schedule=_text(a["schedule"]) if "schedule" in a else "",
            deck_text=_text(a["deck"]) if "deck" in a else "",
            clock_offset_us=_float_array(a, "clock_offset_us", len(events)),
            clock_error_us=_float_array(a, "clock_error_us", len(events)),
            theory_bubble=float(np.ravel(a["theory_bubble"])[0]) if "theory_bubble" in a else None,
            cost_bubble=float(np.ravel(a["cost_bubble"])[0]) if "cost_bubble" in a else None,
            action_costs_s=(np.asarray(a["action_costs_s"], dtype=np.float64).reshape(-1, 3)
                            if "action_costs_s" in a else None),
            schedule_first_step=_scalar_int(a, "schedule_first_step", 0),
            replay_steps=replay_steps, replay_bubble=replay_bubble)


def load_or_exit(path, prog):
    """load_trace, turning a TraceError into 'prog: error: message' and exit 1."""
    try:
        return load_trace(path)
    except TraceError as err:
        sys.exit(f"{prog}: error: {err}")


def parse_step_range(text, steps, path):
    """'K' or 'A:B' (inclusive) or None (the last step) -> list of steps present."""
    if not steps:
        raise TraceError(f"{path}: the trace has no events")
    if text is None:
        return [steps[-1]]
    try:
        lo, _, hi = text.partition(":")
        first, last = int(lo), int(hi) if hi else int(lo)
    except ValueError:
        raise TraceError(f"--step {text!r}: expected K or A:B") from None
    chosen = [s for s in steps if first <= s <= last]
    if not chosen:
        raise TraceError(f"{path}: no events in step(s) {text} (steps {steps[0]}..{steps[-1]})")
    return chosen
