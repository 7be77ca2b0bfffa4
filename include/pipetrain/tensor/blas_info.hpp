// blas_info.hpp: which BLAS and which kernels this process computes with, and
// the choice of the best OpenBLAS kernels for this CPU.
//
// Debian's OpenBLAS 0.3.21 does not recognise some new CPUs (new Xeons, VMs
// with a generic CPU name) and silently runs its slowest (Prescott, SSE3)
// kernels, 3 to 4 times slower than the CPU allows. OpenBLAS reads its
// kernel choice (OPENBLAS_CORETYPE) once, when the library loads, so the fix
// has to happen before any BLAS call: select_blas_kernel() compares the
// kernel OpenBLAS chose with the best the CPU supports and, if OpenBLAS fell
// back, sets OPENBLAS_CORETYPE and re-executes the program (before
// MPI_Init, so the MPI job is unaffected). A user's own OPENBLAS_CORETYPE is
// always kept (with a warning when it names a slower kernel than the CPU
// allows); PIPETRAIN_BLAS_AUTOSELECT=0 turns the selection off.
#pragma once

#include <string>

namespace pt {

struct BlasInfo {
  std::string library;    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." (openblas_get_config)
  std::string core;       // the kernels in use, e.g. "SkylakeX", "Haswell", "Prescott"
  std::string best_core;  // the fastest kernels this CPU supports, e.g. "SkylakeX"
  std::string cpu;        // the CPU's model name (/proc/cpuinfo)
  std::string isa;        // "avx512" | "avx2" | "avx" | "sse"
  int threads = 1;        // OpenBLAS threads of this process
  bool fallback = false;  // core is slower than best_core
  std::string selection;  // what select_blas_kernel did ("" = nothing)
  std::string gemm;       // what computes the CPU backend's GEMMs (cpu_gemm_description())

  // "OpenBLAS 0.3.21 (...); kernels SkylakeX (best for this CPU: SkylakeX), 1 thread;
  //  CPU AMD EPYC (avx512); GEMMs: oneDNN 2.6.3 dnnl_sgemm, ISA avx512_core"
  std::string describe() const;
};

BlasInfo blas_info();

// Call first thing in main, before MPI_Init: may re-execute the program with
// OPENBLAS_CORETYPE set (it then returns in the new process image). Returns
// the one line to log about it ("" when OpenBLAS's own choice was kept).
std::string select_blas_kernel(int argc, char** argv);

}  // namespace pt
