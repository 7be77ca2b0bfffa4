// hybrid_layers.hpp: the two layers that join a convolutional network to
// Transformer blocks in the hybrid family (docs/cnn.md, "The hybrid family"):
// the patch tokens, which turn each pixel of a feature map into one token,
// and a classification head that pools the tokens. They compute with the
// convolution kernel group (the image <-> token transposes, global average
// pooling) and the transformer group (LayerNorm).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pipetrain/model/layers.hpp"

namespace pt {

// x (N, C, S, S) -> y (N, S S, d_model): pixel p = h S + w becomes token p,
// its C channels projected by a Linear "<name>.proj" (d_model, C) with bias
// (uniform, gain 1, from (seed, stream)), plus a learned position embedding
// "<name>.pos" (S S, d_model), N(0, 0.02^2) from (seed, stream + 1).
std::unique_ptr<Layer> make_patch_tokens(const std::string& name, int64_t channels, int64_t side,
                                         int64_t d_model, uint64_t seed, uint64_t stream,
                                         ParamInit init = ParamInit::FromSeed);

// x (N, T, d_model) -> logits (N, classes): LayerNorm "<name>.ln" over each
// token (weight 1, bias 0), the mean over the T tokens, then a Linear
// "<name>.fc" (classes, d_model) with bias (gain 1, from (seed, stream)).
std::unique_ptr<Layer> make_token_pool_head(const std::string& name, int64_t tokens,
                                            int64_t d_model, int64_t classes, uint64_t seed,
                                            uint64_t stream);

}  // namespace pt
