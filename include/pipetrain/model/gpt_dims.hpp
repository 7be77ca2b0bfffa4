// gpt_dims.hpp: the widths of a GPT (decoder-only transformer), the one
// struct that both the runtime's layers (model/gpt.hpp) and the planner's
// analytic cost model (plan/device.hpp, GptSpec) describe a GPT with. The
// "gpt" family fills it from the deck's model section (family_gpt.cpp).
// Kept apart from gpt.hpp so the planner needs no layer or kernel header.
#pragma once

#include <cstdint>

namespace pt {

struct GptDims {
  int64_t vocab_size = 256;  // V
  int64_t seq_len = 64;      // T
  int64_t d_model = 128;     // C
  int64_t heads = 4;         // H; C % H == 0
  int64_t mlp_ratio = 4;     // R: MLP hidden width R*C
  int64_t blocks = 4;        // n_blocks (for the residual init scale)
};

}  // namespace pt
