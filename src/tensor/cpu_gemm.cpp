// cpu_gemm.cpp: the CPU backend's one GEMM entry point and the library that
// serves it.
//
// Two libraries can compute the CPU's GEMMs:
//   onednn    oneDNN's dnnl_sgemm (the default). It picks its kernels from
//             the CPU's features at run time (AVX-512, AMX, ...), so it never
//             falls back silently, and on the micro-batch shapes of pipeline
//             training it is faster than OpenBLAS 0.3.21's best kernels
//             (results/bench_gemm.md).
//   openblas  OpenBLAS's cblas_sgemm, with the kernels select_blas_kernel
//             chose (tensor/blas_info).
// Both are deterministic for a fixed thread count: the same shapes give
// bitwise the same results, so every equivalence in the tests holds with
// either. training.cpu_gemm chooses; set_cpu_gemm applies it process-wide.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

namespace {

CpuGemm g_cpu_gemm = CpuGemm::OneDNN;
int g_blas_threads = 1;
bool g_threads_applied = false;
std::vector<GemmShape>* g_gemm_recording = nullptr;

// Both libraries get the thread count before their first GEMM, also in
// programs (tests, benchmarks) that never call set_blas_threads.
void apply_threads() {
  openblas_set_num_threads(g_blas_threads);
  omp_set_num_threads(g_blas_threads);  // oneDNN's OpenMP runtime
  g_threads_applied = true;
}

void onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda,
                                          b, ldb, beta, c, ldc);
  PT_CHECK(status == dnnl_success, "dnnl_sgemm failed with status " +
                                       std::to_string(static_cast<int>(status)) + " for m=" +
                                       std::to_string(m) + " n=" + std::to_string(n) +
                                       " k=" + std::to_string(k));
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse4.1";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace

CpuGemm parse_cpu_gemm(const std::string& name) {
  if (name == "onednn") return CpuGemm::OneDNN;
  if (name == "openblas") return CpuGemm::OpenBLAS;
  throw InputError("unknown CPU GEMM library \"" + name + "\"; expected onednn or openblas");
}

void set_cpu_gemm(CpuGemm gemm) { g_cpu_gemm = gemm; }
CpuGemm cpu_gemm() { return g_cpu_gemm; }

std::string cpu_gemm_description() {
  if (g_cpu_gemm == CpuGemm::OpenBLAS) return "OpenBLAS cblas_sgemm";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " dnnl_sgemm, ISA " + isa_name(dnnl_get_effective_cpu_isa());
}

namespace cpu {
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (g_gemm_recording) g_gemm_recording->push_back({ta, tb, m, n, k, lda, ldb, ldc, beta, a, b, c});
  if (!g_threads_applied) apply_threads();
  if (g_cpu_gemm == CpuGemm::OneDNN) {
    onednn_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
}  // namespace cpu

void start_gemm_recording() {
  delete g_gemm_recording;
  g_gemm_recording = new std::vector<GemmShape>();
}

std::vector<GemmShape> stop_gemm_recording() {
  PT_CHECK(g_gemm_recording != nullptr, "GEMM recording was not started");
  std::vector<GemmShape> shapes = std::move(*g_gemm_recording);
  delete g_gemm_recording;
  g_gemm_recording = nullptr;
  return shapes;
}

void set_blas_threads(int threads) {
  PT_CHECK(threads >= 1, "BLAS threads must be >= 1");
  g_blas_threads = threads;
  apply_threads();
}

int blas_threads() { return g_blas_threads; }

}  // namespace pt
