#!/usr/bin/env bash
# bench_rebalance_move.sh: how long a rebalancing move takes. A GPT of 16
# blocks of width 512 (inputs/bench_rebalance_move_gpt.toml, about 50 M
# parameters) trains on 2 ranks; after step 2 the fault hook
# PIPETRAIN_TEST_REBALANCE forces the move [8, 8] -> [12, 4]: rank 1 sends 4
# blocks' values and AdamW moments, rank 0 builds only those 4 blocks
# (uninitialised) and receives them. The time is the move's wall time on
# rank 0 as pipetrain prints it, with the tensors and bytes it sent; the
# median (min-max) of REPS runs, beside the median step time of the same runs.
# Writes results/bench_rebalance_move.md, naming the CPU, the BLAS kernels,
# the GEMM library and the load average.
#   jobs/bench_rebalance_move.sh          (BUILD=build-dir, REPS=n)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BUILD=${BUILD:-build}
DECK=inputs/bench_rebalance_move_gpt.toml
OUT=${OUT:-runs/bench_rebalance_move}
REPS=${REPS:-5}
mkdir -p "$OUT" results
median_range() {  # "median (min-max)" of the numbers on stdin, printf format $1
  sort -g | awk -v f="$1" '{a[NR] = $1}
    END {printf f " (" f "-" f ")", a[int((NR + 1) / 2)], a[1], a[NR]}'
}
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$OUT/move_s"; : > "$OUT/step_ms"
for rep in $(seq 1 "$REPS"); do
  log=$OUT/rep$rep.log
  PIPETRAIN_TEST_REBALANCE=1:12,4 mpirun --oversubscribe --bind-to none -np 2 \
    "$BUILD/pipetrain" train "$DECK" --set output.dir=\"$OUT/rep$rep\" > "$log" 2>&1 ||
    { cat "$log"; exit 1; }
  line=$(grep -m1 "rebalance after step 2: partition \[8, 8\] -> \[12, 4\]" "$log") ||
    { echo "bench_rebalance_move: no move in $log" >&2; exit 1; }
  echo "$line" | grep -o 'in [0-9.]* s' | awk '{print $2}' >> "$OUT/move_s"
  grep -E '^step +[1-4]/' "$log" | grep -o '[0-9.]* ms' | awk '{print $1}' >> "$OUT/step_ms"
done
sent=$(echo "$line" | grep -o '[0-9]* tensors, [0-9.]* MB sent')
blas=$(grep -m1 "^BLAS (ranks" "$OUT/rep1.log" || echo "BLAS: (not printed)")
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cat > results/bench_rebalance_move.md <<MD
# A rebalancing move's time

\`jobs/bench_rebalance_move.sh\`, $(date -u +%Y-%m-%d): a GPT of 16 blocks of width 512
(\`inputs/bench_rebalance_move_gpt.toml\`, about 50 M parameters, AdamW) on 2 ranks; after
step 2 the fault hook \`PIPETRAIN_TEST_REBALANCE=1:12,4\` forces the move [8, 8] -> [12, 4].
Rank 1 sends 4 blocks (values and both AdamW moments); rank 0 builds only those blocks,
uninitialised, and receives them ([rebalance.md](../docs/rebalance.md#limits)).

- **Machine:** $cpu, $(nproc) cores, load average $load_start at the start.
- **Kernels:** $blas
- **Runs:** $REPS, each a fresh job; median (min-max).

| move | sent | move time on rank 0 (s) | step time of the same runs (ms) |
|---|---|---:|---:|
| [8, 8] -> [12, 4] | $sent | $(median_range '%.3f' < "$OUT/move_s") | $(median_range '%.1f' < "$OUT/step_ms") |

Before #40's defect 2.5 a move built and initialised the whole new stage and then overwrote
it; the same move then took 3.7 to 6.7 s in a one-off measurement on this kind of machine.
MD
cat results/bench_rebalance_move.md
