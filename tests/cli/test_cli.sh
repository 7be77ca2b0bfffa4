#!/usr/bin/env bash
# test_cli.sh: the pipetrain executable end to end under mpirun.
#   tests/cli/test_cli.sh BUILD_DIR
# Checks exit statuses, the specific error messages, that every rank exits
# (each case runs under `timeout`, so a hang fails the test), and the outputs.
source "$(dirname "$0")/lib.sh" "$1"

# A bad deck: specific message, non-zero exit on every rank, no hang.
run 2 train tests/decks/bad_batch.toml
check "bad deck exits non-zero" status_not
check "bad deck names file, line and key" output_has "bad_batch.toml:"
check "bad deck says what was expected" output_has "must be divisible by pipeline.micro_batches"

# Bad input found after start-up, by every rank alike (a memory budget no
# recomputation policy fits): status 2, as for a bad deck, and one line,
# rank 0's, in the start-up errors' form.
run 2 train inputs/mlp_small.toml --set pipeline.recompute=\"auto\" --set pipeline.memory_budget_mb=0.001
check "bad input after start-up exits with status 2" status_is 2
check "... said once, by rank 0" [ "$(grep -c 'error:' "$tmp/out")" -eq 1 ]
check "... in the start-up errors' form" output_has "pipetrain: error: "

# A model too large for the job's memory (62 TiB of parameters, gradients
# and AdamW moments, whatever the machine): refused before anything is
# built, by every rank, with status 2, its figures and the key that sizes it.
run 2 train inputs/mlp_small.toml --set model.hidden_dim=65536 --set model.depth=1000 --set output.dir=\"$tmp/huge\"
check "a model too large for the job's memory exits with status 2" status_is 2
check "... saying so with its figures" output_has "the model does not fit in this job's memory: its 4.29e+12 parameters"
check "... naming the key that sizes it" output_has "model.depth = 1000 (--set model.depth=1000)"
check "... and the memory it was given" output_has "of host memory available (MemAvailable)"
check "... before the start-up report or any output" \
  bash -c "! grep -Eq '^plan: |^stage 0: ' '$tmp/out' && [ ! -e '$tmp/huge/profile.h5' ] && [ ! -e '$tmp/huge/deck.resolved.toml' ]"
run 2 profile inputs/mlp_small.toml --set model.hidden_dim=65536 --set model.depth=1000 --out "$tmp/huge_profile"
check "... and so is its profile, before a unit is built" \
  output_has "the model's profile does not fit in memory: the 2 ranks on node "
check "... with status 2" status_is 2

# An option before the command, and a bad input on a single process (no
# mpirun): one line, status 2, no MPI_ABORT banner.
"$build/pipetrain" --version > "$tmp/out" 2>&1; status=$?
check "an option before the command exits with status 2" status_is 2
check "... naming it and what comes first" output_has "unknown option '--version' before the command; expected the command first"
"$build/pipetrain" plan inputs/mlp_small.toml --device foo > "$tmp/out" 2>&1; status=$?
check "bad input on one process: status 2" status_is 2
check "... the message" output_has "pipetrain: error: plan --device foo: unknown device; expected one of: h200"
check "... and no MPI_ABORT banner" bash -c "! grep -q MPI_ABORT '$tmp/out'"
# A balanced partition's budget below what any partition's largest stage
# holds for its parameters: refused by validate, which measures nothing.
run 1 validate inputs/mlp_small.toml --ranks 2 --set pipeline.partition=\"balanced\" --set pipeline.memory_budget_mb=0.01
check "validate refuses a balanced budget below every partition's parameters" status_is 2
check "... naming the key and the least largest stage" \
  output_has "pipeline.memory_budget_mb = 0.01: below the "
run 1 validate inputs/mlp_small.toml --ranks abc
check "--ranks abc: status 2" status_is 2
check "... says what a rank count is" output_has "expected a whole number of ranks from 1 to 65536, got 'abc'"
# interleaved without virtual_stages says it runs as 1F1B.
run 1 validate inputs/mlp_small.toml --ranks 2 --set pipeline.schedule=\"interleaved\"
check "interleaved at one stage per rank says that nothing is interleaved" \
  output_has "with one stage per rank (pipeline.virtual_stages = 1) nothing is interleaved"

# A bad --set override.
run 2 train inputs/mlp_small.toml --set pipeline.micro_batch=3
check "unknown override key exits non-zero" status_not
check "unknown override key suggests the right one" output_has "did you mean 'micro_batches'"

# Rank count not matching the stage count.
run 2 train inputs/mlp_small.toml --set pipeline.stages=4
check "stage/rank mismatch exits non-zero" status_not
check "stage/rank mismatch explained" output_has "pipeline.stages = 4 but the job has 2 MPI ranks"

# The CUDA device in a CPU-only build.
run 1 validate inputs/mlp_small.toml --set training.device=\"cuda\"
if "$build/pipetrain" --help >/dev/null 2>&1 && ! grep -q PIPETRAIN_HAVE_CUDA "$build/CMakeFiles/pt_deck_io.dir/flags.make" 2>/dev/null; then
  check "cuda device without the CUDA build exits non-zero" status_not
  check "cuda device without the CUDA build explained" output_has "this build has no CUDA backend"
fi
run 1 validate inputs/mlp_small.toml --set training.precision=\"bf16\"
check "reduced precision on the CPU (emulated) validates" status_is 0
run 1 validate inputs/mlp_small.toml --set pipeline.transport=\"nccl\"
check "a GPU transport on the CPU is refused" status_not
check "... naming the CPU's transports" output_has "the CPU offers auto, mpi and nccl_model"

# A GPT splits its transformer blocks (model.blocks), not model.depth.
run 1 validate inputs/gpt_markov.toml --ranks 8
check "4-block GPT on 8 ranks is refused" status_not
check "4-block GPT on 8 ranks names model.blocks" \
  output_has "model.blocks = 4: must be >= the number of stages (8, one per MPI rank); each stage needs at least one transformer block"
run 1 validate inputs/gpt_markov.toml --ranks 2 --set pipeline.partition=[1,3]
check "GPT partition over blocks accepted" status_is 0

# Outputs the run could not write are refused before step 0, not at the end.
mkdir -p "$tmp/latestdir/checkpoints/latest"
run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/latestdir\" --set output.checkpoint_every=2
check "latest as a directory exits non-zero" status_not
check "latest as a directory named with its key" output_has "output.dir = \"$tmp/latestdir\": checkpoint directory '$tmp/latestdir/checkpoints': '$tmp/latestdir/checkpoints/latest': a directory, not a regular file; expected the checkpoint pointer file \`latest\`, which the run writes there"
check "latest as a directory refused before step 0" bash -c "! grep -q '^step ' '$tmp/out'"
mkdir -p "$tmp/ckdir/latest"
run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/ckrun\" --set output.checkpoint_every=2 \
  --set output.checkpoint_dir=\"$tmp/ckdir\"
check "latest in output.checkpoint_dir named with that key" \
  output_has "output.checkpoint_dir = \"$tmp/ckdir\": '$tmp/ckdir/latest': a directory, not a regular file"
mkdir -p "$tmp/m5/metrics.h5"
run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/m5\"
check "metrics.h5 as a directory refused" output_has "output.dir = \"$tmp/m5\": '$tmp/m5/metrics.h5': a directory, not a regular file; expected its metrics.h5"
check "metrics.h5 as a directory refused before step 0" bash -c "! grep -q '^step ' '$tmp/out'"
# Root writes into any mode, so as root a directory nobody may write (/proc) stands in.
if [ "$(id -u)" -ne 0 ]; then ro=$tmp/ro; mkdir -p "$ro"; chmod 555 "$ro"; else ro=/proc; fi
run 2 train inputs/mlp_small.toml --set output.dir=\"$ro\"
check "unwritable output.dir exits non-zero" status_not
check "unwritable output.dir named" output_has "output.dir = \"$ro\": cannot create files in '$ro'"

# Unknown command line option.
run 1 train inputs/mlp_small.toml --bogus
check "unknown option exits non-zero" status_not

# validate prints the schedule and accepts the deck.
run 1 validate inputs/mlp_small.toml --ranks 4 --print-schedule
check "validate succeeds" status_is 0
check "validate prints the grid" output_has "0F0"
check "validate reports peak in-flight" output_has "peak in-flight micro-batches per stage [4, 3, 2, 1]"

# A short training run writes its outputs.
run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/run\"
check "training succeeds" status_is 0
check "step line printed" output_has "step      5/5"
check "resolved deck echoed" output_has "micro_batches = 4"
check "metrics.h5 written" test -s "$tmp/run/metrics.h5"
check "resolved deck stored" test -s "$tmp/run/deck.resolved.toml"
check "no temporary file left" bash -c "! ls '$tmp/run' | grep -q '\\.tmp$'"

# The stored resolved deck reproduces the run bitwise (deterministic on CPU).
cp "$tmp/out" "$tmp/first"
run 2 train "$tmp/run/deck.resolved.toml" --set output.dir=\"$tmp/run2\"
check "resolved deck reruns" status_is 0
check "same deck, same losses" bash -c "diff <(grep -o 'loss [0-9.e+-]*' '$tmp/first') <(grep -o 'loss [0-9.e+-]*' '$tmp/out')"

# A peer that stops answering: the waiting rank names its action, the job ends.
PIPETRAIN_TEST_STALL=1:step:0 run 2 train inputs/mlp_small.toml \
  --set pipeline.timeout_s=1 --set output.dir=\"$tmp/stall\"
check "stalled peer ends the job" status_not
check "timeout names the action waited on" output_has "waiting on 0RECV_B0"

# A fault-injection hook is announced, and a malformed one refused by name
# (base/fault_injection.hpp), not silently never fired.
check "an active hook is announced" output_has "fault injection active: PIPETRAIN_TEST_STALL=1:step:0"
PIPETRAIN_TEST_STALL=1:stpe:0 run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/bad_hook\"
check "a malformed hook ends the job" status_not
check "a malformed hook is named with its format" \
  output_has "PIPETRAIN_TEST_STALL=\"1:stpe:0\": POINT 'stpe' is not one of step, loss"

# A diverging run stops with step, stage and micro-batch.
run 2 train inputs/mlp_small.toml --set training.lr=1e30 --set training.optimizer=\"sgd\" \
  --set output.dir=\"$tmp/nan\"
check "non-finite run exits non-zero" status_not
# A non-finite gradient (injected on rank 0 in step 1) is named by parameter.
PIPETRAIN_TEST_NONFINITE=0:1 run 2 train inputs/mlp_small.toml --set output.dir=\"$tmp/nan_grad\"
check "non-finite gradient exits non-zero" status_not
check "non-finite gradient message names parameter, step and stage" \
  output_has "non-finite gradient of unit3.linear.bias at step 1, stage 0"
check "non-finite message names step, stage and micro-batch (loss) or parameter (gradient)" \
  bash -c "grep -Eq 'non-finite (loss at step [0-9]+, stage [0-9]+, micro-batch [0-9]+|gradient of [a-z0-9_.]+ at step [0-9]+, stage [0-9]+)' '$tmp/out'"

# A traced run: trace.h5 is written and every tool reads it.
py=tools/.venv/bin/python
run 2 train inputs/mlp_small.toml --set output.trace=true --set output.dir=\"$tmp/trace\"
check "traced run succeeds" status_is 0
check "trace.h5 written" test -s "$tmp/trace/trace.h5"
check "trace report runs" bash -c "$py tools/trace_report.py '$tmp/trace/trace.h5' > '$tmp/report.txt'"
check "trace report gives the bubble" grep -q "measured bubble" "$tmp/report.txt"
check "chrome export is valid JSON" bash -c "$py tools/trace_to_chrome.py '$tmp/trace/trace.h5' '$tmp/t.json' >/dev/null && $py -c 'import json,sys; e=json.load(open(sys.argv[1]))[\"traceEvents\"]; assert any(x.get(\"ph\")==\"X\" for x in e)' '$tmp/t.json'"
check "timeline png written" bash -c "$py tools/trace_timeline.py '$tmp/trace/trace.h5' '$tmp/t.png' >/dev/null && test -s '$tmp/t.png'"

# GPT on Markov data with evaluation: floor, eval loss and summary.
run 2 train inputs/gpt_markov.toml --set training.steps=4 --set training.eval_every=2 \
  --set training.warmup_steps=1 --set output.dir=\"$tmp/gpt\"
check "gpt run succeeds" status_is 0
check "loss floor printed" output_has "loss floor of a window"
check "eval loss in the step line" output_has "| eval "
check "summary states floor and gap" output_has "above the floor"

# HDF5 token data made by the tool, then a bad token file.
$py tools/make_token_file.py README.md "$tmp/tok.h5" --eval-fraction 0.2 --eval-output "$tmp/tok_eval.h5" > /dev/null
cat > "$tmp/h5.toml" <<DECK
[model]
type = "gpt"
vocab_size = 256
seq_len = 16
d_model = 16
heads = 2
blocks = 2
[data]
type = "hdf5"
path = "$tmp/tok.h5"
eval_path = "$tmp/tok_eval.h5"
shuffle = true
[training]
steps = 3
batch_size = 8
eval_every = 3
blas_threads = 1
[pipeline]
micro_batches = 2
[output]
dir = "$tmp/h5run"
DECK
run 2 train "$tmp/h5.toml"
check "training on an HDF5 token file succeeds" status_is 0
run 2 train "$tmp/h5.toml" --set model.vocab_size=64
check "token id beyond the vocabulary exits non-zero" status_not
check "bad token named with file and index" output_has "outside 0..model.vocab_size-1"

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
