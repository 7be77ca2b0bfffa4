// gemm.hpp: row-major GEMMs on cuBLAS in the backend's precision, the
// on-the-fly fp32 -> bf16/fp16 operand copies of mixed precision (skipped for
// an operand stored in bf16/fp16 already, a weight copy), and the
// recording of GEMM shapes for benchmarks (internal to pt_cuda).
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

#include "device_memory.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

// A GEMM operand: device pointer and element type.
struct Operand {
  const void* ptr = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  // The same operand `elements` further on.
  Operand at(int64_t elements) const;
};

// The element type of a GEMM operand in precision p: fp32 for fp32 and tf32.
cudaDataType_t operand_type(Precision p);
// x (n fp32 elements) as an operand of precision p: x itself for fp32/tf32;
// for bf16/fp16 a rounded copy in `holder`, made on the compute stream.
Operand as_operand(const float* x, int64_t n, Precision p, DeviceBuffer& holder);
// A matmul operand: an F32 tensor as above; a BF16 / F16 one (already in
// precision p: a weight copy; Backend::matmul checked its dtype) as it is,
// with no cast.
Operand as_operand(const Tensor& t, Precision p, DeviceBuffer& holder);

// Row-major C = alpha op(A) op(B) + beta C, C fp32, `batch` GEMMs with
// element strides stride_* between consecutive ones. Leading dimensions as in
// cblas row-major (the row pitch of the stored matrix).
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  Operand a;
  int64_t lda = 0, stride_a = 0;
  Operand b;
  int64_t ldb = 0, stride_b = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1.f, beta = 0.f;
  int64_t batch = 1;
};
// Runs g on the compute stream; fp32 accumulation in every precision (TF32
// tensor cores for Precision::Tf32).
void run_gemm(const Gemm& g, Precision p);
// Adds g's shape to the benchmarks' recording, if one is on (run_gemm does;
// a GEMM run another way, as cuBLASLt's fused Linear, calls it itself).
void record_gemm(const Gemm& g);

}  // namespace pt::cuda
