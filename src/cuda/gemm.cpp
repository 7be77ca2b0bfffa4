// gemm.cpp: row-major GEMMs through cublasGemmEx / cublasGemmStridedBatchedEx.
//
// cuBLAS is column-major; a row-major (m, n) C is a column-major (n, m) C^T,
// and C^T = op(B)^T op(A)^T, so each call swaps the operands and the sizes:
// cuBLAS(opB, opA, n, m, k, B, A). Output and accumulation are fp32.
#include "gemm.hpp"

#include <cublas_v2.h>

#include <climits>
#include <mutex>
#include <vector>

#include "check.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "pipetrain/tensor/precision.hpp"

namespace pt::cuda {

namespace {

std::mutex g_record_mutex;
std::vector<DeviceGemm>* g_recording = nullptr;

size_t element_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

int as_int(int64_t v, const char* what) {
  PT_CHECK(v >= 0 && v <= INT_MAX, std::string("GEMM ") + what + " over 2^31");
  return static_cast<int>(v);
}

cublasComputeType_t compute_type(Precision p) {
  return p == Precision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace

void record_gemm(const Gemm& g) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (g_recording == nullptr) return;
  DeviceGemm d;
  d.shape = {g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.beta};
  d.batch = g.batch;
  d.stride_a = g.stride_a;
  d.stride_b = g.stride_b;
  d.stride_c = g.stride_c;
  g_recording->push_back(d);
}

Operand Operand::at(int64_t elements) const {
  Operand o = *this;
  o.ptr = static_cast<const char*>(ptr) + elements * static_cast<int64_t>(element_bytes(type));
  return o;
}

cudaDataType_t operand_type(Precision p) {
  if (p == Precision::Fp32 || p == Precision::Tf32) return CUDA_R_32F;
  return p == Precision::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

Operand as_operand(const float* x, int64_t n, Precision p, DeviceBuffer& holder) {
  if (p == Precision::Fp32 || p == Precision::Tf32) return {x, CUDA_R_32F};
  const bool bf16 = p == Precision::Bf16;
  holder = DeviceBuffer(static_cast<size_t>(n) * 2);
  kern::cast_to_half(x, holder.get(), n, bf16, context().compute);
  return {holder.get(), operand_type(p)};
}

Operand as_operand(const Tensor& t, Precision p, DeviceBuffer& holder) {
  if (t.dtype() == DType::F32) return as_operand(t.f32(), t.numel(), p, holder);
  PT_CHECK(t.dtype() == stored_dtype(p), std::string("a ") + dtype_name(t.dtype()) +
                                             " GEMM operand in a " + kind_name(p) + " GEMM");
  return {t.raw(), t.dtype() == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F};
}

void run_gemm(const Gemm& g, Precision p) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  PT_CHECK(g.a.type == g.b.type, "GEMM operands of different types");
  record_gemm(g);
  Context& ctx = context();
  const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  const int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb"), ldc = as_int(g.ldc, "ldc");
  if (g.batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_b, op_a, n, m, k, &g.alpha, g.b.ptr, g.b.type, ldb,
                              g.a.ptr, g.a.type, lda, &g.beta, g.c, CUDA_R_32F, ldc,
                              compute_type(p), CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.cublas, op_b, op_a, n, m, k, &g.alpha, g.b.ptr, g.b.type, ldb, g.stride_b, g.a.ptr,
      g.a.type, lda, g.stride_a, &g.beta, g.c, CUDA_R_32F, ldc, g.stride_c,
      as_int(g.batch, "batch"), compute_type(p), CUBLAS_GEMM_DEFAULT));
}

void start_device_gemm_recording() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  delete g_recording;
  g_recording = new std::vector<DeviceGemm>();
}

std::vector<DeviceGemm> stop_device_gemm_recording() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  PT_CHECK(g_recording != nullptr, "device GEMM recording was not started");
  std::vector<DeviceGemm> out = std::move(*g_recording);
  delete g_recording;
  g_recording = nullptr;
  return out;
}

}  // namespace pt::cuda
