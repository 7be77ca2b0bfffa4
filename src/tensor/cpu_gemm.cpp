// cpu_gemm.cpp: the CPU backend's one GEMM entry point and the library that
// serves it.
//
// Four choices (training.cpu_gemm) compute the CPU's GEMMs:
//   auto      (the default) onednn's calls, except the weight gradients of
//             wide layers over few rows, which run on OpenBLAS (measured
//             faster when the gradient streams from memory), and, where
//             oneDNN has no AVX-512, the input gradients of wide layers
//             (see auto_gemm_uses_openblas below).
//   onednn    oneDNN. It picks its kernels from the CPU's
//             features at run time (AVX-512, AMX, ...), so it never falls
//             back silently, and on the micro-batch shapes of pipeline
//             training it is faster than OpenBLAS 0.3.21's best kernels
//             (results/bench_gemm.md). A x B^T (every wide Linear forward) runs
//             on oneDNN's matmul primitive, whose brgemm kernels read the
//             transposed B in place; dnnl_sgemm packs it first: the MLP's
//             forwards took 20-31% less time on the primitive at 32-64 rows
//             (results/bench_gemm.md). Other shapes run dnnl_sgemm.
//   onednn-sgemm  dnnl_sgemm for every shape (the default before the
//             matmul primitive; kept to measure against).
//   openblas  OpenBLAS's cblas_sgemm, with the kernels select_blas_kernel
//             chose (tensor/blas_info).
// All are deterministic for a fixed thread count: the same shapes give
// bitwise the same results, so every equivalence in the tests holds with
// each. training.cpu_gemm chooses; set_cpu_gemm applies it process-wide.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "cpu_kernels_conv.hpp"

namespace pt {

namespace {

CpuGemm g_cpu_gemm = CpuGemm::Auto;
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

// The shortest inner dimension at which A B^T runs on the matmul primitive:
// below it the primitive's fixed cost per call (a few microseconds) outweighs
// what it saves (measured on 16-256 rows; docs/performance.md).
constexpr int64_t kMatmulMinK = 256;

// Under auto, a weight gradient dW (+)= dY^T x of a wide layer (C at least
// 512 x 512) summed over at most 64 rows runs on OpenBLAS: its kernels keep
// C's read-modify-write streaming when C comes from memory, as a step's
// gradients do: the MLP's 16 weight gradients took 27% less time than on
// dnnl_sgemm at 32 rows, 8% at 64 (results/bench_gemm.md). With C in cache,
// or over more rows, dnnl_sgemm was as fast or faster (docs/performance.md).
constexpr int64_t kOpenBlasMaxRows = 64;
constexpr int64_t kOpenBlasMinArea = 512 * 512;

// Where oneDNN runs without AVX-512 (an AVX2-only CPU, or
// ONEDNN_MAX_CPU_ISA=AVX2), A x B of a wide layer (the input gradient dY W,
// B at least 512 x 512) runs on OpenBLAS too: with oneDNN's AVX2 kernels the
// MLP's forward + backward of a 64-row micro-batch took 88.5 ms, on OpenBLAS's
// Haswell kernels 68.6 ms (results/bench_gemm_avx2.md), the gap being the
// input gradients (48 against 21 ms in the first AVX2 run, docs/performance.md),
// while with AVX-512 dnnl_sgemm was the faster (21 against 28 ms,
// results/bench_gemm.md). Decided once, from the ISA oneDNN runs.
bool onednn_has_avx512() {
  static const bool has = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) ==
                          dnnl_cpu_isa_avx512_core;
  return has;
}
}  // namespace

bool auto_gemm_uses_openblas(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  if (ta && !tb) return k <= kOpenBlasMaxRows && m * n >= kOpenBlasMinArea;
  if (!ta && !tb) return !onednn_has_avx512() && n * k >= kOpenBlasMinArea;
  return false;
}

namespace {

// C = alpha * A B^T + beta * C on oneDNN's matmul primitive. B^T is described
// by strides (a (k, n) view of the row-major (n, k) B), so nothing is copied.
// Primitives are created once per shape and kept per thread: creating one
// costs far more than running a micro-batch's GEMM.
class MatmulNT {
 public:
  void run(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    using dnnl::memory;
    const memory::desc a_desc({m, k}, memory::data_type::f32, memory::dims{lda, 1});
    const memory::desc b_desc({k, n}, memory::data_type::f32, memory::dims{1, ldb});
    const memory::desc c_desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::matmul& mm = primitive(Key{m, n, k, lda, ldb, ldc, alpha, beta}, a_desc, b_desc, c_desc);
    memory a_mem(a_desc, engine_, const_cast<float*>(a));
    memory b_mem(b_desc, engine_, const_cast<float*>(b));
    memory c_mem(c_desc, engine_, c);
    mm.execute(stream_, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream_.wait();
  }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

  dnnl::matmul& primitive(const Key& key, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                          const dnnl::memory::desc& c) {
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    dnnl::primitive_attr attr;
    if (std::get<6>(key) != 1.f) attr.set_output_scales(0, {std::get<6>(key)});
    if (std::get<7>(key) != 0.f) {
      dnnl::post_ops sum;
      sum.append_sum(std::get<7>(key));
      attr.set_post_ops(sum);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
    return cache_.emplace(key, dnnl::matmul(pd)).first->second;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, dnnl::matmul> cache_;
};

void onednn_matmul_nt(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local MatmulNT matmul;
  try {
    matmul.run(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } catch (const dnnl::error& e) {
    PT_FAIL(std::string("oneDNN matmul failed (") + e.what() + ") for m=" + std::to_string(m) +
            " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
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

void set_cpu_gemm(CpuGemm gemm) { g_cpu_gemm = gemm; }
CpuGemm cpu_gemm() { return g_cpu_gemm; }

std::string cpu_gemm_description() {
  if (g_cpu_gemm == CpuGemm::OpenBLAS) return "OpenBLAS cblas_sgemm";
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = "oneDNN " + std::to_string(v->major) + "." +
                             std::to_string(v->minor) + "." + std::to_string(v->patch);
  const std::string isa = std::string(", ISA ") + isa_name(dnnl_get_effective_cpu_isa());
  if (g_cpu_gemm == CpuGemm::OneDNNSgemm) return onednn + " dnnl_sgemm" + isa;
  const std::string with_matmul = onednn + " dnnl_sgemm + matmul (A B^T)" + isa;
  if (g_cpu_gemm == CpuGemm::OneDNN) return with_matmul;
  return "auto: " + with_matmul + ", OpenBLAS cblas_sgemm (wide A^T B of <= 64 rows" +
         (onednn_has_avx512() ? ")" : "; wide A B, as oneDNN runs without AVX-512)");
}

namespace cpu {
void ensure_blas_threads() {
  if (!g_threads_applied) apply_threads();
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (g_gemm_recording) g_gemm_recording->push_back({ta, tb, m, n, k, lda, ldb, ldc, beta, a, b, c});
  if (!g_threads_applied) apply_threads();
  const bool openblas =
      g_cpu_gemm == CpuGemm::OpenBLAS || (g_cpu_gemm == CpuGemm::Auto && auto_gemm_uses_openblas(ta, tb, m, n, k));
  if (!openblas) {
    const bool matmul = g_cpu_gemm != CpuGemm::OneDNNSgemm && !ta && tb && m > 0 && n > 0 && k >= kMatmulMinK;
    if (matmul) onednn_matmul_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else onednn_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
