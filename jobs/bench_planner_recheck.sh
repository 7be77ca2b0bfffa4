#!/usr/bin/env bash
# bench_planner_recheck.sh: runs again every configuration of
# jobs/bench_planner.sh whose kept run missed its step-time prediction by
# more than 10%, to tell the planner's misses from the host's. Each rerun
# starts from the kept run's own resolved deck (deck.resolved.toml: the
# same model, schedule, micro-batches, recompute, partition request and
# steps), so it profiles, partitions and predicts afresh, as the kept run
# did. The report (results/bench_planner.md) is then written again with a
# section "Runs over 10% run again": each miss beside its reruns' errors and
# whether it reproduces (over 10% in most reruns). The published figures
# stay those of the kept runs.
#   jobs/bench_planner.sh && jobs/bench_planner_recheck.sh
#   RECHECKS=5 jobs/bench_planner_recheck.sh          (reruns per miss; default 3)
#   WORK=runs/bench_planner_gpt OUT=results/bench_planner_gpt DECKS=gpt jobs/bench_planner_recheck.sh
#        (after a subset: the same WORK, OUT and DECKS as that run)
set -euo pipefail
source "$(dirname "$0")/bench_planner_common.sh"  # PS NS DECKS STEPS TRIES RECHECKS WORK OUT, write_report
[ "$RECHECKS" -ge 1 ] || { echo "$me: RECHECKS must be at least 1 here (reruns per miss), got '$RECHECKS'" >&2; exit 1; }
list=$WORK/runs.txt
[ -s "$list" ] || { echo "$me: $list is missing or empty: run jobs/bench_planner.sh first (same WORK)" >&2; exit 1; }

rechecks=$WORK/rechecks.txt
: > "$rechecks"
misses=$($PY tools/planner_report.py --runs "$list" --csv /dev/null --plot /dev/null --misses 10)
# (mpirun reads standard input: it gets /dev/null, the list stays the loop's)
while read -r d p n sched rc part dir; do
  [ -n "$d" ] || continue
  for k in $(seq 1 "$RECHECKS"); do
    echo "$me: $d P=$p N=$n $sched recompute=$rc partition=$part (rerun $k)"
    again=${dir}_recheck$k
    rm -rf "$again"
    mpirun --oversubscribe --bind-to none -np "$p" build/pipetrain train "$dir/deck.resolved.toml" \
      --set output.dir=\""$again"\" < /dev/null > "$again.log" 2>&1 || { tail -20 "$again.log" >&2; exit 1; }
    echo "$d $p $n $sched $rc $part $again" >> "$rechecks"
  done
done <<< "$misses"

write_report "$rechecks"
cat "$OUT.md"
