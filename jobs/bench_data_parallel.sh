#!/usr/bin/env bash
# bench_data_parallel.sh: data parallel x pipeline on this machine
# (docs/data-parallel.md): strong and weak scaling of P x D grids.
#
# Strong scaling: the global batch fixed (each deck's batch_size), the
# micro-batch size fixed too (D x N constant): 1x1, then the 2-rank grids
# 2x1 (pipeline) and 1x2 (data parallel) that fit the 2 cores, then the
# 4-rank grids 4x1, 2x2, 1x4, OVERSUBSCRIBED (4 ranks on 2 cores: labelled
# so in the table; they measure correctness of the overlap more than speed).
# Weak scaling: the batch per replica fixed, the global batch D x B: 1x1,
# 1x2, then 2x2 and 1x4 oversubscribed. One BLAS thread per rank,
# data_parallel.reduction = "replica" (the default), the median step time after WARMUP
# steps, the best of REPEATS runs. Writes results/bench_data_parallel.md.
#   jobs/bench_data_parallel.sh                 (the full run, a quiet machine)
#   TINY=1 jobs/bench_data_parallel.sh          (seconds: proves the script works)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-2}
REPEATS=${REPEATS:-3}
out=${OUT:-results/bench_data_parallel.md}
# deck:global batch:micro-batches of a single pipeline (N x D stays this)
CASES=${CASES:-"inputs/bench_mlp.toml:512:8 inputs/gpt_markov.toml:32:8"}
if [ "${TINY:-0}" = 1 ]; then
  STEPS=4; WARMUP=1; REPEATS=1
  out=${OUT:-runs/bench_data_parallel_tiny.md}
  CASES="inputs/mlp_small.toml:16:4 inputs/gpt_markov.toml:16:4"
fi
cores=$(nproc)

median_ms() {  # median_ms NP DECK BATCH P D N: best-of-REPEATS median step time (ms)
  local np=$1 deck=$2 batch=$3 p=$4 d=$5 n=$6 best=""
  local dir="runs/bench_dp_$(basename "$deck" .toml)_${p}x${d}_b$batch"
  mkdir -p "$dir"
  for _ in $(seq "$REPEATS"); do
    mpirun --oversubscribe --bind-to none -np "$np" build/pipetrain train "$deck" \
      --set training.steps="$STEPS" --set training.warmup_steps=0 \
      --set training.batch_size="$batch" --set training.blas_threads=1 \
      --set training.eval_every=0 --set pipeline.predict=false \
      --set data_parallel.replicas="$d" --set pipeline.micro_batches="$n" \
      --set output.log_every=1 --set output.dir=\"$dir\" > "$dir.log" 2>&1 ||
      { tail -20 "$dir.log"; exit 1; }
    t=$(grep '^step ' "$dir.log" | tail -n +"$((WARMUP + 1))" |
        sed -E 's/.*\| +([0-9.]+) ms.*/\1/' | sort -g |
        awk '{v[NR]=$1} END {if (NR == 0) exit 1; print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}')
    best=$(awk -v a="$t" -v b="${best:-1e300}" 'BEGIN {print (a < b) ? a : b}')
  done
  echo "$best"
}

row() {  # row KIND DECK BATCH P D N BASE_MS BASE_BATCH
  local kind=$1 deck=$2 batch=$3 p=$4 d=$5 n=$6 base=$7 base_batch=$8
  local np=$((p * d)) note="fits the $cores cores"
  [ "$np" -gt "$cores" ] && note="OVERSUBSCRIBED: $np ranks on $cores cores"
  local ms; ms=$(median_ms "$np" "$deck" "$batch" "$p" "$d" "$n")
  awk -v k="$kind" -v deck="$(basename "$deck" .toml)" -v b="$batch" -v p="$p" -v d="$d" \
      -v n="$n" -v ms="$ms" -v base="${base:-$ms}" -v bb="$base_batch" -v np="$np" -v note="$note" \
    'BEGIN {
       rate = b / (ms / 1e3); base_rate = bb / (base / 1e3);
       printf "| %s | %s | %dx%d | %d | %d | %d | %.1f | %.1f | %.2f | %.0f%% | %s |\n",
              deck, k, p, d, b, n, b / (d * n), ms, rate, rate / base_rate, 100 * rate / base_rate / np, note
     }'
  echo "$ms" > "$tmp_ms"
}

tmp_ms=$(mktemp)
trap 'rm -f "$tmp_ms"' EXIT
mkdir -p runs "$(dirname "$out")"
{
  echo "# Data parallel x pipeline: strong and weak scaling (CPU backend)"
  echo
  echo "Command: \`jobs/bench_data_parallel.sh\`${TINY:+ (TINY=1: a proof that the script works, not a measurement)};"
  echo "$STEPS steps, median step time after $WARMUP warm-up steps, best of $REPEATS runs; one BLAS"
  echo "thread per rank; data_parallel.reduction = \"replica\"; 1F1B."
  echo
  tools/.venv/bin/python tools/run_identity.py "$(ls -d runs/bench_dp_*_1x1_* | head -1)/metrics.h5"
  echo
  echo "Strong scaling keeps the global batch and the micro-batch size (N x D fixed);"
  echo "weak scaling keeps each replica's batch (global batch D x B). Speedup is samples/s"
  echo "over the 1x1 run of the same kind; efficiency is speedup / ranks. Rows with more"
  echo "ranks than cores are oversubscribed and say so: they cannot scale here."
  echo
  echo "| deck | scaling | P x D | global batch | N | rows per micro-batch | step (ms) | samples/s | speedup | efficiency | ranks vs cores |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
} > "$out"

for c in $CASES; do
  IFS=: read -r deck batch n1 <<< "$c"
  # Strong scaling.
  row strong "$deck" "$batch" 1 1 "$n1" "" "$batch" >> "$out"; base=$(cat "$tmp_ms")
  for pd in "2 1" "1 2" "4 1" "2 2" "1 4"; do
    read -r p d <<< "$pd"
    row strong "$deck" "$batch" "$p" "$d" "$((n1 / d))" "$base" "$batch" >> "$out"
  done
  # Weak scaling: each replica keeps the 1x1 batch and N.
  row weak "$deck" "$batch" 1 1 "$n1" "" "$batch" >> "$out"; base=$(cat "$tmp_ms")
  for pd in "1 2" "2 2" "1 4"; do
    read -r p d <<< "$pd"
    row weak "$deck" "$((batch * d))" "$p" "$d" "$n1" "$base" "$batch" >> "$out"
  done
done
cat "$out"
