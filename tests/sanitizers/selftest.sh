#!/usr/bin/env bash
# selftest.sh: the sanitizer pass catches what it must (CTest sanitizer_selftest,
# sanitizer build only).
#   tests/sanitizers/selftest.sh PATH/TO/sanitizer_selftest
# Runs sanitizer_selftest on 2 ranks with the options of options.sh once per
# mode. "clean" must exit 0 and leave no report (the Open MPI, hwloc, PMIx
# and libevent leaks of MPI_Init/MPI_Finalize are suppressed by lsan.supp).
# "leak", "overflow" and "ub" (made on rank 1) must exit non-zero and leave
# one report file that names the kind of error and sanitizer_selftest.cpp at
# the line marked SELFTEST-<MODE>, with nothing of the report on stderr: a
# project leak is not hidden by lsan.supp, frames are symbolized, and the
# whole report lands where run.sh looks for it. Then "clean" and "leak" again
# with the fast unwinding of the CTest suite (options.sh fast, then
# leak_filter.py as run.sh applies it): the filter sets aside every leak of
# the clean run (Open MPI's, whose stacks stop inside it; counted) and keeps
# the deliberate one, alone; an overflow and UB still end the run non-zero.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
src=$here/sanitizer_selftest.cpp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0

check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"
  else failed=$((failed + 1)); echo "FAIL $name"; sed 's/^/     | /' "$tmp/out" | tail -30; fi
}

run_mode() {  # run_mode MODE [UNWIND]: status in $status, the report files in $tmp/reports
  local logs=$tmp/logs_$1_${2:-full}
  (
    source "$here/options.sh" "$logs" "${2:-full}"
    timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$bin" "$1"
  ) > "$tmp/run.txt" 2>&1
  status=$?
  if [ "${2:-full}" = fast ]; then
    python3 "$here/leak_filter.py" "$logs" "$(dirname "$bin")" "$tmp/aside_$1" >> "$tmp/run.txt" 2>&1
    aside=$(grep -hc '^Direct leak of\|^Indirect leak of' "$tmp/aside_$1"/* 2>/dev/null | awk '{s += $1} END {print s + 0}')
  fi
  cat "$logs"/* > "$tmp/reports" 2>/dev/null
  reports=$(find "$logs" -type f -size +0 | wc -l)
  # Shown on a failed check: the report files, then what mpirun printed.
  { echo "--- report files:"; cat "$tmp/reports"; echo "--- mpirun output:"; cat "$tmp/run.txt"; } > "$tmp/out"
}
# Only the report files count: a report that reached stderr alone would be
# lost in a test that expects a failure, or whose output nobody reads.
reported() { grep -qE -- "$1" "$tmp/reports"; }
marked_line() { grep -n "SELFTEST-${1^^}" "$src" | head -1 | cut -d: -f1; }  # the line marked for MODE
not_on_stderr() { ! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$tmp/run.txt"; }

run_mode clean
check "clean: exits 0" [ "$status" -eq 0 ]
check "clean: no report (Open MPI noise suppressed)" [ "$reports" -eq 0 ]

for mode in leak overflow ub; do
  line=$(marked_line $mode)
  run_mode $mode
  check "$mode: exits non-zero" bash -c "[ $status -ne 0 ] && [ $status -ne 124 ]"
  check "$mode: one report file" [ "$reports" -eq 1 ]
  case $mode in
    leak) check "leak: reported by LeakSanitizer" reported "ERROR: LeakSanitizer: detected memory leaks"
          check "leak: frame names leak_on_purpose" reported "in [^ ]*leak_on_purpose" ;;
    overflow) check "overflow: reported as heap-buffer-overflow" reported "ERROR: AddressSanitizer: heap-buffer-overflow" ;;
    ub) check "ub: reported as signed integer overflow" reported "runtime error: signed integer overflow" ;;
  esac
  check "$mode: report names sanitizer_selftest.cpp:$line" reported "sanitizer_selftest\\.cpp:$line"
  check "$mode: the report went to the file, not to stderr" not_on_stderr
done

run_mode clean fast
check "fast clean: leak_filter.py leaves no report" [ "$reports" -eq 0 ]
echo "     ($aside leak(s) of the clean run set aside as allocated outside the project's code)"
line=$(marked_line leak)
run_mode leak fast
check "fast leak: one report file kept" [ "$reports" -eq 1 ]
check "fast leak: it names leak_on_purpose at sanitizer_selftest.cpp:$line" \
  reported "in [^ ]*leak_on_purpose [^ ]*sanitizer_selftest\\.cpp:$line"
check "fast leak: the deliberate leak is the only one kept" \
  [ "$(grep -c '^Direct leak of\|^Indirect leak of' "$tmp/reports")" -eq 1 ]
for mode in overflow ub; do
  run_mode $mode fast
  check "fast $mode: exits non-zero (a leak does not, there)" bash -c "[ $status -ne 0 ] && [ $status -ne 124 ]"
  check "fast $mode: reported" reported "sanitizer_selftest\\.cpp:$(marked_line $mode)"
done

echo "sanitizer selftest: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
