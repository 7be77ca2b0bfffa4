# options.sh: the sanitizer runtime options of `make test-sanitize` (sourced
# by run.sh and selftest.sh, not run).
#   source tests/sanitizers/options.sh LOG_DIR [full|fast]
# Every report goes to a file LOG_DIR/asan.<pid> or LOG_DIR/ubsan.<pid>, so a
# report printed by any rank, also in a run that was expected to fail, is
# found afterwards: the pass fails when LOG_DIR holds a non-empty file.
#   detect_leaks=1            LeakSanitizer at exit (on by default on Linux;
#                             stated so that it cannot be lost)
#   halt_on_error=1           the first ASan report ends the process
#   fast_unwind_on_malloc     how the stack of each allocation is taken:
#     full (default): 0, the DWARF unwinder. Open MPI, hwloc and PMIx are
#       built without frame pointers; only this unwinder gives the whole
#       stack through them, so that lsan.supp can match their leaks by
#       library, and a leak the project causes inside a library (an HDF5
#       handle never closed) shows the project's frame that made it. It
#       makes every allocation about ten times slower: run.sh uses it for
#       its closing training run and resume only.
#     fast: 1, the frame-pointer unwinder. The project is built with frame
#       pointers, so an allocation made by its code has its whole stack, but
#       a stack inside those libraries stops after a frame or two and
#       lsan.supp cannot match it. Leak reports then carry each frame's
#       module, and leak_filter.py sets aside the leaks whose allocating
#       frame (#1) lies outside the project's executables. As those leaks
#       are no longer suppressed, a leak no longer changes the exit status
#       (LSan's exitcode=0): the report file decides, after the filter;
#       ASan's errors still end the process non-zero (abort_on_error=1:
#       abort() instead of an exit with `exitcode`, which LSan's
#       exitcode=0 would have made 0), UBSan's too. run.sh uses this mode
#       for the CTest suite: test_schedule_equivalence_np2 took 17 s with
#       it and 126 s without (2026-12-06, AMD EPYC, AVX2).
#   stack_trace_format        the default frame line and {module offset}:
#                             the path of the executable or library of each
#                             frame and the offset in it, which
#                             leak_filter.py reads
#   print_suppressions=0      no table of suppressed leaks: it would make the
#                             log files non-empty
#   print_stacktrace=1        UBSan prints the stack, not only file and line
# -fno-sanitize-recover=undefined (CMakeLists.txt) makes every UB fatal.
# ASan's own error reports (out of bounds, use after free) take the stack of
# the faulting access with the full unwinder in both modes.
sanitizer_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
case "${2:-full}" in
  full) sanitizer_mode="fast_unwind_on_malloc=0" sanitizer_leak_exit="" ;;
  fast) sanitizer_mode="fast_unwind_on_malloc=1:abort_on_error=1" sanitizer_leak_exit=":exitcode=0" ;;
  *) echo "options.sh: unwinding mode '$2': expected full or fast" >&2; return 2 ;;
esac
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:$sanitizer_mode:log_path=$1/asan:stack_trace_format='    #%n %p %F %L {%m %o}'"
export LSAN_OPTIONS="suppressions=$sanitizer_dir/lsan.supp:print_suppressions=0$sanitizer_leak_exit"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$1/ubsan"
