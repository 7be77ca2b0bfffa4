// model_config.hpp: the deck's [model] section as plain data, one struct per
// built-in model family. The keys a user writes stay flat (model.d_model,
// model.depth); the key table (src/io/deck_schema.cpp) puts each in its
// family's struct, and each family's file (src/model/family_*.cpp) reads its
// own. A family registered at run time may read the keys of a built-in one
// (its `keys` list says which; tests/test_model_family.cpp's toy reads the
// MLP's).
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/base/deck_kinds.hpp"

namespace pt {

// model.type = "mlp": Linear layers with an activation between them.
struct MlpConfig {
  int64_t input_dim = 64;          // features per sample
  int64_t hidden_dim = 128;        // width of hidden layers
  int64_t output_dim = 8;          // regression outputs or classes
  int64_t depth = 8;               // number of Linear layers (partition units)
  LossKind loss = LossKind::Mse;
};

// model.type = "gpt": the widths of a decoder-only transformer, as the
// deck gives them, the layers are built with (model/gpt.hpp) and the
// planner's analytic cost model prices them (plan/device.hpp, GptSpec).
struct GptDims {
  int64_t vocab_size = 256;  // V: token ids 0..V-1
  // The embedding table and the LM head have padded_vocab() rows, V
  // rounded up to a multiple of this (1: none; 128 on GPUs, so the LM
  // head's GEMMs have an N that tensor cores tile without a ragged edge).
  // The padded rows start at zero and stay there: the loss gives the
  // padded logits no probability and zero gradient.
  int64_t vocab_multiple = 1;  // model.vocab_multiple
  int64_t seq_len = 64;      // T: tokens per sample
  int64_t d_model = 128;     // C
  int64_t heads = 4;         // H: attention heads; C % H == 0
  int64_t mlp_ratio = 4;     // R: MLP hidden width R*C
  int64_t blocks = 4;        // transformer blocks (partition units; the residual init scale)
  // How the blocks compute attention: "reference" (probabilities (T, T)
  // materialised in fp32, the reference path) or "fused" (one kernel each
  // way, nothing of size T x T kept; on CUDA cuDNN's SDPA in bf16).
  AttentionKind attention = AttentionKind::Reference;  // model.attention
  // Whether token t attends only to tokens <= t (a language model: the gpt
  // family, always) or to every token (model.causal = false, offered by the
  // hybrid family, whose tokens are an image's pixels).
  bool causal = true;  // model.causal

  // Vp: the rows of embed.wte and head.lm_head, V rounded up to a multiple
  // of vocab_multiple (V itself when that is 1).
  int64_t padded_vocab() const {
    return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
  }
};

// model.type = "cnn": a ResNet-style classifier (docs/cnn.md): a stem
// convolution, `stages` stages of `stage_blocks` residual blocks (the
// partition units) whose width doubles and resolution halves from one stage
// to the next, and a classification head.
struct CnnConfig {
  int64_t image_size = 16;   // H = W of the input images
  int64_t in_channels = 3;   // channels of the input images
  int64_t classes = 10;      // classes of the head (cross-entropy)
  int64_t width = 16;        // channels of the stem and the first stage
  int64_t stages = 3;        // stage s has width * 2^s channels
  int64_t stage_blocks = 2;  // residual blocks per stage
  int64_t norm_groups = 4;   // group normalisation groups; must divide width
  NormKind norm = NormKind::Group;  // model.norm: group (norm_groups) or batch
};

struct ModelConfig {
  // The model family: a name in the registry of model/family.hpp, which
  // checks it; the deck layer only holds it (and its default).
  std::string type = "mlp";
  // model.activation: between the MLP's Linear layers; in the cnn's stem and
  // residual blocks and the hybrid's stem. Gelu is the default of the key;
  // a family may default it otherwise (ModelFamily::key_defaults: cnn and
  // hybrid, relu).
  ActivationKind activation = ActivationKind::Gelu;
  MlpConfig mlp;
  GptDims gpt;
  CnnConfig cnn;
  uint64_t init_seed = 1234;       // parameter initialisation seed (every family)
};

}  // namespace pt
