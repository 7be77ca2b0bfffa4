// kernels_reduce.cu: deterministic sums over whole tensors (sum of squares,
// non-finite count, MSE, sums of per-row losses). Two passes: a fixed grid
// (a function of n only) writes one partial per block, one block adds the
// partials; both in double. The result comes back through pinned memory after
// a synchronisation of the stream, or (the *_into forms) stays in device
// memory for a ScalarBatch to read with others at once.
#include "context.hpp"
#include "device_common.cuh"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace pt::cuda::kern {

namespace {

constexpr int64_t kPerThread = 8;  // elements per thread before the block tree
constexpr int kMaxBlocks = 1024;

unsigned reduce_blocks(int64_t n) {
  return std::min<unsigned>(grid_for(n, kPerThread), kMaxBlocks);
}

struct SquareTerm {
  const float* x;
  __device__ double operator()(int64_t i) const { return static_cast<double>(x[i]) * x[i]; }
};

struct NonFiniteTerm {
  const float* x;
  __device__ double operator()(int64_t i) const {
    const unsigned bits = __float_as_uint(x[i]);
    return (bits & 0x7f800000u) == 0x7f800000u ? 1.0 : 0.0;
  }
};

// Writes the gradient as a side effect, like the CPU loop.
struct MseTerm {
  const float* pred;
  const float* target;
  float grad_scale;
  float* dpred;
  __device__ double operator()(int64_t i) const {
    const float diff = pred[i] - target[i];
    dpred[i] = 2.f * diff * grad_scale;
    return static_cast<double>(diff) * diff;
  }
};

struct DoubleTerm {
  const double* x;
  __device__ double operator()(int64_t i) const { return x[i]; }
};

template <class Term>
__global__ void partial_sum_kernel(int64_t n, Term term, double* partials) {
  double s = 0.0;
  for (int64_t i = global_index(); i < n; i += global_stride()) s += term(i);
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void final_sum_kernel(const double* partials, int count, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// Leaves the sum in device memory at `out`, in stream order; nothing waits
// (on the compute stream).
template <class Term>
void reduce_into(int64_t n, Term term, double* out, cudaStream_t s) {
  if (n == 0) {
    CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), s));
    return;
  }
  const unsigned blocks = reduce_blocks(n);
  DeviceBuffer partials(blocks * sizeof(double));  // back to the cache in stream order
  partial_sum_kernel<<<blocks, kThreads, 0, s>>>(n, term, partials.as<double>());
  PT_LAUNCH_CHECK();
  final_sum_kernel<<<1, kThreads, 0, s>>>(partials.as<double>(), static_cast<int>(blocks), out);
  PT_LAUNCH_CHECK();
  // The cache hands blocks out again in the compute stream's order: on any
  // other stream the partials must be read before they go back to it.
  if (s != context().compute) wait_for_stream(s, "a reduction on its own stream");
}

// The same sum, waited for and returned.
template <class Term>
double reduce(int64_t n, Term term, cudaStream_t s) {
  if (n == 0) return 0.0;
  DeviceBuffer out(sizeof(double));
  reduce_into(n, term, out.as<double>(), s);
  Context& ctx = context();
  CUDA_CHECK(cudaMemcpyAsync(ctx.readback, out.as<double>(), sizeof(double),
                             cudaMemcpyDeviceToHost, s));
  if (s != ctx.compute) wait_for_stream(s, "a reduction on its own stream");
  sync_and_check();  // the compute stream, bounded
  return ctx.readback[0];
}

}  // namespace

double reduce_sum_squares(const float* x, int64_t n, cudaStream_t s) {
  return reduce(n, SquareTerm{x}, s);
}

int64_t reduce_count_nonfinite(const float* x, int64_t n, cudaStream_t s) {
  return static_cast<int64_t>(reduce(n, NonFiniteTerm{x}, s));
}

double reduce_mse(const float* pred, const float* target, float grad_scale, float* dpred,
                  int64_t n, cudaStream_t s) {
  return reduce(n, MseTerm{pred, target, grad_scale, dpred}, s);
}

double reduce_sum(const double* x, int64_t n, cudaStream_t s) {
  return reduce(n, DoubleTerm{x}, s);
}

void reduce_sum_squares_into(const float* x, int64_t n, double* out, cudaStream_t s) {
  reduce_into(n, SquareTerm{x}, out, s);
}

void reduce_count_nonfinite_into(const float* x, int64_t n, double* out, cudaStream_t s) {
  reduce_into(n, NonFiniteTerm{x}, out, s);
}

void reduce_mse_into(const float* pred, const float* target, float grad_scale, float* dpred,
                     int64_t n, double* out, cudaStream_t s) {
  reduce_into(n, MseTerm{pred, target, grad_scale, dpred}, out, s);
}

void reduce_sum_into(const double* x, int64_t n, double* out, cudaStream_t s) {
  reduce_into(n, DoubleTerm{x}, out, s);
}

}  // namespace pt::cuda::kern
