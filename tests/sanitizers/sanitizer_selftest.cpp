// sanitizer_selftest.cpp: a program with one deliberate error, built only in
// the sanitizer build (-DPIPETRAIN_SANITIZE=ON), so that selftest.sh can show
// that the plumbing of `make test-sanitize` catches what it is meant to catch.
//   mpirun -np 2 sanitizer_selftest clean|leak|overflow|ub
// MPI is started and stopped as in pipetrain; the error happens on the last
// rank only (a report from a rank other than 0 must not be lost). "clean"
// does nothing wrong: no report may appear (the suppressions cover Open MPI).
// Each error sits on a line marked SELFTEST-<MODE>; selftest.sh expects the
// report to name this file and that line.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>

namespace {

int* volatile g_sink = nullptr;  // defeats the optimiser; never freed on purpose
volatile int g_int = 0;

__attribute__((noinline)) void leak_on_purpose(int n) {
  g_sink = new int[n];  // SELFTEST-LEAK
  g_sink[0] = n;
  g_sink = nullptr;  // the last pointer to the block is gone: a leak
}

__attribute__((noinline)) int overflow_on_purpose(int n) {
  int* p = new int[n];
  for (int i = 0; i < n; ++i) p[i] = i;
  const int v = p[n];  // SELFTEST-OVERFLOW
  delete[] p;
  return v;
}

__attribute__((noinline)) int ub_on_purpose(int n) {
  g_int = INT_MAX - 1;
  const int x = g_int;
  return x + n;  // SELFTEST-UB
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mode = argc > 1 ? argv[1] : "clean";
  int result = 0;
  if (rank == size - 1) {
    if (std::strcmp(mode, "leak") == 0) {
      leak_on_purpose(25);
    } else if (std::strcmp(mode, "overflow") == 0) {
      result = overflow_on_purpose(8 + size);
    } else if (std::strcmp(mode, "ub") == 0) {
      result = ub_on_purpose(1 + size);
    } else if (std::strcmp(mode, "clean") != 0) {
      std::fprintf(stderr, "sanitizer_selftest: unknown mode %s\n", mode);
      result = 2;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return result == 2 ? 2 : 0;
}
