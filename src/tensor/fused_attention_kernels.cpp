// fused_attention_kernels.cpp: the argument checks of the fused attention
// kernel group (fused_attention_kernels.hpp), written once for every backend
// that provides it: each public kernel checks its shapes here and then calls
// the backend's do_<kernel>.
#include "pipetrain/tensor/fused_attention_kernels.hpp"

#include "attention_dims.hpp"
#include "shape_checks.hpp"

namespace pt {

using shapes::numel_is;

void FusedAttentionKernels::forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) {
  const AttnDims d = attn_dims(qkv, heads);  // qkv: (mb, T, 3C)
  numel_is("fused attention forward", "y", y, d.mb * d.T * d.C, "mb * T * C");
  numel_is("fused attention forward", "stats", stats, d.mb * d.H * d.T, "mb * H * T");
  do_forward(qkv, heads, y, stats);
}

void FusedAttentionKernels::backward(const Tensor& qkv, const Tensor& y, const Tensor& stats,
                                     const Tensor& dy, int64_t heads, Tensor& dqkv) {
  const AttnDims d = attn_dims(qkv, heads);
  numel_is("fused attention backward", "y", y, d.mb * d.T * d.C, "mb * T * C");
  PT_CHECK(y.dtype() == DType::F32 || y.dtype() == DType::BF16 || y.dtype() == DType::F16,
           std::string("fused attention backward: y ") + shape_string(y.shape()) + " is " +
               dtype_name(y.dtype()) + ", not f32, bf16 or f16");
  numel_is("fused attention backward", "stats", stats, d.mb * d.H * d.T, "mb * H * T");
  numel_is("fused attention backward", "dy", dy, d.mb * d.T * d.C, "mb * T * C");
  numel_is("fused attention backward", "dqkv", dqkv, qkv.numel(), "those of qkv");
  do_backward(qkv, y, stats, dy, heads, dqkv);
}

}  // namespace pt
