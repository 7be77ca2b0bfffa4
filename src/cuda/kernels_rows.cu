// kernels_rows.cu: row-wise kernels of the CUDA backend, one block per row:
// LayerNorm forward and backward, softmax cross-entropy, and the masked
// (causal or not) softmax, forward and backward, of attention. Row statistics are summed in
// double with fixed block trees, as the CPU backend sums in double.
#include "context.hpp"
#include "device_common.cuh"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace pt::cuda::kern {

namespace {

constexpr int64_t kLnRowsPerBlock = 32;  // rows of one LayerNorm-backward block

// Sets a bit of the mapped error word (plain store: a lost bit only loses
// which reason is printed, never the error).
__device__ void flag_error(unsigned* word, unsigned bit) {
  volatile unsigned* w = word;
  *w = *w | bit;
}

// x, y: (rows, C); one block per row.
__global__ void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                         float eps, float* y, float* mean, float* rstd,
                                         int64_t C) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  float* yr = y + r * C;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) sum += xr[j];
  const double mu = block_sum(sum) / static_cast<double>(C);
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) sq += (xr[j] - mu) * (xr[j] - mu);
  sq = block_sum(sq);
  const float m = static_cast<float>(mu);
  const float rs = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(C) + eps));
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
    yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

// One block per chunk of kLnRowsPerBlock rows: dx of each row, and the
// chunk's partial dgamma, dbeta (C each) accumulated in shared memory by the
// thread that owns each column, written to part_g/part_b (chunks, C).
__global__ void layernorm_backward_kernel(const float* x, const float* gamma, const float* mean,
                                          const float* rstd, const float* dy, float* dx,
                                          float* part_g, float* part_b, int64_t rows,
                                          int64_t C) {
  extern __shared__ float acc[];  // (2C): dgamma then dbeta partials
  float* acc_g = acc;
  float* acc_b = acc + C;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) acc_g[j] = acc_b[j] = 0.f;
  const int64_t r0 = blockIdx.x * kLnRowsPerBlock;
  const int64_t r1 = r0 + kLnRowsPerBlock < rows ? r0 + kLnRowsPerBlock : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const float m = mean[r], rs = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const float xhat = (xr[j] - m) * rs;
      const float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_gx += static_cast<double>(g) * xhat;
      acc_g[j] += dyr[j] * xhat;
      acc_b[j] += dyr[j];
    }
    sum_g = block_sum(sum_g);
    sum_gx = block_sum(sum_gx);
    const float mg = static_cast<float>(sum_g / static_cast<double>(C));
    const float mgx = static_cast<float>(sum_gx / static_cast<double>(C));
    float* dxr = dx + r * C;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const float xhat = (xr[j] - m) * rs;
      dxr[j] = rs * (dyr[j] * gamma[j] - mg - xhat * mgx);
    }
  }
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    part_g[blockIdx.x * C + j] = acc_g[j];
    part_b[blockIdx.x * C + j] = acc_b[j];
  }
}

// out[j] += sum over chunks of part[c, j], chunks in order.
__global__ void add_column_sums_kernel(const float* part, int64_t chunks, int64_t C,
                                       float* out) {
  const int64_t j = global_index();
  if (j >= C) return;
  float s = 0.f;
  for (int64_t c = 0; c < chunks; ++c) s += part[c * C + j];
  out[j] += s;
}

// logits, dlogits: (rows, width), the first `classes` columns classes, the
// rest padding (dlogits 0, no probability); one block per row.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, float grad_scale,
                                    float* dlogits, double* row_loss, int64_t classes,
                                    int64_t width, unsigned* error_word) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * width;
  float* drow = dlogits + r * width;
  for (int64_t j = classes + threadIdx.x; j < width; j += blockDim.x) drow[j] = 0.f;
  const int32_t label = labels[r];
  if (label < 0 || label >= classes) {  // the whole block leaves together
    if (threadIdx.x == 0) {
      flag_error(error_word, kBadLabel);
      row_loss[r] = 0.0;
    }
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) drow[j] = 0.f;
    return;
  }
  float maxv = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) maxv = fmaxf(maxv, row[j]);
  maxv = block_max(maxv);
  double denom = 0.0;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    denom += exp(static_cast<double>(row[j] - maxv));
  const double log_denom = log(block_sum(denom));
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float prob = static_cast<float>(exp(static_cast<double>(row[j] - maxv) - log_denom));
    drow[j] = (prob - (j == label ? 1.f : 0.f)) * grad_scale;
  }
  if (threadIdx.x == 0) row_loss[r] = log_denom - static_cast<double>(row[label] - maxv);
}

// The columns [0, n) query i = r % T of row r sees: causal i + 1, else T.
__device__ int64_t visible_keys(int64_t r, int64_t T, bool causal) {
  return causal ? r % T + 1 : T;
}

// scores: (rows, T), row r is query i = r % T; one block per row.
__global__ void masked_softmax_forward_kernel(float* scores, int64_t T, bool causal) {
  const int64_t r = blockIdx.x;
  const int64_t n = visible_keys(r, T, causal);
  float* row = scores + r * T;
  float maxv = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) maxv = fmaxf(maxv, row[j]);
  maxv = block_max(maxv);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = fast_exp(row[j] - maxv);
    row[j] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / block_sum(sum));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) row[j] *= inv;  // own elements only
  for (int64_t j = n + threadIdx.x; j < T; j += blockDim.x) row[j] = 0.f;
}

__global__ void masked_softmax_backward_kernel(const float* p, float* dp, int64_t T,
                                               float scale, bool causal) {
  const int64_t r = blockIdx.x;
  const int64_t n = visible_keys(r, T, causal);
  const float* prow = p + r * T;
  float* drow = dp + r * T;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dot += static_cast<double>(prow[j]) * drow[j];
  const float dotf = static_cast<float>(block_sum(dot));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    drow[j] = scale * prow[j] * (drow[j] - dotf);
  for (int64_t j = n + threadIdx.x; j < T; j += blockDim.x) drow[j] = 0.f;
}

unsigned row_grid(int64_t rows) {
  PT_CHECK(rows <= kMaxGridRows, "too many rows for one launch");
  return static_cast<unsigned>(rows);
}

}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* mean, float* rstd, int64_t rows, int64_t C,
                       cudaStream_t s) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<row_grid(rows), kThreads, 0, s>>>(x, gamma, beta, eps, y, mean,
                                                                 rstd, C);
  PT_LAUNCH_CHECK();
}

// Lets `kernel` launch with `bytes` of dynamic shared memory. The default
// limit of 48 KiB counts the kernel's static shared memory too, so the
// opt-in is needed whenever both together pass it (not only the dynamic
// part); past the device's opt-in limit the width is refused by name.
static void reserve_dynamic_shared_memory(const void* kernel, size_t bytes, const std::string& what) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t total = bytes + attributes.sharedSizeBytes;
  PT_CHECK(total <= static_cast<size_t>(optin),
           what + " needs " + std::to_string(total) + " bytes of shared memory per block; this GPU "
           "allows " + std::to_string(optin));
  if (total > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)));
}

void layernorm_backward(const float* x, const float* gamma, const float* mean,
                        const float* rstd, const float* dy, float* dx, float* dgamma,
                        float* dbeta, int64_t rows, int64_t C, cudaStream_t s) {
  if (rows == 0 || C == 0) return;
  const int64_t chunks = (rows + kLnRowsPerBlock - 1) / kLnRowsPerBlock;
  const size_t smem = 2 * static_cast<size_t>(C) * sizeof(float);
  reserve_dynamic_shared_memory(reinterpret_cast<const void*>(layernorm_backward_kernel), smem,
                                "LayerNorm backward at width " + std::to_string(C));
  DeviceBuffer part(2 * static_cast<size_t>(chunks * C) * sizeof(float));  // (2, chunks, C)
  float* part_g = part.as<float>();
  float* part_b = part_g + chunks * C;
  layernorm_backward_kernel<<<static_cast<unsigned>(chunks), kThreads, smem, s>>>(
      x, gamma, mean, rstd, dy, dx, part_g, part_b, rows, C);
  PT_LAUNCH_CHECK();
  add_column_sums_kernel<<<grid_for(C), kThreads, 0, s>>>(part_g, chunks, C, dgamma);
  PT_LAUNCH_CHECK();
  add_column_sums_kernel<<<grid_for(C), kThreads, 0, s>>>(part_b, chunks, C, dbeta);
  PT_LAUNCH_CHECK();
}

void softmax_xent(const float* logits, const int32_t* labels, float grad_scale, float* dlogits,
                  double* row_loss, int64_t rows, int64_t classes, int64_t width,
                  cudaStream_t s) {
  if (rows == 0) return;
  softmax_xent_kernel<<<row_grid(rows), kThreads, 0, s>>>(logits, labels, grad_scale, dlogits,
                                                            row_loss, classes, width,
                                                            context().error_word);
  PT_LAUNCH_CHECK();
}

void masked_softmax_forward(float* scores, int64_t rows, int64_t T, bool causal, cudaStream_t s) {
  if (rows == 0) return;
  masked_softmax_forward_kernel<<<row_grid(rows), kThreads, 0, s>>>(scores, T, causal);
  PT_LAUNCH_CHECK();
}

void masked_softmax_backward(const float* p, float* dp, int64_t rows, int64_t T, float scale,
                             bool causal, cudaStream_t s) {
  if (rows == 0) return;
  masked_softmax_backward_kernel<<<row_grid(rows), kThreads, 0, s>>>(p, dp, T, scale, causal);
  PT_LAUNCH_CHECK();
}

}  // namespace pt::cuda::kern
