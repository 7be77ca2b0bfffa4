#!/usr/bin/env python3
"""run_row.py: one CSV row of jobs/bench_peer.sh from a finished run.

    run_row.py pipetrain RUN_DIR/metrics.h5 --workload W --procs P --rep R --batch B --warmup K --load L --other C
    run_row.py pipetrain-step ...  (the same, a run with pipeline.weight_grad = "step")
    run_row.py peer      RUN.json           --workload W --procs P --rep R --warmup K --load L --other C

Columns: workload, program, procs, rep, batch, warmup, steps (timed),
median_step_s, samples_per_s, first_loss, last_loss, load1_before,
other_cores (cores busy with other processes during the run). The step
time is the median over the steps after the first --warmup ones.
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program", choices=("pipetrain", "pipetrain-step", "peer"))
    ap.add_argument("path", help="pipetrain: metrics.h5; peer: the --out JSON")
    for name in ("--workload", "--procs", "--rep", "--warmup", "--load", "--other"):
        ap.add_argument(name, required=True)
    ap.add_argument("--batch", type=int, help="pipetrain: the batch size")
    args = ap.parse_args()
    warmup = int(args.warmup)
    if args.program.startswith("pipetrain"):
        import h5py
        with h5py.File(args.path, "r") as f:
            times = [float(t) for t in f["step_time_s"]]
            loss = [float(x) for x in f["loss"]]
        batch = args.batch
    else:
        with open(args.path) as f:
            s = json.load(f)
        times, loss, batch = s["step_time_s"], s["loss"], int(s["batch_size"])
    timed = times[warmup:]
    if not timed:
        sys.exit(f"run_row: {args.path}: {len(times)} steps, none after {warmup} warm-up steps")
    t = statistics.median(timed)
    print(f"{args.workload},{args.program},{args.procs},{args.rep},{batch},{warmup},{len(timed)},"
          f"{t:.6f},{batch / t:.2f},{loss[0]:.6f},{loss[-1]:.6f},{args.load},{args.other}")


if __name__ == "__main__":
    main()
