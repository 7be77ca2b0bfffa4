// kernels.hpp: launchers of the CUDA backend's own kernels (internal to
// pt_cuda). Raw device pointers, row-major; every launch goes on `s`.
// Contracts match the Backend methods in include/pipetrain/tensor/backend.hpp; the
// reductions (reduce_*) synchronise the compute stream and return to the host.
// No kernel uses floating-point atomics: all results are bitwise reproducible
// run to run on a given GPU and launch shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pt::cuda::kern {

// ---- elementwise (kernels_elementwise.cu) ----
// y (rows, n) += bias (n)
void add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s);
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s);
void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t s);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s);
void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s);
void fill(float* x, float value, int64_t n, cudaStream_t s);
void scale(float* x, float factor, int64_t n, cudaStream_t s);
void sgd_step(float* p, const float* g, float* v, float lr, float momentum, float weight_decay,
              int64_t n, cudaStream_t s);
// step_size = lr / (1 - beta1^t), decay = 1 - lr * wd, bias2_sqrt = sqrt(1 - beta2^t).
void adamw_step(float* p, const float* g, float* m, float* v, float beta1, float beta2,
                float eps, float step_size, float decay, float bias2_sqrt, int64_t n,
                cudaStream_t s);
// out[i] = the bits of x[i] rounded to nearest even in bf16 (to_bf16) or
// fp16: the CPU's round_bits (tensor/precision.hpp), NaN included.
void cast_to_half(const float* x, void* out, int64_t n, bool to_bf16, cudaStream_t s);
// out[i] = x[i] (n bf16 values) as fp32, exactly.
void bf16_to_float(const void* x, float* out, int64_t n, cudaStream_t s);

// ---- payload digest (kernels_digest.cu; tensor/payload_digest.hpp); synchronises ----
// float_kind: digest::FloatKind of the elements.
void payload_digest(const void* data, int64_t bytes, int float_kind, uint64_t* checksum,
                    int64_t* nonfinite, cudaStream_t s);

// ---- reductions (kernels_reduce.cu); each synchronises and returns, except *_into ----
double reduce_sum_squares(const float* x, int64_t n, cudaStream_t s);
int64_t reduce_count_nonfinite(const float* x, int64_t n, cudaStream_t s);
// Returns sum (pred - target)^2; writes dpred = 2 (pred - target) grad_scale.
double reduce_mse(const float* pred, const float* target, float grad_scale, float* dpred,
                  int64_t n, cudaStream_t s);
double reduce_sum(const double* x, int64_t n, cudaStream_t s);
// The same sums left at device address `out` (a ScalarBatch slot); no wait.
void reduce_sum_squares_into(const float* x, int64_t n, double* out, cudaStream_t s);
void reduce_count_nonfinite_into(const float* x, int64_t n, double* out, cudaStream_t s);
void reduce_mse_into(const float* pred, const float* target, float grad_scale, float* dpred,
                     int64_t n, double* out, cudaStream_t s);
void reduce_sum_into(const double* x, int64_t n, double* out, cudaStream_t s);

// ---- row-wise kernels (kernels_rows.cu) ----
void layernorm_forward(const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* mean, float* rstd, int64_t rows, int64_t C,
                       cudaStream_t s);
// Writes dx; ADDS into dgamma, dbeta (via per-chunk partial sums, no atomics).
void layernorm_backward(const float* x, const float* gamma, const float* mean,
                        const float* rstd, const float* dy, float* dx, float* dgamma,
                        float* dbeta, int64_t rows, int64_t C, cudaStream_t s);
// logits, dlogits: (rows, width); the first `classes` columns of a row are
// its classes, the rest padding. Per-row loss into row_loss (rows, double);
// dlogits = (softmax - onehot) * grad_scale over the classes, 0 in the padding.
void softmax_xent(const float* logits, const int32_t* labels, float grad_scale, float* dlogits,
                  double* row_loss, int64_t rows, int64_t classes, int64_t width,
                  cudaStream_t s);
// s: rows of length T, row r being query position i = r % T of its (T, T)
// block. In place: softmax over the visible columns (`causal`: j <= i,
// exactly 0 above the diagonal; else all T).
void masked_softmax_forward(float* scores, int64_t rows, int64_t T, bool causal, cudaStream_t s);
// In place on dp: scale * p * (dp - sum_j p dp) over the visible columns, 0 elsewhere.
void masked_softmax_backward(const float* p, float* dp, int64_t rows, int64_t T, float scale,
                             bool causal, cudaStream_t s);

// ---- embedding (kernels_embedding.cu) ----
// y (mb*T, C) = wte[tokens] + wpe[t]; invalid tokens set kBadToken.
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* y,
                       int64_t mb, int64_t T, int64_t V, int64_t C, unsigned* error_word,
                       cudaStream_t s);
// ADDS dy into dwte[token] and dwpe[t], each sum in (b, t) order as on the CPU.
void embedding_backward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe,
                        int64_t mb, int64_t T, int64_t V, int64_t C, unsigned* error_word,
                        cudaStream_t s);

// ---- convolution group (kernels_conv.cu; tensor/conv_kernels.hpp) ----
// One pooling: `planes` = N C planes of H x W in, OH x OW out.
struct PoolDims {
  int64_t planes, H, W, OH, OW, kernel, stride, pad;
};
// where (planes, OH, OW) i32: the position h W + w of each window's
// maximum in its plane (the max-pooling workspace of this backend).
void max_pool_forward(const float* x, const PoolDims& d, float* y, int32_t* where, cudaStream_t s);
// dx (planes, H, W), overwritten: a gather over the windows, no atomics.
void max_pool_backward(const float* dy, const int32_t* where, const PoolDims& d, float* dx,
                       cudaStream_t s);
// Average over the window's pixels inside the image (padding excluded).
void avg_pool_forward(const float* x, const PoolDims& d, float* y, cudaStream_t s);
void avg_pool_backward(const float* dy, const PoolDims& d, float* dx, cudaStream_t s);
// y (planes) = mean of x (planes, HW); dx (planes, HW) = dy / HW.
void global_avg_pool_forward(const float* x, int64_t planes, int64_t HW, float* y, cudaStream_t s);
void global_avg_pool_backward(const float* dy, int64_t planes, int64_t HW, float* dx,
                              cudaStream_t s);
// The sets normalised together in x (N, C, H, W), HW = H W: set s has
// `runs` runs of `run` consecutive elements `gap` apart (as in the CPU
// backend's NormSets). Group norm: count N groups, sets_per_image groups,
// runs 1; batch norm: count C = sets_per_image, channels_per_set 1, runs N.
struct NormSetDims {
  int64_t count, sets_per_image, channels_per_set, HW, C, runs, run, gap;
};
// mean, rstd (count), var (count) when not null; y like x.
void norm_forward(const float* x, const float* gamma, const float* beta, float eps,
                  const NormSetDims& d, float* y, float* mean, float* rstd, float* var,
                  cudaStream_t s);
// Writes dx; ADDS into dgamma, dbeta (C). N: images in x.
void norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                   const float* dy, const NormSetDims& d, int64_t N, float* dx, float* dgamma,
                   float* dbeta, cudaStream_t s);
// y (n, cols, rows) = x (n, rows, cols) transposed image by image (the
// hybrid family's image <-> token layouts): exact copies.
void transpose_images(const float* x, int64_t n, int64_t rows, int64_t cols, float* y, cudaStream_t s);
// y = (x - mean[c]) / sqrt(var[c] + eps) gamma[c] + beta[c] over x (N, C, HW),
// evaluated in double and rounded once (batch norm with running statistics).
void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float eps, int64_t N, int64_t C, int64_t HW, float* y,
                          cudaStream_t s);
// out (C) += dy (N, C, HW) summed over N and HW (a convolution's bias gradient).
void add_channel_sums(const float* dy, int64_t N, int64_t C, int64_t HW, float* out,
                      cudaStream_t s);

}  // namespace pt::cuda::kern
