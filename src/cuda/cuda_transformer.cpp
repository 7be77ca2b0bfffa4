// cuda_transformer.cpp: the transformer kernel group of the CUDA backend:
// LayerNorm and embedding in own kernels (kernels_rows.cu,
// kernels_embedding.cu), attention in attention.cpp, all on the compute
// stream. Shapes are checked before a do_ kernel runs
// (src/tensor/transformer_kernels.cpp); here only that every tensor is on the GPU.
#include "cuda_transformer.hpp"

#include "attention.hpp"
#include "check.hpp"
#include "context.hpp"
#include "kernels.hpp"

namespace pt::cuda {

namespace {

class CudaTransformerKernels final : public TransformerKernels {
 public:
  explicit CudaTransformerKernels(Precision precision) : precision_(precision), ctx_(context()) {}

 protected:
  void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) override {
    check_on_gpu({&x, &gamma, &beta, &y, &mean, &rstd}, "layernorm");
    kern::layernorm_forward(x.f32(), gamma.f32(), beta.f32(), eps, y.f32(), mean.f32(),
                            rstd.f32(), x.rows(), x.cols(), stream());
  }

  void do_layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                             Tensor& dbeta) override {
    check_on_gpu({&x, &gamma, &mean, &rstd, &dy, &dx, &dgamma, &dbeta}, "layernorm backward");
    kern::layernorm_backward(x.f32(), gamma.f32(), mean.f32(), rstd.f32(), dy.f32(), dx.f32(),
                             dgamma.f32(), dbeta.f32(), x.rows(), x.cols(), stream());
  }

  // tokens (mb, T) i32; wte (V, C); wpe (Tmax, C); y (mb, T, C).
  void do_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            Tensor& y) override {
    check_on_gpu({&tokens, &wte, &wpe, &y}, "embedding");
    kern::embedding_forward(tokens.i32(), wte.f32(), wpe.f32(), y.f32(), tokens.dim(0),
                            tokens.dim(1), wte.rows(), wte.cols(), ctx_.error_word, stream());
  }

  void do_embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                             Tensor& dwpe) override {
    check_on_gpu({&tokens, &dy, &dwte, &dwpe}, "embedding");
    kern::embedding_backward(tokens.i32(), dy.f32(), dwte.f32(), dwpe.f32(), tokens.dim(0),
                             tokens.dim(1), dwte.rows(), dwte.cols(), ctx_.error_word, stream());
  }

  void do_attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs,
                          AttentionMask mask) override {
    cuda::attention_probs(qkv, heads, probs, mask, precision_);
  }
  void do_attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                           Tensor& y) override {
    cuda::attention_values(qkv, probs, heads, y, precision_);
  }
  void do_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                             int64_t heads, Tensor& dqkv, AttentionMask mask) override {
    cuda::attention_backward(qkv, probs, dy, heads, dqkv, mask, precision_);
  }

 private:
  cudaStream_t stream() const { return ctx_.compute; }

  Precision precision_;  // of the attention GEMMs
  Context& ctx_;
};

}  // namespace

std::unique_ptr<TransformerKernels> make_transformer_kernels(Precision precision) {
  return std::make_unique<CudaTransformerKernels>(precision);
}

}  // namespace pt::cuda
