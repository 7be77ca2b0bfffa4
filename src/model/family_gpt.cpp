// family_gpt.cpp: the "gpt" model family, a decoder-only transformer
// (layers in gpt.cpp) trained on token data. A partition unit is one
// transformer block; the embedding is pinned to the first stage and the head
// (final LayerNorm, LM head) with the cross-entropy to the last.
#include "families.hpp"
#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

// The family's keys: model.vocab_size, vocab_multiple, seq_len, d_model,
// heads, mlp_ratio, blocks and attention, read from the deck into
// ModelConfig::gpt.
GptDims dims(const ModelConfig& m) { return m.gpt; }

int64_t units(const ModelConfig& m) { return m.gpt.blocks; }

int64_t tokens(const ModelConfig& m) { return m.gpt.seq_len; }

// Token ids (T) into the first stage, activations (T, C) into the others.
StageInput stage_input(const ModelConfig& m, int64_t, bool first) {
  if (first) return {Shape{m.gpt.seq_len}, DType::I32};
  return {Shape{m.gpt.seq_len, m.gpt.d_model}, DType::F32};
}

void add_front(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_gpt_embedding(dims(m), m.init_seed));
  sm.layer_unit.push_back(-1);
}

void add_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  sm.layers.push_back(make_gpt_block(dims(m), u, m.init_seed, init));
  sm.layer_unit.push_back(u);
}

void end_stage(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_gpt_head(dims(m), m.init_seed));
  sm.layer_unit.push_back(-1);
  sm.loss = make_cross_entropy_loss(m.gpt.vocab_size);  // of the padded_vocab() logits
  sm.loss_terms_per_sample = m.gpt.seq_len;
}

// Forward matmul FLOPs per sample of one transformer block: per token the
// qkv, attention projection and MLP products, and the scores and weighted
// values over the full sequence.
double block_flops(const GptDims& g) {
  const double c = g.d_model, t = g.seq_len, r = g.mlp_ratio;
  const double per_token = 2.0 * c * 3.0 * c + 2.0 * t * c * 2.0 + 2.0 * c * c + 2.0 * 2.0 * c * r * c;
  return t * per_token;
}

// The LM head: 2 T C V of useful work (what MFU counts), and 2 T C (Vp - V)
// on the padded vocabulary columns, which take time but do nothing.
CostUnitInfo head_cost(const GptDims& g) {
  const double per_column = 2.0 * static_cast<double>(g.seq_len * g.d_model);
  const double padded = static_cast<double>(g.padded_vocab() - g.vocab_size);
  CostUnitInfo head{"head", false, per_column * static_cast<double>(g.vocab_size), per_column * padded};
  head.parameters = gpt_head_parameters(g);
  return head;
}

std::vector<CostUnitInfo> costs(const ModelConfig& m) {
  const GptDims& g = m.gpt;
  std::vector<CostUnitInfo> out;
  out.push_back({"embedding", false, 0.0});  // a gather, no matmul
  out.back().parameters = gpt_embedding_parameters(g);
  for (int64_t b = 0; b < g.blocks; ++b) {
    out.push_back({"block" + std::to_string(b), true, block_flops(g)});
    out.back().parameters = gpt_block_parameters(g);
  }
  out.push_back(head_cost(g));
  return out;
}

// W's share of a backward without recompute, by matmul FLOPs: the backward
// of a weight product is two products (dx, dW) and W is one of them; the
// attention products (scores, weighted values: 4 T C per token forward, no
// weights) have a backward of twice their FLOPs, all in B; fused attention's
// backward first recomputes the scores (2 T C per token), half as much again.
// The LM head counts its padded columns: the share is one of time.
double weight_grad_share(const ModelConfig& m) {
  const GptDims& g = m.gpt;
  const double c = g.d_model, t = g.seq_len, r = g.mlp_ratio, v = g.padded_vocab();
  const double blocks = static_cast<double>(g.blocks);
  const double weights = blocks * (8.0 * c * c + 4.0 * r * c * c) * t + 2.0 * t * c * v;
  const double attention = blocks * 4.0 * t * c * t;
  const double attention_backward = (g.attention == AttentionKind::Fused ? 2.5 : 2.0) * attention;
  return weights / (2.0 * weights + attention_backward);
}

std::string describe(const ModelConfig& m) {
  const GptDims& g = m.gpt;
  return " vocab_size=" + std::to_string(g.vocab_size) + " seq_len=" + std::to_string(g.seq_len) +
         " d_model=" + std::to_string(g.d_model) + " heads=" + std::to_string(g.heads) +
         " blocks=" + std::to_string(g.blocks) + " mlp_ratio=" + std::to_string(g.mlp_ratio) +
         (g.vocab_multiple == 1 ? "" : " vocab_multiple=" + std::to_string(g.vocab_multiple)) +
         (g.attention == AttentionKind::Reference ? "" : std::string(" attention=") + kind_name(g.attention));
}

// Fused attention on CUDA is cuDNN's SDPA, whose inputs are 16-bit: bf16,
// the precision it is built and tested in, with a head width cuDNN's fused
// kernels take on every GPU from sm_80 on (docs/cuda.md). The CPU computes
// it in every precision and width.
constexpr int64_t kFusedHeadWidthMax = 128;
constexpr int64_t kFusedHeadWidthStep = 8;

void check_fused_attention(const Deck& deck) {
  const GptDims& g = deck.model.gpt;
  const TrainingConfig& t = deck.training;
  if (g.attention != AttentionKind::Fused || t.device != DeviceKind::Cuda) return;
  const std::string at = deck.where("model.attention") + " = \"fused\": on CUDA it is cuDNN's bf16 attention";
  const std::string instead = "; use model.attention = \"reference\"";
  if (t.precision != Precision::Bf16)
    throw InputError(at + " and needs training.precision = \"bf16\", not " +
                     deck.described("training.precision", "\"" + std::string(kind_name(t.precision)) + "\"") +
                     instead + " in other precisions");
  const int64_t width = g.d_model / g.heads;
  if (width % kFusedHeadWidthStep != 0 || width > kFusedHeadWidthMax)
    throw InputError(at + ", whose head width d_model / heads must be a multiple of 8 and at most 128, not " +
                     std::to_string(width) + " (" + deck.described("model.d_model", std::to_string(g.d_model)) +
                     ", " + deck.described("model.heads", std::to_string(g.heads)) + ")" + instead);
}

void check(const Deck& deck) {
  const GptDims& g = deck.model.gpt;
  if (g.d_model % g.heads != 0)
    throw InputError(deck.where("model.heads") + " = " + std::to_string(g.heads) + ": must divide " +
                     deck.described("model.d_model", std::to_string(g.d_model)));
  check_fused_attention(deck);
}

// Selective recomputation drops the attention probabilities; fused
// attention keeps none (only row statistics), so there it drops nothing.
bool selective_drops(const ModelConfig& m) { return m.gpt.attention != AttentionKind::Fused; }

// The layers compute with the backend's transformer kernels, and with fused
// attention with its fused attention kernels.
void check_backend(const ModelConfig& m, Backend& be) {
  gpt_kernels(be);
  if (m.gpt.attention == AttentionKind::Fused) gpt_fused_attention(be);
}

}  // namespace

ModelFamily gpt_family() {
  ModelFamily f;
  f.name = "gpt";
  f.summary = "decoder-only transformer (Markov or HDF5 token data)";
  f.keys = {"vocab_size", "vocab_multiple", "seq_len", "d_model", "heads", "blocks", "mlp_ratio", "attention"};
  f.data_types = {DataKind::Markov, DataKind::Hdf5};
  // The names from data.type's one table (deck_kinds.hpp).
  f.data_rule = std::string("needs token data, data.type = \"") + kind_name(DataKind::Markov) + "\" or \"" +
                kind_name(DataKind::Hdf5) + "\"";
  f.check = check;
  f.check_backend = check_backend;
  f.describe = describe;
  f.units_key = "blocks";
  f.unit_name = "transformer block";
  f.units = units;
  f.tokens_per_sample = tokens;
  f.stage_input = stage_input;
  f.add_front = add_front;
  f.add_unit = add_unit;
  f.end_stage = end_stage;
  f.cost_units = costs;
  f.pinned_front = 1;
  f.pinned_back = 1;
  f.selective_drops = selective_drops;
  f.weight_grad_share = weight_grad_share;
  f.analytic_dims = dims;
  return f;
}

}  // namespace pt
