#!/usr/bin/env bash
# test_schedules.sh: the interleaved and zero-bubble schedules end to end
# (docs/schedules.md): validate --print-schedule draws each, a run of each
# on 2 ranks trains the loss of the 1F1B run bit for bit, its trace draws and
# counts W, a placement at measured times (pipeline.schedule_times) trains
# the same loss, a hand-written schedule file with a placement line and W
# runs like the generated one, and bad decks get their specific messages.
#   tests/cli/test_schedules.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"
py=tools/.venv/bin/python
deck=inputs/mlp_small.toml
final_loss() { grep -o "final training loss [0-9.]*" "$1" | awk '{print $4}'; }

for s in interleaved zb-h1 zb-v; do
  extra=()
  [ "$s" = interleaved ] && extra=(--set pipeline.virtual_stages=2)
  run 1 validate $deck --ranks 2 --print-schedule --set pipeline.schedule=\"$s\" "${extra[@]}"
  check "$s: validate succeeds" status_is 0
  check "$s: validate draws the grid" output_has "rank 1 |"
  stages=4; [ "$s" = zb-h1 ] && stages=2
  check "$s: validate names the stage count" output_has "schedule $s: $stages stages"
  [ "$s" = interleaved ] || check "$s: the grid has W" output_has "0W3"
done
check "zb-v: the schedule text names the placement" output_has "placement: 0 1 1 0"
check "zb-v: the theory is the unit-time simulation" output_has "theoretical bubble 4.0%"

run 2 train $deck --set output.dir=\"$tmp/1f1b\" --set pipeline.predict=false
check "1f1b: run succeeds" status_is 0
cp "$tmp/out" "$tmp/1f1b.out"
want=$(final_loss "$tmp/1f1b.out")
for s in interleaved zb-h1 zb-v; do
  extra=()
  [ "$s" = interleaved ] && extra=(--set pipeline.virtual_stages=2)
  # zb-h1 in the papers' placement all run long; zb-v as decks leave it (auto)
  [ "$s" = zb-h1 ] && extra=(--set pipeline.schedule_times=\"unit\")
  run 2 train $deck --set pipeline.schedule=\"$s\" "${extra[@]}" --set output.trace=true \
    --set output.dir=\"$tmp/$s\" --set pipeline.predict=false
  check "$s: run succeeds" status_is 0
  if [ "$s" = zb-h1 ]; then check "zb-h1: one stage per rank" output_has "2 ranks, one stage per rank"
  else check "$s: the header says two stages per rank" output_has "2 ranks, 2 stages per rank"; fi
  check "$s: the final loss is 1F1B's, bit for bit" [ "$(final_loss "$tmp/out")" = "$want" ]
  "$py" tools/trace_timeline.py "$tmp/$s/trace.h5" "$tmp/$s.png" > "$tmp/out" 2>&1
  check "$s: the timeline draws" status_is 0
  "$py" tools/trace_report.py "$tmp/$s/trace.h5" --skip 1 > "$tmp/out" 2>&1
  check "$s: the trace report runs" output_has "measured bubble"
done
"$py" -c "
import h5py, sys
f = h5py.File('$tmp/zb-h1/trace.h5')
names = f.attrs['kind_names'].decode().split(',')
w = names.index('W')
n = sum(int((f['events'][r]['kind'] == w).sum()) for r in f['events'])
sys.exit(0 if n == 2 * 4 * 5 and f.attrs['num_ranks'] == 2 else 1)" > "$tmp/out" 2>&1
check "zb-h1: the trace holds one W per stage, micro-batch and step" status_is 0

# pipeline.schedule_times = "measured": placed again after step 2, the same
# loss, and the trace report times only the steps of the stored placement.
run 2 train $deck --set pipeline.schedule=\"zb-v\" --set pipeline.schedule_times=\"measured\" \
  --set output.trace=true --set output.dir=\"$tmp/measured\" --set pipeline.predict=false
check "zb-v measured: run succeeds" status_is 0
check "zb-v measured: the log says where and when it was placed" output_has "placed again at the measured F/B/W ms per stage [0]"
check "... from step 3 on" output_has "from step 3 on"
check "zb-v measured: the final loss is 1F1B's, bit for bit" [ "$(final_loss "$tmp/out")" = "$want" ]
"$py" tools/trace_report.py "$tmp/measured/trace.h5" --skip 1 > "$tmp/out" 2>&1
check "zb-v measured: the trace report times steps 3..4 only" output_has "steps 3..4"
"$py" -c "
import h5py, sys
m = h5py.File('$tmp/measured/metrics.h5')
sys.exit(0 if m.attrs['schedule_first_step'][0] == 3 and m.attrs['schedule_action_times_s'].size == 12 else 1)" > "$tmp/out" 2>&1
check "zb-v measured: metrics.h5 holds the step and the 4 x 3 times" status_is 0
# With 2 data-parallel replicas every replica runs replica 0's placement
# (their gradient buckets must complete in one order): the same loss as ZB-H1
# in the papers' placement on the same 2 x 2 grid.
grid=(--set pipeline.data_parallel=2 --set pipeline.micro_batches=2 --set pipeline.predict=false)
run 4 train $deck --set pipeline.schedule=\"zb-h1\" --set pipeline.schedule_times=\"unit\" "${grid[@]}" \
  --set output.dir=\"$tmp/dp_unit\"
check "zb-h1 on 2 x 2 ranks: run succeeds" status_is 0
want_dp=$(final_loss "$tmp/out")
run 4 train $deck --set pipeline.schedule=\"zb-h1\" --set pipeline.schedule_times=\"measured\" \
  "${grid[@]}" --set output.dir=\"$tmp/dp_measured\"
check "zb-h1 measured on 2 x 2 ranks: run succeeds and is placed again" output_has "from step 3 on"
check "... with the loss of the papers' placement, bit for bit" [ "$(final_loss "$tmp/out")" = "$want_dp" ]
# The default, schedule_times = "auto": placed at measured times like
# "measured"; the run's plan error counts the steps of the placement only.
run 2 train $deck --set pipeline.schedule=\"zb-v\" --set output.dir=\"$tmp/auto\"
check "zb-v, schedule_times auto: placed again" output_has "from step 3 on"
check "... its plan error counts the steps of the placement (steps 4-5)" output_has \
  "over 2 steps (from the placement at measured times on): error"
check "... and it trains 1F1B's loss bit for bit" [ "$(final_loss "$tmp/out")" = "$want" ]
# Three steps: the placement would come after the last, so there is none,
# and the trace report times every step.
run 2 train $deck --set pipeline.schedule=\"zb-v\" --set training.steps=3 --set output.trace=true \
  --set output.dir=\"$tmp/auto3\"
check "zb-v auto, 3 steps: run succeeds" status_is 0
check "... not placed after its last step" bash -c "! grep -q 'placed again at the measured' '$tmp/out'"
check "... its plan error counts steps 2-3" output_has "over 2 steps: error"
"$py" tools/trace_report.py "$tmp/auto3/trace.h5" --skip 1 > "$tmp/out" 2>&1
check "... and the trace report times steps 1..2" output_has "steps 1..2"
run 2 train $deck --set pipeline.schedule=\"zb-h1\" --set pipeline.rebalance=true --set output.dir=\"$tmp/auto_rb\"
check "zb-h1, schedule_times auto with rebalancing: run succeeds" status_is 0
check "... and keeps the papers' placement" \
  bash -c "! grep -q 'placed again at the measured' '$tmp/out'"
run 2 train $deck --set pipeline.schedule=\"1f1b\" --set pipeline.schedule_times=\"measured\"
check "schedule_times with 1f1b is refused" output_has 'pipeline.schedule_times: only applies with pipeline.schedule = "zb-h1" or "zb-v"'

# A hand-written file: the generated ZB-V schedule, printed and read back.
run 1 validate $deck --ranks 2 --print-schedule --set pipeline.schedule=\"zb-v\"
awk '/^placement:/{p=1} p&&/^$/{exit} p' "$tmp/out" > "$tmp/zbv.txt"
run 2 train $deck --set pipeline.schedule=\"file\" --set pipeline.schedule_file=\"$tmp/zbv.txt\" \
  --set pipeline.virtual_stages=2 --set output.dir=\"$tmp/file\" --set pipeline.predict=false
check "schedule file with placement and W: run succeeds" status_is 0
check "... and trains 1F1B's loss bit for bit" [ "$(final_loss "$tmp/out")" = "$want" ]
sed 's/ 0W3//' "$tmp/zbv.txt" > "$tmp/zbv_missing.txt"
run 1 validate $deck --ranks 2 --set pipeline.schedule=\"file\" \
  --set pipeline.schedule_file=\"$tmp/zbv_missing.txt\" --set pipeline.virtual_stages=2
check "a file missing a W is refused" status_not
check "... naming it and marking its B" output_has "missing 0W3: the schedule splits the backward"

run 1 validate $deck --ranks 2 --set pipeline.schedule=\"interleaved\" --set pipeline.micro_batches=3 \
  --set training.batch_size=12
check "interleaved with N not a multiple of P is refused" status_not
check "... saying why" output_has "3 micro-batches is not a multiple of the 2 ranks"
run 1 validate $deck --ranks 2 --set pipeline.virtual_stages=2
check "virtual_stages with 1f1b is refused" output_has 'pipeline.virtual_stages'
check "... naming the schedules it applies to" output_has 'only applies with pipeline.schedule = "interleaved" or "file"'
run 1 validate $deck --ranks 2 --set pipeline.schedule=\"zb-v\" --set pipeline.recompute=\"auto\" \
  --set pipeline.memory_budget_mb=100
check "recompute auto with two stages per rank is refused" output_has '"auto" chooses one stage per rank'
run 1 validate $deck --ranks 8 --set pipeline.schedule=\"zb-v\"
check "zb-v needs 2 units per rank" output_has "must be >= the number of stages (16: 8 ranks x 2 stages per rank)"

echo "schedules: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
