#!/usr/bin/env bash
# run.sh: the sanitizer pass (`make test-sanitize`, after the ASan + UBSan
# configuration of BUILD_DIR, normally build-asan).
#   tests/sanitizers/run.sh BUILD_DIR
# 0. builds the targets the pass runs: the executables of the tests below
#    (from ctest's list of their commands) and the drivers pipetrain and
#    pipetrain_logits; the test executables of the skipped labels are not
#    built (JOBS parallel jobs, default: the cores);
# 1. the CTest suite of BUILD_DIR (MPI tests at 1, 2 and 4 ranks, the
#    end-to-end CLI tests, and sanitizer_selftest) except the tests labelled
#    "tooling" (tests/CMakeLists.txt: the Python tools and the command-line
#    drivers whose C++ the GoogleTests cover), "repeats_at_4" (4-rank
#    reruns of the equivalence matrices), "covered_at_2" (1-rank instances
#    whose 2-rank instance runs the same matrix), "kernel_free" (the
#    schedule, planner and deck GoogleTests: integer and host-container
#    logic, run by every `make test`) and "covered_e2e" (end-to-end runs
#    of data parallelism, rebalancing and stalls, whose C++ the MPI
#    GoogleTests run), two tests at a time (a test
#    that starts a multi-rank job runs alone: PROCESSORS);
#    with options.sh's fast unwinding; then leak_filter.py sets aside the
#    leaks allocated outside the project's code (their stacks stop inside
#    Open MPI and the libraries under it) into BUILD_DIR/sanitizer-external;
# 2. a short training run on 2 ranks with checkpoints, then a --resume of it
#    on 4 ranks to more steps, with the full unwinder: every leak with its
#    whole stack, only lsan.supp's libraries suppressed, a leak the project
#    causes inside a library (HDF5, MPI objects) reported at its frame;
# each rank writing its reports to BUILD_DIR/sanitizer-logs. Fails when a
# test or run fails, and when any report was written (after step 1's
# filter), also by a run that was expected to fail (the CLI tests' bad
# decks, stalls, divergences) or that exited 0. Reports are printed at the
# end. SANITIZE_CTEST_ARGS adds ctest arguments, e.g.
# SANITIZE_CTEST_ARGS="-R test_cli" to run one test.
set -uo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
logs=$build/sanitizer-logs
external=$build/sanitizer-external
rm -rf "$logs" "$external"
source tests/sanitizers/options.sh "$logs" fast
mpirun=(timeout 300 mpirun --oversubscribe --bind-to none)
failed=()
tb=$SECONDS

# A failed test gets one more try: on a loaded 2-core machine
# test_trace_np2's clock-alignment bound (best MPI ping-pong under 1 ms)
# failed once in three sanitizer runs here (and once in a plain `make test`
# under the same load: the load, not ASan). The try does not hide a sanitizer
# report: the first try's report stays in $logs and fails the pass.
skipped="tooling|repeats_at_4|covered_at_2|kernel_free|covered_e2e"

# The targets of the tests the pass runs: each executable a test's command
# names inside the build directory (an MPI test's, after mpiexec), and the
# drivers the scripts start. ctest lists no command for a test whose
# executable is its command and is not built yet: such a test is a
# pt_add_test GoogleTest (tests/CMakeLists.txt), named as its target.
needed_targets() {
  (cd "$build" && ctest -N -LE "$skipped" ${SANITIZE_CTEST_ARGS:-} --show-only=json-v1) | python3 -c '
import json, os, sys
build, names = sys.argv[1], {"pipetrain", "pipetrain_logits"}
for test in json.load(sys.stdin)["tests"]:
    command = test.get("command", [])
    if not command:
        names.add(test["name"])
    for arg in command:
        if os.path.isabs(arg) and os.path.dirname(arg).startswith(build):
            names.add(os.path.basename(arg))
print(" ".join(sorted(names)))' "$build"
}
targets=$(needed_targets) || { echo "test-sanitize: cannot list the tests of $build"; exit 1; }
echo "test-sanitize: building $(wc -w <<< "$targets") targets in $build"
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $targets || exit 1
t0=$SECONDS

echo "test-sanitize: ctest in $build (reports to $logs)"
(cd "$build" && ctest --output-on-failure -j 2 -LE "$skipped" --repeat until-pass:2 ${SANITIZE_CTEST_ARGS:-}) ||
  failed+=("ctest")
python3 tests/sanitizers/leak_filter.py "$logs" "$build" "$external" || failed+=("leak_filter.py")
t1=$SECONDS

source tests/sanitizers/options.sh "$logs" full

out=$build/sanitize-train
rm -rf "$out"
mkdir -p "$out"
deck=inputs/mlp_small.toml
common=(--set output.checkpoint_every=2 --set output.dir=\"$out/run\")
echo "test-sanitize: train $deck, 2 ranks, 4 steps, checkpoints every 2"
"${mpirun[@]}" -np 2 "$build/pipetrain" train $deck "${common[@]}" --set training.steps=4 \
  > "$out/train.log" 2>&1 || failed+=("training run (log: $out/train.log)")
tail -2 "$out/train.log"
echo "test-sanitize: resume it on 4 ranks to step 8"
"${mpirun[@]}" -np 4 "$build/pipetrain" train $deck "${common[@]}" --set training.steps=8 \
  --resume > "$out/resume.log" 2>&1 || failed+=("resumed run (log: $out/resume.log)")
grep -q "resuming from $out/run/checkpoints/step_00000004 (step 4)" "$out/resume.log" ||
  failed+=("resumed run did not resume from step 4 (log: $out/resume.log)")
grep -q "step      8/8" "$out/resume.log" || failed+=("resumed run did not reach step 8")
tail -2 "$out/resume.log"
t2=$SECONDS

reports=$(find "$logs" -type f -size +0 2>/dev/null | sort)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "==================== sanitizer report $f"
    cat "$f"
  done
  failed+=("$(echo "$reports" | wc -l) sanitizer report(s) in $logs (printed above)")
fi

echo "test-sanitize: build $((t0 - tb)) s, ctest $((t1 - t0)) s, training and resume $((t2 - t1)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'test-sanitize: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "test-sanitize: passed, no sanitizer report"
