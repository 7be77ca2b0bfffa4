// conv_layers.hpp: the layers of convolutional networks, on images (N, C, H, W)
// in NCHW f32, written against the convolution kernel group
// (tensor/conv_kernels.hpp): 2-D convolution, normalisation (group, layer
// or batch), pooling, a ResNet-style residual block and a classification
// head. ReLU is the core one (make_relu, elementwise on any shape).
//
// Each layer asks its backend for the group through require_kernels, so a
// backend without it (CUDA, for now) fails with one message naming the
// layer and the backend. Parameter gradients are added (accumulated over a
// step's micro-batches); the optimizer zeroes them. Layers here have no
// weight-gradient product worth deferring, so a split backward
// (backward_input) does all of it, as the Layer default does.
#pragma once

#include <memory>
#include <string>

#include "pipetrain/model/layers.hpp"
#include "pipetrain/tensor/conv_kernels.hpp"

namespace pt {

// Which normalisation a layer or block uses (NormKind, base/deck_kinds.hpp).
// Group: per image, over groups of channels and the pixels (groups = 1 is
// layer normalisation over (C, H, W)); every image is normalised alone, so
// the result does not depend on how a batch is split into micro-batches.
// Batch: per channel over the micro-batch's images and pixels, torchgpipe's
// deferred batch normalisation: a training forward normalises with the
// micro-batch's statistics and keeps them (by micro-batch, from
// forward_context()); end_step combines the step's micro-batches, in
// ascending order, into one mean and unbiased variance and moves the running
// statistics towards them by `momentum`, once per step, as one process
// running the same micro-batches does. A recomputing forward keeps nothing;
// an evaluation forward normalises with the running statistics. They are
// parameters "<name>.running_mean" (zeros) and "<name>.running_var" (ones),
// flagged Param::running_statistic: no gradient, no optimizer update, saved
// in checkpoints and moved with their unit like any parameter.
struct NormSpec {
  NormKind kind = NormKind::Group;
  int64_t groups = 1;  // Group only: must divide each normalised layer's channels
  float eps = 1e-5f;
  double momentum = 0.1;  // Batch only: running = (1 - momentum) running + momentum step's
};

// y (N, out, OH, OW) = conv(x (N, in, H, W)) with a K x K window, stride
// and zero padding; weight (out, in, K, K) uniform with standard deviation
// gain / sqrt(in K K), drawn from (seed, stream); bias (out) zeros, or none.
std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in, int64_t out,
                                   int64_t kernel, Conv2dGeometry g, bool bias, uint64_t seed,
                                   uint64_t stream, float gain,
                                   ParamInit init = ParamInit::FromSeed);
// y = normalise(x) * gamma + beta over `channels` channels; gamma (C) ones,
// beta (C) zeros.
std::unique_ptr<Layer> make_norm(const std::string& name, int64_t channels, NormSpec spec,
                                 ParamInit init = ParamInit::FromSeed);
// Max or average pooling (Pool2dGeometry).
std::unique_ptr<Layer> make_pool2d(Pool2dGeometry g);

// A residual block: y = act(norm(conv3x3(act(norm(conv3x3_stride(x))))) + skip(x)),
// act = relu or gelu (model.activation), skip(x) = x when in == out and
// stride == 1, else norm(conv1x1_stride(x)) (the projection). Convolutions
// have no bias (a norm follows each).
// x (N, in, H, W) -> y (N, out, ceil(H / stride), ceil(W / stride)). The
// weights are drawn from `seed` and streams stream, stream + 1, stream + 2.
std::unique_ptr<Layer> make_residual_block(const std::string& name, int64_t in, int64_t out,
                                           int64_t stride, NormSpec norm, uint64_t seed,
                                           uint64_t stream, ParamInit init = ParamInit::FromSeed,
                                           ActivationKind activation = ActivationKind::Relu);
// A classification head: global average pooling (N, C, H, W) -> (N, C),
// then a Linear C -> classes (gain 1) drawn from (seed, stream): logits
// (N, classes) for the cross-entropy loss (make_loss).
std::unique_ptr<Layer> make_classifier_head(const std::string& name, int64_t channels,
                                            int64_t classes, uint64_t seed, uint64_t stream,
                                            ParamInit init = ParamInit::FromSeed);

}  // namespace pt
