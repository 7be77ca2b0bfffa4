// gemm_epilogue.hpp: a Linear layer's forward as one cuBLASLt matmul with
// its bias, or bias and GELU, applied in the GEMM's epilogue (issue #42):
// y = x w^T + bias and gelu = GELU(y) without a pass over y of their own;
// and the input gradient of a Linear layer fed by a GELU with GELU's
// backward in the epilogue (DGELU) (internal to pt_cuda).
#pragma once

#include <cstdint>
#include <functional>

#include "gemm.hpp"

namespace pt::cuda {

struct LinearEpilogue {
  int64_t rows = 0, in = 0, out = 0;
  Operand x;                    // (rows, in), row-major
  Operand w;                    // (out, in), row-major
  const float* bias = nullptr;  // (out) or null
  float* y = nullptr;           // (rows, out): x w^T + bias, GELU's input when gelu is set
  float* gelu = nullptr;        // (rows, out) = GELU(y), or null
};

// Runs e on the compute stream and returns true when a fused form applies
// to its shape, operand types, precision and pointers (x and w: those of
// the fp32 tensors, or null when the operands are low-precision copies
// still to be made, which are aligned): a bias or GELU to fuse, 16-byte
// aligned matrices, an output width GELU's auxiliary output can take (a
// multiple of 8), and a cuBLASLt algorithm for it. `make_operands` is
// called once it applies, to set e.x and e.w (making the casts); the
// algorithm is chosen at a shape's first use and kept, so a shape's results
// are bitwise the same in every call. Otherwise returns false, having run
// nothing (counted): the caller runs the unfused kernels.
bool run_linear_epilogue(LinearEpilogue e, Precision p,
                         const std::function<void(LinearEpilogue&)>& make_operands);

// The input gradient through a GELU: dx (rows, in) = GELU'(gelu_input) *
// (dy (rows, out) w (out, in)), dy and w row-major.
struct GeluInputGradEpilogue {
  int64_t rows = 0, in = 0, out = 0;
  Operand dy;                         // (rows, out)
  Operand w;                          // (out, in)
  const float* gelu_input = nullptr;  // (rows, in): the GELU's input u, read by the epilogue
  float* dx = nullptr;                // (rows, in)
};

// As run_linear_epilogue, for cuBLASLt's DGELU epilogue: applies when the
// matrices are 16-byte aligned, `in` (the auxiliary input's leading
// dimension) is a multiple of 8 and cuBLASLt has an algorithm; otherwise
// returns false having run nothing (counted).
bool run_gelu_input_grad_epilogue(GeluInputGradEpilogue e, Precision p,
                                  const std::function<void(GeluInputGradEpilogue&)>& make_operands);

}  // namespace pt::cuda
