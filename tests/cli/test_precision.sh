#!/usr/bin/env bash
# test_precision.sh: mixed precision on the CPU end to end (docs/cuda.md,
# "Precision modes"). An fp16 run whose initial loss scale overflows skips
# steps and backs off; resumed from a checkpoint taken after the skips, it
# continues bit for bit (same losses, same checkpoint digest: the loss
# scaler's state and AdamW's update count are in the checkpoint). Bad
# precision keys get their message.
#   tests/cli/test_precision.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"
losses_from() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]* | scale [0-9.e+]*' "$2" | \
  sed 's/  */ /g' | awk -v s="$1" '{split($2, a, "/"); if (a[1] > s) print}'; }

deck=inputs/mlp_small.toml
fp16=(--set training.precision=\"fp16\" --set training.loss_scale=16777216
      --set training.steps=8 --set output.checkpoint_every=4)

run 2 train $deck "${fp16[@]}" --set output.dir=\"$tmp/straight\"
cp "$tmp/out" "$tmp/straight.log"
check "fp16 run succeeds" status_is 0
check "fp16 overflow skips a step" output_has "SKIPPED (overflow)"
check "the step line shows the loss scale" output_has "| scale 524288 |"

run 2 train $deck "${fp16[@]}" --set output.dir=\"$tmp/resumed\" \
  --resume "$tmp/straight/checkpoints/step_00000004"
check "fp16 resume succeeds" status_is 0
check "resumed losses and scales equal the uninterrupted run's" \
  diff <(losses_from 4 "$tmp/straight.log") <(losses_from 4 "$tmp/out")
check "resumed final digest equals the uninterrupted run's" \
  test "$(digest 8 "$tmp/straight.log")" = "$(digest 8 "$tmp/out")"

run 1 train $deck --set training.steps=8 "${fp16[@]:0:4}" --set output.dir=\"$tmp/one\"
check "one process, same fp16 losses" \
  diff <(losses_from 0 "$tmp/straight.log") <(losses_from 0 "$tmp/out")

run 1 validate $deck --set training.loss_scale=1024
check "loss_scale without fp16 is refused" status_not
check "... naming the key and the condition" output_has 'training.loss_scale'
check "... and fp16" output_has 'training.precision = "fp16"'
run 1 validate $deck --set training.precision=\"fp8\"
check "an unknown precision is refused" status_not
check "... listing the choices" output_has 'must be one of "fp32", "tf32", "bf16", "fp16"'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
