// transformer_kernels.cpp: the argument checks of the transformer kernel group,
// written once for every backend that provides it: each public kernel checks
// its shapes here and then calls the backend's do_<kernel>.
#include "pipetrain/tensor/transformer_kernels.hpp"

#include "attention_dims.hpp"
#include "shape_checks.hpp"

namespace pt {

using shapes::numel_is;

namespace {

// tokens (mb, T) i32, a table (V, C) and positions (Tmax >= T, C); returns mb * T * C.
int64_t embedding_numel(const char* kernel, const Tensor& tokens, const Tensor& table,
                        const Tensor& pos) {
  PT_CHECK(tokens.dtype() == DType::I32 && tokens.ndim() == 2,
           std::string(kernel) + ": tokens must be (mb, T) i32: " + shape_string(tokens.shape()));
  const int64_t T = tokens.dim(1), C = table.cols();
  PT_CHECK(pos.cols() == C && T <= pos.rows(),
           std::string(kernel) + ": the position table " + shape_string(pos.shape()) +
               " must be (Tmax >= " + std::to_string(T) + ", " + std::to_string(C) + ")");
  return tokens.dim(0) * T * C;
}

}  // namespace

void TransformerKernels::layernorm_forward(const Tensor& x, const Tensor& gamma,
                                           const Tensor& beta, float eps, Tensor& y,
                                           Tensor& mean, Tensor& rstd) {
  const char* k = "layernorm_forward";
  const int64_t rows = x.rows(), C = x.cols();  // x: (rows, C)
  numel_is(k, "gamma", gamma, C, "the columns of x");
  numel_is(k, "beta", beta, C, "the columns of x");
  numel_is(k, "y", y, rows * C, "those of x");
  numel_is(k, "mean", mean, rows, "the rows of x");
  numel_is(k, "rstd", rstd, rows, "the rows of x");
  do_layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
}

void TransformerKernels::layernorm_backward(const Tensor& x, const Tensor& gamma,
                                            const Tensor& mean, const Tensor& rstd,
                                            const Tensor& dy, Tensor& dx, Tensor& dgamma,
                                            Tensor& dbeta) {
  const char* k = "layernorm_backward";
  const int64_t rows = x.rows(), C = x.cols();  // x, dy, dx: (rows, C)
  numel_is(k, "gamma", gamma, C, "the columns of x");
  numel_is(k, "mean", mean, rows, "the rows of x");
  numel_is(k, "rstd", rstd, rows, "the rows of x");
  numel_is(k, "dy", dy, rows * C, "those of x");
  numel_is(k, "dx", dx, rows * C, "those of x");
  numel_is(k, "dgamma", dgamma, C, "the columns of x");
  numel_is(k, "dbeta", dbeta, C, "the columns of x");
  do_layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
}

void TransformerKernels::embedding_forward(const Tensor& tokens, const Tensor& wte,
                                           const Tensor& wpe, Tensor& y) {
  const int64_t n = embedding_numel("embedding_forward", tokens, wte, wpe);
  numel_is("embedding_forward", "y", y, n, "mb * T * C");
  do_embedding_forward(tokens, wte, wpe, y);
}

void TransformerKernels::embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                                            Tensor& dwpe) {
  const int64_t n = embedding_numel("embedding_backward", tokens, dwte, dwpe);
  numel_is("embedding_backward", "dy", dy, n, "mb * T * C");
  do_embedding_backward(tokens, dy, dwte, dwpe);
}

void TransformerKernels::attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs,
                                         AttentionMask mask) {
  const AttnDims d = attn_dims(qkv, heads);  // qkv: (mb, T, 3C)
  numel_is("attention_probs", "probs", probs, d.mb * d.probs_seq(), "mb * H * T * T");
  do_attention_probs(qkv, heads, probs, mask);
}

void TransformerKernels::attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                                          Tensor& y) {
  const AttnDims d = attn_dims(qkv, heads);
  numel_is("attention_values", "probs", probs, d.mb * d.probs_seq(), "mb * H * T * T");
  numel_is("attention_values", "y", y, d.mb * d.T * d.C, "mb * T * C");
  do_attention_values(qkv, probs, heads, y);
}

void TransformerKernels::attention_backward(const Tensor& qkv, const Tensor& probs,
                                            const Tensor& dy, int64_t heads, Tensor& dqkv,
                                            AttentionMask mask) {
  const AttnDims d = attn_dims(qkv, heads);
  numel_is("attention_backward", "probs", probs, d.mb * d.probs_seq(), "mb * H * T * T");
  numel_is("attention_backward", "dy", dy, d.mb * d.T * d.C, "mb * T * C");
  numel_is("attention_backward", "dqkv", dqkv, qkv.numel(), "those of qkv");
  do_attention_backward(qkv, probs, dy, heads, dqkv, mask);
}

}  // namespace pt
