#!/usr/bin/env bash
# bench_gemm_limits.sh: pipetrain's MLP throughput against two GEMM limits
# (#12), without the PyTorch peer (jobs/bench_peer.sh has both):
#   - the warm limit: the deck's micro-batch GEMMs replayed on one set of
#     buffers (every operand in cache when it fits), the limit #12 defines;
#   - the model-buffer limit: the same calls on buffers laid out as the
#     model's own matrices, streaming its whole footprint as training does.
# Each repetition runs build/bench_gemm, then pipetrain on 1 and on 2 ranks
# (1F1B, N = 8, one BLAS thread per rank), per batch size.
#   jobs/bench_gemm_limits.sh            REPEATS=3 BATCHES="512 256" OUT=results/bench_gemm_limits.md
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# An OPENBLAS_CORETYPE inherited from the shell would pin a kernel; unset, pipetrain picks the best.
unset OPENBLAS_CORETYPE
REPEATS=${REPEATS:-3}
BATCHES=${BATCHES:-"512 256"}
OUT=${OUT:-results/bench_gemm_limits.md}
PY=tools/.venv/bin/python
DECK=inputs/bench_mlp.toml
die() { echo "bench_gemm_limits: $*" >&2; exit 1; }
[ -x build/pipetrain ] && [ -x build/bench_gemm ] || die "run 'make build' first"
[ -x "$PY" ] || die "run 'make tools' first"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=$work/rows.csv
echo "batch,rep,warm_1,warm_2,model_1,model_2,pipetrain_1,pipetrain_2" > "$rows"

median_rate() {  # metrics.h5 batch: the batch over the median step time after 3 warm-up steps
  $PY tools/metrics_summary.py "$1" --skip 3 --json |
    $PY -c 'import json, sys; print(int(sys.argv[1]) / json.load(sys.stdin)["median_step_time_s"])' "$2"
}
train_rate() {  # ranks batch rep
  local dir=$work/run_$1_$2_$3
  timeout 600 mpirun --oversubscribe --bind-to none -np "$1" build/pipetrain train "$DECK" \
    --set training.batch_size="$2" --set training.steps=13 --set pipeline.micro_batches=8 \
    --set output.dir=\"$dir\" > "$dir.log" 2>&1 || die "pipetrain failed (log: $dir.log)"
  median_rate "$dir/metrics.h5" "$2"
}

for rep in $(seq 1 "$REPEATS"); do
  for batch in $BATCHES; do
    # The first line is the default GEMM choice, the one the runs use. sed reads
    # all the output (head would close the pipe early: SIGPIPE under pipefail).
    line=$(build/bench_gemm "$DECK" --set training.batch_size="$batch" --stages 2 --reps 11 --tsv |
           sed -n 1p) || die "bench_gemm failed"
    IFS=$'\t' read -r _ _ _ _ warm1 warm2 _ model1 model2 <<< "$line"
    one=$(train_rate 1 "$batch" "$rep")
    two=$(train_rate 2 "$batch" "$rep")
    echo "$batch,$rep,$warm1,$warm2,$model1,$model2,$one,$two" >> "$rows"
    echo "batch $batch rep $rep: warm limit $warm1 / $warm2, model-buffer limit $model1 / $model2, pipetrain $one / $two samples/s"
  done
done

identity=$($PY tools/run_identity.py "$(ls -d "$work"/run_2_*/ | head -1)metrics.h5")
$PY - "$rows" "$REPEATS" "$identity" > "$OUT" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("# pipetrain's MLP against its GEMM limits (#12)\n")
print(f"Command: `jobs/bench_gemm_limits.sh` ({sys.argv[2]} repetitions; deck `inputs/bench_mlp.toml`, "
      "1F1B, N = 8, one BLAS thread per rank). " + sys.argv[3] + "\n")
print("Warm limit: `build/bench_gemm`'s replay of one micro-batch's GEMMs on one set of buffers, "
      "x P x N/(N+P-1) (the limit #12 defines; goal: >= 90% at 2 stages). Model-buffer limit: the "
      "same GEMMs on buffers laid out as the model's own matrices, so they stream the model's "
      "footprint (16 layers x 4 MiB of weights and as much of gradients) through the caches as "
      "training does. pipetrain: the batch over the median step time after 3 warm-up steps. "
      "Medians over repetitions, [min-max] of the per-repetition ratios.\n")
print("| batch (rows per micro-batch) | processes | warm limit | model-buffer limit | pipetrain | % of warm limit | % of model-buffer limit |")
print("|---|---:|---:|---:|---:|---:|---:|")
def rng(v): return f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"
for batch in dict.fromkeys(r["batch"] for r in rows):
    rs = [r for r in rows if r["batch"] == batch]
    for p in ("1", "2"):
        warm = [float(r["warm_" + p]) for r in rs]
        model = [float(r["model_" + p]) for r in rs]
        got = [float(r["pipetrain_" + p]) for r in rs]
        print(f"| {batch} ({int(batch) // 8}) | {p} | {statistics.median(warm):.0f} | {statistics.median(model):.0f} | "
              f"{statistics.median(got):.0f} | {rng([100 * g / w for g, w in zip(got, warm)])} | "
              f"{rng([100 * g / m for g, m in zip(got, model)])} |")
EOF
cat "$OUT"
