// families.hpp: the built-in model families, each defined in its own file
// (family_mlp.cpp, family_gpt.cpp, family_cnn.cpp, family_hybrid.cpp) and
// listed by the registry (family.cpp); and the convolutional network the cnn
// family builds, which the hybrid family uses as its stem. Private to src/model.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/model/conv_layers.hpp"
#include "pipetrain/model/family.hpp"

namespace pt {

ModelFamily mlp_family();
ModelFamily gpt_family();
ModelFamily cnn_family();
ModelFamily hybrid_family();

// The cnn family's network (family_cnn.cpp) from the model.cnn keys: a stem
// (3 x 3 convolution, norm, ReLU; pinned, layer_unit -1) and blocks(m)
// residual blocks "block<u>" in stages that widen and downsample.
namespace cnn_net {
int64_t blocks(const ModelConfig& m);
// The initialisation streams of block u (three from this one on); the
// stream of blocks(m) is free for what follows the blocks.
uint64_t block_stream(int64_t unit);
NormSpec norm(const ModelConfig& m);
// Channels and image side entering block `unit` (unit = blocks(m): after the last).
int64_t width_before(const ModelConfig& m, int64_t unit);
int64_t side_before(const ModelConfig& m, int64_t unit);
// An image (C, H, W) into the stage whose first block is `first_unit`.
StageInput stage_input(const ModelConfig& m, int64_t first_unit, bool first);
void add_stem(const ModelConfig& m, StageModel& sm);
void add_block(const ModelConfig& m, StageModel& sm, int64_t unit, ParamInit init);
// Forward FLOPs per sample of a K x K convolution onto a side x side output.
double conv_flops(int64_t in, int64_t out, int64_t k, int64_t side);
// Cost units "stem" (pinned) and "block<u>", forward FLOPs per sample.
std::vector<CostUnitInfo> stem_and_block_costs(const ModelConfig& m);
std::string describe(const ModelConfig& m);  // " image_size=16 ... norm_groups=4"
void check(const Deck& deck);                 // the model.cnn keys' cross-checks
}  // namespace cnn_net

}  // namespace pt
