#!/usr/bin/env bash
# bench_schedules.sh: every schedule (1f1b, interleaved with 2 stages per
# rank, zb-h1, zb-v; gpipe with SCHEDULES) on the MLP whose stages do equal
# F, B and W work under every placement (inputs/bench_mlp_even.toml, model
# "mlp-even"), the MLP of the other benchmarks (inputs/bench_mlp.toml,
# "mlp"), the balanced GPT (inputs/gpt_balanced.toml, "gpt-balanced") and
# the unbalanced GPT (inputs/gpt_markov.toml, "gpt"); MODELS picks (also
# "mlp-equal": inputs/bench_mlp_equal.toml, equal GEMM work at 2 stages;
# zb-h1 and zb-v run as a deck leaves them, pipeline.schedule_times = "auto":
# placed again at the measured times after step 2, reported as zb-h1-measured
# and zb-v-measured, timed from the step the schedule was placed at;
# zb-h1-unit and zb-v-unit keep the papers' placement, reported as zb-h1 and
# zb-v; zb-h1-measured and zb-v-measured set "measured" explicitly; SCHEDULES
# may add
# 1f1b-wstep, gpipe-wstep, interleaved-wstep: pipeline.weight_grad = "step"), at
# P = 2 ranks, N = 2, 4, 8, 16, each REPS times (default 3; the schedules of
# one model and N run one after another within a repetition, so that a slow
# spell of the host hits them alike; the table gives medians): measured bubble (trace.h5, tools/trace_report.py) against
# the schedule's theory (unit-time simulation of its schedule data) and the
# planner's prediction, measured step time against the prediction, peak
# memory, and ZB-H1's gain over 1F1B against what theory predicts. Writes
# results/bench_schedules.md and one timeline per schedule (the first of MODELS, N = 8):
# results/bench_schedules_timeline_<schedule>.png.
#   jobs/bench_schedules.sh        (needs build/ and tools/.venv: make build tools)
#   P=4 jobs/bench_schedules.sh    (4 ranks on this 2-core machine: oversubscribed)
#   REPORT_ONLY=1 jobs/bench_schedules.sh  (the tables again from runs/ of an earlier run
#                                           with the same settings; nothing is run)
#   SUFFIX=_zbh1 MODELS=mlp-even SCHEDULES="1f1b zb-h1-unit" N_LIST="4 8 16" REPS=8 jobs/bench_schedules.sh
#        (a subset with more repetitions: results/bench_schedules_zbh1.md, runs apart)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
P=${P:-2}
N_LIST=${N_LIST:-"2 4 8 16"}
SCHEDULES=${SCHEDULES:-"1f1b interleaved zb-h1-unit zb-v-unit zb-h1 zb-v"}
MODELS=${MODELS:-"mlp-even mlp gpt-balanced gpt"}
REPS=${REPS:-3}
PY=tools/.venv/bin/python
# zb-h1 (auto) and zb-h1-measured run the same setting and would share the label
has_schedule() { case " $SCHEDULES " in *" $1 "*) return 0 ;; esac; return 1; }
for zb in zb-h1 zb-v; do
  if has_schedule "$zb" && has_schedule "$zb-measured"; then
    echo "bench_schedules: SCHEDULES has both $zb and $zb-measured: $zb is placed at measured times already (pipeline.schedule_times = \"auto\"); keep one, or use $zb-unit for the papers' placement" >&2
    exit 1
  fi
done
out=results/bench_schedules${SUFFIX:-}.md
mkdir -p runs results
dirs=()

# Machine check: the MLP on one rank alone, then two independent one-rank
# runs at once. On a machine with a core per rank both take the same time; a
# ratio near 2 means the ranks share one core's throughput, so a rank runs
# faster while its peer idles and filling the bubble cannot shorten the step.
median_step() {
  $PY -c "import h5py, numpy as np; print(np.median(h5py.File('$1/metrics.h5')['step_time_s'][2:]))"
}
one_rank() {
  mpirun --oversubscribe --bind-to none -np 1 build/pipetrain train inputs/bench_mlp.toml \
    --set pipeline.predict=false --set output.dir=\"$1\" > "$1.log" 2>&1 || { cat "$1.log"; exit 1; }
}
if [ "${REPORT_ONLY:-0}" != 1 ]; then
  one_rank runs/bench_schedules_alone
  one_rank runs/bench_schedules_pair_a & one_rank runs/bench_schedules_pair_b & wait
fi
alone=$(median_step runs/bench_schedules_alone)
pair=$(median_step runs/bench_schedules_pair_a)
check_line=$($PY -c "print('one-rank MLP step %.1f ms alone, %.1f ms with a second one-rank run at once: x%.2f' % ($alone * 1e3, $pair * 1e3, $pair / $alone))")

deck_of() {
  case $1 in
    mlp) echo inputs/bench_mlp.toml ;;
    mlp-equal) echo inputs/bench_mlp_equal.toml ;;
    mlp-even) echo inputs/bench_mlp_even.toml ;;
    gpt-balanced) echo inputs/gpt_balanced.toml ;;
    gpt) echo inputs/gpt_markov.toml ;;
    *) echo "bench_schedules: unknown model '$1' (mlp mlp-even mlp-equal gpt-balanced gpt)" >&2; exit 1 ;;
  esac
}
# The GPT deck trains for 600 steps with evaluations; the benchmark times 20.
extra_of() {
  [ "$1" = gpt ] && echo "--set training.steps=20 --set training.eval_every=0 --set training.warmup_steps=2"
}

for rep in $(seq 1 "$REPS"); do
  for model in $MODELS; do
    for n in $N_LIST; do
      for s in $SCHEDULES; do
        deck=$(deck_of "$model")
        case $s in interleaved*) [ $((n % P)) -ne 0 ] && continue ;; esac
        dir=runs/bench_schedules${SUFFIX:-}_${model}_${s}_p${P}_n${n}_r$rep
        virtual=""
        [ "$s" = interleaved ] && virtual="--set pipeline.virtual_stages=2"
        # zb-h1-measured, zb-v-measured: placed again at the measured action times
        sched=$s
        case $s in *-measured) virtual="--set pipeline.schedule_times=\"measured\""; sched=${s%-measured} ;; esac
        # zb-h1-unit, zb-v-unit: the papers' placement all run long (zb-h1 and zb-v
        # as decks leave them, pipeline.schedule_times = "auto", are placed again)
        case $s in *-unit) virtual="--set pipeline.schedule_times=\"unit\""; sched=${s%-unit} ;; esac
        # 1f1b-wstep, ...: every stage's weight gradients in one pass after its last B
        case $s in *-wstep) virtual="--set pipeline.weight_grad=\"step\""; sched=${s%-wstep}
                            if [ "$sched" = interleaved ]; then virtual+=" --set pipeline.virtual_stages=2"; fi ;; esac
        if [ "${REPORT_ONLY:-0}" = 1 ]; then  # the tables again from the runs already there
          [ -f "$dir/trace.h5" ] || { echo "bench_schedules: REPORT_ONLY=1 but $dir/trace.h5 is missing" >&2; exit 1; }
          dirs+=("$model=$dir")
          continue
        fi
        # shellcheck disable=SC2046
        mpirun --oversubscribe --bind-to none -np "$P" build/pipetrain train "$deck" \
          --set pipeline.micro_batches=$n --set pipeline.schedule=\"$sched\" $virtual \
          --set output.trace=true --set output.dir=\"$dir\" $(extra_of $model) \
          > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
        dirs+=("$model=$dir")
        if [ "$model" = "${MODELS%% *}" ] && [ "$n" = 8 ] && [ "$rep" = 1 ]; then  # the first model's
          $PY tools/trace_timeline.py "$dir/trace.h5" "results/bench_schedules_timeline_${s}${SUFFIX:-}.png" > /dev/null
        fi
      done
    done
  done
done
first_dir=${dirs[0]#*=}
blas=$(grep -m1 "^BLAS (ranks" "$first_dir.log" || true)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
  echo "# Schedules: measured bubble and step time, P = $P (CPU backend)"
  echo
  subset=""
  [ -n "${SUFFIX:-}" ] && subset="SUFFIX=$SUFFIX MODELS=\"$MODELS\" SCHEDULES=\"$SCHEDULES\" N_LIST=\"$N_LIST\" "
  echo "Command: \`${subset}P=$P REPS=$REPS jobs/bench_schedules.sh\`; decks \`inputs/bench_mlp.toml\` (mlp: 16"
  echo "Linear layers of 1024 x 1024, batch 512, 12 steps), \`inputs/gpt_balanced.toml\`"
  echo "(gpt-balanced: 7 blocks and a head that costs about one, C = 96, T = 64, V = 384, batch 32,"
  echo "20 steps, partition \"time\": equal stages) and \`inputs/gpt_markov.toml\` (gpt: 4 blocks,"
  echo "V = 128, batch 32, 20 steps: its last stage is the slowest, so its bubble is above the"
  echo "theory of equal stages and is compared with the planner's prediction instead), one BLAS"
  echo "thread per rank, tracing on, steps after the first 2 counted. Interleaved runs 2 stages"
  echo "per rank, ZB-V 2 (V shape). Each row: the median of $REPS runs (column runs), the"
  echo "schedules of one model and N run one after another in each repetition."
  case " $MODELS " in *" mlp-equal "*)
    echo "mlp-equal: \`inputs/bench_mlp_equal.toml\`, the mlp with its last layer 1024 -> 683, so that"
    echo "both stages do 23 GEMMs of 1024 x 1024 x rows per micro-batch (in mlp the first does 23, the"
    echo "second 24: layer 0 needs no input gradient)." ;;
  esac
  case " $MODELS " in *" mlp-even "*)
    echo "mlp-even: \`inputs/bench_mlp_even.toml\`, layer 0 of 16 -> 1024 (1/64 of a layer) and"
    echo "the mlp's 16 layers of 1024 x 1024, uniform partition [9, 8] on 2 stages and [5, 4, 4, 4]"
    echo "on 4: every stage does the same GEMMs in F, in B and in W under every placement (in mlp the"
    echo "first stage's B does one fewer, as layer 0 needs no input gradient), which is what the"
    echo "theory assumes." ;;
  esac
  echo "Machine: $(hostname), $(nproc) cores ($cpu), $(date -u +%F). $blas"
  echo
  echo "Machine check (this run): $check_line. A factor near 1 means a core per rank;"
  echo "near 2, the two ranks share one core's throughput: a rank computes up to twice as fast"
  echo "while its peer idles, so the measured bubble shrinks and a schedule that fills the"
  echo "bubble (interleaved, ZB) cannot shorten the step much."
  [ "$P" -gt "$(nproc)" ] && echo "**$P ranks on $(nproc) cores: oversubscribed**, ranks share cores, bubbles and step times are not the schedule's alone."
  echo
  echo "Theory: the schedule data simulated in unit time (F = 1, B = 2, or B = W = 1 when"
  echo "split; free links): (P-1)/(N+P-1) for 1F1B, (P-1)/(vN+P-1) interleaved, (P-1)/(3N+P-1)"
  echo "ZB-H1 (N >= P). Predicted: the planner's simulation of the same schedule with the"
  echo "run's brief profile (W = its share of B by FLOPs, docs/schedules.md). At the run's"
  echo "costs: the same schedule simulated with the run's own median F, B and W time of every"
  echo "stage (trace.h5 attribute cost_bubble; free links): the bubble the schedule leaves for"
  echo "actions that cost what they cost in this run. Measured minus it (runtime added) is what"
  echo "running adds to that: the spread of action times and the runtime's messages and progress."
  echo "It minus the theory is what the model's uneven actions cost (a GPT's last stage: F carries"
  echo "the loss and the head, B and W are light; attention has no W). Replayed: every timed step"
  echo "simulated again with each F, B and W taking the time it took in that step (trace.h5 group"
  echo "replay; free links), the mean over the steps. Replayed minus at the run's costs is what the"
  echo "spread of action times around their medians costs (a slow action delays the stage that"
  echo "waits for it); measured minus replayed is all that messages, progress and the executor's"
  echo "bookkeeping between actions add."
  case " $SCHEDULES " in *-measured*|*" zb-h1 "*|*" zb-v "*)
    echo
    echo "zb-h1-measured, zb-v-measured: the same schedules with pipeline.schedule_times ="
    echo "\"measured\" (or \"auto\", the default since 2026-12-04, which means the same without"
    echo "rebalancing): steps 0-2 run the papers' (unit-time) placement, then W is placed again at"
    echo "each stage's median F, B and W time measured in steps 1-2 when that simulates a bubble"
    echo "at least half a point smaller (docs/schedules.md); their rows count the steps from the"
    echo "placement on (3..), and their theory is the papers' placement's." ;;
  esac
  case " $SCHEDULES " in *-wstep*)
    echo
    echo "1f1b-wstep (and gpipe-, interleaved-): the schedule with pipeline.weight_grad = \"step\":"
    echo "B computes input gradients only, each stage's weight gradients run in one pass after"
    echo "its last B (docs/schedules.md); theory 2(P-1)/(3N+2(P-1)) for 1f1b and gpipe." ;;
  esac
  echo
  $PY tools/schedules_report.py --skip 2 "${dirs[@]}"
  echo
  echo "Measured bubble = mean over ranks and steps of 1 - (F + B + W time without"
  echo "waits) / (longest rank's span of the step's schedule); see docs/outputs.md."
  echo "Peak MiB: the largest rank's peak of all memory during a step (metrics.h5);"
  echo "activations MiB: the largest rank's peak of activations (the stash)."
  echo
  for s in $SCHEDULES; do
    echo "![$s, ${MODELS%% *}, N = 8](bench_schedules_timeline_${s}${SUFFIX:-}.png)"
  done
} > "$out"
cat "$out"
