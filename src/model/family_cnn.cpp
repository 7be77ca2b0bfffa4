// family_cnn.cpp: the "cnn" model family, a ResNet-style image classifier
// (layers in conv_layers.cpp) trained on teacher-labelled images
// (data.type = "images"). A partition unit is one residual block; the stem
// (3 x 3 convolution, group norm, ReLU) is pinned to the first stage and the
// classification head with the cross-entropy to the last. Stage s of the
// network (not of the pipeline) has width * 2^s channels; its first block
// halves the resolution (stride 2, with a projection skip) for s > 0.
#include <cmath>

#include "families.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/conv_layers.hpp"

namespace pt {

namespace {

// Initialisation streams: the stem's, then three per block, then the head's.
constexpr uint64_t kStemStream = 0;
uint64_t block_stream(int64_t unit) { return 1 + 3 * static_cast<uint64_t>(unit); }

int64_t units(const ModelConfig& m) { return m.cnn.stages * m.cnn.stage_blocks; }

int64_t tokens(const ModelConfig&) { return 1; }

NormSpec norm(const ModelConfig& m) { return {NormKind::Group, m.cnn.norm_groups, 1e-5f}; }

int64_t stage_of(const ModelConfig& m, int64_t unit) { return unit / m.cnn.stage_blocks; }
int64_t width_of_stage(const ModelConfig& m, int64_t s) { return m.cnn.width << s; }
bool downsamples(const ModelConfig& m, int64_t unit) {
  return unit % m.cnn.stage_blocks == 0 && stage_of(m, unit) > 0;
}

// Channels and image side entering unit `unit` (unit = units(m): the head).
int64_t width_before(const ModelConfig& m, int64_t unit) {
  if (unit == units(m)) return width_of_stage(m, m.cnn.stages - 1);
  return width_of_stage(m, stage_of(m, unit) - (downsamples(m, unit) ? 1 : 0));
}
int64_t side_before(const ModelConfig& m, int64_t unit) {
  int64_t side = m.cnn.image_size;
  for (int64_t u = 0; u < unit; ++u)
    if (downsamples(m, u)) side = (side - 1) / 2 + 1;  // 3 x 3, padding 1, stride 2
  return side;
}
int64_t side_after(const ModelConfig& m, int64_t unit) {
  const int64_t side = side_before(m, unit);
  return downsamples(m, unit) ? (side - 1) / 2 + 1 : side;
}

StageInput stage_input(const ModelConfig& m, int64_t first_unit, bool first) {
  if (first) return {Shape{m.cnn.in_channels, m.cnn.image_size, m.cnn.image_size}, DType::F32};
  const int64_t side = side_before(m, first_unit);
  return {Shape{width_before(m, first_unit), side, side}, DType::F32};
}

void add_front(const ModelConfig& m, StageModel& sm) {
  const CnnConfig& c = m.cnn;
  sm.layers.push_back(make_conv2d("stem.conv", c.in_channels, c.width, 3, {1, 1}, false,
                                  m.init_seed, kStemStream, std::sqrt(2.f)));
  sm.layers.push_back(make_norm("stem.norm", c.width, norm(m)));
  sm.layers.push_back(make_relu());
  for (int i = 0; i < 3; ++i) sm.layer_unit.push_back(-1);
}

void add_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  sm.layers.push_back(make_residual_block("block" + std::to_string(u), width_before(m, u),
                                          width_of_stage(m, stage_of(m, u)),
                                          downsamples(m, u) ? 2 : 1, norm(m), m.init_seed,
                                          block_stream(u), init));
  sm.layer_unit.push_back(u);
}

void end_stage(const ModelConfig& m, StageModel& sm) {
  sm.layers.push_back(make_classifier_head("head", width_before(m, units(m)), m.cnn.classes,
                                           m.init_seed, block_stream(units(m))));
  sm.layer_unit.push_back(-1);
  sm.loss = make_loss(LossKind::CrossEntropy);
  sm.loss_terms_per_sample = 1;
}

// Forward multiply-add FLOPs (2 per multiply-add) per sample of a K x K
// convolution from `in` to `out` channels over an output of side x side.
double conv_flops(int64_t in, int64_t out, int64_t k, int64_t side) {
  return 2.0 * static_cast<double>(in * out * k * k * side * side);
}

double block_flops(const ModelConfig& m, int64_t u) {
  const int64_t in = width_before(m, u), out = width_of_stage(m, stage_of(m, u));
  const int64_t side = side_after(m, u);
  double flops = conv_flops(in, out, 3, side) + conv_flops(out, out, 3, side);
  if (in != out || downsamples(m, u)) flops += conv_flops(in, out, 1, side);
  return flops;
}

std::vector<CostUnitInfo> costs(const ModelConfig& m) {
  const CnnConfig& c = m.cnn;
  std::vector<CostUnitInfo> out;
  out.push_back({"stem", false, conv_flops(c.in_channels, c.width, 3, c.image_size)});
  for (int64_t u = 0; u < units(m); ++u)
    out.push_back({"block" + std::to_string(u), true, block_flops(m, u)});
  out.push_back({"head", false, 2.0 * static_cast<double>(width_before(m, units(m)) * c.classes)});
  return out;
}

// A convolution's backward is two of its size (data, weights): W is half.
double weight_grad_share(const ModelConfig&) { return 0.5; }

std::string describe(const ModelConfig& m) {
  const CnnConfig& c = m.cnn;
  return " image_size=" + std::to_string(c.image_size) + " in_channels=" +
         std::to_string(c.in_channels) + " classes=" + std::to_string(c.classes) +
         " width=" + std::to_string(c.width) + " stages=" + std::to_string(c.stages) +
         " stage_blocks=" + std::to_string(c.stage_blocks) +
         " norm_groups=" + std::to_string(c.norm_groups);
}

void check(const Deck& deck) {
  const CnnConfig& c = deck.model.cnn;
  if (c.width % c.norm_groups != 0)
    throw InputError(deck.where("model.norm_groups") + " = " + std::to_string(c.norm_groups) +
                     ": must divide " + deck.described("model.width", std::to_string(c.width)) +
                     " (every stage's width is a multiple of it)");
  if ((c.width << (c.stages - 1)) > (int64_t{1} << 20))
    throw InputError(deck.where("model.stages") + " = " + std::to_string(c.stages) +
                     ": the last stage would have width * 2^(stages - 1) = " +
                     std::to_string(c.width << (c.stages - 1)) + " channels; at most 2^20 with " +
                     deck.described("model.width", std::to_string(c.width)));
}

void check_backend(const ModelConfig&, Backend& be) {
  require_kernels<ConvKernels>(be, "model family \"cnn\"");
}

}  // namespace

ModelFamily cnn_family() {
  ModelFamily f;
  f.name = "cnn";
  f.summary = "ResNet-style image classifier (teacher-labelled images)";
  f.keys = {"image_size", "in_channels", "classes", "width", "stages", "stage_blocks", "norm_groups"};
  f.data_types = {DataKind::Images, DataKind::ImageFiles};
  f.data_rule = "trains on data.type = \"images\" or \"image_files\"";
  f.check = check;
  f.check_backend = check_backend;
  f.describe = describe;
  f.units_key = "stage_blocks";
  f.unit_name = "residual block";
  f.units = units;
  f.tokens_per_sample = tokens;
  f.stage_input = stage_input;
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
