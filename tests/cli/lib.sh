# lib.sh: shared by the end-to-end shell tests (sourced, not run).
#   source tests/cli/lib.sh BUILD_DIR
# Sets build, tmp (removed on exit), passed/failed counters and the helpers
# run, check, output_has, status_is, status_not; works from the repo root.
set -uo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0

run() {  # run NP ARGS... : runs pipetrain on NP ranks, output in $tmp/out, status in $status
  local np=$1; shift
  timeout 60 mpirun --oversubscribe --bind-to none -np "$np" "$build/pipetrain" "$@" \
    > "$tmp/out" 2>&1
  status=$?
}

check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"
  else failed=$((failed + 1)); echo "FAIL $name"; sed 's/^/     | /' "$tmp/out" | tail -20; fi
}
output_has() { grep -qF -- "$1" "$tmp/out"; }
status_is() { [ "$status" -eq "$1" ]; }
status_not() { [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; }  # 124 = timeout: a hang
