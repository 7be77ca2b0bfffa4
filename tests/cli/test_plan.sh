#!/usr/bin/env bash
# test_plan.sh: `pipetrain plan` end to end: measured on 2 ranks it ranks
# every alternative of a deck (schedules x micro-batch counts x recompute x
# partitions) by predicted step time, marks what fits the budget and names
# the best plan and the deck's own rank; from a profile.h5 it plans that
# profile's micro-batch size, and from a training run's profile.h5 it
# predicts that run's step again; on the H200 description it plans GPT-3 175B at
# 8 stages (nothing fits) and 64 (1F1B, selective, balanced, as
# test_plan_device finds), and with fused attention at a smaller peak;
# --schedules weighs interleaved and the zero-bubble schedules, and
# pipeline.weight_grad = "step" its pass of weight gradients; bad inputs
# get their message.
#   tests/cli/test_plan.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"

# A plan row: rank, P x D, reduction ms, schedule, N, micro-batch size, recompute, partition, step ms, ...
rows() { grep -E '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' "$tmp/out"; }
sorted_by_step() { rows | awk '{print $9}' | sort -g -c; }

run 2 plan inputs/gpt_markov.toml --micro-batches 4,8 --top 1000
check "plan on 2 ranks succeeds" status_is 0
check "it weighs 2 grids (2x1, 1x2) x 2 N x 2 schedules x 3 recompute x 4 partitions" bash -c "[ \$(grep -cE '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' '$tmp/out') -eq 96 ]"
check "both grids are weighed" bash -c "grep -qE '^ +[0-9]+ +2x1 ' '$tmp/out' && grep -qE '^ +[0-9]+ +1x2 ' '$tmp/out'"
check "rows are ranked by predicted step time" sorted_by_step
check "it names the best plan" output_has "best: rank "
check "it names the deck's own rank" output_has "the deck as written (1f1b, N=8, recompute none, partition uniform) ranks "
check "it says where the costs come from" output_has "plan: costs from brief profiles measured now on 2 ranks"

# pipeline.weight_grad = "step": the same 1F1B point with its weight
# gradients in one pass per stage after its last B predicts a larger peak
# (every micro-batch's weight-gradient inputs kept until the pass) than per
# micro-batch. (Its bubble is smaller too, but on this GPT only by about
# half a point, within two brief profiles' noise.)
point_of() { grep -E "^ +[0-9]+ +2x1 +[0-9.e+-]+ +1f1b${2:-} +8 +[0-9]+ +none +uniform " "$tmp/out" | awk "{print \$$1}"; }
per_mb_bubble=$(point_of 11); per_mb_peak=$(point_of 12)  # from the first plan above
run 2 plan inputs/gpt_markov.toml --micro-batches 8 --schedules 1f1b --set pipeline.weight_grad=\"step\" --top 1000
check "plan with weight_grad = step succeeds" status_is 0
check "... and says so" output_has 'plan: weight gradients once per step (pipeline.weight_grad = "step")'
check "... its rows are marked (1f1b/step) and the mark explained" output_has '/step: weight gradients in one pass per stage'
check "... a larger peak ($(point_of 12 /step) against $per_mb_peak MiB; bubble $(point_of 11 /step) against $per_mb_bubble)" \
  awk -v m="$(point_of 12 /step)" -v m0="$per_mb_peak" 'BEGIN { exit !(m0 > 0 && m > m0) }'

# A budget that only recomputation meets: the best plan is the fastest that
# fits, or a simpler one predicted within the 2% tie margin of it.
run 2 plan inputs/gpt_markov.toml --micro-batches 8 --set pipeline.memory_budget_mb=9.4 --top 1000
check "a tight budget marks plans that do not fit" bash -c "grep -E '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' '$tmp/out' | grep -q ' no '"
check "the best plan fits the budget" bash -c "
  best=\$(sed -n 's/^best: rank \([0-9]*\),.*/\1/p' '$tmp/out')
  grep -E \"^ +\$best +[0-9]+x\" '$tmp/out' | grep -q ' yes '"
check "no plan faster than the best by more than the 2% tie margin fits" bash -c "
  best=\$(sed -n 's/^best: rank \([0-9]*\),.*/\1/p' '$tmp/out')
  step=\$(grep -E \"^ +\$best +[0-9]+x\" '$tmp/out' | awk '{print \$9}')
  [ -n \"\$step\" ] &&
  ! grep -E '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' '$tmp/out' | awk -v s=\$step '\$9 * 1.02 < s + 0 && / yes /' | grep -q ."

run 2 profile inputs/gpt_markov.toml --out "$tmp/gpt.h5" --reps 2
run 1 plan inputs/gpt_markov.toml --ranks 2 --profile "$tmp/gpt.h5" --top 1000
check "plan from a profile.h5 succeeds" status_is 0
check "a profile plans its own micro-batch count only" bash -c "[ \$(grep -E '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' '$tmp/out' | wc -l) -gt 0 ] && [ \$(grep -E '^ +[0-9]+ +[0-9]+x[0-9]+ +[0-9.e+-]+ +(gpipe|1f1b) ' '$tmp/out' | awk '\$5 != 8' | wc -l) -eq 0 ] && grep -qF 'the profile $tmp/gpt.h5' '$tmp/out'"
run 1 plan inputs/gpt_markov.toml --ranks 2 --profile "$tmp/gpt.h5" --micro-batches 4
check "another micro-batch count than the profile's is refused" output_has "the profile holds for micro-batches of 4 samples, i.e. 8 micro-batches"

# A training run keeps its brief profile: planned from it, the deck as run
# ranks with the very step the run predicted.
run 2 train inputs/gpt_markov.toml --set training.steps=3 --set training.warmup_steps=1 \
  --set training.eval_every=0 --set pipeline.micro_batches=4 --set output.dir=\"$tmp/run\"
predicted=$(sed -n 's/^plan: predicted step \([0-9.]*\) ms, bubble.*/\1/p' "$tmp/out")
check "a training run writes the profile it predicted from" test -s "$tmp/run/profile.h5"
run 1 plan "$tmp/run/deck.resolved.toml" --ranks 2 --profile "$tmp/run/profile.h5" --top 1000
check "planned from the run's profile, the run's row has its predicted step ($predicted ms)" bash -c "
  [ -n '$predicted' ] && rows_of() { grep -E '^ +[0-9]+ +2x1 +[0-9.e+-]+ +1f1b +4 +8 +none +uniform ' '$tmp/out'; }
  rows_of | awk -v p='$predicted' '{ d = \$9 - p; if (d < 0) d = -d; if (d < 0.01) found = 1 } END { exit !found }'"

run 1 plan inputs/gpt3_175b.toml --device h200 --ranks 8 --micro-batches 1536
check "GPT-3 175B on 8 H200s: nothing fits" output_has "best: none of the 24 plans fits the budget"
run 1 plan inputs/gpt3_175b.toml --device h200 --ranks 64 --micro-batches 1536
check "GPT-3 175B on 64 H200s: 1F1B, selective, balanced" output_has "best: rank 11, P x D = 64 x 1, 1f1b N=1536 recompute selective, balanced partition [1 x19, 2 x32, 1 x13]"
# Fused attention keeps each row's statistics, not the H x T x T
# probabilities: the same point (1F1B, N = 1536, recompute none, uniform)
# predicts a smaller peak, and selective, which then drops nothing, is
# weighed as none (docs/planner.md).
peak_of_none() { grep -E '^ +[0-9]+ +64x1 +[0-9.e+-]+ +1f1b +1536 +1 +none +uniform ' "$tmp/out" | awk '{print $12, $13}'; }
run 1 plan inputs/gpt3_175b.toml --device h200 --ranks 64 --micro-batches 1536 --top 1000
reference_peak=$(peak_of_none)
run 1 plan inputs/gpt3_175b.toml --device h200 --ranks 64 --micro-batches 1536 --top 1000 --set model.attention=\"fused\"
check "GPT-3 175B, fused attention: the model line says so, and the padded vocabulary" output_has "vocab 50257 padded to 50304, fused attention;"
fused_peak=$(peak_of_none)
check "... a smaller peak at 1f1b, none, uniform ($fused_peak against $reference_peak)" \
  awk -v f="$fused_peak" -v r="$reference_peak" 'BEGIN { split(f, a, " "); split(r, b, " "); exit !(a[2] == "GiB" && b[2] == "GiB" && a[1] > 0 && a[1] < b[1]) }'
check "... selective is not weighed apart from none" bash -c "! grep -qE '^ +[0-9]+ +[0-9]+x[0-9]+ .* selective ' '$tmp/out'"
check "... and the deck's selective ranks as none" output_has "recompute selective (= none for this model), partition uniform) ranks "
# More ranks than blocks: only grids with D > 1 are plans (docs/data-parallel.md).
run 1 plan inputs/gpt3_175b.toml --device h200 --ranks 512 --micro-batches 64,128,256
check "GPT-3 175B on 512 H200s: grids of at most 96 stages" output_has "on 512 x H200 SXM (bf16) as every P x D grid"
check "... the table has a P x D column" output_has "P x D  dp (ms)"

# --schedules weighs the interleaved and zero-bubble schedules too: on the
# 2 x 1 grid both zero-bubble schedules predict a smaller bubble than 1F1B
# (same N, recompute, partition), since they fill its idle time with weight
# passes whatever the measured costs. How much smaller depends on the brief
# profile's timings (about 0.12-0.15 against 0.23 on an idle machine, 0.18
# against 0.20 on a loaded one), so only the order is checked.
# Interleaved only at N a multiple of P.
run 2 plan inputs/gpt_markov.toml --micro-batches 1,4 --schedules 1f1b,interleaved,zb-h1,zb-v --top 1000
check "plan --schedules succeeds" status_is 0
bubble_of() { grep -E "^ +[0-9]+ +2x1 +[0-9.e+-]+ +$1 +4 +[0-9]+ +none +uniform " "$tmp/out" | awk '{print $11}'; }
check "every requested schedule is weighed at N = 4" bash -c "[ -n '$(bubble_of 1f1b)' ] && [ -n '$(bubble_of interleaved)' ] && [ -n '$(bubble_of zb-h1)' ] && [ -n '$(bubble_of zb-v)' ]"
check "ZB-V and ZB-H1 predict a smaller bubble than 1F1B" awk -v v="$(bubble_of zb-v)" -v h="$(bubble_of zb-h1)" -v f="$(bubble_of 1f1b)" 'BEGIN { exit !(v < f && h < f) }'
check "interleaved is not weighed at N = 1 on 2 ranks" bash -c "! grep -qE '^ +[0-9]+ +2x1 +[0-9.e+-]+ +interleaved +1 ' '$tmp/out'"
run 1 plan inputs/gpt_markov.toml --schedules 1f1b,zb-x
check "an unknown schedule is refused" status_not
check "... naming it" output_has "zb-x"

# Bad inputs: one message each, non-zero exit.
run 1 plan inputs/gpt_markov.toml --device tpu7
check "an unknown device is refused" output_has "plan --device tpu7: unknown device; expected one of: h200"
run 1 plan inputs/mlp_small.toml --device h200
check "a device plan of an MLP is refused" output_has "plan --device h200 models GPT decks only"
run 1 plan inputs/gpt_markov.toml --micro-batches 5
check "a micro-batch count that does not divide the batch is refused" output_has "plan --micro-batches 5: does not divide"
run 1 plan inputs/gpt_markov.toml --profile "$tmp/nothing.h5"
check "a missing profile is refused" output_has "'$tmp/nothing.h5': no such file; expected a profile.h5"
mkfifo "$tmp/fifo.h5"
run 1 plan inputs/gpt_markov.toml --profile "$tmp/fifo.h5"
check "a FIFO as the profile is refused as such, without opening it" \
  output_has "'$tmp/fifo.h5': a FIFO, not a regular file; expected a profile.h5"
run 1 plan inputs/gpt_markov.toml --profile "$tmp/gpt.h5" --device h200
check "--profile and --device together are refused" status_not
run 1 plan inputs/gpt_markov.toml --ranks 8 --set pipeline.stages=8
check "--ranks checks the deck against P stages" output_has "model.blocks = 4: must be >= the number of stages (8"
# Without a stage count, 8 ranks are weighed as the grids whose pipelines fit 4 blocks.
run 1 plan inputs/gpt_markov.toml --ranks 8 --micro-batches 4 --top 1000
check "--ranks 8 on 4 blocks: 4x2, 2x4 and 1x8 grids, no 8x1" bash -c "
  grep -qE '^ +[0-9]+ +4x2 ' '$tmp/out' && grep -qE '^ +[0-9]+ +2x4 ' '$tmp/out' &&
  grep -qE '^ +[0-9]+ +1x8 ' '$tmp/out' && ! grep -qE '^ +[0-9]+ +8x1 ' '$tmp/out'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
