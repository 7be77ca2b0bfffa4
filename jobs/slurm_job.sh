#!/usr/bin/env bash
# slurm_job.sh: the body of the pipetrain batch jobs, sourced by
# jobs/slurm_pipetrain.sbatch (CPU nodes) and jobs/slurm_pipetrain_gpu.sbatch
# (one GPU per rank) after their #SBATCH lines; not submitted itself.
#   PIPETRAIN_HOME  the pipetrain checkout (set by the sbatch script)
#   PIPETRAIN_BIN   the binary (default: $PIPETRAIN_HOME/build/pipetrain, or
#                   build-cuda/pipetrain from the GPU script)
#   RESUME=1        resume on the first attempt too (a resubmitted job)
# What it does (docs/cluster.md):
#   - marks each attempt in the log (the scripts append: --open-mode=append);
#   - on a requeued attempt (SLURM_RESTART_COUNT > 0) passes --resume auto:
#     the latest good checkpoint, or step 0 when none was written yet;
#   - forwards the time-limit warning (--signal=B:USR1@SECONDS, sent to this
#     shell) to the ranks, which finish their step, write a checkpoint and
#     exit with status 75; SIGTERM (preemption, a limit without warning)
#     reaches the ranks directly and ends the same way;
#   - after status 75 following the warning, requeues the job (scontrol
#     requeue), so the next attempt resumes (also if the limit's SIGTERM came
#     too); after a SIGTERM alone, Slurm itself is requeueing, preempting or
#     cancelling the job and decides; any other status is the job's.
# Exit statuses: 0 trained to the end, or stopped and requeued; 2 bad input
# (a missing deck or binary here; the deck, command line or checkpoint in
# pipetrain); 75 stopped with a checkpoint, not requeued here; anything else
# the run's failure.

pt_die() { echo "pipetrain job: error: $*" >&2; exit 2; }

pt_deck=${1:-}
[ -n "$pt_deck" ] || pt_die "usage: sbatch ${PT_SCRIPT:-jobs/slurm_pipetrain.sbatch} DECK [--set section.key=value ...]"
shift
[ -f "$pt_deck" ] || pt_die "deck '$pt_deck' not found (relative paths are taken from the submit directory, $PWD)"
pt_bin=${PIPETRAIN_BIN:-$PIPETRAIN_HOME/$PT_DEFAULT_BIN}
[ -x "$pt_bin" ] || pt_die "pipetrain binary '$pt_bin' not found or not executable: build it in $PIPETRAIN_HOME ('make' for CPU, 'make cuda' for GPU) or set PIPETRAIN_BIN"

pt_attempt=$(( ${SLURM_RESTART_COUNT:-0} + 1 ))
echo "=== pipetrain job ${SLURM_JOB_ID:-?} attempt $pt_attempt: $(date '+%F %T'), nodes ${SLURM_JOB_NODELIST:-?}, ${SLURM_NTASKS:-?} tasks, deck $pt_deck ==="

pt_args=(train "$pt_deck")
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ -n "${RESUME:-}" ]; then pt_args+=(--resume auto); fi
# Each rank's BLAS threads are the cores Slurm gave it.
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
pt_args+=(--set "training.blas_threads=${SLURM_CPUS_PER_TASK:-1}")

pt_step_pid=""
pt_warned=""
pt_forwarder=""
# The warning reached this shell: pass it on to the ranks, again every 5 s
# until the job step ends (a warning that comes before the step's tasks
# exist, or while they start, would otherwise be lost; a rank records the
# first and ignores the rest).
pt_forward() {
  [ -n "$pt_step_pid" ] && [ -z "$pt_forwarder" ] || return 0
  (while kill -0 "$pt_step_pid" 2> /dev/null; do
     scancel --signal=USR1 "$SLURM_JOB_ID" 2> /dev/null
     sleep 5
   done) &
  pt_forwarder=$!
}
trap 'pt_warned=1; echo "pipetrain job: USR1 received at $(date +%T); asking the ranks to checkpoint and stop"; pt_forward' USR1
pt_terminated=""
trap 'pt_terminated=1; echo "pipetrain job: SIGTERM received at $(date +%T); the ranks stop after their step"' TERM

# srun starts one task per rank through PMIx (no mpirun inside Slurm), each
# with the cores of --cpus-per-task (srun of Slurm 22.05 does not inherit
# them). It runs in the background so that the traps above run while it trains.
srun --mpi=pmix --cpu-bind=cores --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
  "$pt_bin" "${pt_args[@]}" "$@" &
pt_step_pid=$!
[ -n "$pt_warned" ] && pt_forward  # warned before srun started
pt_status=0
while :; do
  wait "$pt_step_pid"
  pt_status=$?
  kill -0 "$pt_step_pid" 2> /dev/null && continue  # a trap interrupted the wait: srun still runs
  if [ "$pt_status" -gt 128 ]; then  # srun ended while a trap ran: its own status
    wait "$pt_step_pid" 2> /dev/null
    pt_reaped=$?
    [ "$pt_reaped" -ne 127 ] && pt_status=$pt_reaped
  fi
  break
done

[ -n "$pt_forwarder" ] && kill "$pt_forwarder" 2> /dev/null
if [ "$pt_status" -eq 75 ] && [ -n "$pt_terminated" ] && [ -z "$pt_warned" ]; then
  # Slurm sent SIGTERM: it is requeueing, preempting, cancelling or timing
  # out the job, and decides whether it runs again; the checkpoint is written.
  echo "pipetrain job: the run stopped on SIGTERM with a checkpoint (status 75); Slurm decides what follows"
  exit 75
fi
if [ "$pt_status" -eq 75 ]; then
  echo "pipetrain job: the run stopped early with a checkpoint (status 75); requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID" || { echo "pipetrain job: scontrol requeue failed: submit again with RESUME=1" >&2; exit 75; }
  exit 0
fi
echo "=== pipetrain job ${SLURM_JOB_ID:-?} attempt $pt_attempt ended with status $pt_status at $(date '+%F %T') ==="
exit "$pt_status"
