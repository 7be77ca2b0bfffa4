// family_cnn.cpp: the "cnn" model family, a ResNet-style image classifier
// (layers in conv_layers.cpp) trained on teacher-labelled images
// (data.type = "images"). A partition unit is one residual block; the stem
// (3 x 3 convolution, norm: group or batch, model.norm; model.activation,
// ReLU unless the deck says GELU) is pinned to the first stage and the
// classification head with the cross-entropy to the last. Stage s of the
// network (not of the pipeline) has width * 2^s channels; its first block
// halves the resolution (stride 2, with a projection skip) for s > 0.
#include <cmath>

#include "families.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/conv_layers.hpp"

namespace pt {

namespace {

// Initialisation streams: the stem's, then three per block (cnn_net::block_stream),
// then the head's.
constexpr uint64_t kStemStream = 0;

int64_t units(const ModelConfig& m) { return cnn_net::blocks(m); }

int64_t tokens(const ModelConfig&) { return 1; }

int64_t stage_of(const ModelConfig& m, int64_t unit) { return unit / m.cnn.stage_blocks; }
int64_t width_of_stage(const ModelConfig& m, int64_t s) { return m.cnn.width << s; }
bool downsamples(const ModelConfig& m, int64_t unit) {
  return unit % m.cnn.stage_blocks == 0 && stage_of(m, unit) > 0;
}

}  // namespace

namespace cnn_net {

int64_t blocks(const ModelConfig& m) { return m.cnn.stages * m.cnn.stage_blocks; }

uint64_t block_stream(int64_t unit) { return 1 + 3 * static_cast<uint64_t>(unit); }

NormSpec norm(const ModelConfig& m) { return {m.cnn.norm, m.cnn.norm_groups, 1e-5f, 0.1}; }

int64_t width_before(const ModelConfig& m, int64_t unit) {
  if (unit == blocks(m)) return width_of_stage(m, m.cnn.stages - 1);
  return width_of_stage(m, stage_of(m, unit) - (downsamples(m, unit) ? 1 : 0));
}
int64_t side_before(const ModelConfig& m, int64_t unit) {
  int64_t side = m.cnn.image_size;
  for (int64_t u = 0; u < unit; ++u)
    if (downsamples(m, u)) side = (side - 1) / 2 + 1;  // 3 x 3, padding 1, stride 2
  return side;
}

StageInput stage_input(const ModelConfig& m, int64_t first_unit, bool first) {
  if (first) return {Shape{m.cnn.in_channels, m.cnn.image_size, m.cnn.image_size}, DType::F32};
  const int64_t side = side_before(m, first_unit);
  return {Shape{width_before(m, first_unit), side, side}, DType::F32};
}

void add_stem(const ModelConfig& m, StageModel& sm) {
  const CnnConfig& c = m.cnn;
  sm.layers.push_back(make_conv2d("stem.conv", c.in_channels, c.width, 3, {1, 1}, false,
                                  m.init_seed, kStemStream, std::sqrt(2.f)));
  sm.layers.push_back(make_norm("stem.norm", c.width, norm(m)));
  sm.layers.push_back(make_activation(m.activation));
  for (int i = 0; i < 3; ++i) sm.layer_unit.push_back(-1);
}

void add_block(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  sm.layers.push_back(make_residual_block("block" + std::to_string(u), width_before(m, u),
                                          width_of_stage(m, stage_of(m, u)),
                                          downsamples(m, u) ? 2 : 1, norm(m), m.init_seed,
                                          block_stream(u), init, m.activation));
  sm.layer_unit.push_back(u);
}

// Forward multiply-add FLOPs (2 per multiply-add) per sample of a K x K
// convolution from `in` to `out` channels over an output of side x side.
double conv_flops(int64_t in, int64_t out, int64_t k, int64_t side) {
  return 2.0 * static_cast<double>(in * out * k * k * side * side);
}

// Adds to `unit` the parameters of a K x K convolution without bias from
// `in` to `out` channels, and of the normalisation after it: gamma and beta,
// and batch normalisation's running mean and variance.
void add_conv_and_norm(CostUnitInfo& unit, const ModelConfig& m, int64_t in, int64_t out, int64_t k) {
  const double channels = static_cast<double>(out);
  unit.parameters += static_cast<double>(in * out * k * k) + 2.0 * channels;
  if (m.cnn.norm == NormKind::Batch) {
    unit.parameters += 2.0 * channels;
    unit.statistics += 2.0 * channels;
  }
}

std::vector<CostUnitInfo> stem_and_block_costs(const ModelConfig& m) {
  const CnnConfig& c = m.cnn;
  std::vector<CostUnitInfo> out;
  out.push_back({"stem", false, conv_flops(c.in_channels, c.width, 3, c.image_size)});
  add_conv_and_norm(out.back(), m, c.in_channels, c.width, 3);
  for (int64_t u = 0; u < blocks(m); ++u) {
    const int64_t in = width_before(m, u), width = width_of_stage(m, stage_of(m, u));
    const int64_t side = side_before(m, u + 1);
    CostUnitInfo unit{"block" + std::to_string(u), true,
                      conv_flops(in, width, 3, side) + conv_flops(width, width, 3, side)};
    add_conv_and_norm(unit, m, in, width, 3);
    add_conv_and_norm(unit, m, width, width, 3);
    if (in != width || downsamples(m, u)) {  // the projection skip
      unit.forward_flops += conv_flops(in, width, 1, side);
      add_conv_and_norm(unit, m, in, width, 1);
    }
    out.push_back(unit);
  }
  return out;
}

std::string describe(const ModelConfig& m) {
  const CnnConfig& c = m.cnn;
  return " image_size=" + std::to_string(c.image_size) + " in_channels=" +
         std::to_string(c.in_channels) + " classes=" + std::to_string(c.classes) +
         " width=" + std::to_string(c.width) + " stages=" + std::to_string(c.stages) +
         " stage_blocks=" + std::to_string(c.stage_blocks) +
         " norm_groups=" + std::to_string(c.norm_groups) +
         (c.norm == NormKind::Group ? "" : std::string(" norm=") + kind_name(c.norm)) +
         (m.activation == ActivationKind::Relu ? "" : std::string(" activation=") + kind_name(m.activation));
}

void check(const Deck& deck) {
  const CnnConfig& c = deck.model.cnn;
  if (c.norm == NormKind::Group && c.width % c.norm_groups != 0)
    throw InputError(deck.where("model.norm_groups") + " = " + std::to_string(c.norm_groups) +
                     ": must divide " + deck.described("model.width", std::to_string(c.width)) +
                     " (every stage's width is a multiple of it)");
  if ((c.width << (c.stages - 1)) > (int64_t{1} << 20))
    throw InputError(deck.where("model.stages") + " = " + std::to_string(c.stages) +
                     ": the last stage would have width * 2^(stages - 1) = " +
                     std::to_string(c.width << (c.stages - 1)) + " channels; at most 2^20 with " +
                     deck.described("model.width", std::to_string(c.width)));
}

}  // namespace cnn_net

namespace {

void add_front(const ModelConfig& m, StageModel& sm) { cnn_net::add_stem(m, sm); }

void add_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  cnn_net::add_block(m, sm, u, init);
}

void end_stage(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_classifier_head("head", cnn_net::width_before(m, units(m)),
                                           m.cnn.classes, m.init_seed,
                                           cnn_net::block_stream(units(m))));
  sm.layer_unit.push_back(-1);
  sm.loss = make_loss(LossKind::CrossEntropy);
  sm.loss_terms_per_sample = 1;
}

std::vector<CostUnitInfo> costs(const ModelConfig& m) {
  std::vector<CostUnitInfo> out = cnn_net::stem_and_block_costs(m);
  const double channels = static_cast<double>(cnn_net::width_before(m, units(m)));
  const double classes = static_cast<double>(m.cnn.classes);
  out.push_back({"head", false, 2.0 * channels * classes});
  out.back().parameters = (channels + 1.0) * classes;  // Linear with bias
  return out;
}

// A convolution's backward is two of its size (data, weights): W is half.
double weight_grad_share(const ModelConfig&) { return 0.5; }

void check_backend(const ModelConfig&, Backend& be) {
  require_kernels<ConvKernels>(be, "model family \"cnn\"");
}

}  // namespace

ModelFamily cnn_family() {
  ModelFamily f;
  f.name = "cnn";
  f.summary = "ResNet-style image classifier (teacher-labelled images or HDF5 image files)";
  f.keys = {"image_size", "in_channels", "classes", "width", "stages", "stage_blocks", "norm_groups",
            "norm", "activation"};
  f.key_defaults = {{"activation", "relu"}};
  f.data_types = {DataKind::Images, DataKind::ImageFiles};
  f.data_rule = "trains on data.type = \"images\" or \"image_files\"";
  f.check = cnn_net::check;
  f.check_backend = check_backend;
  f.describe = cnn_net::describe;
  f.units_key = "stage_blocks";
  f.unit_name = "residual block";
  f.units = units;
  f.tokens_per_sample = tokens;
  f.stage_input = cnn_net::stage_input;
  f.add_front = add_front;
  f.add_unit = add_unit;
  f.end_stage = end_stage;
  f.cost_units = costs;
  f.pinned_front = 1;
  f.pinned_back = 1;
  f.weight_grad_share = weight_grad_share;
  return f;
}

}  // namespace pt
