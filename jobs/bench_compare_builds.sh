#!/usr/bin/env bash
# bench_compare_builds.sh: step times of two builds of pipetrain on the same
# benchmark decks, side by side: is a refactoring "within noise"?
#
#   jobs/bench_compare_builds.sh <base-commit> [label]
#
# Builds <base-commit> in a git worktree (runs/compare_base, Release, the
# pipetrain target only), then runs each deck alternately with the base build
# and this checkout's build/pipetrain, REPEATS times each (the order flipped
# every repetition), and compares the median step time after 2 warm-up steps
# per repetition. Writes results/bench_compare_builds[_label].md. Run it on a
# quiet machine: other work on the cores moves step times by more than a
# refactoring does.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: jobs/bench_compare_builds.sh <base-commit> [label]}
LABEL=${2:-}
REPEATS=${REPEATS:-3}
NP=${NP:-2}
PY=tools/.venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# name:deck:steps
DECKS=${DECKS:-"scaling:inputs/bench_gpt_scaling.toml:10 recompute:inputs/bench_gpt_recompute.toml:7 mlp:inputs/bench_mlp.toml:10 mlp_even:inputs/bench_mlp_even.toml:10"}
OUT=runs/compare_builds
WT=runs/compare_base
mkdir -p "$OUT" results
[ -x build/pipetrain ] || make build
if [ ! -d "$WT" ]; then git worktree add --detach "$WT" "$BASE" >/dev/null; fi
git -C "$WT" checkout --quiet --detach "$BASE"
cmake -S "$WT" -B "$WT/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$WT/build" -j "$(nproc)" --target pipetrain > /dev/null
run() {  # tag binary name deck steps rep
  local dir=$OUT/$3-$1-$6
  mpirun --oversubscribe --bind-to none -np "$NP" "$2" train "$4" --set training.steps="$5" \
    --set output.checkpoint_every=0 --set output.dir=\"$dir\" > "$dir.log" 2>&1 ||
    { tail -5 "$dir.log"; exit 1; }
}
for r in $(seq "$REPEATS"); do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for entry in $DECKS; do
    IFS=: read -r name deck steps <<< "$entry"
    for tag in $order; do
      bin=build/pipetrain; [ "$tag" = base ] && bin=$WT/build/pipetrain
      run "$tag" "$bin" "$name" "$deck" "$steps" "$r"
    done
  done
done
first=${DECKS%% *}; first=${first%%:*}
$PY - "$OUT" "$REPEATS" "$NP" "$BASE" "$(git rev-parse --short HEAD)" "$DECKS" \
  "$($PY tools/run_identity.py "$OUT/$first-new-1/metrics.h5")" \
  > "results/bench_compare_builds${LABEL:+_$LABEL}.md" <<'PYEOF'
import sys, h5py, numpy as np
out, repeats, np_ranks, base, new, decks, identity = sys.argv[1:8]
reps = range(1, int(repeats) + 1)
def median_step(name, tag, r):
    with h5py.File(f"{out}/{name}-{tag}-{r}/metrics.h5") as f:
        return float(np.median(np.asarray(f["step_time_s"])[2:]))
print(f"# Step times of two builds: {base} (base) and {new} (new)\n")
print(f"Command: `jobs/bench_compare_builds.sh {base}` ({np_ranks} ranks, {repeats} "
      "repetitions per deck, base and new side by side in each, their order flipped every "
      "repetition; the median step time after 2 warm-up steps per run).\n\n" + identity + "\n")
print("| deck | steps | base (ms), per repetition | new (ms), per repetition | new / base (median of the per-repetition ratios) |")
print("|---|---:|---|---|---:|")
for entry in decks.split():
    name, deck, steps = entry.split(":")
    b = [median_step(name, "base", r) for r in reps]
    n = [median_step(name, "new", r) for r in reps]
    ratio = np.median([x / y for x, y in zip(n, b)])
    fmt = lambda v: " / ".join(f"{x * 1e3:.1f}" for x in v)
    print(f"| `{deck}` | {steps} | {fmt(b)} | {fmt(n)} | {ratio:.3f} |")
spread = []
for entry in decks.split():
    name = entry.split(":")[0]
    for tag in ("base", "new"):
        v = [median_step(name, tag, r) for r in reps]
        spread.append((max(v) - min(v)) / np.median(v))
print(f"\nNoise: the same build's repetitions differ by up to {max(spread) * 100:.1f}% "
      f"(median {np.median(spread) * 100:.1f}%) here; a ratio inside that is within noise.")
PYEOF
cat "results/bench_compare_builds${LABEL:+_$LABEL}.md"
