# slurm_cluster.sh: a real single-node Slurm for the tests (sourced, not run).
#   start_slurm DIR   munged, slurmctld and slurmd as root in the background,
#                     no systemd, all state under DIR, ports chosen free;
#                     exports SLURM_CONF; returns once the node is idle
#   stop_slurm        stops exactly the daemons start_slurm started (by PID)
#   job_field ID KEY  a field of `scontrol show job` (JobState, Restarts, ExitCode)
#   wait_job ID LIMIT waits until job ID has ended for good (not requeued);
#                     sets job_state, job_restarts, job_exit; 1 on time-out
# The node has the CPUs online (getconf _NPROCESSORS_ONLN; nproc honours
# OMP_NUM_THREADS), proctrack/linuxproc and task/none (no cgroups), and
# AuthInfo cred_expire=5 and a scheduling pass every 2 s, so a requeued job
# starts again about 21 s later.
slurm_pids=()

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_slurm() {
  local dir=$1 host cpus port_ctld port_d i
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  host=$(hostname -s)
  cpus=$(getconf _NPROCESSORS_ONLN)
  port_ctld=$(free_port)
  port_d=$(free_port)
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=pipetrain-ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$dir/slurm.conf
  munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" > "$dir/munged.out" 2>&1 &
  slurm_pids+=($!)
  for i in $(seq 1 50); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done
  slurmctld -D -i -f "$dir/slurm.conf" > "$dir/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  slurmd -D -f "$dir/slurm.conf" -N "$host" > "$dir/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  for i in $(seq 1 120); do
    sinfo -h -N -o '%T' 2> /dev/null | grep -qx idle && return 0
    sleep 0.5
  done
  echo "start_slurm: the node did not become idle; logs in $dir:" >&2
  tail -n 20 "$dir"/*.log "$dir"/*.out "$dir/munge/munged.log" >&2 2> /dev/null
  return 1
}

stop_slurm() {
  local pid
  [ ${#slurm_pids[@]} -eq 0 ] && return 0
  scancel --full --signal=KILL --state=RUNNING -u root 2> /dev/null
  for pid in "${slurm_pids[@]}"; do kill -TERM "$pid" 2> /dev/null; done
  sleep 1
  for pid in "${slurm_pids[@]}"; do kill -KILL "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; done
  slurm_pids=()
  # What the jobs started carries the test's marker (lib.sh): no rank or
  # launcher outlives the test, whatever became of slurmstepd.
  if declare -F job_pids > /dev/null; then
    for pid in $(job_pids); do kill -KILL "$pid" 2> /dev/null; done
  fi
  return 0
}

job_field() { scontrol show job -o "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

wait_job() {
  local id=$1 limit=$2 t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    job_state=$(job_field "$id" JobState)
    case $job_state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        job_restarts=$(job_field "$id" Restarts)
        job_exit=$(job_field "$id" ExitCode)
        return 0 ;;
    esac
    sleep 1
  done
  job_restarts=$(job_field "$id" Restarts)
  job_exit=$(job_field "$id" ExitCode)
  echo "wait_job: job $id still $job_state after $limit s" >&2
  return 1
}
