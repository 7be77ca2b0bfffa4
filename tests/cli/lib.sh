# lib.sh: shared by the end-to-end shell tests (sourced, not run).
#   source tests/cli/lib.sh BUILD_DIR
# Sets build, tmp (removed on exit), passed/failed counters and the helpers
# run, check, output_has, status_is, status_not, digest, need_tools_python,
# same_history, job_pids, no_leftovers, sanitized_build;
# works from the repo root. Every process this test starts carries the
# marker PIPETRAIN_TEST_JOB in its environment, so that process checks see
# this test's own job only, never another user's run or another checkout's
# test on the same machine.
set -uo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
export PIPETRAIN_TEST_JOB="$(basename "$0").$$.$tmp"
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0

run() {  # run NP ARGS... : runs pipetrain on NP ranks, output in $tmp/out, status in $status
  local np=$1; shift  # RUN_LIMIT_S (default 60): the wall limit; past it, status 124 (a hang)
  timeout "${RUN_LIMIT_S:-60}" mpirun --oversubscribe --bind-to none -np "$np" "$build/pipetrain" "$@" \
    > "$tmp/out" 2>&1
  status=$?
}

# sanitized_build: true when BUILD_DIR is the ASan + UBSan build (make
# test-sanitize), whose ranks run several times slower: a test that needs a
# run long enough to interrupt it asks for fewer steps there.
sanitized_build() { grep -q '^PIPETRAIN_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt" 2> /dev/null; }

check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"
  else failed=$((failed + 1)); echo "FAIL $name"; sed 's/^/     | /' "$tmp/out" | tail -20; fi
}
output_has() { grep -qF -- "$1" "$tmp/out"; }
status_is() { [ "$status" -eq "$1" ]; }
status_not() { [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; }  # 124 = timeout: a hang

# job_pids: the pipetrain ranks and MPI launchers (mpirun, prterun, prted,
# orted) that this test started, found by the marker in their environment.
job_pids() {
  local dir pid exe
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    exe=$(readlink "$dir/exe" 2> /dev/null) || continue
    case "${exe##*/}" in pipetrain | mpirun | orterun | prterun | prted | orted) ;; *) continue ;; esac
    tr '\0' '\n' < "$dir/environ" 2> /dev/null | grep -qxF "PIPETRAIN_TEST_JOB=$PIPETRAIN_TEST_JOB" &&
      echo "$pid"
  done
}
# True when none of this test's pipetrain ranks or launchers is left; waits
# up to 5 s for ranks that are still exiting.
no_leftovers() {
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    [ -z "$(job_pids)" ] && return 0
    sleep 0.5
  done
  echo "     | left: $(job_pids | tr '\n' ' ')"
  return 1
}
# start_decoy: a real pipetrain rank of another job (its own marker), stopped
# by SIGSTOP at start-up, that this test must neither count nor kill; sets
# decoy_pid (the launcher). stop_decoy kills it.
start_decoy() {
  PIPETRAIN_TEST_JOB=decoy.$$ PIPETRAIN_TEST_STALL=0:startup \
    mpirun --oversubscribe --bind-to none -np 1 "$build/pipetrain" train inputs/mlp_small.toml \
    --set output.dir=\"$tmp/decoy\" > "$tmp/decoy.out" 2>&1 &
  decoy_pid=$!
  local i
  for i in $(seq 1 100); do
    grep -q "test fault: stopping" "$tmp/decoy.out" 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}
decoy_alive() { kill -0 "$decoy_pid" 2> /dev/null && [ -n "$(PIPETRAIN_TEST_JOB=decoy.$$ job_pids)" ]; }
stop_decoy() {
  local p
  for p in $(PIPETRAIN_TEST_JOB=decoy.$$ job_pids); do kill -KILL "$p" 2> /dev/null; done
  kill -KILL "$decoy_pid" 2> /dev/null
  wait "$decoy_pid" 2> /dev/null
  return 0
}

# digest STEP LOG: the digest of the checkpoint of step STEP that LOG printed
# (the final state when STEP is the last step). When LOG printed none it
# prints "no-digest:STEP:LOG:" and the clock in nanoseconds, unique to the
# call, so two missing digests never compare equal (not even two of one LOG
# path rewritten by two runs); has_digest STEP LOG tells whether there is one.
digest() {
  local d
  d=$(grep -o "checkpoint step $1: .*digest [0-9a-f]\+" "$2" 2>/dev/null | awk '{print $NF}')
  echo "${d:-no-digest:$1:$2:$(date +%s%N)}"
}
has_digest() { case "$(digest "$1" "$2")" in no-digest:*) return 1 ;; *) return 0 ;; esac; }

# need_tools_python: sets py to tools/.venv's Python (h5py), or fails the test.
need_tools_python() {
  py=tools/.venv/bin/python
  if [ ! -x "$py" ]; then echo "FAIL $py missing: run make tools"; exit 1; fi
}

# same_history DIR REF: DIR/metrics.h5 holds exactly REF/metrics.h5's steps,
# each once, with its losses, gradient norms and learning rates bit for bit.
same_history() {
  "$py" - "$2/metrics.h5" "$1/metrics.h5" > "$tmp/py.out" 2>&1 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2]) as b:
    assert list(b["step"][:]) == list(a["step"][:]), f"steps {list(b['step'][:])}"
    for name in ("loss", "grad_norm", "lr"):
        assert a[name][:].tobytes() == b[name][:].tobytes(), f"{name} differs"
PY
}
