#!/usr/bin/env bash
# bench_cnn_partition.sh: the seeds' partition table on a convolutional
# network (issue #46). The seeds measure device utilisation of an image
# classifier's pipeline under uniform 82%, compute-balanced 91% and
# memory-balanced 78% partitions. Here, on the cnn family
# (inputs/bench_cnn_partition.toml: 9 residual blocks whose cost and memory
# change from one end of the network to the other):
#   P = 2, measured: jobs/bench_balance.sh on the deck (uniform, time,
#     memory and balanced strategies traced: utilisation = busy / span per
#     stage; every contiguous partition [k, 9 - k] for the best one);
#   P = 4 and 8, predicted: `pipetrain plan --ranks P` (profiles measured on
#     the 2 ranks at hand, 1F1B, N = 8): step time, throughput and bubble per
#     partition objective.
# Writes results/bench_cnn_partition.md and its plot results/bench_cnn_partition.png
# (and the P = 2 runs' table).
#   jobs/bench_cnn_partition.sh        (needs build/ and tools/.venv: make build tools)
#   REPS=1 jobs/bench_cnn_partition.sh (one run per partition; the default,
#                                       3, runs each 3 times in rounds and
#                                       takes medians: the runs of one
#                                       partition differ by several percent
#                                       on a shared 2-core host)
#   REPORT_ONLY=1 jobs/bench_cnn_partition.sh  (the report again from the runs
#                                       made last: runs/bench_balance, runs/bench_cnn_partition)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deck=inputs/bench_cnn_partition.toml
out=results/bench_cnn_partition.md
work=runs/bench_cnn_partition
mkdir -p "$work" results
export REPS=${REPS:-3}
MODELS=bench_cnn_partition OUT="$work/p2.md" PLOT=results/bench_cnn_partition.png \
  SEEDS="uniform=82,time=91,memory=78" jobs/bench_balance.sh > /dev/null
if [ -z "${REPORT_ONLY:-}" ]; then
  for p in 4 8; do
    mpirun --oversubscribe --bind-to none -np 2 build/pipetrain plan "$deck" --ranks "$p" \
      --set data_parallel.replicas=1 --schedules 1f1b --micro-batches 8 --top 100 < /dev/null \
      > "$work/plan_p$p.txt" 2>&1
  done
fi
{
  echo "# The seeds' partition table on the cnn family (jobs/bench_cnn_partition.sh)"
  echo
  echo "The seeds' figures, for an ImageNet classifier: device utilisation 82% (uniform), 91%"
  echo "(compute-balanced), 78% (memory-balanced). Here: \`time\` is the compute-balanced"
  echo "partition, \`memory\` the memory-balanced one, \`balanced\` the fastest within the memory"
  echo "budget (docs/planner.md). Measured at P = 2; predicted by the planner at P = 4 and 8."
  echo
  echo "![utilisation per strategy and throughput per partition](bench_cnn_partition.png)"
  tail -n +2 "$work/p2.md"
  for p in 4 8; do
    echo
    echo "## P = $p, predicted (\`pipetrain plan --ranks $p\`, 1F1B, N = 8, profiles measured on 2 ranks)"
    echo
    echo "| partition objective | units per stage | step (ms) | samples/s | bubble | mean utilisation (1 - bubble) |"
    echo "|---|---|---:|---:|---:|---:|"
    awk '$4 == "1f1b" && $5 == 8 && $7 == "none" && !seen[$8]++ {
           units = ""; for (i = 16; i <= NF; i++) units = units (units == "" ? "" : " ") $i
           printf "| %s | %s | %s | %s | %.1f%% | %.1f%% |\n", $8, units, $9, $10, 100 * $11, 100 * (1 - $11) }' \
      "$work/plan_p$p.txt"
  done
} > "$out"
cat "$out"
