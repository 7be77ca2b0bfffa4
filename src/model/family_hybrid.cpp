// family_hybrid.cpp: the "hybrid" model family, a convolutional stem followed
// by Transformer blocks on its patch tokens (docs/cnn.md, "The hybrid
// family"). The convolutional part is the cnn family's network (stem and
// model.stages x model.stage_blocks residual blocks that widen and
// downsample, cnn_net); each pixel of its last feature map becomes one token
// of width model.d_model (patch tokens: a Linear projection and a learned
// position embedding); model.blocks GPT blocks (gpt.cpp; causal attention, or
// over every token with model.causal = false) follow, then a head that pools the tokens and
// classifies, with the cross-entropy. Partition units: the residual blocks
// (units 0..R-1), then the Transformer blocks (R..R+B-1), the patch tokens
// belonging to unit R; the stem is pinned to the first stage and the head to
// the last. A pipeline of this model has convolutional and attention stages.
#include "families.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/gpt.hpp"
#include "pipetrain/model/hybrid_layers.hpp"

namespace pt {

namespace {

int64_t conv_blocks(const ModelConfig& m) { return cnn_net::blocks(m); }
int64_t units(const ModelConfig& m) { return conv_blocks(m) + m.gpt.blocks; }

// The last feature map: channels and side; its pixels are the tokens.
int64_t feature_channels(const ModelConfig& m) { return cnn_net::width_before(m, conv_blocks(m)); }
int64_t feature_side(const ModelConfig& m) { return cnn_net::side_before(m, conv_blocks(m)); }
int64_t tokens(const ModelConfig& m) { return feature_side(m) * feature_side(m); }

// The Transformer blocks' dimensions: the deck's d_model, heads, mlp_ratio,
// blocks and attention over a sequence of tokens(m).
GptDims dims(const ModelConfig& m) {
  GptDims g = m.gpt;
  g.seq_len = tokens(m);
  return g;
}

// Streams after the residual blocks': the patch tokens take two, the head one.
uint64_t tokens_stream(const ModelConfig& m) { return cnn_net::block_stream(conv_blocks(m)); }

StageInput stage_input(const ModelConfig& m, int64_t first_unit, bool first) {
  if (first || first_unit <= conv_blocks(m)) return cnn_net::stage_input(m, first_unit, first);
  return {Shape{tokens(m), m.gpt.d_model}, DType::F32};
}

void add_front(const ModelConfig& m, StageModel& sm) { cnn_net::add_stem(m, sm); }

void add_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  if (u < conv_blocks(m)) return cnn_net::add_block(m, sm, u, init);
  if (u == conv_blocks(m)) {
    sm.layers.push_back(make_patch_tokens("tokens", feature_channels(m), feature_side(m),
                                          m.gpt.d_model, m.init_seed, tokens_stream(m), init));
    sm.layer_unit.push_back(u);
  }
  sm.layers.push_back(make_gpt_block(dims(m), u, m.init_seed, init));  // "block<u>."
  sm.layer_unit.push_back(u);
}

void end_stage(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_token_pool_head("head", tokens(m), m.gpt.d_model, m.cnn.classes,
                                           m.init_seed, tokens_stream(m) + 2));
  sm.layer_unit.push_back(-1);
  sm.loss = make_loss(LossKind::CrossEntropy);
  sm.loss_terms_per_sample = 1;
}

// Forward FLOPs per sample of a Transformer block: its weight products and
// its attention products (scores and weighted values over T tokens).
double block_weight_flops(const ModelConfig& m) {
  const double c = m.gpt.d_model, r = m.gpt.mlp_ratio, t = tokens(m);
  return t * (2.0 * c * 3.0 * c + 2.0 * c * c + 4.0 * c * r * c);
}
double block_attention_flops(const ModelConfig& m) {
  const double c = m.gpt.d_model, t = tokens(m);
  return t * 4.0 * t * c;
}
double token_flops(const ModelConfig& m) {
  return 2.0 * static_cast<double>(feature_channels(m) * m.gpt.d_model * tokens(m));
}

std::vector<CostUnitInfo> costs(const ModelConfig& m) {
  std::vector<CostUnitInfo> out = cnn_net::stem_and_block_costs(m);
  const double block = block_weight_flops(m) + block_attention_flops(m);
  const double d = static_cast<double>(m.gpt.d_model), classes = static_cast<double>(m.cnn.classes);
  for (int64_t u = conv_blocks(m); u < units(m); ++u) {
    const bool with_tokens = u == conv_blocks(m);
    out.push_back({"block" + std::to_string(u), true, block + (with_tokens ? token_flops(m) : 0.0)});
    out.back().parameters = gpt_block_parameters(dims(m));
    // The patch tokens: a Linear (d, channels) with bias, positions (T, d).
    if (with_tokens)
      out.back().parameters += (static_cast<double>(feature_channels(m)) + 1.0) * d +
                               static_cast<double>(tokens(m)) * d;
  }
  out.push_back({"head", false, 2.0 * d * classes});
  out.back().parameters = 2.0 * d + (d + 1.0) * classes;  // LayerNorm, Linear with bias
  return out;
}

// W's share of a backward by FLOPs: a convolution's or a weight product's
// backward is two of its size, one of them W; attention's backward is
// twice its forward, all in B (as the gpt and cnn families count them).
double weight_grad_share(const ModelConfig& m) {
  double conv = 0.0;
  for (const CostUnitInfo& u : cnn_net::stem_and_block_costs(m)) conv += u.forward_flops;
  const double blocks = static_cast<double>(m.gpt.blocks);
  const double weights = conv + token_flops(m) + blocks * block_weight_flops(m);
  return weights / (2.0 * weights + 2.0 * blocks * block_attention_flops(m));
}

std::string describe(const ModelConfig& m) {
  const GptDims& g = m.gpt;
  return cnn_net::describe(m) + " d_model=" + std::to_string(g.d_model) +
         " heads=" + std::to_string(g.heads) + " blocks=" + std::to_string(g.blocks) +
         " mlp_ratio=" + std::to_string(g.mlp_ratio) +
         (g.attention == AttentionKind::Reference ? "" : std::string(" attention=") + kind_name(g.attention)) +
         (g.causal ? "" : " causal=false");
}

void check(const Deck& deck) {
  cnn_net::check(deck);
  const GptDims& g = deck.model.gpt;
  if (g.d_model % g.heads != 0)
    throw InputError(deck.where("model.heads") + " = " + std::to_string(g.heads) + ": must divide " +
                     deck.described("model.d_model", std::to_string(g.d_model)));
  if (!g.causal && g.attention == AttentionKind::Fused)
    throw InputError(deck.where("model.causal") + " = false: the fused attention kernels are causal " +
                     "only; with " + deck.described("model.attention", "\"fused\"") +
                     " keep model.causal = true, or use model.attention = \"reference\"");
}

bool selective_drops(const ModelConfig& m) { return m.gpt.attention != AttentionKind::Fused; }

void check_backend(const ModelConfig& m, Backend& be) {
  require_kernels<ConvKernels>(be, "model family \"hybrid\"");
  require_kernels<TransformerKernels>(be, "model family \"hybrid\"");
  if (m.gpt.attention == AttentionKind::Fused) gpt_fused_attention(be);
}

}  // namespace

ModelFamily hybrid_family() {
  ModelFamily f;
  f.name = "hybrid";
  f.summary = "convolutional stem + Transformer blocks on its patch tokens (teacher-labelled images or HDF5 image files)";
  f.keys = {"image_size", "in_channels", "classes", "width", "stages", "stage_blocks",
            "norm_groups", "norm", "activation", "d_model", "heads", "blocks", "mlp_ratio", "attention",
            "causal"};
  f.key_defaults = {{"activation", "relu"}};
  f.data_types = {DataKind::Images, DataKind::ImageFiles};
  f.data_rule = "trains on data.type = \"images\" or \"image_files\"";
  f.check = check;
  f.check_backend = check_backend;
  f.describe = describe;
  f.units_key = "blocks";
  f.unit_name = "residual or Transformer block";
  f.units = units;
  f.tokens_per_sample = [](const ModelConfig&) -> int64_t { return 1; };
  f.stage_input = stage_input;
  f.add_front = add_front;
  f.add_unit = add_unit;
  f.end_stage = end_stage;
  f.cost_units = costs;
  f.pinned_front = 1;
  f.pinned_back = 1;
  f.selective_drops = selective_drops;
  f.weight_grad_share = weight_grad_share;
  return f;
}

}  // namespace pt
