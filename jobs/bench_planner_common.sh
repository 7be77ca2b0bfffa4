# bench_planner_common.sh: sourced by jobs/bench_planner.sh and
# jobs/bench_planner_recheck.sh: the sweep's settings (from the environment,
# with their defaults), the checks both need, and the one report of its runs.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
me=${0##*/}
me=${me%.sh}
PS=${PS:-"1 2"}
NS=${NS:-"1 2 4 8 16"}
DECKS=${DECKS:-"mlp gpt mlp128"}
STEPS=${STEPS:-}  # training steps per run; empty: per deck (bench_planner.sh, deck_settings)
TRIES=${TRIES:-3}
RECHECKS=${RECHECKS:-3}
[[ "$TRIES" =~ ^[1-9][0-9]*$ ]] || { echo "$me: TRIES must be a positive integer (tries per configuration), got '$TRIES'" >&2; exit 1; }
[[ "$RECHECKS" =~ ^[0-9]+$ ]] || { echo "$me: RECHECKS must be a non-negative integer (reruns per miss), got '$RECHECKS'" >&2; exit 1; }
PY=tools/.venv/bin/python
WORK=${WORK:-runs/bench_planner}
OUT=${OUT:-results/bench_planner}
[ -x build/pipetrain ] || { echo "$me: build/pipetrain missing: run make build" >&2; exit 1; }

# write_report [RECHECKS_FILE]: $OUT.md, $OUT.csv and ${OUT}_error.png from
# the runs listed in $WORK (and the reruns of the misses, when given).
write_report() {
  local command="jobs/bench_planner.sh (PS=\"$PS\" NS=\"$NS\" DECKS=\"$DECKS\" STEPS=${STEPS:-\"mlp 10, mlp128 20, gpt 40, cnn 8, hybrid 30\"})"
  local rechecks=()
  if [ -n "${1:-}" ]; then
    rechecks=(--rechecks "$1")
    command+=", then jobs/bench_planner_recheck.sh (RECHECKS=$RECHECKS)"
  fi
  $PY tools/planner_report.py --runs "$WORK/runs.txt" --csv "$OUT.csv" --plot "${OUT}_error.png" \
    --stress mlp128 --unsteady "$WORK/unsteady.txt" --tries "$TRIES" "${rechecks[@]}" \
    --command "$command" > "$OUT.md"
}
