# options.sh: the sanitizer runtime options of `make test-sanitize` (sourced
# by run.sh and selftest.sh, not run).
#   source tests/sanitizers/options.sh LOG_DIR
# Every report goes to a file LOG_DIR/asan.<pid> or LOG_DIR/ubsan.<pid>, so a
# report printed by any rank, also in a run that was expected to fail, is
# found afterwards: the pass fails when LOG_DIR holds a non-empty file.
#   detect_leaks=1            LeakSanitizer at exit (on by default on Linux;
#                             stated so that it cannot be lost)
#   halt_on_error=1           the first ASan report ends the process
#   fast_unwind_on_malloc=0   Open MPI, hwloc and PMIx are built without frame
#                             pointers: the frame-pointer unwinder stops inside
#                             them after one frame, so their leaks cannot be
#                             matched by lsan.supp; the DWARF unwinder gives
#                             the whole stack (slower, measured acceptable)
#   print_suppressions=0      no table of suppressed leaks: it would make the
#                             log files non-empty
#   print_stacktrace=1        UBSan prints the stack, not only file and line
# -fno-sanitize-recover=undefined (CMakeLists.txt) makes every UB fatal.
sanitizer_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=0:log_path=$1/asan"
export LSAN_OPTIONS="suppressions=$sanitizer_dir/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$1/ubsan"
