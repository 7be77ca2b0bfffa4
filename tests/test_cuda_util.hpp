// test_cuda_util.hpp: helpers of the CUDA tests: skip cleanly without a GPU
// (or fail, when PIPETRAIN_REQUIRE_GPU=1 says a GPU must be there;
// test_gpu_skip.hpp), move tensors between devices, compare against the CPU
// backend.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"
#include "pipetrain/base/rng.hpp"
#include "test_gpu_skip.hpp"

namespace pt::test {

// Initialises device 0 once; false (with the reason) when no GPU is visible.
inline bool gpu_available(std::string* why) {
  static int state = -1;  // -1 unknown, 0 none, 1 ready
  static std::string reason;
  if (state < 0) {
    if (cuda::device_count(&reason) == 0) {
      state = 0;
    } else {
      cuda::init_device(0);
      state = 1;
    }
  }
  if (why) *why = reason;
  return state == 1;
}

// Single-process tests: device 0, initialised once.
#define PT_REQUIRE_GPU()                                                           \
  do {                                                                             \
    std::string pt_why_;                                                           \
    if (!::pt::test::gpu_available(&pt_why_))                                      \
      PT_NO_GPU("no CUDA device visible (" + pt_why_ + ")");                       \
  } while (0)

// MPI tests: true when every rank of comm sees a device (collective; no device
// is initialised, since select_device picks each rank's own). `why` gets this
// rank's reason when not.
inline bool gpu_on_every_rank(MPI_Comm comm, std::string* why) {
  const int mine = cuda::device_count(why) > 0 ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  if (all == 0 && why != nullptr && mine == 1) *why = "another rank has no CUDA device";
  return all == 1;
}

#define PT_REQUIRE_GPU_ON_EVERY_RANK(comm)                                         \
  do {                                                                             \
    std::string pt_why_;                                                           \
    if (!::pt::test::gpu_on_every_rank((comm), &pt_why_))                          \
      PT_NO_GPU("no CUDA device on some rank (" + pt_why_ + ")");                  \
  } while (0)

inline Tensor random_host(const Shape& shape, uint64_t stream, float std = 1.f) {
  Tensor t = Tensor::empty(shape, DType::F32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std * normal01(7, stream, i);
  return t;
}

// The transformer kernel group of a backend (both backends provide it).
inline TransformerKernels& transformer(Backend& be) {
  return require_kernels<TransformerKernels>(be, "the GPU kernel tests");
}

// The CUDA backend in precision p (device 0, initialised by PT_REQUIRE_GPU).
inline std::unique_ptr<Backend> cuda_backend(Precision p = Precision::Fp32) {
  cuda::BackendOptions o;
  o.precision = p;
  return cuda::make_backend(o);
}

inline Tensor gpu(const Tensor& t) { return t.to(Device::CUDA, t.category()); }
inline Tensor host(const Tensor& t) { return t.to(Device::CPU, t.category()); }

// max |got - want| / max |want| (want on the CPU, got on either device);
// infinity when the sizes differ or any element of either is inf or NaN
// (std::max would pass a NaN by).
inline double rel_error(const Tensor& got_any, const Tensor& want) {
  const Tensor got = got_any.device() == Device::CPU ? got_any : host(got_any);
  EXPECT_EQ(got.numel(), want.numel());
  if (got.numel() != want.numel()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (!std::isfinite(got.f32()[i]) || !std::isfinite(want.f32()[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(got.f32()[i]) - want.f32()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want.f32()[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Relative tolerance of one GEMM on the GPU against the CPU's emulation of
// the same precision (docs/cuda.md, "Tolerances of the GPU tests").
inline double gemm_tol(Precision p) {
  switch (p) {
    case Precision::Fp32: return 1e-5;
    case Precision::Tf32: return 5e-3;
    case Precision::Fp16: return 5e-3;
    case Precision::Bf16: return 2e-2;
  }
  return 0;
}

inline void expect_close(const Tensor& got, const Tensor& want, double tol,
                         const std::string& what) {
  const double err = rel_error(got, want);
  std::printf("  %-40s rel error %.3e (tol %.0e)\n", what.c_str(), err, tol);
  EXPECT_LE(err, tol) << what;
}

}  // namespace pt::test
