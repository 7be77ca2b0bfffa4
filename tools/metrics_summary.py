#!/usr/bin/env python3
"""metrics_summary.py: summarise a run's metrics.h5 (see docs/outputs.md).

    tools/.venv/bin/python tools/metrics_summary.py runs/mlp/metrics.h5 [--skip 2] [--json]

Prints steps, first/last loss and the mean throughput over the steps after
the first --skip (warm-up) steps.
"""
import argparse
import json
import sys

import h5py
import numpy as np


def summarise(path, skip):
    with h5py.File(path, "r") as f:
        loss = np.asarray(f["loss"], dtype=np.float64)
        step_time = np.asarray(f["step_time_s"], dtype=np.float64)
        samples_per_s = np.asarray(f["samples_per_s"], dtype=np.float64)
    if len(loss) <= skip:
        sys.exit(f"{path}: only {len(loss)} steps, cannot skip {skip}")
    timed = step_time[skip:]
    return {
        "steps": int(len(loss)),
        "first_loss": float(loss[0]),
        "last_loss": float(loss[-1]),
        "timed_steps": int(len(timed)),
        "mean_step_time_s": float(timed.mean()),
        "median_step_time_s": float(np.median(timed)),
        "mean_samples_per_s": float(samples_per_s[skip:].mean()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="path to metrics.h5")
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps to leave out")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    summary = summarise(args.metrics, args.skip)
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value}")


if __name__ == "__main__":
    main()
