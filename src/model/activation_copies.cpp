// activation_copies.cpp: the GEMM-precision copies of the activations kept
// only as GEMM operands (model/activation_copies.hpp).
#include "pipetrain/model/activation_copies.hpp"

namespace pt {

Tensor gemm_operand_copy(Backend& be, const Tensor& x) {
  const DType dtype = stored_dtype(be.precision());
  if (dtype == DType::F32 || x.dtype() != DType::F32) return x;
  Tensor copy = Tensor::empty(x.shape(), dtype, MemCategory::Workspace, x.device());
  be.round_to(x, copy);
  return copy;
}

void set_activation_copies(StageModel& stage, bool on) {
  for (auto& layer : stage.layers) layer->set_activation_copies(on);
}

}  // namespace pt
