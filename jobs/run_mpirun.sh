#!/usr/bin/env bash
# run_mpirun.sh: launch pipetrain with mpirun on one node.
#   jobs/run_mpirun.sh NP DECK [pipetrain options, e.g. --set training.steps=10]
# One rank per pipeline stage. Ranks are not bound to cores (--bind-to none)
# so that each rank's BLAS threads can use the cores it is given; pipetrain
# picks cores/ranks BLAS threads per rank unless training.blas_threads says.
# --oversubscribe lets more ranks than cores run (slower; for testing).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 NP DECK [--set section.key=value ...]" >&2
  exit 2
fi
np=$1; deck=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
root_flags=()
[ "$(id -u)" -eq 0 ] && root_flags=(--allow-run-as-root)
exec mpirun "${root_flags[@]}" --oversubscribe --bind-to none -np "$np" \
  "$here/build/pipetrain" train "$deck" "$@"
